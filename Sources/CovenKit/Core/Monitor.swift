import Glibc

/// A mutex with several condition variables that share it (pthread's), so a thread waiting for
/// one thing is woken only when that thing happens.
///
/// `NSCondition` has one condition per mutex: where a reader waits for the next run and
/// producers wait for a free buffer, every broadcast wakes all of them for every change, and
/// most go back to sleep at once; at 1,000 runs a second that hand-off costs a tenth of a
/// warm read.
final class Monitor: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let conditions: UnsafeMutablePointer<pthread_cond_t>
    private let count: Int

    init(conditions count: Int) {
        self.count = count
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        conditions = .allocate(capacity: count)
        for i in 0..<count { pthread_cond_init(conditions + i, nil) }
    }

    deinit {
        for i in 0..<count { pthread_cond_destroy(conditions + i) }
        conditions.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Waits on condition `condition`; the caller holds the lock.
    func wait(_ condition: Int) { pthread_cond_wait(conditions + condition, mutex) }
    /// Wakes one waiter of `condition`, if any.
    func signal(_ condition: Int) { pthread_cond_signal(conditions + condition) }
    /// Wakes every waiter of `condition`.
    func broadcast(_ condition: Int) { pthread_cond_broadcast(conditions + condition) }

    /// Runs `body` holding the lock.
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

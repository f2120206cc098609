import Foundation

/// The device's advisory lock (`flock` on `<db>.d/lock`): commands that change the device hold
/// it, so two cron jobs never interleave their changes. Released when the value goes away or
/// the process dies (the kernel drops it), so a `kill -9` never leaves a stale lock.
public final class DeviceLock {
    private let descriptor: Int32

    /// Takes the lock, waiting for it unless `wait` is false.
    ///
    /// - Throws: ``CovenError`` `.busy` when another process holds it and `wait` is false;
    ///   `.io` when the lock file cannot be opened.
    public init(path: String, wait: Bool) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CovenError.posix("open lock file", path: path) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK else {
                let error = CovenError.posix("lock", path: path)
                close(fd)
                throw error
            }
            guard wait else {
                close(fd)
                throw CovenError(.busy, "another coven command is changing this device", hint: "wait for it, or run without --no-wait to queue behind it", details: ["path": path])
            }
            while flock(fd, LOCK_EX) != 0 {
                if errno == EINTR { continue }
                let error = CovenError.posix("lock", path: path)
                close(fd)
                throw error
            }
        }
        descriptor = fd
    }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}

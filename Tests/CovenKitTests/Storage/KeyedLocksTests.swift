@testable import CovenKit
import XCTest

/// The lock a file:// upload's part writers take for its file: one body at a time per key,
/// bodies of different keys at once, and no lock kept for a key nobody uses.
final class KeyedLocksTests: XCTestCase {
    func testBodiesOfOneKeyNeverOverlapAndTheLockGoesAfter() {
        let locks = KeyedLocks()
        let inside = LockedCount()
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            for _ in 0..<50 {
                locks.withLock("part file") {
                    XCTAssertEqual(inside.withLock { count in count += 1; return count }, 1, "two bodies of one key at once")
                    usleep(50)
                    inside.withLock { $0 -= 1 }
                }
            }
            _ = index
        }
        XCTAssertEqual(locks.count, 0)
    }

    func testBodiesOfDifferentKeysRunAtOnce() {
        let locks = KeyedLocks()
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            locks.withLock("first") {
                started.signal()
                // Held until a body of another key has run.
                _ = release.wait(timeout: .now() + 10)
            }
            done.signal()
        }
        XCTAssertEqual(started.wait(timeout: .now() + 10), .success)
        var ran = false
        locks.withLock("second") { ran = true }
        XCTAssertTrue(ran)
        XCTAssertEqual(locks.count, 1, "the first key's lock is held")
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(locks.count, 0)
    }

    func testAThrowingBodyReleasesItsLock() {
        struct Failed: Error {}
        let locks = KeyedLocks()
        XCTAssertThrowsError(try locks.withLock("key") { throw Failed() })
        XCTAssertEqual(locks.count, 0)
        var ran = false
        locks.withLock("key") { ran = true }
        XCTAssertTrue(ran)
    }
}

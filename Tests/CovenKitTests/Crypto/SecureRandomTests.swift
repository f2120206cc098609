@testable import CovenKit
import XCTest

/// Strong random bytes come from libgcrypt a block at a time: no piece is ever handed out
/// twice, across blocks and threads, and the block is wiped as it goes.
final class SecureRandomTests: XCTestCase {
    func testNoPieceRepeatsAcrossBlocksAndThreads() {
        let pieces = Pieces()
        // 8 threads x 400 keys of 32 bytes: 100 blocks of the pool, drawn concurrently.
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            var mine: [[UInt8]] = []
            for index in 0..<400 { mine.append(SecureRandom.bytes(index % 5 == 0 ? 17 : 32)) }
            pieces.add(mine)
        }
        let (seen, total) = pieces.result
        XCTAssertEqual(seen.count, total, "a random piece was handed out twice")
        XCTAssertFalse(seen.contains([UInt8](repeating: 0, count: 32)))
    }

    func testLargeAndSmallRequestsAreRandom() {
        for count in [1, 16, 32, 255, 256, 257, 1024, 4096] {
            let first = SecureRandom.bytes(count)
            let second = SecureRandom.bytes(count)
            XCTAssertEqual(first.count, count)
            if count >= 16 {
                XCTAssertNotEqual(first, second, "\(count) bytes")
                // 16 or more strong random bytes are never all one value.
                XCTAssertGreaterThan(Set(first).count, 1, "\(count) bytes")
            }
        }
    }
}

/// Pieces gathered from several threads. @unchecked: under `lock`.
private final class Pieces: @unchecked Sendable {
    private let lock = NSLock()
    private var seen = Set<[UInt8]>()
    private var total = 0
    func add(_ pieces: [[UInt8]]) {
        lock.lock()
        defer { lock.unlock() }
        for piece in pieces { seen.insert(piece) }
        total += pieces.count
    }
    var result: (Set<[UInt8]>, Int) {
        lock.lock()
        defer { lock.unlock() }
        return (seen, total)
    }
}

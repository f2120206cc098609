@testable import CovenKit
import XCTest

final class ContentHasherTests: XCTestCase {
    /// Hashes `bytes` through the two-lane pipeline, reading in pieces of `piece`.
    func digests(_ bytes: [UInt8], piece: Int = .max) throws -> ContentDigests {
        var offset = 0
        return try ContentHasher.run(read: { buffer in
            let count = min(buffer.count, piece, bytes.count - offset)
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.withUnsafeBytes { $0 }[offset..<offset + count]))
            offset += count
            return count
        }, write: nil, progress: nil)
    }

    func expected(_ bytes: [UInt8]) -> ([UInt8], [UInt8]) {
        var chunks: [UInt8] = []
        var index = 0
        repeat {
            let upper = min(index + 65536, bytes.count)
            chunks += SHA256.digest(Array(bytes[index..<upper]))
            index = upper
        } while index < bytes.count
        return (SHA256.digest(bytes), chunks)
    }

    func testBoundaries() throws {
        let block = ContentHasher.blockSize
        for size in [0, 1, 65535, 65536, 65537, 3 * 65536 + 17, block - 1, block, block + 1, 2 * block, 2 * block + 65536 * 3 + 5] {
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
            for piece in [Int.max, 7000, 65536] {
                let result = try digests(bytes, piece: piece)
                let (content, chunks) = expected(bytes)
                XCTAssertEqual(result.size, Int64(size), "size \(size) piece \(piece)")
                XCTAssertEqual(result.content, content, "content hash of \(size) bytes, piece \(piece)")
                XCTAssertEqual(result.chunks, chunks, "chunk hashes of \(size) bytes, piece \(piece)")
            }
        }
    }

    func testWriterGetsEveryByteInOrder() throws {
        let bytes = (0..<(ContentHasher.blockSize * 2 + 12345)).map { UInt8(truncatingIfNeeded: $0 >> 3) }
        var copy: [UInt8] = []
        var offset = 0
        let result = try ContentHasher.run(read: { buffer in
            let count = min(buffer.count, bytes.count - offset)
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.withUnsafeBytes { $0 }[offset..<offset + count]))
            offset += count
            return count
        }, write: { copy.append(contentsOf: $0) }, progress: nil)
        XCTAssertEqual(copy, bytes)
        XCTAssertEqual(result.content, SHA256.digest(bytes))
    }

    func testReaderErrorPropagates() {
        XCTAssertThrowsError(try ContentHasher.run(read: { _ in throw CovenError(.io, "boom") }, write: nil, progress: nil)) { error in
            XCTAssertEqual((error as? CovenError)?.code, .io)
        }
    }
}

@testable import CovenKit
import XCTest

final class ContentHasherTests: XCTestCase {
    /// Hashes `bytes` through the two-lane pipeline, reading in pieces of `piece`.
    func digests(_ bytes: [UInt8], piece: Int = .max, sizeHint: Int64? = nil) throws -> ContentDigests {
        var offset = 0
        return try ContentHasher.run(read: { buffer in
            let count = min(buffer.count, piece, bytes.count - offset)
            bytes.withUnsafeBytes { source in
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<offset + count]))
            }
            offset += count
            return count
        }, write: nil, sizeHint: sizeHint, progress: nil)
    }

    /// A size hint only sizes the buffers: a source larger or smaller than its hint (a file that
    /// grew or shrank while read) is still hashed whole, in the right 64 KiB chunks.
    func testSizeHintsRightAndWrong() throws {
        let block = ContentHasher.blockSize
        for (size, hint) in [(0, 0), (5, 5), (5, 0), (65536, 65536), (65537, 65536), (200_000, 10), (200_000, 199_999),
                             (block + 3, 100), (10, Int(block) * 4), (3 * 65536, 65535), (ContentHasher.inlineLimit + 1, ContentHasher.inlineLimit + 1)] {
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
            for piece in [Int.max, 4096] {
                let result = try digests(bytes, piece: piece, sizeHint: Int64(hint))
                let (content, chunks) = expected(bytes)
                XCTAssertEqual(result.size, Int64(size), "size \(size) hint \(hint)")
                XCTAssertEqual(result.content, content, "content of \(size) bytes, hint \(hint)")
                XCTAssertEqual(result.chunks, chunks, "chunks of \(size) bytes, hint \(hint)")
            }
        }
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

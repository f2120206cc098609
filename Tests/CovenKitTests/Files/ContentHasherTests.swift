@testable import CovenKit
import XCTest

final class ContentHasherTests: XCTestCase {
    /// Hashes `bytes` through the two-lane pipeline, reading in pieces of `piece`.
    func digests(_ bytes: [UInt8], piece: Int = .max, sizeHint: Int64? = nil) throws -> ContentDigests {
        try Self.digests(bytes, piece: piece, sizeHint: sizeHint)
    }

    static func digests(_ bytes: [UInt8], piece: Int, sizeHint: Int64?) throws -> ContentDigests {
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

    /// The lanes share each block's chunks by their times: a slow reader hands the whole-file
    /// lane chunks, a slow writer takes them back. The hashes are right whichever lane made
    /// each, and the writer still gets every byte in order.
    func testChunksHandedBetweenLanesHashRight() throws {
        let block = ContentHasher.blockSize
        let bytes = (0..<(block * 9 + 65536 * 5 + 77)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 11) }
        let (content, chunks) = expected(bytes)
        for slow in ["reader", "writer"] {
            var offset = 0
            var copy: [UInt8] = []
            let result = try ContentHasher.run(read: { buffer in
                if slow == "reader" { usleep(3000) }
                let count = min(buffer.count, bytes.count - offset)
                bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) }
                offset += count
                return count
            }, write: { piece in
                if slow == "writer" { usleep(3000) }
                copy.append(contentsOf: piece)
            }, sizeHint: Int64(bytes.count), progress: nil)
            XCTAssertEqual(result.size, Int64(bytes.count), slow)
            XCTAssertEqual(result.content, content, slow)
            XCTAssertEqual(result.chunks, chunks, "chunk hashes, a slow \(slow)")
            XCTAssertEqual(copy, bytes, slow)
        }
    }

    /// A writer failing on a later block (a full disk under `stage -`) fails the run with its
    /// error, the blocks still in the other lane's hands ended first; so does a reader failing
    /// after some blocks.
    func testLaterErrorsOfEitherLanePropagate() {
        let block = ContentHasher.blockSize
        let bytes = [UInt8](repeating: 5, count: block * 6)
        for failing in ["reader", "writer"] {
            var offset = 0
            var written = 0
            XCTAssertThrowsError(try ContentHasher.run(read: { buffer in
                if failing == "reader", offset >= block * 3 { throw CovenError(.io, "unplugged") }
                let count = min(buffer.count, bytes.count - offset)
                bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) }
                offset += count
                return count
            }, write: { piece in
                if failing == "writer", written >= block * 2 { throw CovenError(.storageFull, "full") }
                written += piece.count
            }, progress: nil), failing) { error in
                XCTAssertEqual((error as? CovenError)?.code, failing == "reader" ? .io : .storageFull, failing)
            }
        }
    }

    /// Sources hashed side by side (a batch's workers) each get their own hashes.
    func testSourcesHashedAtOnceEachRight() throws {
        let block = ContentHasher.blockSize
        let sources = (0..<4).map { seed in (0..<(block * 3 + seed * 70_000)).map { UInt8(truncatingIfNeeded: $0 &* (seed + 3) &+ $0 >> 7) } }
        let results = UnsafeMutableBufferPointer<ContentDigests?>.allocate(capacity: sources.count)
        results.initialize(repeating: nil)
        defer { results.deallocate() }
        nonisolated(unsafe) let slots = results
        DispatchQueue.concurrentPerform(iterations: sources.count) { index in
            slots[index] = try? Self.digests(sources[index], piece: 100_000, sizeHint: nil)
        }
        for (index, bytes) in sources.enumerated() {
            let (content, chunks) = expected(bytes)
            XCTAssertEqual(results[index]?.content, content, "source \(index)")
            XCTAssertEqual(results[index]?.chunks, chunks, "source \(index)")
        }
    }
}

import XCTest

@testable import CovenKit

/// The one chunk framer, on its own: the chunks it hands over, whatever the pieces, and the
/// framing rules it enforces without a key.
final class ChunkFramerCryptoTests: XCTestCase {
    static let sealed = Int(ObjectLayout.sealedChunkSize)

    /// Frames `bytes` fed in `piece`-byte pieces; the header and every chunk's (index, last, bytes).
    func frame(
        _ bytes: [UInt8], headerSize: Int, layout: ChunkFramer.Layout, piece: Int
    ) throws -> (header: [UInt8], chunks: [(Int64, Bool, [UInt8])]) {
        let carry = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.sealed, alignment: 16)
        defer { carry.deallocate() }
        var framer = ChunkFramer(headerSize: headerSize, layout: layout, carry: carry)
        var header: [UInt8] = []
        var chunks: [(Int64, Bool, [UInt8])] = []
        let take = { (index: Int64, last: Bool, sealed: UnsafeRawBufferPointer) in chunks.append((index, last, Array(sealed))) }
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + piece, bytes.count)
            try bytes[offset..<end].withUnsafeBytes { try framer.feed($0, header: { header = Array($0) }, chunk: take) }
            offset = end
        }
        try framer.finish(chunk: take)
        XCTAssertTrue(framer.isComplete)
        return (header, chunks)
    }

    func testChunksAreHandedOverWholeAndInOrderWhateverThePieces() throws {
        let size: Int64 = 3 * 65536 + 100
        let object = randomBytes(Int(ObjectLayout.encryptedSize(plaintextSize: size)), seed: 1)
        for piece in [1, 15, 16, 17, 8 + Self.sealed, Self.sealed + 1, 100_000, object.count] {
            for layout in [ChunkFramer.Layout.streamed, .known(plaintextSize: size, chunks: 0..<4)] {
                let (header, chunks) = try frame(object, headerSize: 8, layout: layout, piece: piece)
                XCTAssertEqual(header, Array(object[0..<8]))
                XCTAssertEqual(chunks.map(\.0), [0, 1, 2, 3], "piece \(piece)")
                XCTAssertEqual(chunks.map(\.1), [false, false, false, true])
                XCTAssertEqual(chunks.flatMap(\.2), Array(object[8...]))
            }
            // A run from the middle, without the header; its last chunk is not the object's.
            let run = ObjectLayout.encryptedRange(chunk: 1, plaintextSize: size).lowerBound
                ..< ObjectLayout.encryptedRange(chunk: 2, plaintextSize: size).upperBound
            let (header, chunks) = try frame(
                Array(object[Int(run.lowerBound)..<Int(run.upperBound)]), headerSize: 0,
                layout: .known(plaintextSize: size, chunks: 1..<3), piece: piece)
            XCTAssertEqual(header, [])
            XCTAssertEqual(chunks.map(\.0), [1, 2])
            XCTAssertEqual(chunks.map(\.1), [false, false])
        }
    }

    func testViolations() throws {
        let size: Int64 = 65536
        let object = randomBytes(Int(ObjectLayout.encryptedSize(plaintextSize: size)), seed: 2)
        func violation(_ bytes: [UInt8], _ layout: ChunkFramer.Layout) -> ChunkFramer.Violation? {
            do {
                _ = try frame(bytes, headerSize: 8, layout: layout, piece: 1000)
                return nil
            } catch {
                return error as? ChunkFramer.Violation
            }
        }
        let known = ChunkFramer.Layout.known(plaintextSize: size, chunks: 0..<1)
        guard case .trailingData(chunk: 0) = violation(object + [0], known) else { return XCTFail("trailing") }
        guard case .truncated(chunk: 0) = violation(Array(object.dropLast()), known) else { return XCTFail("truncated") }
        guard case .truncated(chunk: 0) = violation(Array(object.prefix(5)), .streamed) else { return XCTFail("no header") }
        guard case .truncated(chunk: 0) = violation(Array(object.prefix(8 + 15)), .streamed) else { return XCTFail("short") }
        // A full chunk, then a bare tag: an empty final chunk after a full one.
        guard case .emptyFinalChunk(chunk: 1) = violation(object + [UInt8](repeating: 0, count: 16), .streamed) else {
            return XCTFail("empty final chunk")
        }
    }
}

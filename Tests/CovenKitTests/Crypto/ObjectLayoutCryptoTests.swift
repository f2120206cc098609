import XCTest

@testable import CovenKit

/// Size and range arithmetic at the chunk boundaries (docs/format.md, section 3.5).
final class ObjectLayoutCryptoTests: XCTestCase {
    let cs: Int64 = 65536

    func testConstants() {
        XCTAssertEqual(ObjectLayout.headerSize, 8)
        XCTAssertEqual(ObjectLayout.chunkSize, 65536)
        XCTAssertEqual(ObjectLayout.tagSize, 16)
        XCTAssertEqual(ObjectLayout.sealedChunkSize, 65552)
    }

    func testChunkCountAndEncryptedSize() {
        let table: [(plaintext: Int64, chunks: Int64, encrypted: Int64)] = [
            (0, 1, 24),
            (1, 1, 25),
            (cs - 1, 1, 8 + cs - 1 + 16),
            (cs, 1, 8 + cs + 16),
            (cs + 1, 2, 8 + cs + 1 + 32),
            (2 * cs, 2, 8 + 2 * cs + 32),
            (2 * cs + 500, 3, 8 + 2 * cs + 500 + 48),
            (8 << 20, 128, 8 + (8 << 20) + 128 * 16),
            (1 << 40, 1 << 24, 8 + (1 << 40) + (1 << 28)),
        ]
        for row in table {
            XCTAssertEqual(ObjectLayout.chunkCount(plaintextSize: row.plaintext), row.chunks, "\(row.plaintext)")
            XCTAssertEqual(ObjectLayout.encryptedSize(plaintextSize: row.plaintext), row.encrypted, "\(row.plaintext)")
            XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: row.encrypted), row.plaintext, "\(row.plaintext)")
        }
    }

    func testRanges() {
        // Empty file: one empty chunk, sealed as a bare tag after the header.
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 0, plaintextSize: 0), 0..<0)
        XCTAssertEqual(ObjectLayout.encryptedRange(chunk: 0, plaintextSize: 0), 8..<24)
        // One byte.
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 0, plaintextSize: 1), 0..<1)
        XCTAssertEqual(ObjectLayout.encryptedRange(chunk: 0, plaintextSize: 1), 8..<25)
        // Exactly one chunk.
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 0, plaintextSize: cs), 0..<cs)
        XCTAssertEqual(ObjectLayout.encryptedRange(chunk: 0, plaintextSize: cs), 8..<(8 + 65552))
        // One chunk and a byte.
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 0, plaintextSize: cs + 1), 0..<cs)
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 1, plaintextSize: cs + 1), cs..<(cs + 1))
        XCTAssertEqual(ObjectLayout.encryptedRange(chunk: 1, plaintextSize: cs + 1), (8 + 65552)..<(8 + 65552 + 17))
        // Three chunks, a short final one.
        let size = 2 * cs + 500
        XCTAssertEqual(ObjectLayout.plaintextRange(chunk: 2, plaintextSize: size), (2 * cs)..<size)
        XCTAssertEqual(
            ObjectLayout.encryptedRange(chunk: 2, plaintextSize: size), (8 + 2 * 65552)..<(8 + 2 * 65552 + 516))
        XCTAssertEqual(
            ObjectLayout.encryptedRange(chunk: 2, plaintextSize: size).upperBound,
            ObjectLayout.encryptedSize(plaintextSize: size))
        // Chunks tile the object with no gap for many sizes.
        for size in [0, 1, cs - 1, cs, cs + 1, 3 * cs, 3 * cs + 17] {
            var expected = ObjectLayout.headerSize
            var plain: Int64 = 0
            for chunk in 0..<ObjectLayout.chunkCount(plaintextSize: size) {
                let sealed = ObjectLayout.encryptedRange(chunk: chunk, plaintextSize: size)
                let range = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
                XCTAssertEqual(sealed.lowerBound, expected)
                XCTAssertEqual(range.lowerBound, plain)
                XCTAssertEqual(Int64(sealed.count), Int64(range.count) + 16)
                expected = sealed.upperBound
                plain = range.upperBound
            }
            XCTAssertEqual(expected, ObjectLayout.encryptedSize(plaintextSize: size))
            XCTAssertEqual(plain, size)
        }
    }

    func testChunksCovering() {
        let size = 3 * cs + 10
        let table: [(Range<Int64>, Range<Int64>)] = [
            (0..<1, 0..<1),
            (0..<cs, 0..<1),
            (0..<(cs + 1), 0..<2),
            ((cs - 1)..<cs, 0..<1),
            ((cs - 1)..<(cs + 1), 0..<2),
            (cs..<(cs + 1), 1..<2),
            (cs..<(2 * cs), 1..<2),
            ((3 * cs)..<size, 3..<4),
            ((size - 1)..<size, 3..<4),
            (0..<size, 0..<4),
            // Empty ranges need no chunk.
            (0..<0, 0..<0),
            (cs..<cs, 1..<1),
            (size..<size, 3..<3),
        ]
        for (range, chunks) in table {
            XCTAssertEqual(ObjectLayout.chunks(covering: range, plaintextSize: size), chunks, "\(range)")
        }
        XCTAssertEqual(ObjectLayout.chunks(covering: 0..<0, plaintextSize: 0), 0..<0)
        XCTAssertEqual(ObjectLayout.chunks(covering: 0..<cs, plaintextSize: cs), 0..<1)
        XCTAssertEqual(ObjectLayout.chunks(covering: cs..<cs, plaintextSize: cs), 1..<1)
    }

    func testPlaintextSizeRejectsImpossibleSizes() {
        for encrypted: Int64 in [-1, 0, 1, 7, 8, 23] {
            XCTAssertNil(ObjectLayout.plaintextSize(encryptedSize: encrypted), "\(encrypted)")
        }
        // A final chunk shorter than its tag after one full chunk.
        for rest: Int64 in 1...15 {
            XCTAssertNil(ObjectLayout.plaintextSize(encryptedSize: 8 + 65552 + rest), "\(rest)")
        }
        // An empty final chunk after a full one.
        XCTAssertNil(ObjectLayout.plaintextSize(encryptedSize: 8 + 65552 + 16))
        XCTAssertNil(ObjectLayout.plaintextSize(encryptedSize: 8 + 3 * 65552 + 16))
        XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: 8 + 65552 + 17), cs + 1)
        XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: 8 + 65552), cs)
        XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: 8 + 65551), cs - 1)
        XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: 8 + 17), 1)
    }

    func testPlaintextSizeInvertsEncryptedSizeExhaustivelyNearBoundaries() {
        var sizes: [Int64] = Array(0...40)
        for k: Int64 in 1...4 { sizes += ((k * cs - 40)...(k * cs + 40)).map { $0 } }
        for size in sizes {
            let encrypted = ObjectLayout.encryptedSize(plaintextSize: size)
            XCTAssertEqual(ObjectLayout.plaintextSize(encryptedSize: encrypted), size, "\(size)")
        }
        // Every encrypted size near the boundaries maps back consistently or to nil.
        for encrypted: Int64 in 0...(8 + 3 * 65552 + 40) where encrypted % 97 == 0 || encrypted % 65552 < 40 {
            if let size = ObjectLayout.plaintextSize(encryptedSize: encrypted) {
                XCTAssertEqual(ObjectLayout.encryptedSize(plaintextSize: size), encrypted)
            }
        }
    }
}

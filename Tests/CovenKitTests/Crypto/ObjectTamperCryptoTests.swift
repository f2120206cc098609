import XCTest

@testable import CovenKit

/// Every way of damaging an object fails with `integrity` (or `update_required` for a newer
/// header), through the streaming reader in both modes and through the ranged opener, and no
/// unauthenticated plaintext is ever released (docs/format.md, section 3.4).
final class ObjectTamperCryptoTests: XCTestCase {
    static let cs = 65536
    static let sealed = 65552

    var key: FileKey!
    var plaintext: [UInt8]!
    var object: [UInt8]!

    override func setUpWithError() throws {
        key = FileKey()
        plaintext = randomBytes(2 * Self.cs + 500, seed: 99)
        object = try sealObject(plaintext, key: key)
    }

    /// Expects every reading path to fail with `code` on `damaged`, and that whatever the streaming
    /// reader emitted before failing is a prefix of the true plaintext made of whole chunks.
    func assertRejected(
        _ damaged: [UInt8], key: FileKey? = nil, original: [UInt8]? = nil,
        _ label: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        assertRejected(damaged, .integrity, key: key, original: original, label, file: file, line: line)
    }

    func assertRejected(
        _ damaged: [UInt8], _ code: ErrorCode, key: FileKey? = nil, original: [UInt8]? = nil,
        _ label: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        let key = key ?? self.key!
        let original = original ?? plaintext!
        let size = Int64(original.count)
        for known in [nil, size] {
            for piece in [7, 65551, 100_000, damaged.count + 1] {
                var emitted = [UInt8]()
                assertThrowsCoven(code, "\(label), piece \(piece), size \(String(describing: known))", file: file, line: line) {
                    try readObject(damaged, key: key, plaintextSize: known, piece: piece, into: &emitted)
                }
                // Only whole authenticated chunks come out (all of them, when the fault is trailing data).
                XCTAssertTrue(
                    emitted.count % Self.cs == 0 || emitted.count == original.count,
                    "\(label): partial chunk emitted", file: file, line: line)
                XCTAssertEqual(emitted[...], original.prefix(emitted.count), "\(label): bad bytes emitted", file: file, line: line)
            }
        }
        // The ranged opener over the whole object, with the size from the record.
        assertThrowsCoven(code, "\(label), opener", file: file, line: line) {
            try openObject(damaged, key: key, plaintextSize: size)
        }
    }

    // MARK: - Header

    func testVersionTwoNeedsAnUpdate() {
        var damaged = object!
        damaged[6] = 2
        assertRejected(damaged, .updateRequired, "version 2")
        let error = assertThrowsCoven(.updateRequired) { try ObjectReader.checkHeader(damaged) }
        XCTAssertEqual(error?.details["version"], "2")
        XCTAssertNotNil(error?.hint)
    }

    func testUnknownAlgorithmNeedsAnUpdate() {
        var damaged = object!
        damaged[7] = 2
        assertRejected(damaged, .updateRequired, "algorithm 2")
        damaged[6] = 0xff
        assertRejected(damaged, .updateRequired, "version 255")
    }

    func testZeroVersionOrAlgorithmIsCorrupt() {
        var damaged = object!
        damaged[6] = 0
        assertRejected(damaged, "version 0")
        damaged = object!
        damaged[7] = 0
        assertRejected(damaged, "algorithm 0")
    }

    func testOtherMagicIsCorrupt() throws {
        for index in 0..<6 {
            var damaged = object!
            damaged[index] ^= 0x20
            assertRejected(damaged, "magic byte \(index)")
        }
        // A store object is not a file object.
        let store = try StoreSealer.seal(plaintext, storeKey: key)
        assertThrowsCoven(.integrity) { try ObjectReader.checkHeader(store) }
        assertThrowsCoven(.integrity) { try ObjectReader.checkHeader([UInt8](repeating: 0, count: 8)) }
        assertThrowsCoven(.integrity) { try ObjectReader.checkHeader(Array(object[0..<7])) }
        XCTAssertNoThrow(try ObjectReader.checkHeader(Array(object[0..<8])))
    }

    // MARK: - Bit flips

    func testEveryHeaderBitFlip() {
        for index in 0..<8 {
            for bit in 0..<8 {
                var damaged = object!
                damaged[index] ^= 1 << bit
                // A flip in the version or algorithm byte may make it newer: then an update is needed.
                let newer = (index == 6 || index == 7) && damaged[index] > 1
                assertRejected(damaged, newer ? .updateRequired : .integrity, "header byte \(index) bit \(bit)")
            }
        }
    }

    func testEveryBitFlipOfASmallObject() throws {
        let small = Array("a".utf8)
        let sealed = try sealObject(small, key: key)
        for index in 8..<sealed.count {
            for bit in 0..<8 {
                var damaged = sealed
                damaged[index] ^= 1 << bit
                assertThrowsCoven(.integrity) { try readObject(damaged, key: key, plaintextSize: nil, piece: 3) }
                assertThrowsCoven(.integrity) { try openObject(damaged, key: key, plaintextSize: 1) }
            }
        }
    }

    func testBitFlipsAcrossTheObject() {
        // Both ends of every chunk's ciphertext and tag, and a spread of positions in between.
        var positions: Set<Int> = []
        for chunk in 0..<3 {
            let range = ObjectLayout.encryptedRange(chunk: Int64(chunk), plaintextSize: Int64(plaintext.count))
            let lower = Int(range.lowerBound)
            let upper = Int(range.upperBound)
            positions.formUnion([lower, lower + 1, upper - 17, upper - 16, upper - 15, upper - 1])
        }
        var generator = SplitMix64(seed: 1234)
        for _ in 0..<24 { positions.insert(Int.random(in: 8..<object.count, using: &generator)) }
        for position in positions.sorted() {
            var damaged = object!
            damaged[position] ^= 1 << (position % 8)
            assertRejected(damaged, "bit flip at \(position)")
        }
    }

    // MARK: - Chunk surgery

    func chunkBytes(_ chunk: Int) -> ArraySlice<UInt8> {
        let range = ObjectLayout.encryptedRange(chunk: Int64(chunk), plaintextSize: Int64(plaintext.count))
        return object[Int(range.lowerBound)..<Int(range.upperBound)]
    }

    func testSwappedChunks() {
        let swapped = Array(object[0..<8]) + chunkBytes(1) + chunkBytes(0) + chunkBytes(2)
        XCTAssertEqual(swapped.count, object.count)
        assertRejected(swapped, "chunks 0 and 1 swapped")
    }

    func testDroppedChunks() {
        assertRejected(Array(object[0..<8]) + chunkBytes(1) + chunkBytes(2), "chunk 0 dropped")
        assertRejected(Array(object[0..<8]) + chunkBytes(0) + chunkBytes(2), "chunk 1 dropped")
        assertRejected(Array(object[0..<8]) + chunkBytes(0) + chunkBytes(1), "final chunk dropped")
    }

    func testDuplicatedChunks() {
        assertRejected(
            Array(object[0..<8]) + chunkBytes(0) + chunkBytes(0) + chunkBytes(1) + chunkBytes(2), "chunk 0 twice")
        assertRejected(object + chunkBytes(2), "final chunk twice")
        assertRejected(
            Array(object[0..<8]) + chunkBytes(0) + chunkBytes(1) + chunkBytes(1) + chunkBytes(2), "chunk 1 twice")
    }

    func testChunkFromAnotherObjectUnderTheSameKey() throws {
        let other = try sealObject(randomBytes(plaintext.count, seed: 1), key: key)
        let range = ObjectLayout.encryptedRange(chunk: 1, plaintextSize: Int64(plaintext.count))
        var spliced = object!
        spliced.replaceSubrange(Int(range.lowerBound)..<Int(range.upperBound), with: other[Int(range.lowerBound)..<Int(range.upperBound)])
        // Same key, same index and flag: this chunk authenticates; that is why a key seals one
        // plaintext only (docs/format.md, section 4). The object then reads as the spliced bytes.
        XCTAssertNoThrow(try readObject(spliced, key: key, plaintextSize: nil, piece: 65551))
    }

    // MARK: - Truncation and extension

    func testTruncationAtEveryInterestingBoundary() {
        var lengths: Set<Int> = Set(0...9)
        for boundary in [8 + Self.sealed, 8 + 2 * Self.sealed, object.count] {
            lengths.formUnion((boundary - 17)...(boundary - 15))
            lengths.formUnion((boundary - 1)...boundary)
            lengths.insert(boundary + 1)
        }
        lengths.formUnion([8 + 16, 8 + 100, 8 + Self.sealed / 2])
        for length in lengths.sorted() where length < object.count {
            assertRejected(Array(object[0..<length]), "truncated to \(length)")
        }
    }

    func testTruncationOfSingleChunkObjects() throws {
        for length in [0, 1, Self.cs] {
            let original = randomBytes(length, seed: 2)
            let sealed = try sealObject(original, key: key)
            for cut in [0, 7, 8, 9, sealed.count - 16, sealed.count - 1] where cut >= 0 && cut < sealed.count {
                assertRejected(Array(sealed[0..<cut]), original: original, "\(length)-byte object cut to \(cut)")
            }
        }
    }

    func testCuttingAFullFinalChunkOffIsDetected() throws {
        // 2 full chunks: dropping the final one leaves a valid-looking 1-chunk object whose only
        // chunk was sealed as non-final.
        let original = randomBytes(2 * Self.cs, seed: 4)
        let sealed = try sealObject(original, key: key)
        let cut = Array(sealed[0..<(8 + Self.sealed)])
        assertThrowsCoven(.integrity) { try readObject(cut, key: key, plaintextSize: nil, piece: 100_000) }
        assertThrowsCoven(.integrity) { try readObject(cut, key: key, plaintextSize: Int64(Self.cs), piece: 100_000) }
        assertRejected(cut, original: original, "final full chunk cut off")
    }

    func testTrailingData() {
        assertRejected(object + [0], "1 trailing byte")
        assertRejected(object + [UInt8](repeating: 0, count: 16), "16 trailing bytes")
        assertRejected(object + [UInt8](repeating: 0, count: Self.sealed), "a chunk of trailing zeros")
        assertRejected(object + object[8...], "the payload twice")
        let error = assertThrowsCoven(.integrity) {
            try readObject(object + [0], key: key, plaintextSize: Int64(plaintext.count), piece: object.count + 1)
        }
        XCTAssertEqual(error?.details["reason"], "trailing_data")
    }

    func testTrailingDataAfterAFullFinalChunk() throws {
        let original = randomBytes(Self.cs, seed: 6)
        let sealed = try sealObject(original, key: key)
        assertRejected(sealed + [1], original: original, "byte after full final chunk")
        assertRejected(sealed + sealed[8...], original: original, "final chunk twice")
    }

    func testAuthenticEmptyFinalChunkAfterAFullChunkIsRejected() throws {
        // Build, with the right key, what a buggy writer would: one full non-final chunk followed
        // by an empty final chunk. Every tag is valid; the format still forbids it.
        let cipher = try ChunkCipher(key: key)
        let original = randomBytes(Self.cs, seed: 8)
        var crafted = ObjectHeader.file + [UInt8](repeating: 0, count: Self.sealed + 16)
        try original.withUnsafeBytes { input in
            try crafted.withUnsafeMutableBytes { out in
                try cipher.seal(
                    index: 0, isLast: false, plaintext: input,
                    into: UnsafeMutableRawBufferPointer(rebasing: out[8..<(8 + Self.sealed)]))
                try cipher.seal(
                    index: 1, isLast: true, plaintext: UnsafeRawBufferPointer(start: nil, count: 0),
                    into: UnsafeMutableRawBufferPointer(rebasing: out[(8 + Self.sealed)...]))
            }
        }
        let error = assertThrowsCoven(.integrity) {
            try readObject(crafted, key: key, plaintextSize: nil, piece: 100_000)
        }
        XCTAssertEqual(error?.details["reason"], "empty_final_chunk")
        assertRejected(crafted, original: original, "empty final chunk")
        XCTAssertNil(ObjectLayout.plaintextSize(encryptedSize: Int64(crafted.count)))
    }

    // MARK: - Keys

    func testWrongKey() {
        assertRejected(object, key: FileKey(), "wrong key")
    }

    // MARK: - Failure hygiene

    func testErrorsAreStickyAndNothingFollowsThem() throws {
        var damaged = object!
        damaged[8 + Self.sealed + 5] ^= 1  // chunk 1
        let reader = try ObjectReader(key: key)
        var emitted = [UInt8]()
        var first: CovenError?
        try damaged.withUnsafeBytes { bytes in
            do {
                try reader.feed(bytes) { emitted += $0 }
                XCTFail("feeding a damaged object succeeded")
            } catch let error as CovenError {
                first = error
            }
        }
        XCTAssertEqual(first?.code, .integrity)
        XCTAssertEqual(first?.details["chunk"], "1")
        XCTAssertEqual(emitted[...], plaintext[0..<Self.cs])
        // The same error again, whatever comes next, and nothing more emitted.
        let again = assertThrowsCoven(.integrity) { try reader.feed(Array(object[8...])) { emitted += $0 } }
        XCTAssertEqual(again, first)
        let atEnd = assertThrowsCoven(.integrity) { try reader.finish { emitted += $0 } }
        XCTAssertEqual(atEnd, first)
        XCTAssertEqual(emitted.count, Self.cs)
    }

    func testEmitErrorsAreSticky() throws {
        struct Stop: Error {}
        let reader = try ObjectReader(key: key, plaintextSize: Int64(plaintext.count))
        XCTAssertThrowsError(try reader.feed(object) { _ in throw Stop() }) { XCTAssertTrue($0 is Stop) }
        XCTAssertThrowsError(try reader.finish { _ in }) { XCTAssertTrue($0 is Stop) }
    }

    func testFeedAfterFinishIsAnInternalError() throws {
        let reader = try ObjectReader(key: key)
        try reader.feed(object) { _ in }
        try reader.finish { _ in }
        try reader.finish { _ in }  // idempotent
        assertThrowsCoven(.internal) { try reader.feed([0]) { _ in } }
    }

    func open(_ cipher: ChunkCipher, _ index: Int64, last: Bool, _ sealed: [UInt8], into output: inout [UInt8]) throws {
        try sealed.withUnsafeBytes { sealed in
            try output.withUnsafeMutableBytes { out in
                try cipher.open(index: index, isLast: last, sealed: sealed, into: out)
            }
        }
    }

    func testFailedChunkOutputIsZeroed() throws {
        let cipher = try ChunkCipher(key: key)
        var damaged = Array(chunkBytes(0))
        damaged[100] ^= 4
        var output = [UInt8](repeating: 0xAA, count: Self.cs)
        assertThrowsCoven(.integrity) { try open(cipher, 0, last: false, damaged, into: &output) }
        XCTAssertTrue(output.allSatisfy { $0 == 0 })
        // The right chunk under the wrong index or flag fails the same way.
        let good = Array(chunkBytes(0))
        output = [UInt8](repeating: 0xAA, count: Self.cs)
        assertThrowsCoven(.integrity) { try open(cipher, 1, last: false, good, into: &output) }
        XCTAssertTrue(output.allSatisfy { $0 == 0 })
        assertThrowsCoven(.integrity) { try open(cipher, 0, last: true, good, into: &output) }
        try open(cipher, 0, last: false, good, into: &output)
        XCTAssertEqual(output, Array(plaintext[0..<Self.cs]))
        // Too short to hold a tag, or longer than a sealed chunk.
        assertThrowsCoven(.integrity) { try open(cipher, 0, last: false, Array(good[0..<15]), into: &output) }
        assertThrowsCoven(.integrity) { try open(cipher, 0, last: false, good + [0], into: &output) }
    }

    func testAFailedChunkOfARunIsZeroedAndNothingAfterIt() throws {
        var damaged = object!
        damaged[damaged.count - 1] ^= 1  // the final chunk's tag
        let size = Int64(plaintext.count)
        let slots = UnsafeMutableRawPointer.allocate(byteCount: 3 * Self.cs, alignment: 16)
        defer { slots.deallocate() }
        slots.initializeMemory(as: UInt8.self, repeating: 0xAA, count: 3 * Self.cs)
        let reader = try ObjectReader(key: key, plaintextSize: size, chunks: 0..<3)
        var asked = 0
        reader.plaintextTarget = {
            defer { asked += 1 }
            return slots + asked * Self.cs
        }
        var emitted = [UInt8]()
        assertThrowsCoven(.integrity) { try reader.feed(damaged) { emitted += $0 } }
        // The two authenticated chunks came out; the failed one's plaintext was wiped.
        XCTAssertEqual(emitted[...], plaintext[0..<(2 * Self.cs)])
        let failed = UnsafeRawBufferPointer(start: slots + 2 * Self.cs, count: 500)
        XCTAssertTrue(failed.allSatisfy { $0 == 0 })
    }

    func testRangedReadRejectsWrongLengths() throws {
        let size = Int64(plaintext.count)
        let end = object.count
        // Short or long by a byte, or nothing at all, for runs from the start, the middle and the end.
        for (chunks, range) in [(0..<1, 0..<(8 + Self.sealed - 1)), (0..<1, 0..<(8 + Self.sealed + 1)),
                                (1..<3, (8 + Self.sealed)..<(end - 1)), (1..<3, (8 + Self.sealed)..<end) as (Range<Int64>, Range<Int>),
                                (2..<3, (8 + 2 * Self.sealed)..<(end - 1)), (0..<3, 0..<8), (0..<3, 0..<0)] {
            var bytes = Array(object[range])
            if range.upperBound == end && chunks == 1..<3 { bytes += [0] }
            assertThrowsCoven(.integrity, "chunks \(chunks), \(range)") {
                try openRun(bytes, key: key, plaintextSize: size, chunks: chunks)
            }
        }
        // A run that claims to start at the wrong chunk fails authentication.
        assertThrowsCoven(.integrity) {
            try openRun(object[(8 + Self.sealed)..<(8 + 2 * Self.sealed)], key: key, plaintextSize: size, chunks: 0..<1)
        }
        assertThrowsCoven(.integrity) {
            try openRun(object[8..<(8 + Self.sealed)], key: key, plaintextSize: size, chunks: 1..<2)
        }
        // A wrong file size changes the final flag.
        assertThrowsCoven(.integrity) {
            try openRun(object[0..<(8 + Self.sealed)], key: key, plaintextSize: Int64(Self.cs), chunks: 0..<1)
        }
        // A fetch cut short at a chunk boundary is truncation of the chunks wanted.
        let short = assertThrowsCoven(.integrity) {
            try openRun(object[0..<(8 + 2 * Self.sealed)], key: key, plaintextSize: size, chunks: 0..<3)
        }
        XCTAssertEqual(short?.details["reason"], "truncated")
        XCTAssertEqual(try openRun(object[(8 + 2 * Self.sealed)...], key: key, plaintextSize: size, chunks: 2..<3).count, 500)
        // Chunks outside the file are a caller bug.
        assertThrowsCoven(.internal) { try ObjectReader(key: key, plaintextSize: size, chunks: 2..<4) }
        assertThrowsCoven(.internal) { try ObjectReader(key: key, plaintextSize: size, chunks: 1..<1) }
    }
}

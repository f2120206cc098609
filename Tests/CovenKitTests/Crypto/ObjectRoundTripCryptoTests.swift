import XCTest

@testable import CovenKit

/// Seal and open at the boundary lengths, through every path: bulk two-thread sealing (whole and
/// by parts), chunk-by-chunk sealing, ranged opening, and the streaming reader fed in odd pieces.
final class ObjectRoundTripCryptoTests: XCTestCase {
    static let cs = 65536
    static let lengths = [0, 1, cs - 1, cs, cs + 1, 2 * cs + 500]
    static let pieces = [1, 7, 65551, 100_000]

    func testBoundaryLengthsAllPaths() throws {
        let key = FileKey()
        for length in Self.lengths {
            let plaintext = randomBytes(length, seed: UInt64(length))
            let object = try sealObject(plaintext, key: key)
            XCTAssertEqual(Int64(object.count), ObjectLayout.encryptedSize(plaintextSize: Int64(length)))
            XCTAssertEqual(try sealObjectSequentially(plaintext, key: key), object, "length \(length)")
            XCTAssertEqual(try sealObject(plaintext, key: key, partChunks: 1), object, "length \(length)")
            XCTAssertEqual(try openObject(object, key: key, plaintextSize: Int64(length)), plaintext)
            for piece in Self.pieces {
                XCTAssertEqual(
                    try readObject(object, key: key, plaintextSize: nil, piece: piece), plaintext,
                    "length \(length), piece \(piece), unknown size")
                XCTAssertEqual(
                    try readObject(object, key: key, plaintextSize: Int64(length), piece: piece), plaintext,
                    "length \(length), piece \(piece), known size")
            }
        }
    }

    func testSeveralMebibytesBulkAndStreaming() throws {
        let key = FileKey()
        let length = 5 << 20 + 12345
        let plaintext = randomBytes(length, seed: 42)
        let object = try sealObject(plaintext, key: key)
        // By 8 MiB-style parts (here 1 MiB = 16 chunks, and an odd 5-chunk run) the bytes match.
        XCTAssertEqual(try sealObject(plaintext, key: key, partChunks: 16), object)
        XCTAssertEqual(try sealObject(plaintext, key: key, partChunks: 5), object)
        XCTAssertEqual(try sealObjectSequentially(plaintext, key: key), object)
        XCTAssertEqual(try openObject(object, key: key, plaintextSize: Int64(length)), plaintext)
        for piece in [7, 65551, 100_000, 1 << 20, object.count] {
            XCTAssertEqual(try readObject(object, key: key, plaintextSize: nil, piece: piece), plaintext, "piece \(piece)")
            XCTAssertEqual(
                try readObject(object, key: key, plaintextSize: Int64(length), piece: piece), plaintext, "piece \(piece)")
        }
    }

    func testRangedOpenOfEveryRun() throws {
        let key = FileKey()
        for length in [0, 1, Self.cs, Self.cs + 1, 2 * Self.cs + 500, 9 * Self.cs + 3] {
            let size = Int64(length)
            let plaintext = randomBytes(length, seed: 9)
            let object = try sealObject(plaintext, key: key)
            let chunks = ObjectLayout.chunkCount(plaintextSize: size)
            for first in 0..<chunks {
                for last in first..<chunks {
                    let sealed = (first == 0 ? 0 : ObjectLayout.encryptedRange(chunk: first, plaintextSize: size).lowerBound)
                        ..< ObjectLayout.encryptedRange(chunk: last, plaintextSize: size).upperBound
                    let plain = ObjectLayout.plaintextRange(chunk: first, plaintextSize: size).lowerBound
                        ..< ObjectLayout.plaintextRange(chunk: last, plaintextSize: size).upperBound
                    for piece in [.max, 65551] {
                        let output = try openRun(
                            object[Int(sealed.lowerBound)..<Int(sealed.upperBound)], key: key, plaintextSize: size,
                            chunks: first..<(last + 1), piece: piece)
                        XCTAssertEqual(output[...], plaintext[Int(plain.lowerBound)..<Int(plain.upperBound)], "\(first)...\(last)")
                    }
                }
            }
        }
    }

    func testChunksCoveringFetchesExactlyWhatARangedReadNeeds() throws {
        let key = FileKey()
        let length = 4 * Self.cs + 777
        let size = Int64(length)
        let plaintext = randomBytes(length, seed: 3)
        let object = try sealObject(plaintext, key: key)
        var generator = SplitMix64(seed: 11)
        for _ in 0..<50 {
            let a = Int64.random(in: 0..<size, using: &generator)
            let b = Int64.random(in: (a + 1)...size, using: &generator)
            let chunks = ObjectLayout.chunks(covering: a..<b, plaintextSize: size)
            let sealed = (chunks.lowerBound == 0 ? 0 : ObjectLayout.encryptedRange(chunk: chunks.lowerBound, plaintextSize: size).lowerBound)
                ..< ObjectLayout.encryptedRange(chunk: chunks.upperBound - 1, plaintextSize: size).upperBound
            let plainStart = ObjectLayout.plaintextRange(chunk: chunks.lowerBound, plaintextSize: size).lowerBound
            let output = try openRun(
                object[Int(sealed.lowerBound)..<Int(sealed.upperBound)], key: key, plaintextSize: size, chunks: chunks,
                piece: 4096)
            XCTAssertLessThanOrEqual(Int(b - plainStart), output.count)
            XCTAssertEqual(Array(output[Int(a - plainStart)..<Int(b - plainStart)]), Array(plaintext[Int(a)..<Int(b)]), "\(a)..<\(b)")
        }
    }

    func testSealingIsDeterministicPerKeyAndDiffersAcrossKeys() throws {
        let plaintext = randomBytes(3 * Self.cs, seed: 5)
        let key = FileKey()
        XCTAssertEqual(try sealObject(plaintext, key: key), try sealObject(plaintext, key: key))
        XCTAssertNotEqual(try sealObject(plaintext, key: key), try sealObject(plaintext, key: FileKey()))
    }

    /// A sealer re-keyed for the next object (an upload's sender keeps one) seals it exactly as
    /// a new sealer under that key would, whatever it sealed before (chunks of every kind: a
    /// short final one, whole ones, several lanes), and the object opens under its own key only.
    func testARekeyedSealerSealsAsANewOne() throws {
        let sizes = [0, 1, Self.cs - 1, Self.cs, 3 * Self.cs + 17, 20 * Self.cs]
        for lanes in [1, ObjectSealer.maximumLanes] {
            let reused = try ObjectSealer(key: FileKey(), lanes: lanes)
            _ = try reused.sealObject(randomBytes(2 * Self.cs + 5, seed: 11))
            for (index, size) in sizes.enumerated() {
                let plaintext = randomBytes(size, seed: UInt64(20 + index))
                let key = FileKey()
                try reused.rekey(key)
                let object = try reused.sealObject(plaintext)
                XCTAssertEqual(object, try ObjectSealer(key: key, lanes: lanes).sealObject(plaintext), "\(size) bytes, \(lanes) lanes")
                XCTAssertEqual(try openObject(object, key: key, plaintextSize: Int64(size)), plaintext)
                XCTAssertThrowsError(try openObject(object, key: FileKey(), plaintextSize: Int64(size)))
            }
        }
    }

    func testSealChunksRejectsRunsThatAreNotWholeChunks() throws {
        let sealer = try ObjectSealer(key: FileKey())
        var output = [UInt8](repeating: 0, count: 4 * 65552)
        let input = [UInt8](repeating: 1, count: 3 * Self.cs)
        try input.withUnsafeBytes { input in
            try output.withUnsafeMutableBytes { out in
                // Not a chunk multiple and not reaching the end of the file.
                assertThrowsCoven(.internal) {
                    try sealer.sealChunks(
                        firstChunk: 0, plaintext: UnsafeRawBufferPointer(rebasing: input[0..<100]),
                        totalPlaintextSize: 3 * 65536, into: out)
                }
                // Past the end of the file.
                assertThrowsCoven(.internal) {
                    try sealer.sealChunks(firstChunk: 0, plaintext: input, totalPlaintextSize: 2 * 65536, into: out)
                }
                assertThrowsCoven(.internal) {
                    try sealer.sealChunks(
                        firstChunk: 3, plaintext: UnsafeRawBufferPointer(rebasing: input[0..<0]),
                        totalPlaintextSize: 3 * 65536, into: out)
                }
                // Output too small.
                assertThrowsCoven(.internal) {
                    try sealer.sealChunks(
                        firstChunk: 0, plaintext: input, totalPlaintextSize: 3 * 65536,
                        into: UnsafeMutableRawBufferPointer(rebasing: out[0..<(3 * 65552 - 1)]))
                }
                // The exact fit works, the final run of a file may be short.
                XCTAssertEqual(
                    try sealer.sealChunks(firstChunk: 0, plaintext: input, totalPlaintextSize: 3 * 65536, into: out),
                    3 * 65552)
                XCTAssertEqual(
                    try sealer.sealChunks(
                        firstChunk: 2, plaintext: UnsafeRawBufferPointer(rebasing: input[0..<10]),
                        totalPlaintextSize: 2 * 65536 + 10, into: out),
                    26)
            }
        }
    }

    /// A chunk a test's fill or check refuses.
    private struct Refused: Error, Equatable { let chunk: Int64 }

    /// The object of the sealRun tests: 64 chunks and 9 bytes of random plaintext, what the
    /// sequential sealer makes of it, and a sealer of the same key.
    private func sealRunObject(seed: UInt64) throws -> (size: Int64, plaintext: [UInt8], expected: [UInt8], sealer: ObjectSealer) {
        let key = FileKey()
        let size = Int64(64 * Self.cs + 9)
        let plaintext = randomBytes(Int(size), seed: seed)
        return (size, plaintext, try sealObjectSequentially(plaintext, key: key), try ObjectSealer(key: key))
    }

    func testSealRunFillsInPlaceAndAFailingFillStopsItsRunWithTheLowestChunksError() throws {
        let (size, plaintext, expected, sealer) = try sealRunObject(seed: 12)
        var output = [UInt8](repeating: 0, count: Int(ObjectLayout.encryptedSize(plaintextSize: size)) - 8)
        // The upload's way: every chunk read into the place its ciphertext goes, then sealed there.
        let written = try plaintext.withUnsafeBytes { input in
            try output.withUnsafeMutableBytes { out in
                try sealer.sealRun(0..<65, plaintextSize: size, into: out) { chunk, place in
                    let range = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
                    XCTAssertEqual(place.count, range.count)
                    place.copyMemory(from: UnsafeRawBufferPointer(rebasing: input[Int(range.lowerBound)..<Int(range.upperBound)]))
                }
            }
        }
        XCTAssertEqual(written, output.count)
        XCTAssertEqual(ObjectHeader.file + output, expected)
        // Two chunks refused, in different slices: the lower one's error is thrown.
        XCTAssertThrowsError(
            try output.withUnsafeMutableBytes { out in
                try sealer.sealRun(0..<65, plaintextSize: size, into: out) { chunk, _ in
                    if chunk == 50 || chunk == 20 { throw Refused(chunk: chunk) }
                }
            }
        ) { XCTAssertEqual($0 as? Refused, Refused(chunk: 20)) }
        XCTAssertThrowsError(
            try output.withUnsafeMutableBytes { out in
                try sealer.sealRun(3..<66, plaintextSize: size, into: out) { _, _ in }
            }
        ) { XCTAssertEqual(($0 as? CovenError)?.code, .internal) }
    }

    /// The upload's check sees every chunk's plaintext once, two at a time where a slice goes
    /// on, before either is sealed, and the run seals as the sequential sealer does; a pair the
    /// check refuses fails the run with its error.
    func testSealRunChecksEachChunkOnceTwoAtATimeBeforeSealingIt() throws {
        let (size, plaintext, expected, sealer) = try sealRunObject(seed: 13)
        var output = [UInt8](repeating: 0, count: Int(ObjectLayout.encryptedSize(plaintextSize: size)) - 8)
        let seen = LockedChunks()
        func fill(_ input: UnsafeRawBufferPointer) -> (Int64, UnsafeMutableRawBufferPointer) -> Void {
            { chunk, place in
                let range = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
                place.copyMemory(from: UnsafeRawBufferPointer(rebasing: input[Int(range.lowerBound)..<Int(range.upperBound)]))
            }
        }
        _ = try plaintext.withUnsafeBytes { input in
            try output.withUnsafeMutableBytes { out in
                try sealer.sealRun(0..<65, plaintextSize: size, into: out, fill: fill(input), check: { chunk, first, next in
                    // Still plaintext: nothing of either is sealed yet.
                    for (index, bytes) in [(chunk, first)] + (next.map { [(chunk + 1, $0)] } ?? []) {
                        let range = ObjectLayout.plaintextRange(chunk: index, plaintextSize: size)
                        XCTAssertTrue(bytes.elementsEqual(input[Int(range.lowerBound)..<Int(range.upperBound)]), "chunk \(index)")
                        seen.add(index)
                    }
                    if next != nil { seen.pair() }
                })
            }
        }
        XCTAssertEqual(ObjectHeader.file + output, expected)
        XCTAssertEqual(seen.chunks.sorted(), Array(0..<65))
        XCTAssertGreaterThanOrEqual(seen.pairs, 65 / 2 - ObjectSealer.maximumLanes, "checked two at a time")
        XCTAssertThrowsError(
            try plaintext.withUnsafeBytes { input in
                try output.withUnsafeMutableBytes { out in
                    try sealer.sealRun(0..<65, plaintextSize: size, into: out, fill: fill(input), check: { chunk, _, next in
                        if chunk == 30 || (chunk + 1 == 30 && next != nil) { throw Refused(chunk: 30) }
                    })
                }
            }
        ) { XCTAssertEqual($0 as? Refused, Refused(chunk: 30)) }
    }

    func testChunkCipherInPlace() throws {
        let key = FileKey()
        let cipher = try ChunkCipher(key: key)
        let plaintext = randomBytes(1000, seed: 1)
        var buffer = plaintext + [UInt8](repeating: 0, count: 16)
        try buffer.withUnsafeMutableBytes { buffer in
            try cipher.seal(
                index: 5, isLast: true, plaintext: UnsafeRawBufferPointer(rebasing: buffer[0..<1000]), into: buffer)
        }
        XCTAssertNotEqual(Array(buffer[0..<1000]), plaintext)
        try buffer.withUnsafeMutableBytes { buffer in
            try cipher.open(index: 5, isLast: true, sealed: UnsafeRawBufferPointer(buffer), into: buffer)
        }
        XCTAssertEqual(Array(buffer[0..<1000]), plaintext)
    }
}

/// A reader's plaintext target: chunks decrypt straight into the caller's memory.
final class ObjectReaderTargetCryptoTests: XCTestCase {
    func testChunksDecryptIntoTheTargetAndANilAnswerUsesTheReadersOwnBuffer() throws {
        let key = FileKey()
        let length = 5 * 65536 + 777
        let plaintext = randomBytes(length, seed: 7)
        let object = try sealObject(plaintext, key: key)
        let slots = UnsafeMutableRawPointer.allocate(byteCount: 6 * 65536, alignment: 16)
        defer { slots.deallocate() }
        for piece in [7, 65551, object.count] {
            let reader = try ObjectReader(key: key, plaintextSize: Int64(length))
            var asked = 0
            // Every chunk but the third goes to its own slot; the third to the reader's buffer.
            reader.plaintextTarget = {
                defer { asked += 1 }
                return asked == 2 ? nil : slots + asked * 65536
            }
            var output = [UInt8]()
            var places: [UnsafeRawPointer?] = []
            try object.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let end = min(offset + piece, bytes.count)
                    try reader.feed(UnsafeRawBufferPointer(rebasing: bytes[offset..<end])) {
                        places.append($0.baseAddress)
                        output += $0
                    }
                    offset = end
                }
            }
            try reader.finish { output += $0 }
            XCTAssertEqual(output, plaintext, "piece \(piece)")
            XCTAssertEqual(asked, 6)
            XCTAssertEqual(places.count, 6)
            for (index, place) in places.enumerated() where index != 2 {
                XCTAssertEqual(place, UnsafeRawPointer(slots + index * 65536), "chunk \(index)")
            }
            XCTAssertFalse(places[2].map { $0 >= UnsafeRawPointer(slots) && $0 < UnsafeRawPointer(slots + 6 * 65536) } ?? true)
        }
    }

    func testAChunkFailingIntoTheTargetEmitsNothing() throws {
        let key = FileKey()
        let plaintext = randomBytes(3 * 65536, seed: 8)
        var object = try sealObject(plaintext, key: key)
        object[8 + 65552 + 10] ^= 1  // chunk 1
        let slot = UnsafeMutableRawPointer.allocate(byteCount: 65536, alignment: 16)
        defer { slot.deallocate() }
        let reader = try ObjectReader(key: key, plaintextSize: Int64(plaintext.count))
        reader.plaintextTarget = { slot }
        var emitted = 0
        XCTAssertThrowsError(try reader.feed(object) { emitted += $0.count }) { error in
            XCTAssertEqual((error as? CovenError)?.code, .integrity)
            XCTAssertEqual((error as? CovenError)?.details["chunk"], "1")
        }
        XCTAssertEqual(emitted, 65536)
    }
}

/// Chunks a test's check saw, from the sealer's threads. @unchecked: under `lock`.
private final class LockedChunks: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [Int64] = []
    private var pairCount = 0
    func add(_ chunk: Int64) { lock.lock(); seen.append(chunk); lock.unlock() }
    func pair() { lock.lock(); pairCount += 1; lock.unlock() }
    var chunks: [Int64] { lock.lock(); defer { lock.unlock() }; return seen }
    var pairs: Int { lock.lock(); defer { lock.unlock() }; return pairCount }
}

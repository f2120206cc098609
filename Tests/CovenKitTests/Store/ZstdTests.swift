import Foundation
import XCTest

@testable import CovenKit

/// zstd through libarchive: round trips, interoperation with the zstd tool, and the failures
/// (not zstd, truncated, corrupt, too large) as `decoding`.
final class ZstdTests: XCTestCase {
    func text(_ count: Int, seed: UInt64) -> [UInt8] {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
        var generator = SplitMix64(seed: seed)
        var bytes: [UInt8] = []
        while bytes.count < count {
            bytes += Array(words[Int(generator.next() % 10)].utf8) + [generator.next() % 7 == 0 ? 10 : 32]
        }
        return Array(bytes.prefix(count))
    }

    func testRoundTripAtSeveralSizes() throws {
        for count in [0, 1, 100, 65535, 65536, 65537, 1 << 20, 3 << 20 + 17] {
            let data = text(count, seed: UInt64(count))
            let compressed = try Zstd.compress(data)
            XCTAssertEqual(Array(compressed.prefix(4)), [0x28, 0xb5, 0x2f, 0xfd], "zstd magic, \(count) bytes")
            if count > 1000 { XCTAssertLessThan(compressed.count, count / 2) }
            XCTAssertEqual(try Zstd.decompress(compressed, maximumSize: count), data, "\(count) bytes")
        }
        let random = randomBytes(200_000, seed: 1)
        XCTAssertEqual(try Zstd.decompress(try Zstd.compress(random, level: 1), maximumSize: 200_000), random)
        XCTAssertEqual(try Zstd.decompress(try Zstd.compress(random, level: 19), maximumSize: 200_000), random)
    }

    func testTheCompressedStreamGoesToTheSinkInPieces() throws {
        let data = randomBytes(8 << 20, seed: 2)  // incompressible: about as much out as in
        var pieces = 0
        var largest = 0
        var total = 0
        var output: [UInt8] = []
        let writer = try ZstdWriter { piece in
            pieces += 1
            largest = max(largest, piece.count)
            total += piece.count
            output += piece
        }
        try data.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let end = min(offset + 100_000, bytes.count)
                try writer.write(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                offset = end
            }
        }
        let beforeFinish = total
        try writer.finish()
        try writer.finish()  // idempotent
        XCTAssertGreaterThan(beforeFinish, 6 << 20, "compressed bytes flow before the end")
        XCTAssertGreaterThan(pieces, 20)
        XCTAssertLessThanOrEqual(largest, 1 << 20)
        XCTAssertEqual(try Zstd.decompress(output, maximumSize: data.count), data)
        assertThrowsCoven(.internal) { try writer.write([1]) }
    }

    func testASinkErrorFailsTheWriteAndSticks() throws {
        struct Full: Error {}
        let writer = try ZstdWriter { _ in throw Full() }
        XCTAssertThrowsError(try {
            try writer.write(randomBytes(4 << 20, seed: 3))
            try writer.finish()
        }()) { XCTAssertTrue($0 is Full, "\($0)") }
        XCTAssertThrowsError(try writer.finish())
    }

    func testInteroperatesWithTheZstdTool() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/zstd") else { throw XCTSkip("no zstd tool") }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("coven-zstd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let data = text(500_000, seed: 4)
        let ours = folder.appendingPathComponent("ours.zst")
        try Data(try Zstd.compress(data)).write(to: ours)
        XCTAssertEqual(try run("/usr/bin/zstd", ["-d", "-c", ours.path]), data)
        let plain = folder.appendingPathComponent("plain")
        try Data(data).write(to: plain)
        let theirs = try run("/usr/bin/zstd", ["-3", "-c", plain.path])
        XCTAssertEqual(try Zstd.decompress(theirs, maximumSize: data.count), data)
        // Level 3 through libarchive is the tool's -3 (the tool adds a 4-byte checksum).
        XCTAssertLessThanOrEqual(abs(try Zstd.compress(data).count - theirs.count), 16)
    }

    func run(_ tool: String, _ arguments: [String]) throws -> [UInt8] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        return [UInt8](output)
    }

    func testNotZstdTruncatedAndCorruptAreDecodingErrors() throws {
        let data = text(300_000, seed: 5)
        let compressed = try Zstd.compress(data)
        XCTAssertEqual(assertThrowsCoven(.decoding) { try Zstd.decompress([], maximumSize: 100) }?.details["reason"], "empty")
        XCTAssertEqual(
            assertThrowsCoven(.decoding) { try Zstd.decompress(data, maximumSize: data.count) }?.details["reason"], "not_zstd")
        assertThrowsCoven(.decoding) { try Zstd.decompress(Array(compressed.prefix(3)), maximumSize: data.count) }
        for cut in [4, 10, compressed.count / 2, compressed.count - 1] {
            assertThrowsCoven(.decoding, "cut at \(cut)") { try Zstd.decompress(Array(compressed.prefix(cut)), maximumSize: data.count) }
        }
        // The stream of no data is 9 bytes; every cut of it fails, the whole one is empty data.
        let empty = try Zstd.compress([])
        XCTAssertEqual(try Zstd.decompress(empty, maximumSize: 0), [])
        for cut in 1..<empty.count {
            assertThrowsCoven(.decoding, "empty stream cut at \(cut)") { try Zstd.decompress(Array(empty.prefix(cut)), maximumSize: 10) }
        }
        var corrupt = compressed
        corrupt[compressed.count / 2] ^= 0xff
        corrupt[compressed.count / 2 + 1] ^= 0x55
        XCTAssertThrowsError(try Zstd.decompress(corrupt, maximumSize: data.count)) { error in
            // A flipped literal byte can decode to other data: the AEAD around a change object is
            // what catches that; here only a structural break is guaranteed to show.
            XCTAssertEqual((error as? CovenError)?.code, .decoding)
        }
        assertThrowsCoven(.decoding) { try Zstd.decompress(compressed + [1, 2, 3, 4, 5, 6, 7, 8], maximumSize: data.count) }
    }

    func testABombStopsAtTheLimit() throws {
        let zeros = [UInt8](repeating: 0, count: 64 << 20)
        let bomb = try Zstd.compress(zeros)
        XCTAssertLessThan(bomb.count, 8 << 10)
        XCTAssertEqual(
            assertThrowsCoven(.decoding) { try Zstd.decompress(bomb, maximumSize: 1 << 20) }?.details["reason"], "too_large")
        XCTAssertEqual(try Zstd.decompress(bomb, maximumSize: 64 << 20).count, 64 << 20)
        assertThrowsCoven(.decoding) { try Zstd.decompress(bomb, maximumSize: (64 << 20) - 1) }
        // Streamed: the reader hands over no more than the limit before failing.
        try bomb.withUnsafeBytes { bytes in
            var given = false
            let reader = try ZstdReader(maximumSize: 100_000) {
                defer { given = true }
                return given ? nil : bytes
            }
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 30_000, alignment: 16)
            defer { scratch.deallocate() }
            var total = 0
            var failure: CovenError?
            while failure == nil {
                do {
                    let count = try reader.read(into: scratch)
                    XCTAssertGreaterThan(count, 0)
                    total += count
                } catch let error as CovenError {
                    failure = error
                }
            }
            XCTAssertEqual(failure?.details["reason"], "too_large")
            XCTAssertLessThanOrEqual(total, 100_000)
            XCTAssertEqual(try? reader.read(into: scratch), nil, "sticky")
        }
    }
}

@testable import CovenKit
import Foundation
import XCTest

/// The streaming store sealer makes objects the whole-object opener reads, and opens what the
/// whole-object sealer makes; tar + zstd through ArchiveWriter/ArchiveReader round-trips.
final class StoreSealerStreamTests: XCTestCase {
    let key = try! FileKey(bytes: (0..<32).map { UInt8($0) })  // swiftlint:disable:this force_try (test fixture)

    func sealStreaming(_ plaintext: [UInt8], path: String, piece: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        let writer = try StoreSealer.StreamWriter(storeKey: key, boundTo: path) { out.append(contentsOf: $0) }
        var at = 0
        while at < plaintext.count {
            let end = min(plaintext.count, at + piece)
            try plaintext[at..<end].withUnsafeBytes { try writer.write($0) }
            at = end
        }
        try writer.finish()
        return out
    }

    func openStreaming(_ sealed: [UInt8], path: String) throws -> [UInt8] {
        var at = 0
        let reader = try StoreSealer.StreamReader(storeKey: key, boundTo: path, sealedSize: Int64(sealed.count)) { buffer in
            let count = min(buffer.count, sealed.count - at)
            sealed.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + count)])) }
            at += count
            return count
        }
        var out: [UInt8] = []
        while let chunk = try reader.nextChunk() { out.append(contentsOf: chunk) }
        return out
    }

    func testBoundariesRoundTripBothWays() throws {
        for size in [0, 1, 65535, 65536, 65537, 3 * 65536, 3 * 65536 + 17] {
            let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            for piece in [1000, 65536, 70000] where size < 70000 || piece != 1 {
                let sealed = try sealStreaming(plaintext, path: "snapshots/x", piece: piece)
                XCTAssertEqual(sealed.count, 40 + size + 16 * max(1, (size + 65535) / 65536), "size \(size)")
                XCTAssertEqual(try StoreSealer.open(sealed, storeKey: key, boundTo: "snapshots/x"), plaintext, "size \(size)")
            }
            let whole = try StoreSealer.seal(plaintext, storeKey: key, boundTo: "snapshots/x")
            XCTAssertEqual(try openStreaming(whole, path: "snapshots/x"), plaintext, "size \(size)")
        }
    }

    func testTruncatedAlteredAndMovedObjectsAreIntegrity() throws {
        let plaintext = (0..<(2 * 65536 + 5)).map { UInt8(truncatingIfNeeded: $0) }
        let sealed = try sealStreaming(plaintext, path: "snapshots/a", piece: 4096)
        var altered = sealed
        altered[70000] ^= 1
        for (bytes, path) in [(Array(sealed.prefix(40 + 65552)), "snapshots/a"), (Array(sealed.prefix(40 + 2 * 65552)), "snapshots/a"),
                              (Array(sealed.dropLast(3)), "snapshots/a"), (altered, "snapshots/a"), (sealed, "snapshots/b")] {
            XCTAssertThrowsError(try openStreaming(bytes, path: path)) { XCTAssertEqual(($0 as? CovenError)?.code, .integrity) }
        }
    }

    func testArchiveRoundTripAndRefusesWhatIsNotTarZstd() throws {
        var out: [UInt8] = []
        let writer = try ArchiveWriter { out.append(contentsOf: $0) }
        let big = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 / 7) }
        try writer.beginEntry(name: "manifest.json", size: 2)
        try writer.write(Array("{}".utf8))
        try writer.beginEntry(name: "empty", size: 0)
        try writer.beginEntry(name: "big", size: Int64(big.count))
        try writer.write(big)
        XCTAssertThrowsError(try writer.write([1]))
        try writer.finish()
        var entries: [String: [UInt8]] = [:]
        try out.withUnsafeBytes { bytes in
            var given = false
            let reader = try ArchiveReader { defer { given = true }; return given ? nil : bytes }
            while let entry = try reader.nextEntry() { entries[entry.name] = try reader.readAll(maximumSize: 1 << 20) }
        }
        XCTAssertEqual(entries, ["manifest.json": Array("{}".utf8), "empty": [], "big": big])
        let notZstd = [UInt8](repeating: 0, count: 1024)
        XCTAssertThrowsError(try notZstd.withUnsafeBytes { bytes in
            var once = false
            let reader = try ArchiveReader { defer { once = true }; return once ? nil : UnsafeRawBufferPointer(bytes) }
            _ = try reader.nextEntry()
        }) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
    }
}

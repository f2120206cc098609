import Foundation
import XCTest

@testable import CovenKit

/// The size target of change objects: the published bytes of 100,000 rows of about 200 bytes
/// are at most 1.3 times `zstd -3` of the same rows as CSV.
final class ChangeObjectSizeTests: XCTestCase {
    static let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"

    /// 100,000 notes as row entries and as CSV (header line, then one line per row).
    static func rows(count: Int) -> (entries: [RowEntry], csv: [UInt8]) {
        var generator = SplitMix64(seed: 2026)
        let syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "va", "de", "zu", "fi", "ro", "an", "el", "or"]
        let vocabulary = (0..<2000).map { _ in
            (0..<(2 + Int(generator.next() % 3))).map { _ in syllables[Int(generator.next() % 16)] }.joined()
        }
        func words(_ range: ClosedRange<Int>) -> String {
            let n = range.lowerBound + Int(generator.next() % UInt64(range.count))
            return (0..<n).map { _ in vocabulary[Int(generator.next() % 2000)] }.joined(separator: " ")
        }
        func hex(_ value: UInt64, _ digits: Int) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: max(0, digits - text.count)) + text
        }
        let columns = ["id", "title", "body", "rating", "price", "audience", "_updated_at"]
        var csv = Array((columns.joined(separator: ",") + "\n").utf8)
        var entries: [RowEntry] = []
        entries.reserveCapacity(count)
        var millis: UInt64 = 1_767_323_045_678
        for _ in 0..<count {
            millis += generator.next() % 4
            let random = generator.next()
            let id = hex(millis, 12).prefix(8) + "-" + hex(millis, 12).suffix(4) + "-7" + hex(random & 0xfff, 3) + "-"
                + hex(0x8000 | (random >> 12) & 0x3fff, 4) + "-" + hex(generator.next() & 0xffff_ffff_ffff, 12)
            let date = Date(timeIntervalSince1970: Double(millis) / 1000)
            let stamp = Timestamp.iso8601(date) + "-0000-" + device
            let title = words(2...5)
            let body = words(6...12)
            let rating = Int64(generator.next() % 6)
            let price = Double(generator.next() % 100_000) / 100
            let values: [SQLValue] = [.text(String(id)), .text(title), .text(body), .integer(rating), .real(price), .text("store"), .text(stamp)]
            entries.append(RowEntry(kind: .upsert, table: "notes", id: String(id), stamp: stamp, columns: columns, values: values))
            csv += Array("\(id),\(title),\(body),\(rating),\(price),store,\(stamp)\n".utf8)
        }
        return (entries, csv)
    }

    func testPublishedRowsAreWithinATenthOfZstdOfCSV() throws {
        let (entries, csv) = Self.rows(count: 100_000)
        XCTAssertEqual(Double(csv.count) / 100_000, 200, accuracy: 15, "rows of about 200 bytes")
        let change = ChangeObject(
            storeID: "9e8d7c6b-5a49-4838-a726-150493827160", device: Self.device, seq: 1,
            schema: .init(migrations: 1, digest: "sha256:0123456789abcdef"), entries: entries)
        let storeKey = FileKey()
        let signingKey = try DeviceSigningKey()
        let published = try change.seal(storeKey: storeKey, signingKey: signingKey)
        let csvZstd = try Zstd.compress(csv, level: 3)
        var reference = csvZstd.count
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/zstd") {
            reference = try zstdTool(csv).count
        }
        let ratio = Double(published.count) / Double(reference)
        let line = String(
            format: "change object size: %d rows, CSV %d bytes, zstd -3 of CSV %d bytes, plaintext %d bytes, published %d bytes, ratio %.3f (target <= 1.3)",
            entries.count, csv.count, reference, change.encoded().count, published.count, ratio)
        print(line)
        XCTAssertLessThanOrEqual(ratio, 1.3)
        XCTAssertEqual(try ChangeObject.open(published, path: change.path, storeKey: storeKey, publicKey: signingKey.publicKey), change)
    }

    func zstdTool(_ input: [UInt8]) throws -> [UInt8] {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("coven-rows-\(UUID().uuidString).csv")
        try Data(input).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/zstd")
        process.arguments = ["-3", "-c", "-q", file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        return [UInt8](output)
    }
}

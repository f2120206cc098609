import CovenKit
import Foundation
import XCTest

@testable import coven

/// OutputSpool keeps a long list's text past a MiB in an unlinked temporary file and gives it
/// back whole, in order (fetch-kept's `fetched` of 100,000 files).
final class OutputSpoolTests: XCTestCase {
    private func written(_ spool: OutputSpool) throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("spool-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/out"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let out = OutputStream(descriptor: fd)
        try spool.write(to: out)
        out.flush()
        try out.check()
        close(fd)
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    func testAShortListStaysInMemoryAndAnEmptyOneWritesNothing() throws {
        XCTAssertEqual(try written(OutputSpool(separator: ",", folder: NSTemporaryDirectory())), "")
        let spool = OutputSpool(separator: ",", folder: NSTemporaryDirectory())
        try spool.append("{\"a\":1}")
        try spool.append("{\"b\":2}")
        XCTAssertEqual(spool.count, 2)
        XCTAssertFalse(spool.spilled)
        XCTAssertEqual(try written(spool), "{\"a\":1},{\"b\":2}")
    }

    func testALongListSpillsToAFileAndComesBackWholeInOrder() throws {
        let spool = OutputSpool(separator: "\n", folder: NSTemporaryDirectory())
        var expected: [String] = []
        // About 3 MiB: spilled three times, with items across the spills' edges.
        for index in 0..<30_000 {
            let line = "failed file-\(index): missing " + String(repeating: "é", count: index % 40)
            expected.append(line)
            try spool.append(line)
        }
        XCTAssertTrue(spool.spilled)
        // The spill file is unlinked at once: nothing is left in the temporary folder.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).filter { $0.hasPrefix("coven-spool-") }
        XCTAssertEqual(leftovers, [])
        XCTAssertEqual(try written(spool), expected.joined(separator: "\n"))
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven get --files-from` whose list turns bad part way: the run fails with the list's error,
/// after the lines of the files taken before it.
final class GetManyListTests: XCTestCase {
    /// 70 ids, then an entry holding a NUL byte: the files taken before the bad entry was read
    /// are held and each printed, in order, then the run ends with the usage error (status 2).
    /// How many were taken by then depends on how far the workers got (64, the first window,
    /// in most runs; 57 in one loaded CI run), so the test asks for the lines in order, each
    /// with its file's bytes, and for every file held complete to be printed. (Before, the
    /// files still in flight or not yet reported when the bad entry was read were held but
    /// never printed.)
    func testABadEntryEndsTheRunAfterTheLinesOfTheFilesTakenBeforeIt() throws {
        let folder = try TestPaths.temporaryDirectory("get-many-list")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = StorageLocation.file(directory: folder + "/store")
        try FileManager.default.createDirectory(atPath: folder + "/store", withIntermediateDirectories: true)
        let paths = DevicePaths(database: folder + "/device.db")
        var files: [String] = []
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "list")
            for index in 0..<70 {
                files.append(try StoredFiles.stageApp(device, bytes: [UInt8](repeating: UInt8(index), count: (256 << 10) + index), namespace: "blobs", table: "blobs"))
            }
            try StoredFiles.store(device, file: files[0])
        }
        var list = Data(files.joined(separator: "\n").utf8)
        list.append(contentsOf: Array("\nbad\0entry\n".utf8))
        try list.write(to: URL(fileURLWithPath: folder + "/ids.txt"))
        let run = try Processes.run(try Repository.covenBinary(), ["get", "--files-from", "ids.txt"],
                                    environment: ["COVEN_DB": paths.database, "PATH": "/usr/bin:/bin"], directory: folder)
        XCTAssertEqual(run.status, 2, run.stderrText)
        XCTAssertTrue(run.stderrText.contains("NUL"), run.stderrText)
        let printed = String(decoding: run.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        XCTAssertTrue((1...70).contains(printed.count), "the lines of the files taken: \(printed.count)")
        let device = try Device.open(paths: paths)
        let held = try device.database.scalar("SELECT count(*) FROM coven_cache WHERE complete = 1").intValue ?? 0
        XCTAssertGreaterThanOrEqual(printed.count, Int(held), "every file held in the cache was printed")
        for (index, path) in printed.enumerated() {
            XCTAssertEqual(FileManager.default.contents(atPath: path).map { [UInt8]($0) }, [UInt8](repeating: UInt8(index), count: (256 << 10) + index))
        }
    }
}

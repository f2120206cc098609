import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of `coven get` of many files at the sync that makes a batch of them durable: no
/// file is recorded held that is not on the disk, and the next run brings every file.
final class GetManyKillTests: XCTestCase {
    /// The sync of the cache's filesystem comes before the commit recording a batch of fetched
    /// files complete, and before their paths are printed: `kill -9` at that sync (strace kills
    /// the process as it enters it) leaves no entry complete nor holding bytes and no path
    /// printed, and the rerun prints every file's path, in the order given, its bytes the
    /// file's. (Before, `get` of many held each file on its own, synced and recorded one by
    /// one: no syncfs was made, and the kill came too late.)
    func testKillAtTheBatchSyncRecordsNothingHeldAndTheRerunBringsEveryFile() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { throw XCTSkip("strace is not installed") }
        let folder = try TestPaths.temporaryDirectory("get-many-sync-kill")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = StorageLocation.file(directory: folder + "/store")
        try FileManager.default.createDirectory(atPath: folder + "/store", withIntermediateDirectories: true)
        let paths = DevicePaths(database: folder + "/device.db")
        var files: [String] = []
        var contents: [[UInt8]] = []
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "kill")
            for index in 0..<20 {
                contents.append([UInt8](repeating: UInt8(index), count: 3000 + index))
                files.append(try StoredFiles.stageApp(device, bytes: contents[index], namespace: "blobs", table: "blobs"))
            }
            try StoredFiles.store(device, file: files[0])
        }
        // The list given twice over: each file once per line, in this order.
        let list = files.reversed() + files
        try Data(list.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: folder + "/ids.txt"))
        func entries() throws -> (complete: Int64, held: Int64) {
            let reader = try Device.open(paths: paths, readOnly: true)
            return (try reader.database.scalar("SELECT count(*) FROM coven_cache WHERE complete > 0").intValue ?? -1,
                    try reader.database.scalar("SELECT count(*) FROM coven_cache WHERE bytes > 0").intValue ?? -1)
        }
        let environment = ["COVEN_DB": paths.database, "PATH": "/usr/bin:/bin"]
        let killed = try Processes.run("/usr/bin/strace", ["-f", "-qq", "-o", "/dev/null", "-e", "trace=syncfs", "-e", "inject=syncfs:signal=KILL",
                                                          try Repository.covenBinary(), "get", "--files-from", "ids.txt"],
                                       environment: environment, directory: folder)
        XCTAssertNotEqual(killed.status, 0, "killed at its batch sync: \(killed.stderrText)")
        XCTAssertEqual(killed.stdout.count, 0, "no path printed before its file was synced and recorded")
        let after = try entries()
        XCTAssertEqual(after.complete, 0, "no entry recorded complete before its batch was synced")
        XCTAssertEqual(after.held, 0, "nor holding bytes")

        let rerun = try Processes.run(try Repository.covenBinary(), ["get", "--files-from", "ids.txt"], environment: environment, directory: folder)
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        let printed = String(decoding: rerun.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        XCTAssertEqual(printed.count, list.count, "one line per id given")
        for (id, path) in zip(list, printed) {
            let index = try XCTUnwrap(files.firstIndex(of: id))
            XCTAssertEqual(FileManager.default.contents(atPath: path).map { [UInt8]($0) }, contents[index], "the bytes of \(id) at \(path)")
        }
        XCTAssertEqual(try entries().complete, 20)
    }
}

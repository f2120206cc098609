import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of `coven fetch-kept` while it fetches several kept files at once: the files it
/// held whole stay held and are not fetched again; the next run fetches only the rest.
final class FetchKeptKillTests: XCTestCase {
    func testKillWhileFetchingManyFilesThenRerunFetchesOnlyTheRest() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-fetch-kill")
        defer { s3.stop() }
        let (server, proxy) = (s3.server, s3.proxy)
        let folder = try TestPaths.temporaryDirectory("fetch-kept-kill")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = s3.location()
        let paths = DevicePaths(database: folder + "/device.db")
        var objects: [String] = []
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "kill", table: "keep", kept: true)
            var files: [String] = []
            for index in 0..<12 {
                files.append(try StoredFiles.stageApp(device, bytes: [UInt8](repeating: UInt8(index), count: 2000 + index), namespace: "keep", table: "keep"))
            }
            try StoredFiles.store(device, file: files[0])
            objects = try files.map { try device.requireFile($0).coordinates.object }
        }
        func gets(_ object: String) -> Int {
            let name = String(object.split(separator: "/").last ?? "")
            return proxy.requests().filter { $0.hasPrefix("GET ") && $0.contains(name) }.count
        }
        // The fourth file's request goes unanswered: the others are fetched meanwhile.
        let stalled = objects[3]
        try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "GET", "path": "\#(String(stalled.split(separator: "/").last ?? ""))", "before": true, "count": 1}"#)
        var environment = server.environment
        environment["COVEN_DB"] = paths.database
        environment["PATH"] = "/usr/bin:/bin"
        let child = try Spawn.start(try Repository.covenBinary(), ["fetch-kept"], environment: environment,
                                    stdout: folder + "/out.txt", stderr: folder + "/err.txt")
        let reader = try Device.open(paths: paths, readOnly: true)
        func complete() -> Int64 { (try? reader.database.scalar("SELECT count(*) FROM coven_cache WHERE complete > 0").intValue) ?? 0 }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline && complete() < 11 { usleep(20_000) }
        XCTAssertEqual(complete(), 11, "every file but the stalled one held")
        XCTAssertEqual(kill(child.pid, SIGKILL), 0)
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
        for object in objects where object != stalled { XCTAssertEqual(gets(object), 1, object) }

        try proxy.clear()
        let rerun = try Processes.run(try Repository.covenBinary(), ["--json", "fetch-kept"], environment: environment, directory: folder)
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        let json = try JSONSerialization.jsonObject(with: rerun.stdout) as? [String: Any]
        XCTAssertEqual((json?["fetched"] as? [[String: Any]])?.count, 1)
        XCTAssertEqual(json?["already_held"] as? Int, 11)
        for object in objects { XCTAssertEqual(gets(object), object == stalled ? 2 : 1, "fetched again only if never held: \(object)") }
        let after = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try after.database.scalar("SELECT count(*) FROM coven_cache WHERE complete > 0").intValue, 12)
    }

    /// The sync that makes a batch of fetched files durable comes before the commit recording
    /// them complete: `kill -9` at that sync (strace kills the process as it enters it) leaves
    /// every entry recorded with nothing held, never one complete without its bytes on the disk,
    /// and the next run fetches them all. (Before, each file was synced and recorded on its own,
    /// and no such batch sync was made.)
    func testKillAtTheBatchSyncLeavesNoEntryCompleteAndTheRerunFetchesEveryFile() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { throw XCTSkip("strace is not installed") }
        let folder = try TestPaths.temporaryDirectory("fetch-kept-sync-kill")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = StorageLocation.file(directory: folder + "/store")
        try FileManager.default.createDirectory(atPath: folder + "/store", withIntermediateDirectories: true)
        let paths = DevicePaths(database: folder + "/device.db")
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "kill", table: "keep", kept: true)
            var files: [String] = []
            for index in 0..<20 {
                files.append(try StoredFiles.stageApp(device, bytes: [UInt8](repeating: UInt8(index), count: 3000 + index), namespace: "keep", table: "keep"))
            }
            try StoredFiles.store(device, file: files[0])
        }
        func entries() throws -> (complete: Int64, held: Int64) {
            let reader = try Device.open(paths: paths, readOnly: true)
            return (try reader.database.scalar("SELECT count(*) FROM coven_cache WHERE complete > 0").intValue ?? -1,
                    try reader.database.scalar("SELECT count(*) FROM coven_cache WHERE bytes > 0").intValue ?? -1)
        }
        let environment = ["COVEN_DB": paths.database, "PATH": "/usr/bin:/bin"]
        let killed = try Processes.run("/usr/bin/strace", ["-f", "-qq", "-o", "/dev/null", "-e", "trace=syncfs", "-e", "inject=syncfs:signal=KILL",
                                                          try Repository.covenBinary(), "fetch-kept"],
                                       environment: environment, directory: folder)
        XCTAssertNotEqual(killed.status, 0, "killed at its batch sync: \(killed.stderrText)")
        let after = try entries()
        XCTAssertEqual(after.complete, 0, "no entry recorded complete before its batch was synced")
        XCTAssertEqual(after.held, 0, "nor holding bytes")

        let rerun = try Processes.run(try Repository.covenBinary(), ["--json", "fetch-kept"], environment: environment, directory: folder)
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        let json = try JSONSerialization.jsonObject(with: rerun.stdout) as? [String: Any]
        XCTAssertEqual((json?["fetched"] as? [[String: Any]])?.count, 20)
        XCTAssertEqual(try entries().complete, 20)
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven gc --gone-devices` while its batch deletes are in flight to the
/// loopback moto server, then a rerun: nothing a record names is gone, the rest is deleted.
final class GCKillCLITests: XCTestCase {
    func testKillDuringBatchDeletesThenRerun() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-gc-kill-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: server.endpoint)
        defer { proxy.stop() }
        let work = try TestPaths.temporaryDirectory("gc-kill")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        for (key, value) in server.environment { environment[key] = value }
        for folder in ["home", "tmp"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        func coven(_ arguments: [String], db: String) throws -> ProcessResult {
            try Processes.run(binary, ["--db", work + "/" + db + "/device.db"] + arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "covers", "kind": "app" } ],
              "tables": [ { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] } ],
              "migrations": [ "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        try Data("named bytes".utf8).write(to: URL(fileURLWithPath: work + "/cover.png"))
        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        try Data(try coven(["key", "export"], db: "a").stdoutText.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
        XCTAssertEqual(try coven(["join", storage, "--key-file", "key.txt", "--name", "c"], db: "c").status, 0)
        // c stores a file a row names, then is removed for good; its folder holds strays too.
        let staged = try coven(["stage", "cover.png", "--namespace", "covers"], db: "c").stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try coven(["write", "INSERT INTO settings (id, file) VALUES ('one', coven_put_staged('\(staged)'))"], db: "c").status, 0)
        XCTAssertEqual(try coven(["upload-worker", "--once"], db: "c").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "c").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        let device = try coven(["sql", "SELECT value FROM coven_meta WHERE key = 'device_id'"], db: "c").stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let named = try coven(["sql", "SELECT object FROM coven_files"], db: "a").stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(named.hasPrefix("files/\(device)/"), named)
        let location = try StorageLocation(parsing: "s3://\(bucket)/store?endpoint=\(server.endpoint)&path_style=true")
        let connector = StorageConnector(location: location, environment: server.environment)
        let strays = (0..<3_000).map { "files/\(device)/stray-\($0)" }
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            guard let connection = try? connector.connect() else { return }
            for index in stride(from: worker, to: strays.count, by: 8) { try? connection.put(strays[index], data: [1]) }
        }
        XCTAssertEqual(try coven(["device", "remove", "c"], db: "a").status, 0)

        // The second batch delete stalls: kill -9 while it is in flight.
        try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "POST", "path": "delete", "before": true, "skip": 1, "count": 1}"#)
        let child = try Spawn.start(binary, ["--db", work + "/a/device.db", "gc", "--gone-devices"], environment: environment, directory: work,
                                    stderr: work + "/gc.err")
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, proxy.requests().filter({ $0.hasPrefix("POST ") && $0.contains("delete") }).count < 2 {
            Thread.sleep(forTimeInterval: 0.05)
        }
        kill(child.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
        try proxy.clear()
        let provider = try connector.connect()
        XCTAssertNotNil(try provider.head(named), "the named object survives the kill")

        let rerun = try coven(["--json", "gc", "--gone-devices"], db: "a")
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        XCTAssertEqual(try provider.list(prefix: "files/\(device)/").map(\.key), [named], "the rerun deletes the rest, and only that")
        var bytes: [UInt8] = []
        let file = try coven(["sql", "SELECT file FROM settings"], db: "a").stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let read = try coven(["cat", file], db: "a")
        bytes = Array(read.stdout)
        XCTAssertEqual(bytes, Array("named bytes".utf8))
    }
}

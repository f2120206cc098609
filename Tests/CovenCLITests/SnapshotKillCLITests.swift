import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven snapshot` while its upload is in flight to the loopback moto
/// server: the database copy and sealed pack it left in `<db>.d/tmp` go at the next command
/// that opens the device (a read-only one too), and a snapshot runs again.
final class SnapshotKillCLITests: XCTestCase {
    func testTheTemporaryFilesOfAKilledSnapshotGoAtTheNextOpen() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-snapshot-kill-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: server.endpoint)
        defer { proxy.stop() }
        let work = try TestPaths.temporaryDirectory("snapshot-kill")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        for (key, value) in server.environment { environment[key] = value }
        for folder in ["home", "tmp"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        let database = work + "/a/device.db"
        func coven(_ arguments: [String]) throws -> ProcessResult {
            try Processes.run(binary, ["--db", database] + arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "files", "kind": "app" } ],
              "tables": [ { "name": "notes", "identity": "uuid" } ],
              "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"]).status, 0)
        let written = try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'a note', coven_stamp())"])
        XCTAssertEqual(written.status, 0, written.stderrText)
        let temporary = database + ".d/tmp"
        func leftovers() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: temporary).filter { $0.hasPrefix("snapshot-") }
        }

        try proxy.inject(#"{"mode": "stall", "seconds": 60, "path": "/snapshots/", "before": true, "count": -1}"#)
        let child = try Spawn.start(binary, ["--db", database, "snapshot"], environment: environment, directory: work, stderr: work + "/snapshot.err")
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, !proxy.requests().contains(where: { $0.contains("/snapshots/") }) {
            Thread.sleep(forTimeInterval: 0.05)
        }
        kill(child.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
        try proxy.clear()
        XCTAssertFalse(try leftovers().isEmpty, "the kill left the snapshot's database copy")

        let read = try coven(["sql", "SELECT count(*) FROM notes"])
        XCTAssertEqual(read.stdoutText, "1\n", read.stderrText)
        XCTAssertEqual(try leftovers(), [], "the next command that opens the device removes them")
        let again = try coven(["snapshot"])
        XCTAssertEqual(again.status, 0, again.stderrText)
        XCTAssertEqual(try leftovers(), [])
    }
}

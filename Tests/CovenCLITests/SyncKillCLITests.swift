import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven sync` while a change is in flight to the loopback moto server,
/// during a push and during a pull, then a rerun: nothing published twice, nothing applied
/// twice, nothing lost.
final class SyncKillCLITests: XCTestCase {
    func testKillDuringPushAndPullThenRerun() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-sync-kill-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: server.endpoint)
        defer { proxy.stop() }
        let folder = try NotesFolder("sync-kill", environment: ["COVEN_SYNC_CHANGE_BYTES": "1"].merging(server.environment) { $1 })
        let work = folder.work, binary = folder.binary, environment = folder.environment
        func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }
        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        let key = try coven(["key", "export"], db: "a").stdoutText
        try Data(key.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
        let joined = try coven(["join", storage, "--key-file", "key.txt", "--name", "b"], db: "b")
        XCTAssertEqual(joined.status, 0, joined.stderrText)
        for index in 0..<8 {
            let written = try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'note \(index)', coven_stamp())"], db: "a")
            XCTAssertEqual(written.status, 0, written.stderrText)
        }

        func killWhileStalled(_ arguments: [String], db: String, stalling path: String, method: String) throws {
            try proxy.clear()
            try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "\#(method)", "path": "\#(path)", "before": true, "count": 1}"#)
            let child = try Spawn.start(binary, ["--db", work + "/" + db + "/device.db"] + arguments, environment: environment, directory: work,
                                        stderr: work + "/\(db).err")
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, !proxy.requests().contains(where: { $0.hasPrefix(method + " ") && $0.contains(path) }) {
                Thread.sleep(forTimeInterval: 0.05)
            }
            kill(child.pid, SIGKILL)
            XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
            try proxy.clear()
        }

        // Push: killed while change 5 is on its way.
        try killWhileStalled(["sync", "--push"], db: "a", stalling: "/0000000000000005", method: "PUT")
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM coven_push"], db: "a").stdoutText, "1\n", "change 5 stays frozen")
        let pushed = try coven(["sync", "--push", "--json"], db: "a")
        XCTAssertEqual(pushed.status, 0, pushed.stderrText)
        XCTAssertTrue(pushed.stdoutText.contains(#""changes":[5,6,7,8]"#), pushed.stdoutText)
        let listed = try S3Storage(location: .s3(bucket: bucket, prefix: "store", endpoint: server.endpoint, region: server.region, pathStyle: true),
                                   options: StorageOptions(environment: [:]), environment: server.environment).list(prefix: "changes/")
        XCTAssertEqual(listed.count, 8, "each change published once")

        // Pull: killed while change 4 is on its way down.
        try killWhileStalled(["sync", "--pull"], db: "b", stalling: "/0000000000000004", method: "GET")
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM notes"], db: "b").stdoutText, "3\n", "changes 1-3 applied, each in its own transaction")
        let pulled = try coven(["sync", "--pull", "--json"], db: "b")
        XCTAssertEqual(pulled.status, 0, pulled.stderrText)
        XCTAssertEqual(try coven(["sql", "SELECT count(*), count(DISTINCT body) FROM notes"], db: "b").stdoutText, "8\t8\n")
        XCTAssertEqual(try coven(["sql", "SELECT count(*), min(seq), max(seq) FROM coven_devices WHERE name = 'a'"], db: "b").stdoutText, "1\t8\t8\n")
        XCTAssertEqual(try coven(["sync", "--json"], db: "b").stdoutText.contains(#""quiet":true"#), true)
    }
}

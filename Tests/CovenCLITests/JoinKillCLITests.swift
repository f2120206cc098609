import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven join` against the loopback moto server, once while it builds
/// the device from a snapshot and once during its pull, then the same join again: it starts
/// clean the first time and finishes the pull the second; a device of another store at the path
/// is refused, naming it.
final class JoinKillCLITests: XCTestCase {
    func testAKilledJoinRunAgainStartsCleanOrFinishes() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-join-kill-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: server.endpoint)
        defer { proxy.stop() }
        let folder = try NotesFolder("join-kill", environment: ["COVEN_SYNC_CHANGE_BYTES": "1"].merging(server.environment) { $1 })
        let work = folder.work, binary = folder.binary, environment = folder.environment
        func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }
        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        func write(_ count: Int) throws {
            for index in 0..<count {
                let written = try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'note \(index)', coven_stamp())"], db: "a")
                XCTAssertEqual(written.status, 0, written.stderrText)
            }
            XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        }
        try write(3)
        XCTAssertEqual(try coven(["snapshot"], db: "a").status, 0)
        try write(4)
        let key = try coven(["key", "export"], db: "a").stdoutText
        try Data(key.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
        var join = ["join", storage, "--key-file", "key.txt", "--name", "b"]

        func killWhileStalled(_ method: String, _ path: String) throws {
            try proxy.clear()
            func matching() -> Int { proxy.requests().filter { $0.hasPrefix(method + " ") && $0.contains(path) }.count }
            let before = matching()
            try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "\#(method)", "path": "\#(path)", "before": true, "count": 1}"#)
            let child = try Spawn.start(binary, ["--db", work + "/b/device.db"] + join, environment: environment, directory: work,
                                        stderr: work + "/b.err")
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, matching() == before {
                Thread.sleep(forTimeInterval: 0.05)
            }
            kill(child.pid, SIGKILL)
            XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
            try proxy.clear()
        }

        // Killed while it announces itself: the snapshot's database is built aside, no device yet.
        try killWhileStalled("PUT", "/devices/")
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/b/device.db.init"), "the kill left the database being built")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/b/device.db"))
        let clean = try coven(join, db: "b")
        XCTAssertEqual(clean.status, 0, clean.stderrText)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/b/device.db.init"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/b/device.db.d/joining"))
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM notes"], db: "b").stdoutText, "7\n")
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM coven_devices WHERE NOT gone"], db: "b").stdoutText, "2\n")

        // Killed during its pull: the device is there; the rerun finishes the pull. (The first
        // b is a live device of the store: this one takes another name.)
        try FileManager.default.removeItem(atPath: work + "/b")
        join = ["join", storage, "--key-file", "key.txt", "--name", "b2"]
        try killWhileStalled("GET", "/changes/")
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/b/device.db"))
        let id = try coven(["sql", "SELECT value FROM coven_meta WHERE key = 'device_id'"], db: "b").stdoutText
        let finished = try coven(join, db: "b")
        XCTAssertEqual(finished.status, 0, finished.stderrText)
        XCTAssertEqual(finished.stdoutText, id, "the same device")
        XCTAssertTrue(finished.stderrText.contains("device 'b2' had joined already: finished its pull"), finished.stderrText)
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM notes"], db: "b").stdoutText, "7\n")

        // A device of another store at the path is refused, named, and left as it is.
        XCTAssertEqual(try coven(["init", "--storage", "file://" + work + "/other", "--manifest", "coven.json", "--name", "c"], db: "c").status, 0)
        let refused = try coven(join, db: "c")
        XCTAssertEqual(refused.status, 4)
        XCTAssertTrue(refused.stderrText.contains("already_exists: a coven device ('c', "), refused.stderrText)
        XCTAssertTrue(refused.stderrText.contains("pass another --db to join that one"), refused.stderrText)
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM notes"], db: "c").stdoutText, "0\n")
    }
}

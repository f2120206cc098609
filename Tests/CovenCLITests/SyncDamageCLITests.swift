import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Damage a household meets, through the built binary (issue "Sync that notices damage"): a
/// change lost from storage, a flipped byte, a database put back from a backup, a lost device
/// key. Each is noticed at the next sync, said on stderr naming the device and the object, in
/// `--json` and `status`, with the documented exit status, and recovered from.
final class SyncDamageCLITests: XCTestCase {
    var folder: NotesFolder!
    var work: String { folder.work }

    override func setUpWithError() throws {
        folder = try NotesFolder("sync-damage")
        XCTAssertEqual(try coven(["init", "--storage", "file://\(work)/store", "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        try Data(try coven(["key", "export"], db: "a").stdoutText.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
    }

    override func tearDownWithError() throws {
        folder = nil
    }

    @discardableResult
    func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }

    func join(_ name: String) throws -> ProcessResult {
        try coven(["join", "file://\(work)/store", "--key-file", "key.txt", "--name", name], db: name)
    }

    func deviceID(_ db: String) throws -> String {
        try coven(["sql", "SELECT coven_device_id()"], db: db).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func json(_ result: ProcessResult) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any], result.stdoutText)
    }

    /// Three notes on a, each written and synced: a's changes 1, 2, 3.
    func threeChanges() throws {
        for index in 0..<3 {
            XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'note \(index)', coven_stamp())"], db: "a").status, 0)
            XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        }
    }

    func notes(_ db: String) throws -> String {
        try coven(["sql", "SELECT body FROM notes ORDER BY body"], db: db).stdoutText
    }

    func testAMissingChangeIsAGapNamedBySyncStatusAndJoin() throws {
        XCTAssertEqual(try join("b").status, 0)
        try threeChanges()
        let a = try deviceID("a")
        let object = ChangeObject.path(device: a, seq: 2)
        try FileManager.default.removeItem(atPath: work + "/store/" + object)

        let sync = try coven(["sync"], db: "b")
        XCTAssertEqual(sync.status, 10, sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("change 2 of device 'a' (\(a)) is missing from storage ('\(object)')"), sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("coven device remove \(a)"), sync.stderrText)
        XCTAssertEqual(try notes("b"), "note 0\n")
        // -q does not silence it: the cron line mails it.
        let quiet = try coven(["sync", "-q"], db: "b")
        XCTAssertEqual(quiet.status, 10)
        XCTAssertTrue(quiet.stderrText.contains("is missing from storage"), quiet.stderrText)
        let asJSON = try coven(["sync", "--json"], db: "b")
        XCTAssertEqual(asJSON.status, 10)
        XCTAssertEqual((try json(asJSON)["pulled"] as? [String: Any])?["gaps"] as? [String: Int], [a: 2])
        // Issue 35 item 8: the warnings go to stderr under --json too, one object a line, and
        // the run ends with the partial error, as a batch's.
        let lines = try asJSON.stderrText.split(separator: "\n").map { line in
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], String(line))
        }
        XCTAssertTrue(lines.contains { ($0["warning"] as? String)?.contains("change 2 of device 'a' (\(a)) is missing from storage") ?? false }, asJSON.stderrText)
        XCTAssertEqual(lines.last?["error"] as? String, "partial", asJSON.stderrText)
        XCTAssertEqual(lines.last?["exit_code"] as? Int, 10, asJSON.stderrText)
        XCTAssertTrue(sync.stderrText.hasSuffix("coven: error: partial: the changes of 1 device stopped at a missing, damaged or waiting change; the rest is applied\n"), sync.stderrText)
        // Nothing moved, but something is stuck: not "nothing to do".
        XCTAssertEqual(try coven(["sync"], db: "b").stdoutText, "nothing published or applied\n")
        let status = try json(try coven(["status", "--json"], db: "b"))
        let problems = try XCTUnwrap((status["sync"] as? [String: Any])?["problems"] as? [[String: Any]])
        XCTAssertEqual(problems.map { "\($0["device"] ?? "") \($0["seq"] ?? "") \($0["kind"] ?? "")" }, ["\(a) 2 gap"])
        XCTAssertTrue(try coven(["status"], db: "b").stdoutText.contains("stopped at change 2 of device \(a): missing from storage"))

        // A device that joins now is told too.
        let joined = try join("c")
        XCTAssertEqual(joined.status, 10, joined.stderrText)
        XCTAssertTrue(joined.stderrText.contains("change 2 of device 'a' (\(a)) is missing from storage"), joined.stderrText)
        XCTAssertTrue(joined.stderrText.hasSuffix("coven: error: partial: the changes of 1 device stopped at a missing, damaged or waiting change; the rest is applied\n"), joined.stderrText)
        // a publishes it again at its next sync; the others go on.
        let republished = try coven(["sync"], db: "a")
        XCTAssertTrue(republished.stderrText.contains("published change 2 of this device again"), republished.stderrText)
        XCTAssertEqual(try coven(["sync"], db: "b").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "c").status, 0)
        XCTAssertEqual(try notes("b"), "note 0\nnote 1\nnote 2\n")
        XCTAssertEqual(try notes("c"), "note 0\nnote 1\nnote 2\n")
    }

    func testADamagedChangeIsReportedPublishedAgainAndTheOthersGoOn() throws {
        XCTAssertEqual(try join("b").status, 0)
        try threeChanges()
        let a = try deviceID("a")
        let path = work + "/store/" + ChangeObject.path(device: a, seq: 2)
        var bytes = try XCTUnwrap(FileManager.default.contents(atPath: path))
        bytes[bytes.count / 2] ^= 0x10
        try bytes.write(to: URL(fileURLWithPath: path))

        let stopped = try coven(["sync"], db: "b")
        XCTAssertEqual(stopped.status, 10, stopped.stderrText)
        XCTAssertTrue(stopped.stderrText.contains("change 2 of device 'a' (\(a)) fails its checks"), stopped.stderrText)
        XCTAssertTrue(stopped.stderrText.contains("reported to that device, which publishes it again at its next sync"), stopped.stderrText)
        XCTAssertEqual(try notes("b"), "note 0\n")
        // gc on b is not stopped by it.
        XCTAssertEqual(try coven(["gc"], db: "b").status, 0)

        let republished = try coven(["sync"], db: "a")
        XCTAssertEqual(republished.status, 0, republished.stderrText)
        XCTAssertTrue(republished.stderrText.contains("published change 2 of this device again"), republished.stderrText)
        let resumed = try coven(["sync"], db: "b")
        XCTAssertEqual(resumed.status, 0, resumed.stderrText)
        XCTAssertEqual(try notes("b"), "note 0\nnote 1\nnote 2\n")
        XCTAssertFalse(try coven(["status"], db: "b").stdoutText.contains("stopped at"))
    }

    func testADatabasePutBackFromABackupCatchesUpOnItsOwnChanges() throws {
        XCTAssertEqual(try join("b").status, 0)
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'before', coven_stamp())"], db: "a").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        // The backup: the database and its folder, as cp takes them.
        XCTAssertEqual(try Processes.run("/bin/cp", ["-a", work + "/a", work + "/backup"], environment: folder.environment, directory: work).status, 0)
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'after', coven_stamp())"], db: "a").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        try FileManager.default.removeItem(atPath: work + "/a")
        try FileManager.default.moveItem(atPath: work + "/backup", toPath: work + "/a")

        let sync = try coven(["sync"], db: "a")
        XCTAssertEqual(sync.status, 0, sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("this device's database was older than what it published"), sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("applied its own change 2 from storage"), sync.stderrText)
        XCTAssertEqual(try notes("a"), "after\nbefore\n")
        // It writes and publishes on, with no device_conflict.
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'new', coven_stamp())"], db: "a").status, 0)
        let next = try coven(["sync"], db: "a")
        XCTAssertEqual(next.status, 0, next.stderrText)
        XCTAssertEqual(try coven(["sync"], db: "b").status, 0)
        XCTAssertEqual(try notes("b"), "after\nbefore\nnew\n")
    }

    func testALostDeviceKeyIsAnIOErrorAndNothingIsPublished() throws {
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'n', coven_stamp())"], db: "a").status, 0)
        try FileManager.default.removeItem(atPath: work + "/a/device.db.d/device.key")
        let sync = try coven(["sync"], db: "a")
        XCTAssertEqual(sync.status, 1, sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("io: the device signing key"), sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("is missing"), sync.stderrText)
        XCTAssertTrue(sync.stderrText.contains("coven: hint: put the device's own key back"), sync.stderrText)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/store/changes/\(try deviceID("a"))/0000000000000001"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/a/device.db.d/device.key"))
    }
}

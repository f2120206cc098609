import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The trash through the built `coven` (issue 37), on file:// and, in the subclass, on the
/// loopback moto server: a row deleted on b comes back on a with its file after gc ran on both
/// inside the window; after the window gc frees it and undelete says `bytes_absent`; a mass
/// delete warns under -q and `undelete --change` brings every row back on every device; circle
/// and owner-only rows are neither listed nor undeletable by others; kill -9 during undelete
/// leaves all or nothing.
class TrashCLITests: XCTestCase {
    /// The S3 server of the subclass; nil: file://.
    class var onS3: Bool { false }
    private var server: S3TestServer?

    override func tearDown() {
        server?.stop()
        server = nil
        super.tearDown()
    }

    /// A folder of devices and the storage URL of a new store (on S3: a bucket of its own).
    func store(_ label: String, manifest: String? = nil) throws -> (folder: NotesFolder, storage: String) {
        var extra: [String: String] = [:]
        var storage: String?
        if Self.onS3 {
            if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
            let server = try S3TestServer.start(.moto)
            self.server = server
            let bucket = "coven-trash-" + UUID().uuidString.lowercased().prefix(8)
            try server.makeBucket(bucket)
            extra = server.environment
            storage = "s3://\(bucket)/store?endpoint=\(server.endpoint)&path_style=true"
        }
        let folder = try NotesFolder(label, files: true, environment: extra)
        if let manifest { try Data(manifest.utf8).write(to: URL(fileURLWithPath: folder.work + "/coven.json")) }
        return (folder, storage ?? "file://\(folder.work)/store")
    }

    @discardableResult
    func ok(_ folder: NotesFolder, _ arguments: [String], db: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let result = try folder.coven(arguments, db: db)
        XCTAssertEqual(result.status, 0, "coven \(arguments): \(result.stderrText)", file: file, line: line)
        return result.stdoutText
    }

    /// a (the store's owner) and b (a device of the same member), synced.
    func twoDevices(_ folder: NotesFolder, storage: String) throws {
        try ok(folder, ["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a")
        try Data(try ok(folder, ["key", "export"], db: "a").utf8).write(to: URL(fileURLWithPath: folder.work + "/me.identity"))
        try ok(folder, ["join", storage, "--identity", "me.identity", "--name", "b"], db: "b")
    }

    func deviceID(_ folder: NotesFolder, db: String) throws -> String {
        try ok(folder, ["sql", "SELECT value FROM coven_meta WHERE key = 'device_id'"], db: db).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testARowDeletedOnBComesBackOnAWithItsFileThenAfterTheWindowItsBytesAreAbsent() throws {
        let (folder, storage) = try store("trash-back")
        try twoDevices(folder, storage: storage)
        let bytes = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try Data(bytes).write(to: URL(fileURLWithPath: folder.work + "/song.bin"))
        let staged = try ok(folder, ["stage", "song.bin", "--namespace", "files"], db: "a").trimmingCharacters(in: .whitespacesAndNewlines)
        let note = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f40"
        let file = try ok(folder, ["write", "INSERT INTO notes VALUES ('\(note)', 'a song', coven_put_staged('\(staged)'), coven_stamp())"], db: "a")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try ok(folder, ["upload-worker", "--once"], db: "a")
        for db in ["a", "b"] { try ok(folder, ["sync", "-q"], db: db) }
        try ok(folder, ["write", "DELETE FROM notes"], db: "b")
        for db in ["b", "a", "b"] { try ok(folder, ["sync", "-q"], db: db) }
        for db in ["a", "b"] {
            let gc = try folder.coven(["--json", "gc"], db: db)
            XCTAssertEqual(gc.status, 0, gc.stderrText)
            XCTAssertTrue(gc.stdoutText.contains(#""reason":"trash""#), gc.stdoutText)
            XCTAssertTrue(gc.stdoutText.contains(#""deleted":[]"#), gc.stdoutText)
        }
        let listed = try JSONSerialization.jsonObject(with: Data(try ok(folder, ["--json", "trash"], db: "a").utf8)) as? [[String: Any]]
        XCTAssertEqual(listed?.count, 1)
        let row = try XCTUnwrap(listed?.first)
        XCTAssertEqual(row["table"] as? String, "notes")
        XCTAssertEqual(row["id"] as? String, note)
        XCTAssertEqual((row["deleted_by"] as? [String: Any])?["name"] as? String, "b")
        XCTAssertEqual(row["change"] as? String, "\(try deviceID(folder, db: "b")):1")
        XCTAssertEqual((row["files"] as? [[String: Any]])?.first?["id"] as? String, file)
        XCTAssertEqual((row["files"] as? [[String: Any]])?.first?["size"] as? Int, 70_000)
        XCTAssertEqual((row["values"] as? [String: Any])?["body"] as? String, "a song")
        XCTAssertTrue(try ok(folder, ["status"], db: "a").contains("trash    1 row, 1 file, 68.4 KiB"))
        XCTAssertEqual(try ok(folder, ["undelete", "notes", note], db: "a"), "notes\t\(note)\n")
        for db in ["a", "b"] { try ok(folder, ["sync", "-q"], db: db) }
        let read = try folder.coven(["cat", file], db: "b")
        XCTAssertEqual(read.status, 0, read.stderrText)
        XCTAssertEqual(Array(read.stdout), bytes, "b reads the file that came back")
        XCTAssertEqual(try ok(folder, ["sql", "SELECT body FROM notes"], db: "b"), "a song\n")
        XCTAssertEqual(try ok(folder, ["trash"], db: "b"), "")

        // A window of one second, set on a and published; the next delete's bytes go after it.
        XCTAssertEqual(try ok(folder, ["trash", "retention"], db: "b"), "30d (default)\n")
        XCTAssertEqual(try ok(folder, ["trash", "retention", "1s"], db: "a"), "1s\n")
        for db in ["a", "b"] { try ok(folder, ["sync", "-q"], db: db) }
        XCTAssertEqual(try ok(folder, ["trash", "retention"], db: "b"), "1s\n")
        try ok(folder, ["write", "DELETE FROM notes"], db: "b")
        for db in ["b", "a", "b"] { try ok(folder, ["sync", "-q"], db: db) }
        Thread.sleep(forTimeInterval: 1.2)
        let gc = try ok(folder, ["gc"], db: "b")
        XCTAssertTrue(gc.contains("deleted files/"), gc)
        let refused = try folder.coven(["undelete", "notes", note], db: "b")
        XCTAssertEqual(refused.status, 3, refused.stderrText)
        XCTAssertTrue(refused.stderrText.hasPrefix("coven: error: bytes_absent: "), refused.stderrText)
        XCTAssertTrue(refused.stderrText.contains(file), refused.stderrText)
        XCTAssertEqual(try ok(folder, ["sql", "SELECT count(*) FROM notes"], db: "b"), "0\n", "nothing came back")
        let elsewhere = try folder.coven(["--json", "undelete", "notes", note], db: "a")
        XCTAssertEqual(elsewhere.status, 3)
        XCTAssertTrue(elsewhere.stderrText.contains(#""error":"bytes_absent""#), elsewhere.stderrText)
    }

    func testAMassDeleteWarnsUnderQuietAndUndeleteChangeBringsEveryRowBackEverywhere() throws {
        let (folder, storage) = try store("trash-mass")
        try twoDevices(folder, storage: storage)
        try ok(folder, ["join", storage, "--identity", "me.identity", "--name", "c"], db: "c")
        try ok(folder, ["write", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 120) "
                        + "INSERT INTO notes (id, body, _updated_at) SELECT coven_uuid7(), 'note ' || i, coven_stamp() FROM n"], db: "a")
        for db in ["a", "b", "c"] { try ok(folder, ["sync", "-q"], db: db) }
        try ok(folder, ["write", "DELETE FROM notes"], db: "b")
        try ok(folder, ["sync", "-q"], db: "b")
        let b = try deviceID(folder, db: "b")
        let undo = "coven undelete --change \(b):1"
        let quiet = try folder.coven(["sync", "-q"], db: "a")
        XCTAssertEqual(quiet.status, 0)
        XCTAssertEqual(quiet.stdoutText, "")
        XCTAssertTrue(quiet.stderrText.hasPrefix("coven: warning: device 'b' (\(b))"), quiet.stderrText)
        XCTAssertTrue(quiet.stderrText.contains("deleted 120 rows in change \(b):1 (notes: 120)"), quiet.stderrText)
        XCTAssertTrue(quiet.stderrText.contains("'\(undo)' brings them back"), quiet.stderrText)
        let json = try folder.coven(["--json", "sync"], db: "c")
        let object = try JSONSerialization.jsonObject(with: Data(json.stdoutText.utf8)) as? [String: Any]
        let mass = try XCTUnwrap((object?["mass_deletes"] as? [[String: Any]])?.first)
        XCTAssertEqual(mass["change"] as? String, "\(b):1")
        XCTAssertEqual(mass["rows"] as? Int, 120)
        XCTAssertEqual(mass["undo"] as? String, undo)
        XCTAssertTrue(json.stderrText.contains(#"{"warning":"#), json.stderrText)
        XCTAssertTrue(try ok(folder, ["status"], db: "c").contains("the last mass delete: 120 rows by device 'b'"))
        XCTAssertEqual(try ok(folder, ["trash"], db: "a").split(separator: "\n").count, 120)
        XCTAssertEqual(try ok(folder, ["undelete", "--change", "\(b):1"], db: "a").split(separator: "\n").count, 120)
        for db in ["a", "b", "c"] { try ok(folder, ["sync", "-q"], db: db) }
        for db in ["a", "b", "c"] {
            XCTAssertEqual(try ok(folder, ["sql", "SELECT count(*), count(DISTINCT body) FROM notes"], db: db), "120\t120\n", db)
            XCTAssertEqual(try ok(folder, ["trash"], db: db), "", db)
        }
        // Bad input is a usage error and changes nothing.
        for arguments in [["undelete", "--change", "nope"], ["undelete", "notes"], ["trash", "empty"], ["trash", "retention", "soon"],
                          ["trash", "--since", "yesterday"], ["undelete", "--change", "\(b):1", "notes"]] {
            let result = try folder.coven(arguments, db: "a")
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderrText)")
        }
        let unknown = try folder.coven(["undelete", "--change", "\(b):1"], db: "a")
        XCTAssertEqual(unknown.status, 3, unknown.stderrText)
        XCTAssertTrue(unknown.stderrText.hasPrefix("coven: error: not_found: "), unknown.stderrText)
        // A window of 0 turns the trash off: a delete keeps nothing.
        XCTAssertEqual(try ok(folder, ["trash", "retention", "0"], db: "a"), "0d\n")
        XCTAssertEqual(try ok(folder, ["--json", "trash", "retention"], db: "a"), "{\"default\":false,\"retention\":\"0d\",\"seconds\":0}\n")
        try ok(folder, ["write", "DELETE FROM notes"], db: "a")
        XCTAssertEqual(try ok(folder, ["sql", "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL"], db: "a"), "0\n")
    }

    func testCircleAndOwnerOnlyRowsAreNeitherListedNorUndeletableByOthers() throws {
        let manifest = """
            { "namespaces": [ { "name": "files", "kind": "app" } ],
              "tables": [ { "name": "albums", "identity": "uuid", "audience_column": "audience" },
                          { "name": "journal", "identity": "uuid", "owner_only": true } ],
              "migrations": [
                "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, audience TEXT NOT NULL DEFAULT 'store', _updated_at TEXT NOT NULL) STRICT",
                "CREATE TABLE journal (id TEXT PRIMARY KEY, owner TEXT, body TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """
        let (folder, storage) = try store("trash-private", manifest: manifest)
        try ok(folder, ["init", "--storage", storage, "--manifest", "coven.json", "--name", "alice", "--member", "alice"], db: "alice")
        let recipient = try ok(folder, ["member", "keygen", "-o", folder.work + "/bob.identity"], db: "alice").trimmingCharacters(in: .whitespacesAndNewlines)
        try ok(folder, ["member", "add", "bob", recipient], db: "alice")
        try ok(folder, ["join", storage, "--identity", "bob.identity", "--name", "bob"], db: "bob")
        let circle = try ok(folder, ["circle", "create", "private"], db: "alice").trimmingCharacters(in: .whitespacesAndNewlines)
        let (secret, shared, diary) = ("0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f40", "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41", "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f42")
        try ok(folder, ["write", """
            INSERT INTO albums VALUES ('\(secret)', 'secret', '\(circle)', coven_stamp());
            INSERT INTO albums VALUES ('\(shared)', 'shared', 'store', coven_stamp());
            INSERT INTO journal (id, body, _updated_at) VALUES ('\(diary)', 'dear diary', coven_stamp())
            """], db: "alice")
        for db in ["alice", "bob"] { try ok(folder, ["sync", "-q"], db: db) }
        try ok(folder, ["write", "DELETE FROM albums; DELETE FROM journal"], db: "alice")
        for db in ["alice", "bob"] { try ok(folder, ["sync", "-q"], db: db) }
        XCTAssertEqual(try ok(folder, ["trash"], db: "alice").split(separator: "\n").count, 3)
        let bobs = try ok(folder, ["trash"], db: "bob")
        XCTAssertEqual(bobs.split(separator: "\n").map { String($0.split(separator: "\t")[1]) }, [shared], bobs)
        let circleRow = try folder.coven(["undelete", "albums", secret], db: "bob")
        XCTAssertEqual(circleRow.status, 3, circleRow.stderrText)
        let owned = try folder.coven(["undelete", "journal", diary], db: "bob")
        XCTAssertEqual(owned.status, 4, owned.stderrText)
        XCTAssertTrue(owned.stderrText.hasPrefix("coven: error: not_owner: "), owned.stderrText)
        let retention = try folder.coven(["trash", "retention", "1d"], db: "bob")
        XCTAssertEqual(retention.status, 4, retention.stderrText)
        XCTAssertTrue(retention.stderrText.hasPrefix("coven: error: not_admin: "), retention.stderrText)
        XCTAssertEqual(try ok(folder, ["sql", "SELECT count(*) FROM journal"], db: "bob"), "0\n")
        XCTAssertEqual(try ok(folder, ["undelete", "journal", diary], db: "alice"), "journal\t\(diary)\n")
        for db in ["alice", "bob"] { try ok(folder, ["sync", "-q"], db: db) }
        XCTAssertEqual(try ok(folder, ["sql", "SELECT body FROM journal"], db: "bob"), "dear diary\n")
    }

    /// kill -9 at many moments of an undelete of 8,000 rows: each time every row is back or
    /// none (one transaction), and the rerun brings them all back once.
    func testKillDuringUndeleteLeavesAllOrNothing() throws {
        let (folder, storage) = try store("trash-kill")
        try ok(folder, ["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a")
        try ok(folder, ["write", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8000) "
                        + "INSERT INTO notes (id, body, _updated_at) SELECT coven_uuid7(), 'note ' || i, coven_stamp() FROM n"], db: "a")
        try ok(folder, ["sync", "-q"], db: "a")
        try ok(folder, ["write", "DELETE FROM notes"], db: "a")
        try ok(folder, ["sync", "-q"], db: "a")
        let changes = Set(try ok(folder, ["trash"], db: "a").split(separator: "\n").map { String($0.split(separator: "\t")[3]) })
        XCTAssertEqual(changes.count, 1, "one change deleted them")
        let change = try XCTUnwrap(changes.first)
        var killed = 0
        var delay = 0.02
        while delay < 5 {
            let child = try Spawn.start(folder.binary, ["--db", folder.database("a"), "undelete", "--change", change], environment: folder.environment,
                                        directory: folder.work, stdout: folder.work + "/undelete.out", stderr: folder.work + "/undelete.err")
            Thread.sleep(forTimeInterval: delay)
            kill(child.pid, SIGKILL)
            let status = Spawn.wait(child, timeout: 30).status
            let counts = try ok(folder, ["sql", "SELECT (SELECT count(*) FROM notes), (SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL)"], db: "a")
            if status == 128 + SIGKILL {
                killed += 1
                XCTAssertTrue(counts == "0\t8000\n" || counts == "8000\t0\n", "after a kill at \(delay)s: \(counts)")
                if counts == "8000\t0\n" { break }
            } else {
                XCTAssertEqual(status, 0)
                XCTAssertEqual(counts, "8000\t0\n")
                break
            }
            delay *= 1.6
        }
        XCTAssertGreaterThan(killed, 0, "at least one run was killed part way")
        if try ok(folder, ["sql", "SELECT count(*) FROM notes"], db: "a") == "0\n" {
            XCTAssertEqual(try ok(folder, ["undelete", "--change", change], db: "a").split(separator: "\n").count, 8000)
        }
        let integrity = try ok(folder, ["sql", "SELECT count(*), count(DISTINCT id) FROM notes"], db: "a")
        XCTAssertEqual(integrity, "8000\t8000\n")
        try ok(folder, ["sync", "-q"], db: "a")
        XCTAssertEqual(try ok(folder, ["sql", "SELECT count(*) FROM coven_outbox"], db: "a"), "0\n", "the write was recorded and published once")
    }
}

final class TrashS3CLITests: TrashCLITests {
    override class var onS3: Bool { true }

    // Test discovery on Linux finds a class's own methods only.
    override func testARowDeletedOnBComesBackOnAWithItsFileThenAfterTheWindowItsBytesAreAbsent() throws {
        try super.testARowDeletedOnBComesBackOnAWithItsFileThenAfterTheWindowItsBytesAreAbsent()
    }
    override func testAMassDeleteWarnsUnderQuietAndUndeleteChangeBringsEveryRowBackEverywhere() throws {
        try super.testAMassDeleteWarnsUnderQuietAndUndeleteChangeBringsEveryRowBackEverywhere()
    }
    override func testCircleAndOwnerOnlyRowsAreNeitherListedNorUndeletableByOthers() throws {
        try super.testCircleAndOwnerOnlyRowsAreNeitherListedNorUndeletableByOthers()
    }
    override func testKillDuringUndeleteLeavesAllOrNothing() throws {
        throw XCTSkip("kill -9 of a local transaction: the file:// case covers it")
    }
}

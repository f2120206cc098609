@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The spec's gate examples (spec/local-data.md "Declaring the set" … "Flipping the gate")
/// through two devices of one store on file://: rows arrive complete on share, leave peers on
/// unshare, stay on the owner, and a private row never appears in any change object.
final class GateTests: DeviceTestCase {
    static let gateManifest = """
        {
          "namespaces": [ { "name": "pics", "kind": "app" }, { "name": "originals", "kind": "user" } ],
          "tables": [
            { "name": "workspaces", "identity": "uuid", "gated_by_descendants": true },
            { "name": "workspace_settings", "identity": "uuid" },
            { "name": "lists", "identity": "uuid", "gated_by": "shared" },
            { "name": "todos", "identity": "uuid", "files": [ { "column": "file" } ] },
            { "name": "labels", "identity": "uuid", "gated_by_descendants": true },
            { "name": "todo_labels", "identity": "uuid" },
            { "name": "albums", "identity": "uuid", "remote_root": true },
            { "name": "photos", "identity": "uuid", "files": [ { "column": "file" } ] },
            { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] }
          ],
          "migrations": [
            "CREATE TABLE workspaces (id TEXT PRIMARY KEY, name TEXT, parent_id TEXT REFERENCES workspaces(id), _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE workspace_settings (id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE, value TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE lists (id TEXT PRIMARY KEY, workspace_id TEXT REFERENCES workspaces(id), name TEXT, shared INTEGER NOT NULL DEFAULT 0, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE todos (id TEXT PRIMARY KEY, list_id TEXT NOT NULL REFERENCES lists(id) ON DELETE CASCADE, title TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE labels (id TEXT PRIMARY KEY, name TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE todo_labels (id TEXT PRIMARY KEY, todo_id TEXT NOT NULL REFERENCES todos(id) ON DELETE CASCADE, label_id TEXT NOT NULL REFERENCES labels(id) ON DELETE CASCADE, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE photos (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id) ON DELETE CASCADE, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    static func id(_ n: Int) -> String { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d%04x", n) }
    let workspace = id(1), nested = id(2), privateList = id(10), sharedList = id(11), neverShared = id(12)
    let todo1 = id(20), todo2 = id(21), todo3 = id(22), secret = id(23)
    let label = id(30), link = id(31), otherLabel = id(32), otherLink = id(33)
    let settingsRow = id(40)


    /// The ids of `table` on `device`.
    func ids(_ device: Device, _ table: String) throws -> Set<String> {
        Set(try device.database.query("SELECT id FROM \(table)").compactMap { $0["id"].textValue })
    }

    /// Every entry of every change `device` published, opened as pull opens them.
    func publishedEntries(_ device: Device) throws -> [RowEntry] {
        let folder = storeFolder + "/changes/" + device.deviceID
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
        return try names.flatMap { name -> [RowEntry] in
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name)))
            let path = "changes/\(device.deviceID)/\(name)"
            return try device.keys.open(change: bytes, path: path, publisher: device.deviceID, storeID: device.storeID).entries
        }
    }

    /// The private rows: a list never shared, its todo, the label only it wears.
    func writeNeverShared(_ a: Device) throws {
        try a.write(sql: """
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(neverShared)', '\(workspace)', 'diary', 0);
            INSERT INTO todos (id, list_id, title) VALUES ('\(secret)', '\(neverShared)', 'secret');
            INSERT INTO labels (id, name) VALUES ('\(otherLabel)', 'private label');
            INSERT INTO todo_labels (id, todo_id, label_id) VALUES ('\(otherLink)', '\(secret)', '\(otherLabel)');
            """)
    }

    // MARK: - The predicate

    func testThePredicateFollowsChainsBothWaysWithTheManyToManyException() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let graph = try a.schemaGraph()
        XCTAssertEqual(graph.roleOf("lists"), .root(column: "shared"))
        XCTAssertEqual(graph.roleOf("albums"), .remoteRoot)
        XCTAssertEqual(graph.roleOf("photos"), .underRemoteRoot)
        XCTAssertEqual(graph.roleOf("notes"), .free)
        XCTAssertEqual(try RowAudiences(device: a).keptCondition(table: "notes", alias: "\"notes\""), "1")
        XCTAssertEqual(try RowAudiences(device: a).keptCondition(table: "albums", alias: "\"albums\""), "1")
        XCTAssertEqual(try RowAudiences(device: a).keptCondition(table: "lists", alias: "\"lists\""), "(\"lists\".\"shared\" IS NOT NULL AND CAST(\"lists\".\"shared\" AS INTEGER) <> 0)")
        XCTAssertTrue(try RowAudiences(device: a).keptCondition(table: "todos", alias: "\"todos\"").hasPrefix("EXISTS (SELECT 1 FROM main.\"lists\""))
        // todo_labels inherits the list's gate through todos, and still keeps labels alive;
        // workspace_settings inherits the workspace's rule, so it does not keep it alive.
        guard case .inherits(let edges) = graph.roleOf("todo_labels") else { return XCTFail("todo_labels inherits") }
        XCTAssertEqual(edges.map(\.parent), ["todos"])
        guard case .inheritsAncestor = graph.roleOf("workspace_settings") else { return XCTFail("workspace_settings inherits the ancestor") }
        XCTAssertTrue(try RowAudiences(device: a).keptCondition(table: "labels", alias: "\"labels\"").contains("\"todo_labels\""))
        XCTAssertFalse(try RowAudiences(device: a).keptCondition(table: "workspaces", alias: "\"workspaces\"").contains("\"workspace_settings\""))
        XCTAssertEqual(graph.remoteRoot(of: "photos"), "albums")
        XCTAssertNil(graph.remoteRoot(of: "todos"))

        // A chain of any length: a workspace nested in another, a shared list in the inner one.
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'outer');
            INSERT INTO workspaces (id, name, parent_id) VALUES ('\(nested)', 'inner', '\(workspace)');
            INSERT INTO workspace_settings (id, workspace_id, value) VALUES ('\(settingsRow)', '\(nested)', 'dark');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(sharedList)', '\(nested)', 'groceries', 1);
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 0);
            INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(sharedList)', 'milk'), ('\(todo2)', '\(privateList)', 'ring');
            INSERT INTO labels (id, name) VALUES ('\(label)', 'urgent'), ('\(otherLabel)', 'someday');
            INSERT INTO todo_labels (id, todo_id, label_id) VALUES ('\(link)', '\(todo1)', '\(label)'), ('\(otherLink)', '\(todo2)', '\(otherLabel)');
            """)
        func kept(_ table: String, _ id: String) throws -> Bool? { try RowAudiences(device: a).isKept(table: table, id: id) }
        XCTAssertEqual(try kept("workspaces", workspace), true, "kept through the nested workspace's shared list")
        XCTAssertEqual(try kept("workspaces", nested), true)
        XCTAssertEqual(try kept("workspace_settings", settingsRow), true)
        XCTAssertEqual(try kept("todos", todo1), true)
        XCTAssertEqual(try kept("todos", todo2), false)
        XCTAssertEqual(try kept("labels", label), true, "worn by a shared todo")
        XCTAssertEqual(try kept("labels", otherLabel), false, "worn only by a private todo")
        XCTAssertEqual(try kept("todo_labels", link), true)
        XCTAssertEqual(try kept("todo_labels", otherLink), false)
        XCTAssertNil(try kept("todos", Self.id(99)))
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(sharedList)'")
        for (table, row) in [("workspaces", workspace), ("workspaces", nested), ("workspace_settings", settingsRow), ("todos", todo1), ("labels", label)] {
            XCTAssertEqual(try kept(table, row), false, "\(table) \(row) once nothing shared is under it")
        }
        // The SQL function scripts use.
        XCTAssertEqual(try a.database.scalar("SELECT coven_kept('lists', ?1)", [privateList]).intValue, 0)
        try a.write(sql: "UPDATE lists SET shared = 1 WHERE id = '\(privateList)'")
        XCTAssertEqual(try a.database.scalar("SELECT coven_kept('workspaces', ?1)", [workspace]).intValue, 1)
        XCTAssertEqual(try a.database.scalar("SELECT coven_kept('workspaces', ?1)", [nested]).intValue, 0)
        XCTAssertTrue(try a.database.scalar("SELECT coven_kept('todos', ?1)", [Self.id(99)]).isNull)
    }

    // MARK: - Two devices

    func testSharingAndUnsharingAListMovesItsWholeComponent() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 0);
            INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(privateList)', 'ring'), ('\(todo2)', '\(privateList)', 'book');
            INSERT INTO labels (id, name) VALUES ('\(label)', 'urgent');
            INSERT INTO todo_labels (id, todo_id, label_id) VALUES ('\(link)', '\(todo1)', '\(label)');
            """)
        try writeNeverShared(a)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        // Nothing is shared: not even the workspace (it would arrive empty).
        for table in ["workspaces", "lists", "todos", "labels", "todo_labels"] {
            XCTAssertEqual(try ids(b, table), [], table)
        }

        // false → true: the whole component arrives in one change, complete.
        try a.write(sql: "UPDATE lists SET shared = 1 WHERE id = '\(privateList)'")
        let shared = try StoreSync(a).sync()
        XCTAssertEqual(shared.pushed.published.count, 1)
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "workspaces"), [workspace])
        XCTAssertEqual(try ids(b, "lists"), [privateList])
        XCTAssertEqual(try ids(b, "todos"), [todo1, todo2])
        XCTAssertEqual(try ids(b, "labels"), [label])
        XCTAssertEqual(try ids(b, "todo_labels"), [link])
        XCTAssertEqual(try b.database.scalar("SELECT title FROM todos WHERE id = ?1", [todo2]).textValue, "book")

        // Edits of shared rows travel both ways as before.
        try b.write(sql: "UPDATE todos SET title = 'ring, gold' WHERE id = '\(todo1)'")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try a.database.scalar("SELECT title FROM todos WHERE id = ?1", [todo1]).textValue, "ring, gold")

        // true → false: peers lose the component, the owner keeps it.
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        for table in ["workspaces", "lists", "todos", "labels", "todo_labels"] {
            XCTAssertEqual(try ids(b, table), [], "\(table) left b")
        }
        XCTAssertEqual(try ids(a, "todos"), [todo1, todo2, secret])
        XCTAssertEqual(try ids(a, "workspaces"), [workspace])
        XCTAssertEqual(try StoreSync(b).lostValues().count, 0, "a retract is not a lost value")
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_tombstones WHERE tbl = 'lists' AND id = ?1", [privateList]), 1)
        // Edits of a private row stay here.
        try a.write(sql: "UPDATE todos SET title = 'ring, silver' WHERE id = '\(todo1)'")
        XCTAssertEqual(try StoreSync(a).sync().pushed.published, [], "a private edit publishes nothing")

        // Shared again: stamped afresh, so b's tombstones do not beat it.
        try a.write(sql: "UPDATE lists SET shared = 1 WHERE id = '\(privateList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1, todo2])
        XCTAssertEqual(try ids(b, "workspaces"), [workspace])
        XCTAssertEqual(try ids(b, "todo_labels"), [link])
        XCTAssertEqual(try b.database.scalar("SELECT title FROM todos WHERE id = ?1", [todo1]).textValue, "ring, silver")
        XCTAssertEqual(try a.database.scalar("SELECT _updated_at FROM todos WHERE id = ?1", [todo2]).textValue,
                       try b.database.scalar("SELECT _updated_at FROM todos WHERE id = ?1", [todo2]).textValue)

        // A row moved under a private parent is retracted; moved back, it returns.
        try a.write(sql: "UPDATE todos SET list_id = '\(neverShared)' WHERE id = '\(todo2)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1])
        try a.write(sql: "UPDATE todos SET list_id = '\(privateList)' WHERE id = '\(todo2)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1, todo2])

        // A deleted shared row is deleted on peers; one never shared sends nothing.
        try a.write(sql: "DELETE FROM todos WHERE id = '\(todo2)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1])
        try a.write(sql: "DELETE FROM todo_labels WHERE id = '\(otherLink)'")
        XCTAssertEqual(try StoreSync(a).sync().pushed.published, [], "a tombstone of a row never published is not sent")

        // The private rows never appeared in any change object.
        let entries = try publishedEntries(a)
        XCTAssertFalse(entries.isEmpty)
        for private_ in [neverShared, secret, otherLabel, otherLink] {
            XCTAssertFalse(entries.contains { $0.id == private_ }, "\(private_) was published")
        }
        XCTAssertTrue(entries.contains { $0.kind == .retract && $0.id == privateList })
    }

    /// A change that unshared a list, damaged in storage and published again by its writer,
    /// still takes the list's component off the device that had not applied it, and still
    /// names no private row.
    /// A peer renames a list while its owner unshares it (neither sees the other's write): the
    /// retract is stamped at the push, after the rename, and wins on both devices. The peer
    /// drops the list; the owner keeps it private, without the rename (an edit that loses to a
    /// delete). Before, the owner took the rename, shared flag and all, and held a shared list
    /// its peer had deleted.
    func testAnEditThatCrossesAnUnshareLosesToItOnBothDevices() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 1);
            """)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "lists"), [privateList])
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        try b.write(sql: "UPDATE lists SET name = 'presents' WHERE id = '\(privateList)'")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()  // pushes the retract, then applies the rename
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try ids(b, "lists"), [], "the peer drops the list")
        XCTAssertEqual(try a.database.scalar("SELECT shared FROM lists WHERE id = ?1", [privateList]).intValue, 0, "the owner keeps it private")
        XCTAssertEqual(try a.database.scalar("SELECT name FROM lists WHERE id = ?1", [privateList]).textValue, "gifts")
    }

    /// A todo written into a list that was then unshared, before either was pushed, never left
    /// its device; the peer's todo in it was retracted. The peer, not having seen the unshare,
    /// renames the list, later: its image wins, and the list is shared again on the owner too.
    /// Both todos, kept now, go at the owner's next push though the owner wrote nothing since
    /// (before, the first stayed on the owner for good, and the peer had lost its own).
    func testARowAPullMakesKeptGoesAtTheNextPush() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        // In no workspace: the unshare retracts the list alone.
        try a.write(sql: "INSERT INTO lists (id, name, shared) VALUES ('\(sharedList)', 'gifts', 1)")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "INSERT INTO todos (id, list_id, title) VALUES ('\(todo2)', '\(sharedList)', 'card')")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        try a.write(sql: "INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(sharedList)', 'ring')")
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(sharedList)'")
        _ = try StoreSync(a).sync()  // the list's retract; the todo stays
        usleep(2_000)
        try b.write(sql: "UPDATE lists SET name = 'presents' WHERE id = '\(sharedList)'")  // later than the retract
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "lists"), [sharedList], "the rename won over the retract")
        XCTAssertEqual(try ids(b, "todos"), [], "the peer's todo was retracted")
        _ = try StoreSync(a).sync()  // applies the rename: the list is shared again here
        XCTAssertEqual(try a.database.scalar("SELECT shared FROM lists WHERE id = ?1", [sharedList]).intValue, 1)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1, todo2], "the todos the pull made kept reached the peer")
        XCTAssertEqual(try b.database.scalar("SELECT title FROM todos WHERE id = ?1", [todo1]).textValue, "ring")
    }

    /// A device that joined from a snapshot knows its peers hold the snapshot's rows: an
    /// unshare there retracts the list from them (before, it thought nobody held it and sent
    /// nothing).
    func testAnUnshareOnADeviceJoinedFromASnapshotReachesItsPeers() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 1);
            INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(privateList)', 'ring');
            """)
        _ = try StoreSync(a).sync()
        _ = try Snapshots(a).snapshot()
        var cStart = SnapshotJoin()
        let c = try join("c", from: a, started: { cStart = $0 })
        XCTAssertNotNil(cStart.key)
        XCTAssertEqual(try ids(c, "lists"), [privateList])
        try c.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try ids(a, "lists"), [], "the peer drops the list")
        XCTAssertEqual(try ids(a, "todos"), [])
        XCTAssertEqual(try ids(c, "lists"), [privateList], "the device that unshared it keeps it")
    }

    func testAnUnshareDamagedInStorageIsPublishedAgainWithItsRetracts() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 1);
            INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(privateList)', 'ring'), ('\(todo2)', '\(privateList)', 'book');
            """)
        try writeNeverShared(a)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(c).sync()
        XCTAssertEqual(try ids(c, "todos"), [todo1, todo2])
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        let unshare = try XCTUnwrap(try StoreSync(a).sync().pushed.published.last)
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [])
        let path = storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: UInt64(unshare))
        var bytes = try XCTUnwrap(FileManager.default.contents(atPath: path))
        bytes[bytes.count / 2] ^= 1
        try bytes.write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(try StoreSync(c).sync().pulled.damaged[a.deviceID]?.seq, unshare)
        XCTAssertEqual(try StoreSync(a).sync().pushed.republished, [unshare])
        _ = try StoreSync(c).sync()
        for table in ["workspaces", "lists", "todos"] {
            XCTAssertEqual(try ids(c, table), try ids(b, table), table)
            XCTAssertEqual(try ids(c, table), [], table)
        }
        let entries = try publishedEntries(a)
        for private_ in [neverShared, secret, otherLabel, otherLink] {
            XCTAssertFalse(entries.contains { $0.id == private_ }, "\(private_) was published")
        }
    }

    func testUnsharingOneOfTwoListsSparesTheSiblingAndTheAncestor() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'gifts', 1), ('\(sharedList)', '\(workspace)', 'food', 1);
            INSERT INTO todos (id, list_id, title) VALUES ('\(todo1)', '\(privateList)', 'ring'), ('\(todo3)', '\(sharedList)', 'milk');
            INSERT INTO labels (id, name) VALUES ('\(label)', 'urgent');
            INSERT INTO todo_labels (id, todo_id, label_id) VALUES ('\(link)', '\(todo1)', '\(label)'), ('\(otherLink)', '\(todo3)', '\(label)');
            """)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "todos"), [todo1, todo3])
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "lists"), [sharedList])
        XCTAssertEqual(try ids(b, "workspaces"), [workspace], "kept by the sibling")
        XCTAssertEqual(try ids(b, "labels"), [label], "still worn by a shared todo")
        XCTAssertEqual(try ids(b, "todo_labels"), [otherLink])
        // The last shared list goes: the now-childless workspace and the label go too.
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(sharedList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        for table in ["workspaces", "lists", "todos", "labels", "todo_labels"] {
            XCTAssertEqual(try ids(b, table), [], "\(table) left b")
        }
        XCTAssertEqual(try ids(a, "labels"), [label])
    }

    /// A device unshares a list whose todo names a file its peer has not uploaded yet; the peer
    /// uploads it (a write of the record that crosses the retract), drops the list and the
    /// record, and runs gc. The bytes stay: the unsharing device keeps the todo and its record,
    /// and reads the file. Before, the peer deleted them (the unsharer's held objects named
    /// stored records only, and applying the upload marked the record held by peers again).
    func testAFileKeptBackWhileItsUploadIsUnderWayKeepsItsBytes() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO lists (id, name, shared) VALUES ('\(sharedList)', 'food', 1)")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        let staged = try stageApp(b, try file("milk.bin", "milk bytes"), namespace: "pics", place: .cloud)
        try b.write(sql: "INSERT INTO todos (id, list_id, title, file) VALUES ('\(todo1)', '\(sharedList)', 'milk', coven_put_staged('\(staged.id)'))")
        let record = try XCTUnwrap(b.database.scalar("SELECT file FROM todos WHERE id = ?1", [todo1]).textValue)
        let object = try XCTUnwrap(b.fileRecord(record)).coordinates.object
        _ = try StoreSync(b).sync()  // the record, on b only until its upload
        _ = try StoreSync(a).sync()
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(sharedList)'")
        _ = try StoreSync(a).sync()  // retracts the list, the todo and the record
        usleep(2_000)
        _ = try UploadWorker.run(paths: b.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
        _ = try StoreSync(b).sync()  // publishes the upload, then drops the list, its todo and the record
        XCTAssertEqual(try ids(b, "coven_files"), [])
        _ = try GarbageCollection(b).collectGarbage()
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try GarbageCollection(b).collectGarbage()
        _ = try GarbageCollection(a).collectGarbage()
        XCTAssertTrue(FileManager.default.fileExists(atPath: storeFolder + "/" + object), "the bytes a's kept-back todo names stay")
        XCTAssertEqual(try a.database.scalar("SELECT place FROM coven_files WHERE id = ?1", [record]).textValue, "stored")
        let (path, _) = try Reader(a).holdFile(record)
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "milk bytes")
    }

    func testFileRecordsOfPrivateRowsAreNotPublished() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        let privateFile = try stageApp(a, try file("private.bin", "private bytes"), namespace: "pics", place: .deviceOnly)
        let sharedFile = try stageApp(a, try file("shared.bin", "shared bytes"), namespace: "pics", place: .deviceOnly)
        try a.write(sql: """
            INSERT INTO lists (id, name, shared) VALUES ('\(privateList)', 'gifts', 0), ('\(sharedList)', 'food', 1);
            INSERT INTO todos (id, list_id, title, file) VALUES ('\(todo1)', '\(privateList)', 'ring', coven_put_staged('\(privateFile.id)')),
                                                              ('\(todo3)', '\(sharedList)', 'milk', coven_put_staged('\(sharedFile.id)'));
            """)
        let privateRecord = try XCTUnwrap(a.database.scalar("SELECT file FROM todos WHERE id = ?1", [todo1]).textValue)
        let sharedRecord = try XCTUnwrap(a.database.scalar("SELECT file FROM todos WHERE id = ?1", [todo3]).textValue)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "coven_files"), [sharedRecord])
        XCTAssertFalse(try publishedEntries(a).contains { $0.id == privateRecord })
        XCTAssertEqual(try a.database.scalar("SELECT coven_kept('coven_files', ?1)", [privateRecord]).intValue, 0)
        try a.write(sql: "UPDATE lists SET shared = 1 WHERE id = '\(privateList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "coven_files"), [privateRecord, sharedRecord])
        try a.write(sql: "UPDATE lists SET shared = 0 WHERE id = '\(privateList)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "coven_files"), [sharedRecord])
        XCTAssertEqual(try ids(a, "coven_files"), [privateRecord, sharedRecord])
    }

    // MARK: - Remote roots

    func testARemoteRootSyncsEveryRowAndRefusesDeviceOnlyFiles() throws {
        let a = try makeDevice(Self.gateManifest, name: "a")
        let b = try join("b", from: a)
        let album = Self.id(50), photo = Self.id(51), note = Self.id(52)
        let cloud = try stageApp(a, try file("cloud.bin", "cloud bytes"), namespace: "pics", place: .cloud)
        try a.write(sql: """
            INSERT INTO albums (id, title) VALUES ('\(album)', 'summer');
            INSERT INTO photos (id, album_id, file) VALUES ('\(photo)', '\(album)', coven_put_staged('\(cloud.id)'));
            """)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try ids(b, "albums"), [album])
        XCTAssertEqual(try ids(b, "photos"), [photo])
        XCTAssertEqual(try ids(b, "coven_files").count, 1)

        // A device-only file in a row under the remote root is refused, naming the root.
        let local = try stageApp(a, try file("local.bin", "local bytes"), namespace: "pics", place: .deviceOnly)
        let refused = assertCovenError(.remoteRoot) {
            try a.write(sql: "INSERT INTO photos (id, album_id, file) VALUES ('\(Self.id(53))', '\(album)', coven_put_staged('\(local.id)'))")
        }
        XCTAssertEqual(refused?.details["remote_root"], "albums")
        XCTAssertTrue(refused?.message.contains("remote root 'albums'") ?? false, refused?.description ?? "")
        XCTAssertEqual(try ids(a, "photos"), [photo], "nothing of the refused write stays")
        // A plain table keeps device-only files.
        try a.write(sql: "INSERT INTO notes (id, body, file) VALUES ('\(note)', 'n', coven_put_staged('\(local.id)'))")
        // Moving that file into a photo is refused too.
        assertCovenError(.remoteRoot) {
            try a.write(sql: "UPDATE photos SET file = (SELECT file FROM notes WHERE id = '\(note)') WHERE id = '\(photo)'")
        }

        // make-device-only refuses a file of a remote root's row.
        let original = try file("original.jpg", "the person's photo")
        let staged = try Staging(a).prepareUserFile(path: original, namespace: "originals", place: .cloud)
        try a.write(sql: "INSERT INTO photos (id, album_id, file) VALUES ('\(Self.id(54))', '\(album)', coven_put_user_file('\(staged.id)'))")
        let fileID = try XCTUnwrap(a.database.scalar("SELECT file FROM photos WHERE id = ?1", [Self.id(54)]).textValue)
        try FileManager.default.createDirectory(atPath: work + "/back", withIntermediateDirectories: true)
        let error = assertCovenError(.remoteRoot) {
            try DeviceOnlyMaker(a).makeDeviceOnly(folder: work + "/back", requests: [DeviceOnlyRequest(file: fileID, names: ["original.jpg"], input: "FILE")])
        }
        XCTAssertEqual(error?.details["remote_root"], "albums")
    }
}

/// Gates and snapshots: a snapshot holds the rows peers hold, never a private one, so a device
/// joined from it and one that pulled every change hold the same rows.
final class GateSnapshotTests: DeviceTestCase {
    typealias G = GateTests

    func dump(_ device: Device) throws -> [String] {
        try ["workspaces", "lists", "todos", "labels", "todo_labels", "coven_files"].flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { row in
                table + ": " + zip(row.columns, row.values).map { "\($0)=\($1.textValue ?? "NULL")" }.joined(separator: " ")
            }
        }
    }

    /// A workspace with a shared list (todo 'milk', id 20) and a private one (todo 'secret',
    /// id 23).
    func writeSharedAndPrivateLists(_ device: Device) throws {
        try device.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(G.id(1))', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(G.id(11))', '\(G.id(1))', 'shopping', 1);
            INSERT INTO todos (id, list_id, title) VALUES ('\(G.id(20))', '\(G.id(11))', 'milk');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(G.id(10))', '\(G.id(1))', 'diary', 0);
            INSERT INTO todos (id, list_id, title) VALUES ('\(G.id(23))', '\(G.id(10))', 'secret');
            """)
    }

    func testASnapshotHoldsTheSharedRowsOnlyAndJoinsLikeAFullPull() throws {
        let a = try makeDevice(G.gateManifest, name: "a")
        let peer = try join("peer", from: a)
        try writeSharedAndPrivateLists(a)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(peer).sync()
        let report = try Snapshots(a).snapshot()
        XCTAssertFalse(report.key.isEmpty)
        let joined = try join("joined", from: a)
        XCTAssertEqual(try dump(joined), try dump(peer), "joined from the snapshot and pulled every change: the same rows")
        XCTAssertEqual(Set(try joined.database.query("SELECT id FROM lists").compactMap { $0.string("id") }), [G.id(11)])
        XCTAssertEqual(try joined.database.scalar("SELECT count(*) FROM todos WHERE title = 'secret'").intValue, 0, "never a private row")
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM todos").intValue, 2, "the owner keeps its rows")
    }

    /// The delete of a private row stays on its device: neither a change nor a snapshot names
    /// its id; the delete of a shared row goes to both.
    func testASnapshotCarriesNoTombstoneOfAPrivateRow() throws {
        let a = try makeDevice(G.gateManifest, name: "a")
        try writeSharedAndPrivateLists(a)
        _ = try StoreSync(a).sync()
        try a.write(sql: "DELETE FROM todos WHERE id IN ('\(G.id(23))', '\(G.id(20))')")
        _ = try Snapshots(a).snapshot()
        XCTAssertEqual(try a.database.scalar("SELECT private FROM coven_tombstones WHERE id = ?1", [G.id(23)]).intValue, 1, "kept here, marked private")
        let joined = try join("joined", from: a)
        XCTAssertEqual(try joined.database.query("SELECT id FROM coven_tombstones WHERE tbl = 'todos'").compactMap { $0.string("id") }, [G.id(20)])
        let peer = try join("peer", from: a)
        XCTAssertEqual(try peer.database.scalar("SELECT count(*) FROM coven_tombstones WHERE id = ?1", [G.id(23)]).intValue, 0)
    }
}

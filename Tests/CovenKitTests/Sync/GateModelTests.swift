@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Randomized gates: an owner shares and unshares lists, moves todos between them, labels them,
/// nests and deletes, while a peer edits what it holds; syncing at random. After everyone syncs,
/// the peer holds exactly the rows the owner's kept predicate keeps, value for value, and no
/// row the predicate never kept appears in any change. The seed of a failing run is printed;
/// `COVEN_SEED=N` replays one run, `COVEN_RUNS=N` sets how many (500 by default).
final class GateModelTests: XCTestCase {
    static let tables = ["workspaces", "workspace_settings", "lists", "todos", "labels", "todo_labels"]

    func testPeersHoldExactlyTheKeptRowsOverManySeededRuns() throws {
        if let failure = SeededRuns.run("gates", runs: 500, base: 0x6A7E_0000, run) { XCTFail(failure) }
    }

    func run(seed: UInt64, work: String) throws -> String? {
        var random = SeededRandom(state: seed)
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let owner = try TestStores.create(paths: DevicePaths(database: work + "/a/device.db"), storage: .file(directory: work + "/store"),
                                          manifest: try Manifest(json: Data(GateTests.gateManifest.utf8)), name: "a")
        let peer = try TestStores.join(paths: DevicePaths(database: work + "/b/device.db"), from: owner, name: "b")
        func id(_ prefix: Int, _ n: Int) -> String { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c%02x%04x", prefix, n) }
        let workspaces = (0..<3).map { id(1, $0) }
        let lists = (0..<4).map { id(2, $0) }
        let todos = (0..<6).map { id(3, $0) }
        let labels = (0..<3).map { id(4, $0) }
        let links = (0..<5).map { id(5, $0) }
        let settings = (0..<2).map { id(6, $0) }
        func pick(_ ids: [String]) -> String { ids[random.below(ids.count)] }
        // Every row the owner's predicate kept at some sync: only these may be published.
        var everKept: Set<String> = []
        func noteKept() throws {
            for table in Self.tables {
                let kept = try RowAudiences(device: owner).keptCondition(table: table, alias: "r")
                for row in try owner.database.query("SELECT id FROM \(table) r WHERE \(kept)") { everKept.insert(row["id"].textValue ?? "") }
            }
        }
        let steps = 15 + random.below(20)
        for _ in 0..<steps {
            let value = "v\(random.below(1000))"
            var sql = ""
            switch random.below(16) {
            case 0: sql = "INSERT OR IGNORE INTO workspaces (id, name, parent_id) VALUES ('\(pick(workspaces))', '\(value)', NULL)"
            case 1: sql = "UPDATE workspaces SET parent_id = '\(workspaces[0])' WHERE id = '\(pick(Array(workspaces.dropFirst())))' AND EXISTS (SELECT 1 FROM workspaces WHERE id = '\(workspaces[0])')"
            case 2, 3: sql = "INSERT INTO lists (id, workspace_id, name, shared) SELECT '\(pick(lists))', (SELECT id FROM workspaces WHERE id = '\(pick(workspaces))'), '\(value)', \(random.below(2)) ON CONFLICT (id) DO UPDATE SET name = excluded.name"
            case 4, 5: sql = "UPDATE lists SET shared = 1 - shared WHERE id = '\(pick(lists))'"
            case 6, 7: sql = "INSERT INTO todos (id, list_id, title) SELECT '\(pick(todos))', id, '\(value)' FROM lists WHERE id = '\(pick(lists))' ON CONFLICT (id) DO UPDATE SET title = excluded.title"
            case 8: sql = "UPDATE todos SET list_id = '\(pick(lists))' WHERE id = '\(pick(todos))' AND EXISTS (SELECT 1 FROM lists WHERE id = '\(pick(lists))')"
            case 9: sql = "DELETE FROM todos WHERE id = '\(pick(todos))'"
            case 10: sql = "INSERT OR IGNORE INTO labels (id, name) VALUES ('\(pick(labels))', '\(value)')"
            case 11: sql = "INSERT OR IGNORE INTO todo_labels (id, todo_id, label_id) SELECT '\(pick(links))', t.id, l.id FROM todos t, labels l WHERE t.id = '\(pick(todos))' AND l.id = '\(pick(labels))'"
            case 12: sql = "INSERT OR IGNORE INTO workspace_settings (id, workspace_id, value) SELECT '\(pick(settings))', id, '\(value)' FROM workspaces WHERE id = '\(pick(workspaces))'"
            case 13:
                // The peer edits what it holds.
                try peer.write(sql: "UPDATE todos SET title = '\(value)' WHERE id = '\(pick(todos))'")
                continue
            default:
                try noteKept()
                _ = try StoreSync(owner).sync()
                if random.below(2) == 0 { _ = try StoreSync(peer).sync() }
                continue
            }
            // Moving a todo under a list that is gone breaks its key: the write is refused.
            do { try owner.write(sql: sql) } catch let error as CovenError where error.sqlitePrimaryCode == 19 { continue }
        }
        for _ in 0..<3 {
            try noteKept()
            _ = try StoreSync(owner).sync()
            _ = try StoreSync(peer).sync()
        }
        for table in Self.tables {
            let kept = try RowAudiences(device: owner).keptCondition(table: table, alias: "r")
            let expected = try dump(owner, "SELECT * FROM \(table) r WHERE \(kept) ORDER BY id")
            let held = try dump(peer, "SELECT * FROM \(table) ORDER BY id")
            if expected != held {
                return "\(table): the peer holds \(held) but the owner keeps \(expected)"
            }
        }
        let folder = work + "/store/changes/" + owner.deviceID
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            let change = try owner.keys.open(change: Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))),
                                             path: "changes/\(owner.deviceID)/\(name)", publisher: owner.deviceID, storeID: owner.storeID)
            for entry in change.entries where entry.kind == .upsert && !everKept.contains(entry.id) && entry.table != "coven_files" {
                return "change \(name) published \(entry.table) \(entry.id), which was never kept"
            }
        }
        return nil
    }

    func dump(_ device: Device, _ sql: String) throws -> [String] {
        try device.database.query(sql).map { row in
            zip(row.columns, row.values).map { "\($0)=\($1.textValue ?? "NULL")" }.joined(separator: " ")
        }
    }
}

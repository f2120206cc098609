import CovenKit
@testable import CovenKit
import Foundation
import XCTest

/// The synced-table rules (spec/local-data.md and files.md), checked at init, at migrate and at
/// every open: each refusal names the table and the column.
final class SchemaCheckTests: DeviceTestCase {
    private func manifest(table: String, migrations: [String]) -> String {
        let sql = migrations.map { "\"\($0)\"" }.joined(separator: ", ")
        return "{ \"tables\": [ \(table) ], \"migrations\": [ \(sql) ] }"
    }

    func testEveryRefusalNamesTableAndColumn() throws {
        let notes = "{ \"name\": \"notes\", \"identity\": \"uuid\" }"
        let withFile = "{ \"name\": \"notes\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\" } ] }"
        let cases: [(table: String, migrations: [String], message: String, column: String?)] = [
            (notes, [], "synced table 'notes' does not exist", nil),
            (notes, ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL)"], "synced table 'notes' is not STRICT", nil),
            (notes, ["CREATE TABLE notes (title TEXT, id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "synced table 'notes' needs 'id TEXT PRIMARY KEY' as its first column", "id"),
            (notes, ["CREATE TABLE notes (id INTEGER PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "synced table 'notes' needs 'id TEXT PRIMARY KEY' as its first column", "id"),
            (notes, ["CREATE TABLE notes (id TEXT, _updated_at TEXT NOT NULL) STRICT"],
             "synced table 'notes' needs 'id TEXT PRIMARY KEY' as its first column", "id"),
            (notes, ["CREATE TABLE notes (key TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "synced table 'notes' needs 'id TEXT PRIMARY KEY' as its first column", "id"),
            (notes, ["CREATE TABLE notes (id TEXT, n INTEGER, _updated_at TEXT NOT NULL, PRIMARY KEY (id, n)) STRICT"],
             "synced table 'notes' must have 'id' as its only primary key column", "id"),
            (notes, ["CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT) STRICT"],
             "synced table 'notes' needs an '_updated_at TEXT NOT NULL' column", "_updated_at"),
            (notes, ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT) STRICT"],
             "synced table 'notes' needs an '_updated_at TEXT NOT NULL' column", "_updated_at"),
            (notes, ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at INTEGER NOT NULL) STRICT"],
             "synced table 'notes' needs an '_updated_at TEXT NOT NULL' column", "_updated_at"),
            (withFile, ["CREATE TABLE notes (id TEXT PRIMARY KEY, f TEXT GENERATED ALWAYS AS (id) VIRTUAL, _updated_at TEXT NOT NULL) STRICT"],
             "file column 'f' of table 'notes' is a generated column", "f"),
            (withFile, ["CREATE TABLE notes (id TEXT PRIMARY KEY, f TEXT GENERATED ALWAYS AS (id) STORED, _updated_at TEXT NOT NULL) STRICT"],
             "file column 'f' of table 'notes' is a generated column", "f"),
            (withFile, ["CREATE TABLE notes (id TEXT PRIMARY KEY, f BLOB, _updated_at TEXT NOT NULL) STRICT"],
             "file column 'f' of table 'notes' must be declared TEXT", "f"),
            (withFile, ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "file column 'f' of table 'notes' does not exist", "f"),
            (withFile, ["CREATE TABLE other (id TEXT PRIMARY KEY) STRICT", "CREATE TABLE notes (id TEXT PRIMARY KEY, f TEXT REFERENCES other(id), _updated_at TEXT NOT NULL) STRICT"],
             "file column 'f' of table 'notes' is an SQL foreign key", "f"),
            (notes, ["CREATE TABLE notes (id TEXT PRIMARY KEY, f TEXT REFERENCES coven_files(id), _updated_at TEXT NOT NULL) STRICT"],
             "table 'notes' column 'f' holds a foreign key into coven_files", "f"),
            ("{ \"name\": \"notes\", \"identity\": \"uuid\", \"audience_column\": \"who\" }", ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "audience column 'who' of table 'notes' does not exist", "who"),
            ("{ \"name\": \"notes\", \"identity\": \"uuid\", \"audience_from\": \"parent\" }", ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "audience_from column 'parent' of table 'notes' does not exist", "parent"),
            ("{ \"name\": \"notes\", \"identity\": \"uuid\", \"audience_from\": \"parent\" }", ["CREATE TABLE notes (id TEXT PRIMARY KEY, parent TEXT, _updated_at TEXT NOT NULL) STRICT"],
             "audience_from column 'parent' of table 'notes' has no foreign key to follow", "parent"),
            ("{ \"name\": \"notes\", \"identity\": \"uuid\", \"gated_by\": \"shared\" }", ["CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT"],
             "gated_by column 'shared' of table 'notes' does not exist", "shared"),
        ]
        for (index, item) in cases.enumerated() {
            let paths = DevicePaths(database: work + "/d\(index)/device.db")
            let json = manifest(table: item.table, migrations: item.migrations)
            let error = assertCovenError(.schema) {
                try DeviceSetup.create(paths: paths, storage: .file(directory: work + "/s\(index)"), manifest: try self.manifest(json), name: "t")
            }
            XCTAssertEqual(error?.message, item.message, json)
            XCTAssertEqual(error?.details["table"], "notes", json)
            XCTAssertEqual(error?.details["column"], item.column, json)
            // Nothing is left of the refused device or store.
            XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/d\(index)"), json)
            XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/s\(index)"), json)
        }
    }

    func testAForeignKeyIntoCovenFilesFromATableThatIsNotSynced() throws {
        let error = assertCovenError(.schema) {
            try makeDevice("{ \"migrations\": [ \"CREATE TABLE local (x TEXT, f TEXT REFERENCES coven_files(id))\" ] }")
        }
        XCTAssertEqual(error?.details["table"], "local")
        XCTAssertEqual(error?.details["column"], "f")
    }

    func testAcceptedShapes() throws {
        // A table-level primary key, and WITHOUT ROWID, are both fine.
        try makeDevice("""
            { "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "f" } ] },
                          { "name": "kv", "identity": "shared-key" } ],
              "migrations": [ "CREATE TABLE notes (id TEXT NOT NULL, f TEXT, _updated_at TEXT NOT NULL, PRIMARY KEY (id)) STRICT",
                              "CREATE TABLE kv (id TEXT PRIMARY KEY, v ANY, _updated_at TEXT NOT NULL) STRICT, WITHOUT ROWID" ] }
            """)
    }

    /// The rules hold at every open, not only at init: a table broken behind coven's back (an
    /// app that changed the schema with its own SQLite) refuses to open.
    func testCheckedAtOpen() throws {
        try makeDevice()
        do {
            let raw = try Database(path: paths.database)
            try raw.execute("CREATE TABLE sneaky (id TEXT, f TEXT REFERENCES coven_files(id))")
        }
        let error = assertCovenError(.schema) { try Device.open(paths: paths) }
        XCTAssertEqual(error?.details["table"], "sneaky")
        assertCovenError(.schema) { try Device.open(paths: paths, readOnly: true) }
        do {
            let raw = try Database(path: paths.database)
            try raw.execute("DROP TABLE sneaky; PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, ') STRICT', ')') WHERE name = 'albums'; PRAGMA writable_schema = OFF")
        }
        let strict = assertCovenError(.schema) { try Device.open(paths: paths) }
        XCTAssertEqual(strict?.message, "synced table 'albums' is not STRICT")
    }

    func testMigrateRechecksAndKeepsTheOldManifestOnRefusal() throws {
        let device = try makeDevice()
        var json = try JSONSerialization.jsonObject(with: Data(DeviceTestCase.albumManifest.utf8)) as? [String: Any] ?? [:]
        var migrations = json["migrations"] as? [String] ?? []
        migrations.append("CREATE TABLE loose (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL)")
        json["migrations"] = migrations
        var tables = json["tables"] as? [[String: Any]] ?? []
        tables.append(["name": "loose", "identity": "uuid"])
        json["tables"] = tables
        let broken = try Manifest(json: try JSONSerialization.data(withJSONObject: json))
        let error = assertCovenError(.schema) { try device.migrate(to: broken) }
        XCTAssertEqual(error?.details["table"], "loose")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM sqlite_schema WHERE name = 'loose'"), 0)
        XCTAssertEqual(device.manifest, try manifest())
        XCTAssertEqual(try Device.open(paths: paths).manifest, try manifest())
    }

    func testMigrationRefusals() throws {
        let device = try makeDevice()
        let base = try manifest()
        var changed = base
        changed.migrations[0] += " "
        let edited = assertCovenError(.migration) { try device.migrate(to: changed) }
        XCTAssertEqual(edited?.details["position"], "0")
        var removed = base
        removed.migrations.removeLast()
        assertCovenError(.migration) { try device.migrate(to: removed) }
        var failing = base
        failing.migrations += ["ALTER TABLE albums ADD COLUMN year INTEGER", "ALTER TABLE nothing_here ADD COLUMN x"]
        let failed = assertCovenError(.migration) { try device.migrate(to: failing) }
        XCTAssertEqual(failed?.details["position"], "5")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM pragma_table_info('albums') WHERE name = 'year'"), 0)
        var added = base
        added.migrations.append("ALTER TABLE albums ADD COLUMN year INTEGER")
        XCTAssertEqual(try device.migrate(to: added), [4])
        XCTAssertEqual(try device.migrate(to: added), [])
    }
}

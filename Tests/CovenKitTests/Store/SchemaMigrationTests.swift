@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// coven's own schema is versioned (`PRAGMA user_version`, Schema.steps): a device made by the
/// previous release opens and migrates with nothing lost.
final class SchemaMigrationTests: DeviceTestCase {
    /// Tests/CovenKitTests/Fixtures/device-schema-1 (its README says how it was made).
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/device-schema-1").path

    /// A copy of the fixture in the case's folder, its storage URL pointed at the copied store
    /// (the fixture names the folder it was made in).
    private func copyFixture() throws -> DevicePaths {
        for part in ["device", "store"] {
            try FileManager.default.copyItem(atPath: Self.fixture + "/" + part, toPath: work + "/" + part)
        }
        let paths = DevicePaths(database: work + "/device/device.db")
        // git keeps no empty folder: the device's cache, partial and temporary folders.
        for folder in [paths.cache, paths.partial, paths.temporary] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        let raw = try Database(path: paths.database)
        try raw.run("UPDATE coven_meta SET value = ?1 WHERE key = 'storage'", ["file://" + work + "/store"])
        XCTAssertEqual(try raw.scalar("PRAGMA user_version").intValue, 1)
        XCTAssertTrue(try raw.query("SELECT name FROM pragma_table_info('coven_outbox')").contains { $0.string("name") == "changeset" })
        return paths
    }

    func testADeviceOfSchemaOneMigratesWithEveryRecordUploadAndWriteKept() throws {
        let paths = try copyFixture()
        let device = try Device.open(paths: paths)
        XCTAssertEqual(try device.database.scalar("PRAGMA user_version").intValue, Schema.version)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM songs").intValue, 3)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_files").intValue, 3)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue, 1, "the queued upload stays")

        // Nothing of version 1 was ever published: every row is recorded anew as a row image,
        // with its own stamp.
        let entries = try device.database.query("SELECT entries FROM coven_outbox ORDER BY seq").flatMap { try RowEntryCodec.decode(XCTUnwrap($0.bytes("entries"))) }
        XCTAssertEqual(entries.filter { $0.table == "songs" }.count, 3)
        XCTAssertEqual(entries.filter { $0.table == "coven_files" }.count, 3)
        for entry in entries {
            XCTAssertEqual(entry.kind, .upsert)
            XCTAssertEqual(entry.value("_updated_at"), .text(entry.stamp))
        }

        // The device works as before: the stored file reads back, a new write is recorded.
        let stored = try XCTUnwrap(device.database.scalar("SELECT file FROM songs WHERE title = 'stored'").textValue)
        var bytes: [UInt8] = []
        try Reader(device).readFile(stored) { bytes.append(contentsOf: $0) }
        XCTAssertEqual(bytes, Array(String(repeating: "stored bytes ", count: 5000).utf8))
        try device.write(sql: "UPDATE songs SET title = 'renamed' WHERE title = 'queued'")
        XCTAssertEqual(try device.database.scalar("SELECT count(DISTINCT hlc) FROM coven_outbox").intValue, 2)

        // Opening again applies nothing twice.
        let outbox = try device.database.scalar("SELECT count(*) FROM coven_outbox").intValue
        let again = try Device.open(paths: paths)
        XCTAssertEqual(try again.database.scalar("SELECT count(*) FROM coven_outbox").intValue, outbox)
    }

    /// A read-only open (coven sql, cat) of an old device migrates it first, never reading an
    /// old schema through new views.
    /// Step 22: what features journaled in coven_meta under a prefix moves to their own tables,
    /// sync's flags to coven_sync_flags, and coven_meta keeps the settings.
    func testStepTwentyTwoMovesTheJournalsOutOfTheSettings() throws {
        let device = try makeDevice()
        let database = device.database
        // The device as a release of schema 21 left it: its journals in coven_meta.
        try database.execute("""
            DROP TABLE coven_released_copies; DROP TABLE coven_made_copies; DROP TABLE coven_checked; DROP TABLE coven_uncache;
            DROP TABLE coven_fetch_failures; DROP TABLE coven_clock_ahead; DROP TABLE coven_gc_floors; DROP TABLE coven_sync_flags;
            DROP TABLE coven_trash_pages; ALTER TABLE coven_tombstones DROP COLUMN trash;
            CREATE TABLE coven_trash (
                tbl TEXT NOT NULL, id TEXT NOT NULL, image BLOB NOT NULL, stamp TEXT NOT NULL, deleted_at TEXT NOT NULL, device TEXT NOT NULL,
                seq INTEGER, audience TEXT NOT NULL DEFAULT 'store', owner TEXT, parent_tbl TEXT, parent_id TEXT, files TEXT NOT NULL DEFAULT '[]',
                PRIMARY KEY (tbl, id)
            ) STRICT, WITHOUT ROWID;
            INSERT INTO coven_meta (key, value) VALUES
              ('release:copies/c1', 'copies/c1'), ('made-copy:o1', '{"folders":[],"path":"2f61"}'), ('checked:cache:o2', '1:2:3'),
              ('uncache:o3', 'o3'), ('fetch_failed:o4', 'missing'), ('clock_ahead:d1', '90000'), ('gc_changes_deleted:d1', '12'),
              ('sync_frontier_due', '1'), ('sync_gate_due', '1'), ('sync_key_unavailable', '{"d1":3}'), ('sync_problems', '{}'),
              ('sync_republish', '4,5'), ('sync_refused_removals', '{"d2":"x"}'), ('key_chains_behind', '[]'),
              ('last_push', '2026-12-01T00:00:00Z'), ('last_pull', '2026-12-02T00:00:00Z'), ('trash_last_mass_delete', '{"n":1}');
            PRAGMA user_version = 21;
            """)
        try Schema.migrate(database, from: 21)
        XCTAssertEqual(try database.scalar("PRAGMA user_version").intValue, Schema.version)
        func value(_ table: String, _ key: String) throws -> String? {
            try database.scalar("SELECT value FROM \(table) WHERE key = ?1", [key]).textValue
        }
        XCTAssertEqual(try value("coven_released_copies", "copies/c1"), "copies/c1")
        XCTAssertEqual(try value("coven_made_copies", "o1"), #"{"folders":[],"path":"2f61"}"#)
        XCTAssertEqual(try value("coven_checked", "cache:o2"), "1:2:3")
        XCTAssertEqual(try value("coven_uncache", "o3"), "o3")
        XCTAssertEqual(try value("coven_fetch_failures", "o4"), "missing")
        XCTAssertEqual(try HybridClock.ahead(of: "d1", in: database), 90000)
        XCTAssertEqual(try value("coven_gc_floors", "d1"), "12")
        let flags = SyncFlags(database: database)
        XCTAssertTrue(try flags.frontierDue)
        XCTAssertTrue(try flags.gateDue)
        XCTAssertEqual(try flags.keyUnavailable, #"{"d1":3}"#)
        XCTAssertEqual(try flags.problems, "{}")
        XCTAssertEqual(try flags.republish, "4,5")
        XCTAssertEqual(try flags.refusedRemovals, #"{"d2":"x"}"#)
        XCTAssertEqual(try flags.keyChainsBehind, "[]")
        XCTAssertEqual(try flags.lastPush, "2026-12-01T00:00:00Z")
        XCTAssertEqual(try flags.lastPull, "2026-12-02T00:00:00Z")
        XCTAssertEqual(try flags.lastMassDelete, #"{"n":1}"#)
        // coven_meta keeps the settings, and nothing of the journals.
        let keys = Set(try database.query("SELECT key FROM coven_meta").compactMap { $0.string("key") })
        XCTAssertTrue(keys.isSuperset(of: ["store_id", "device_id", "device_name", "storage", "manifest"]))
        XCTAssertEqual(keys.filter { $0.contains(":") || $0.hasPrefix("sync_") || $0.hasPrefix("last_") || $0 == "key_chains_behind" || $0.hasPrefix("trash_") }, [])
        // The device opens and works on the moved state: the released copy is swept.
        try FileManager.default.createDirectory(atPath: device.paths.folder + "/copies", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: device.paths.folder + "/copies/c1", contents: Data("x".utf8))
        CopySweep(device).removeReleased()
        XCTAssertFalse(FileManager.default.fileExists(atPath: device.paths.folder + "/copies/c1"))
        XCTAssertNil(try value("coven_released_copies", "copies/c1"))
    }

    func testAReadOnlyOpenMigratesFirst() throws {
        let paths = try copyFixture()
        let device = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try device.database.scalar("PRAGMA user_version").intValue, Schema.version)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_uploads").intValue, 1)
    }

    /// A database of a newer schema is refused, changing nothing.
    /// A row's lost values are found by index, not a scan: a pull bringing back 100,000 rows
    /// taken out marks each restored (step 14).
    func testARowsLostValuesAreFoundByIndex() throws {
        let device = try DeviceSetup.create(paths: DevicePaths(database: work + "/plan/device.db"), storage: .file(directory: work + "/planstore"),
                                       manifest: try Manifest(json: Data(DeviceTestCase.albumManifest.utf8)), name: "plan")
        let plan = try device.database.query("""
            EXPLAIN QUERY PLAN UPDATE coven_lost_values SET restored_at = 'x' WHERE tbl = 'albums' AND row_id = 'a' AND restored_at IS NULL
            """).compactMap { $0.string("detail") }.joined(separator: "; ")
        XCTAssertTrue(plan.contains("USING INDEX coven_lost_values_row"), plan)
    }

    func testANewerSchemaIsRefused() throws {
        let paths = try copyFixture()
        let raw = try Database(path: paths.database)
        try raw.execute("PRAGMA user_version = \(Schema.version + 1)")
        XCTAssertThrowsError(try Device.open(paths: paths)) { XCTAssertEqual(($0 as? CovenError)?.code, .updateRequired) }
        XCTAssertEqual(try raw.scalar("PRAGMA user_version").intValue, Schema.version + 1)
    }
}

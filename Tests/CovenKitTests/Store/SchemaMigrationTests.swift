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

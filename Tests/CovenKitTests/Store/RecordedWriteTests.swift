@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The one recorded-write path: row images and tombstones of whatever a write changed,
/// cascades and generated columns included.
final class RecordedWriteTests: DeviceTestCase {
    static let generatedManifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [
            { "name": "people", "identity": "uuid" },
            { "name": "pets", "identity": "uuid", "files": [ { "column": "photo" } ] }
          ],
          "migrations": [
            "CREATE TABLE people (id TEXT PRIMARY KEY, first TEXT, last TEXT, full TEXT GENERATED ALWAYS AS (first || ' ' || last) VIRTUAL, initials TEXT GENERATED ALWAYS AS (substr(first, 1, 1) || substr(last, 1, 1)) STORED, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE pets (id TEXT PRIMARY KEY, owner TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE, name TEXT, photo TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """
    let ada = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"
    let rex = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f42"

    private func lastEntries(_ device: Device) throws -> [RowEntry] {
        let stamp = try XCTUnwrap(device.database.scalar("SELECT max(hlc) FROM coven_outbox").textValue)
        return try device.database.query("SELECT entries FROM coven_outbox WHERE hlc = ?1 ORDER BY seq", [stamp])
            .flatMap { try RowEntryCodec.decode(XCTUnwrap($0.bytes("entries"))) }
    }

    /// SQLite 3.40's session extension refused such a table ("sql: not an error"): capture by
    /// triggers does not, and the generated columns are never recorded.
    func testATableWithGeneratedColumnsAcceptsWritesAndRecordsStoredColumnsOnly() throws {
        let device = try makeDevice(Self.generatedManifest)
        try device.write(sql: "INSERT INTO people (id, first, last) VALUES ('\(ada)', 'Ada', 'Lovelace')")
        let entries = try lastEntries(device)
        XCTAssertEqual(entries.count, 1)
        XCTAssertEqual(entries[0].kind, .upsert)
        XCTAssertEqual(entries[0].columns, ["id", "first", "last", "_updated_at"])
        XCTAssertEqual(entries[0].values[0...2], [.text(ada), .text("Ada"), .text("Lovelace")])
        XCTAssertEqual(entries[0].value("_updated_at"), .text(entries[0].stamp))
        XCTAssertEqual(try device.database.scalar("SELECT full || '/' || initials FROM people").textValue, "Ada Lovelace/AL")

        try device.write(sql: "UPDATE people SET last = 'King' WHERE id = '\(ada)'")
        let update = try lastEntries(device)
        XCTAssertEqual(update.map(\.kind), [.upsert])
        XCTAssertEqual(update[0].value("first"), .text("Ada"), "an update records the whole row, not the changed column")
        XCTAssertEqual(update[0].value("last"), .text("King"))
    }

    /// A cascade's deletes are tombstones of the same write; an insert then a delete in one
    /// write records nothing; a change of a row's id is a delete and an insert.
    func testCascadesFoldedChangesAndIdChangesAreRecorded() throws {
        let device = try makeDevice(Self.generatedManifest)
        try device.write(sql: "INSERT INTO people (id, first, last) VALUES ('\(ada)', 'Ada', 'L'); INSERT INTO pets (id, owner, name) VALUES ('\(rex)', '\(ada)', 'Rex')")
        XCTAssertEqual(Set(try lastEntries(device).map(\.table)), ["people", "pets"])

        let ghost = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f43"
        try device.write(sql: "INSERT INTO pets (id, owner, name) VALUES ('\(ghost)', '\(ada)', 'Ghost'); DELETE FROM pets WHERE id = '\(ghost)'; UPDATE pets SET name = 'Rexy' WHERE id = '\(rex)'")
        let folded = try lastEntries(device)
        XCTAssertEqual(folded.map(\.id), [rex], "inserted and deleted in one write: nothing to publish")

        let renamed = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f44"
        try device.write(sql: "UPDATE pets SET id = '\(renamed)' WHERE id = '\(rex)'")
        let moved = try lastEntries(device)
        XCTAssertEqual(moved.map(\.kind), [.delete, .upsert])
        XCTAssertEqual(moved.map(\.id), [rex, renamed])

        try device.write(sql: "DELETE FROM people WHERE id = '\(ada)'")
        let cascade = try lastEntries(device)
        XCTAssertEqual(Set(cascade.map { "\($0.kind) \($0.table) \($0.id)" }), ["delete people \(ada)", "delete pets \(renamed)"])
        XCTAssertTrue(cascade.allSatisfy { $0.stamp == cascade[0].stamp })
    }

    /// A write that fails records nothing, and the capture is off afterwards: changes no write
    /// records (coven's own bookkeeping) leave no trace for the next write.
    func testAFailedWriteRecordsNothingAndCaptureEndsWithTheWrite() throws {
        let device = try makeDevice(Self.generatedManifest)
        let before = try device.database.scalar("SELECT count(*) FROM coven_outbox").intValue
        XCTAssertThrowsError(try device.write(sql: "INSERT INTO people (id, first) VALUES ('\(ada)', 'A'); INSERT INTO people (id) VALUES ('not-a-uuid')"))
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_outbox").intValue, before)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM people").intValue, 0)
        try device.database.execute("INSERT INTO people (id, first) VALUES ('\(rex)', 'unrecorded')")
        try device.write(sql: "INSERT INTO people (id, first) VALUES ('\(ada)', 'A')")
        XCTAssertEqual(try lastEntries(device).map(\.id), [ada])
    }
}

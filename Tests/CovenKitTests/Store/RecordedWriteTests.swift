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
    static let itemsManifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [ { "name": "items", "identity": "shared-key" } ],
          "migrations": [ "CREATE TABLE items (id TEXT PRIMARY KEY, value TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
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

    /// A write of many rows (many batches of ``RecordedChanges`` and outbox pieces) records every
    /// row it changed exactly once, in the order it first touched them: updates, deletes, an id
    /// change as a delete then an insert, a row deleted and inserted again as an update, a row
    /// inserted and deleted again as nothing.
    func testAWriteOfManyRowsRecordsEveryRowOnceInTheOrderItTouchedThem() throws {
        let device = try makeDevice(Self.itemsManifest)
        let count = 20_000
        let pad = String(repeating: "x", count: 100)
        func numbers(_ limit: Int) -> String {
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(limit))"
        }
        func pieces(_ stamp: String) throws -> Int64? {
            try device.database.scalar("SELECT count(*) FROM coven_outbox WHERE hlc = ?1", [stamp]).intValue
        }

        try device.write(sql: "\(numbers(count)) INSERT INTO items (id, value) SELECT 'k' || i, '\(pad)' FROM n")
        let inserted = try lastEntries(device)
        XCTAssertEqual(inserted.map(\.id), (1...count).map { "k\($0)" })
        XCTAssertTrue(inserted.allSatisfy { $0.kind == .upsert && $0.value("value") == .text(pad) && $0.value("_updated_at") == .text($0.stamp) })
        XCTAssertGreaterThan(try XCTUnwrap(pieces(inserted[0].stamp)), 1, "more than one outbox piece")

        let number = "CAST(substr(id, 2) AS INTEGER)"
        try device.write(sql: """
            UPDATE items SET value = 'updated' WHERE \(number) % 5 = 0;
            DELETE FROM items WHERE \(number) % 5 = 1;
            UPDATE items SET id = 'm' || substr(id, 2) WHERE \(number) % 5 = 2;
            DELETE FROM items WHERE \(number) % 5 = 3;
            \(numbers(count)) INSERT INTO items (id, value) SELECT 'k' || i, 'again' FROM n WHERE i % 5 = 3;
            \(numbers(5_000)) INSERT INTO items (id, value) SELECT 'n' || i, 'new' FROM n;
            DELETE FROM items WHERE id LIKE 'n%' AND \(number) % 2 = 1;
            UPDATE items SET value = 'newer' WHERE id LIKE 'n%';
            """)
        let entries = try lastEntries(device)
        let stamp = try XCTUnwrap(entries.first?.stamp)
        var expected: [String] = []
        for i in stride(from: 5, through: count, by: 5) { expected.append("upsert k\(i)") }
        for i in stride(from: 1, through: count, by: 5) { expected.append("delete k\(i)") }
        for i in stride(from: 2, through: count, by: 5) { expected += ["delete k\(i)", "upsert m\(i)"] }
        for i in stride(from: 3, through: count, by: 5) { expected.append("upsert k\(i)") }
        for i in stride(from: 2, through: 5_000, by: 2) { expected.append("upsert n\(i)") }
        XCTAssertEqual(entries.count, expected.count)
        XCTAssertEqual(entries.map { "\($0.kind) \($0.id)" }, expected)
        XCTAssertEqual(Set(entries.map { "\($0.kind) \($0.id)" }).count, entries.count, "every row once")
        XCTAssertGreaterThan(try XCTUnwrap(pieces(stamp)), 1)
        let values = Dictionary(entries.filter { $0.kind == .upsert }.map { ($0.id, $0.value("value")) }, uniquingKeysWith: { first, _ in first })
        XCTAssertEqual(values["k5"], .text("updated"))
        XCTAssertEqual(values["m2"], .text(pad))
        XCTAssertEqual(values["k3"], .text("again"))
        XCTAssertEqual(values["n2"], .text("newer"))
        XCTAssertTrue(entries.allSatisfy { $0.stamp == stamp && ($0.kind == .delete || $0.value("_updated_at") == .text(stamp)) })

        // Every upserted row is stamped, the rows the write left alone are not, and the deleted
        // rows have the write's tombstones.
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM items WHERE _updated_at = ?1", [stamp]).intValue,
                       Int64(expected.filter { $0.hasPrefix("upsert") }.count))
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM items WHERE _updated_at <> ?1", [stamp]).intValue, Int64(count / 5))
        let tombstones = try device.database.query("SELECT id FROM coven_tombstones WHERE tbl = 'items' AND stamp = ?1", [stamp]).compactMap { $0.string("id") }
        XCTAssertEqual(Set(tombstones), Set(expected.filter { $0.hasPrefix("delete") }.map { String($0.dropFirst("delete ".count)) }))

        try device.write(sql: "DELETE FROM items")
        let deleted = try lastEntries(device)
        XCTAssertEqual(deleted.count, count - count / 5 + 2_500)
        XCTAssertTrue(deleted.allSatisfy { $0.kind == .delete })
        XCTAssertEqual(Set(deleted.map(\.id)).count, deleted.count)
    }

    /// A batch's ids go to SQL as one JSON array: any text comes back from `json_each` as it was.
    func testIdsGoToSQLAsTheyAre() throws {
        let device = try makeDevice(Self.itemsManifest)
        let ids = ["plain", "", "quote \" and \\ backslash", "tab\tnew\nline\u{1}\u{1F}", "ünï/cødé 🦊", "[\"x\"]"]
        let json = RecordedChanges.json(ids: ids)
        XCTAssertEqual(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String], ids)
        XCTAssertEqual(try device.database.query("SELECT value FROM json_each(?1) ORDER BY key", [json]).map { $0["value"] }, ids.map { .text($0) })
        XCTAssertEqual(RecordedChanges.json(ids: []), "[]")
    }

    /// A number for each id goes to SQL as one JSON object: `json_each` gives each id back as
    /// its key, as it was, with its number.
    func testNumbersByIdGoToSQLAsTheyAre() throws {
        let device = try makeDevice(Self.itemsManifest)
        let pairs: [(id: String, number: Int64)] = [("plain", 0), ("", -3), ("quote \" and \\ backslash", Int64.max),
                                                    ("tab\tnew\nline\u{1}\u{1F}", 7), ("ünï/cødé 🦊", Int64.min), ("{\"x\":1}", 42)]
        let json = RecordedChanges.json(numbers: pairs)
        let parsed = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: NSNumber])
        XCTAssertEqual(parsed.mapValues(\.int64Value), Dictionary(uniqueKeysWithValues: pairs.map { ($0.id, $0.number) }))
        let rows = try device.database.query("SELECT key, value FROM json_each(?1)", [json])
        XCTAssertEqual(rows.map { $0["key"] }, pairs.map { .text($0.id) })
        XCTAssertEqual(rows.map { $0["value"] }, pairs.map { .integer($0.number) })
        XCTAssertEqual(RecordedChanges.json(numbers: []), "{}")
    }
}

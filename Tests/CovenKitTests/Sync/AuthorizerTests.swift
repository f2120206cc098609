@testable import CovenKit
import Foundation
import XCTest

/// The applier asks an authorizer about every entry, and a change is laid out in sections per
/// audience (the seams members and circles build on).
final class AuthorizerTests: DeviceTestCase {
    /// Refuses every entry of one table.
    private struct RefuseTable: ChangeAuthorizer {
        let table: String
        func authorize(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Authorization {
            return entry.table == table ? .refused(.notAuthorized) : .accepted
        }
    }

    private let track = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"

    func testARefusedEntryIsNeverAppliedAndIsKeptAsALostValueThatCannotBeRestored() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: """
            INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road');
            INSERT INTO tracks (id, album_id, title) VALUES ('\(track)', '\(Self.album)', 'Come Together');
            """)
        let pushed = try StoreSync(a).sync(pull: false).pushed.published
        XCTAssertEqual(pushed, [1])
        let path = ChangeObject.path(device: a.deviceID, seq: 1)
        let provider = try StorageConnector(location: b.storage).connect()
        try StoreSync(b).sync(push: false, pull: false)
        let change = try b.keys.open(change: try XCTUnwrap(try provider.getObject(path)), path: path, publisher: a.deviceID)
        var applier = ChangeApplier(device: b, authorizer: RefuseTable(table: "tracks"))
        let report = try applier.apply(change, path: path)
        XCTAssertEqual(report.refused, 1)
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums WHERE id = ?1", [Self.album]).textValue, "Abbey Road")
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM tracks").intValue, 0, "a refused entry is not applied")
        let lost = try XCTUnwrap(try StoreSync(b).lostValues().first)
        XCTAssertEqual(lost.why, "not_authorized")
        XCTAssertEqual(lost.rowID, track)
        XCTAssertEqual(lost.device, a.deviceID)
        XCTAssertEqual(lost.values["title"], .text("Come Together"))
        XCTAssertFalse(lost.restorable)
        assertCovenError(.invalidState) { try StoreSync(b).restoreLost(lost.id) }
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM tracks").intValue, 0)
    }

    func testEveryEntryOfEverySectionIsAskedAbout() throws {
        let a = try makeDevice(name: "a")
        let entries = [RowEntry(kind: .upsert, table: "albums", id: Self.album, stamp: "2026-01-01T00:00:00.000Z-0000-x",
                                columns: ["id", "title", "audience", "_updated_at"],
                                values: [.text(Self.album), .text("Let It Be"), .text("store"), .text("2026-01-01T00:00:00.000Z-0000-x")])]
        let change = ChangeObject(storeID: a.storeID, device: "0193a9b2-0000-4000-8000-000000000001", seq: 1,
                                  schema: .init(migrations: a.manifest.migrations.count, digest: a.schemaVersion.digest),
                                  sections: [ChangeSection(audience: "store", entries: entries), ChangeSection(audience: "circle-1", entries: entries)])
        let recorder = Recorder()
        var applier = ChangeApplier(device: a, authorizer: RecordingAuthorizer(recorder: recorder))
        let report = try applier.apply(change, path: ChangeObject.path(device: change.device, seq: 1))
        XCTAssertEqual(recorder.audiences, ["store", "circle-1"])
        XCTAssertEqual(report.refused, 0)
        XCTAssertEqual(try a.database.scalar("SELECT title FROM albums WHERE id = ?1", [Self.album]).textValue, "Let It Be")
    }

    func testSectionsFollowTheRowsAudienceAndNothingSealsARowOfACircleWithoutItsKey() throws {
        let a = try makeDevice(name: "a")
        let circleID = try makeCircle(a)
        let circle = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try a.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store'), ('\(circle)', 'Private', '\(circleID)');
            INSERT INTO tracks (id, album_id, title) VALUES ('\(track)', '\(circle)', 'Secret');
            """)
        let entries = try a.database.transaction { try Outbox(database: a.database).oldest(bytes: 1 << 20).flatMap { try RowEntryCodec.decode($0.entries) } }
        XCTAssertEqual(entries.count, 3)
        let sections = try ChangeSections(audiences: RowAudiences(device: a), keys: a.keys).build(entries)
        // The circle's album and its track go to the circle's section, in order.
        XCTAssertEqual(sections.map(\.audience), ["store", circleID])
        XCTAssertEqual(sections[0].entries.map(\.id), [Self.album])
        XCTAssertEqual(sections[1].entries.map(\.id), [circle, track])
        // A section of a circle this device holds no key of is never sealed.
        let change = ChangeObject(storeID: a.storeID, device: a.deviceID, seq: 1, schema: .init(migrations: 0, digest: ""),
                                  sections: [ChangeSection(audience: "0193a9b2-0000-4000-8000-0000000000cc", entries: entries)])
        assertCovenError(.notInCircle) { try a.keys.seal(change) }
        // Nor is a row written into it.
        assertCovenError(.notInCircle) {
            try a.write(sql: "INSERT INTO albums (id, title, audience) VALUES (coven_uuid7(), 'Elsewhere', '0193a9b2-0000-4000-8000-0000000000cc')")
        }
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM albums").intValue, 2, "a refused write changes nothing")
    }
}

/// Records the audience of the section of every entry it is asked about.
private final class Recorder {
    var audiences: [String] = []
}

private struct RecordingAuthorizer: ChangeAuthorizer {
    let recorder: Recorder
    func authorize(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Authorization {
        recorder.audiences.append(section.audience)
        return .accepted
    }
}

/// Schema step 10 makes the lost values' table again with the refusals' reasons.
final class LostReasonsStepTests: DeviceTestCase {
    func testTheStepKeepsRowsIdsAndTheNextIdAndTakesTheNewReasons() throws {
        let device = try makeDevice()
        func add(_ why: String) throws {
            try device.database.run("""
                INSERT INTO coven_lost_values (tbl, row_id, entry, stamp, device, lost_at, why) VALUES ('albums', 'r', x'00', 's', 'd', 't', ?1)
                """, [why])
        }
        try add("concurrent")
        try add("parent_deleted")
        try add("file_deleted")
        try device.database.run("DELETE FROM coven_lost_values WHERE id = 3")
        try device.database.transaction { try device.database.execute(Schema.lostReasonsWidened) }
        XCTAssertEqual(try device.database.query("SELECT id, why FROM coven_lost_values ORDER BY id").map { "\($0.int("id") ?? 0) \($0.string("why") ?? "")" },
                       ["1 concurrent", "2 parent_deleted"])
        try add("not_authorized")
        try add("not_owner")
        XCTAssertEqual(try device.database.query("SELECT id FROM coven_lost_values ORDER BY id").compactMap { $0.int("id") }, [1, 2, 4, 5],
                       "an id given before is never given again")
        XCTAssertThrowsError(try add("because"))
    }
}

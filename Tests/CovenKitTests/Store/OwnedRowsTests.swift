@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Owner-only tables (issue 21; DESIGN.md "Rows and files across audiences"): coven fills the
/// owner with the writer's member; nobody else, an admin included, changes or deletes the row,
/// locally (`not_owner`) or on apply (a `not_owner` lost value, never applied).
class OwnedRowsTests: DeviceTestCase {
    static let journalManifest = """
        {
          "namespaces": [ { "name": "music", "kind": "user" } ],
          "tables": [
            { "name": "journal", "identity": "uuid", "owner_only": true,
              "files": [ { "column": "file" } ] },
            { "name": "notes", "identity": "uuid", "owner_only": true, "owner_column": "author" }
          ],
          "migrations": [
            "CREATE TABLE journal (id TEXT PRIMARY KEY, owner TEXT, body TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE notes (id TEXT PRIMARY KEY, author TEXT, body TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    /// Alice (owner, admin) with a laptop, Bob (a member) with a laptop, synced.
    private func twoMembers() throws -> (alice: Device, bob: Device, aliceID: String, bobID: String) {
        let alice = try makeDevice(Self.journalManifest, name: "alice")
        let bobIdentity = try MemberIdentity()
        let added = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        return (alice, bob, try XCTUnwrap(try Members(alice).memberID()), added.member.id)
    }

    private func body(_ device: Device, _ id: String) throws -> String? {
        try device.database.scalar("SELECT body FROM journal WHERE id = ?1", [id]).textValue
    }

    func testTheWriterOwnsTheRowAndNobodyElseChangesIt() throws {
        let (alice, bob, aliceID, bobID) = try twoMembers()
        // The owner column is filled with the writer's member; another value is refused.
        try alice.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary')")
        XCTAssertEqual(try alice.database.scalar("SELECT owner FROM journal").textValue, aliceID)
        let outbox = try alice.database.scalar("SELECT count(*) FROM coven_outbox").intValue
        let forged = assertCovenError(.notOwner) {
            try alice.write(sql: "INSERT INTO journal (id, owner, body) VALUES (coven_uuid7(), '\(bobID)', 'in bob''s name')")
        }
        XCTAssertEqual(forged?.details["table"], "journal")
        assertCovenError(.notOwner) { try alice.write(sql: "UPDATE journal SET owner = '\(bobID)'") }
        XCTAssertEqual(try alice.database.scalar("SELECT count(*) FROM journal").intValue, 1)
        XCTAssertEqual(try alice.database.scalar("SELECT count(*) FROM coven_outbox").intValue, outbox, "nothing recorded")
        // A named owner column works the same; the owner may edit and clear it back to itself.
        try alice.write(sql: "INSERT INTO notes (id, body) VALUES (coven_uuid7(), 'n')")
        XCTAssertEqual(try alice.database.scalar("SELECT author FROM notes").textValue, aliceID)
        try alice.write(sql: "UPDATE journal SET body = 'edited', owner = NULL")
        XCTAssertEqual(try alice.database.scalar("SELECT owner FROM journal").textValue, aliceID)
        // Bob reads it, and may neither change nor delete it; nothing changes on his device.
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try body(bob, Self.album), "edited")
        let refused = assertCovenError(.notOwner) { try bob.write(sql: "UPDATE journal SET body = 'bob was here'") }
        XCTAssertEqual(refused?.details["owner"], aliceID)
        assertCovenError(.notOwner) { try bob.write(sql: "DELETE FROM journal") }
        XCTAssertEqual(try body(bob, Self.album), "edited")
        // Alice, the store's owner and an admin, may not change bob's rows either.
        try bob.write(sql: "INSERT INTO journal (id, body) VALUES ('\(DeviceTestCase.album.dropLast())1', 'bob''s')")
        for device in [bob, alice] { _ = try StoreSync(device).sync() }
        assertCovenError(.notOwner) { try alice.write(sql: "DELETE FROM journal WHERE owner = '\(bobID)'") }
        // Bob deletes his own.
        try bob.write(sql: "DELETE FROM journal WHERE owner = '\(bobID)'")
        for device in [bob, alice] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try alice.database.scalar("SELECT count(*) FROM journal").intValue, 1)
    }

    /// A coven that skipped the local check (the write recorded straight, as a forged client
    /// would): every receiver refuses the entries, keeps them as `not_owner` lost values, and
    /// leaves the row as its owner wrote it.
    func testAForgedChangeOfAnotherMembersRowIsRefusedOnApply() throws {
        let (alice, bob, aliceID, bobID) = try twoMembers()
        try alice.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary')")
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        try bob.database.transaction {
            try bob.recordWrite { _ in
                try bob.database.run("UPDATE journal SET body = 'bob was here', _updated_at = '9' WHERE id = ?1", [Self.album])
                try bob.database.run("INSERT INTO journal (id, owner, body, _updated_at) VALUES (?1, ?2, 'in alice''s name', '9')",
                                     [String(Self.album.dropLast()) + "2", aliceID])
            }
        }
        _ = try StoreSync(bob).sync()
        let report = try StoreSync(alice).sync()
        XCTAssertEqual(report.pulled.refused, 2)
        XCTAssertEqual(try body(alice, Self.album), "dear diary")
        XCTAssertEqual(try alice.database.scalar("SELECT count(*) FROM journal").intValue, 1)
        let lost = try StoreSync(alice).lostValues()
        XCTAssertEqual(Set(lost.map(\.why)), ["not_owner"])
        XCTAssertEqual(lost.count, 2)
        XCTAssertEqual(Set(lost.map(\.device)), [bob.deviceID])
        // Bob's own rows still go through.
        try bob.write(sql: "INSERT INTO notes (id, body) VALUES (coven_uuid7(), 'mine')")
        _ = try StoreSync(bob).sync()
        _ = try StoreSync(alice).sync()
        XCTAssertEqual(try alice.database.scalar("SELECT author FROM notes").textValue, bobID)
    }

    /// make-device-only changes every row naming the file: another member's owner-only row
    /// refuses it (`not_owner`), before anything is fetched or written.
    func testMakeDeviceOnlyOfAFileInAnotherMembersRowIsNotOwner() throws {
        let (alice, bob, _, _) = try twoMembers()
        let song = try Staging(alice).prepareUserFile(path: try file("song.flac", "the one song"), namespace: "music", place: .cloud)
        let file = try alice.write(sql: "INSERT INTO journal (id, body, file) VALUES (coven_uuid7(), 'a song', coven_put_user_file('\(song.id)'))").files[0]
        try StoredFiles.store(alice, file: file)
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        let folder = work + "/Music"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let error = assertCovenError(.notOwner) {
            _ = try DeviceOnlyMaker(bob).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: file, names: ["song.flac"], input: "argument 1")])
        }
        XCTAssertEqual(error?.details["table"], "journal")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), [])
        XCTAssertEqual(try bob.fileRecord(file)?.coordinates.at, .stored)
        // Its owner may.
        _ = try DeviceOnlyMaker(alice).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: file, names: ["song.flac"], input: "argument 1")])
        XCTAssertEqual(try alice.fileRecord(file)?.coordinates.at, .device)
    }

    /// A store without members has no owners to keep: a write to an owner-only table is
    /// refused until it has.
    func testAnOwnerOnlyTableNeedsAMember() throws {
        let device = try makeDevice(Self.journalManifest, name: "solo", kind: .noMember)
        assertCovenError(.invalidState) { try device.write(sql: "INSERT INTO journal (id, body) VALUES (coven_uuid7(), 'x')") }
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM journal").intValue, 0)
        _ = try Members(device).establish(name: "solo")
        try device.write(sql: "INSERT INTO journal (id, body) VALUES (coven_uuid7(), 'x')")
        XCTAssertEqual(try device.database.scalar("SELECT owner FROM journal").textValue, try Members(device).memberID())
    }
}

/// The same on S3 (moto).
final class OwnedRowsS3Tests: OwnedRowsTests {
    override class var s3Server: S3TestServer.Kind? { .moto }
    override func testAForgedChangeOfAnotherMembersRowIsRefusedOnApply() throws { try super.testAForgedChangeOfAnotherMembersRowIsRefusedOnApply() }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Circles (issue 21; DESIGN.md "Members and circles"): three members, a circle of two. A
/// circle's rows and file records reach its members only; the store's other members see that
/// a section exists and check its signature, nothing more.
class CirclesTests: DeviceTestCase {
    static let secretTitle = "Honeymoon in Kyoto, unreleased"

    /// Alice (owner), Bob and Carol, a device each, synced; and a circle of Alice and Bob.
    struct Store {
        var alice: Device
        var bob: Device
        var carol: Device
        var circle: String
        var all: [Device] { [alice, bob, carol] }
    }

    func threeMembers() throws -> Store {
        let alice = try makeDevice(name: "alice")
        let bobIdentity = try MemberIdentity()
        let carolIdentity = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        _ = try Members(alice).add(name: "carol", recipient: carolIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        let carol = try join("carol", from: alice, identity: carolIdentity)
        let circle = try Circles(alice).create(name: "couple", members: ["bob"]).circle.id
        let store = Store(alice: alice, bob: bob, carol: carol, circle: circle)
        try syncAll(store)
        return store
    }

    func syncAll(_ store: Store) throws {
        for _ in 0..<2 { for device in store.all { _ = try StoreSync(device).sync() } }
    }

    func title(_ device: Device, _ id: String) throws -> String? {
        try device.database.scalar("SELECT title FROM albums WHERE id = ?1", [id]).textValue
    }

    /// Every object in storage, and the files of `device`'s database.
    func leaks(_ needles: [String], store: Store, outsider: Device) throws -> [String] {
        var found: [String] = []
        let provider = try store.alice.connectStorage()
        for info in try provider.list(prefix: "") {
            let bytes = try XCTUnwrap(try provider.getObject(info.key))
            for needle in needles where bytes.firstRange(of: Array(needle.utf8)) != nil { found.append("\(info.key): \(needle)") }
        }
        for suffix in ["", "-wal"] {
            guard let data = FileManager.default.contents(atPath: outsider.paths.database + suffix) else { continue }
            for needle in needles where [UInt8](data).firstRange(of: Array(needle.utf8)) != nil { found.append("\(outsider.paths.database)\(suffix): \(needle)") }
        }
        return found
    }

    func testACirclesRowsAndFilesReachItsMembersOnly() throws {
        let s = try threeMembers()
        let listed = try Circles(s.bob).list()
        XCTAssertEqual(listed.map(\.name), ["couple"])
        XCTAssertEqual(Set(listed[0].members.map(\.name)), ["alice", "bob"])
        XCTAssertEqual(try Circles(s.carol).list(), [], "an outsider knows no circle's name")
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        let track = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4d"
        let cover = try stageApp(s.alice, text: "kyoto cover")
        let written = try s.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store'), ('\(secret)', '\(Self.secretTitle)', '\(s.circle)');
            INSERT INTO tracks (id, album_id, title) VALUES ('\(track)', '\(secret)', 'First dance');
            INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(secret)', coven_put_staged('\(cover.id)'));
            """)
        let file = written.files[0]
        XCTAssertEqual(try s.alice.fileRecord(file)?.audience, s.circle)
        try StoredFiles.store(s.alice, file: file)
        try syncAll(s)
        // Bob reads the circle's rows and file; Carol the store's only.
        XCTAssertEqual(try title(s.bob, secret), Self.secretTitle)
        XCTAssertEqual(try s.bob.database.scalar("SELECT title FROM tracks WHERE id = ?1", [track]).textValue, "First dance")
        XCTAssertEqual(try s.bob.fileRecord(file)?.audience, s.circle)
        XCTAssertEqual(try title(s.carol, Self.album), "Abbey Road")
        XCTAssertNil(try title(s.carol, secret))
        XCTAssertNil(try s.carol.fileRecord(file))
        XCTAssertEqual(try s.carol.database.scalar("SELECT count(*) FROM tracks").intValue, 0)
        XCTAssertGreaterThan(try CircleSections(database: s.carol.database).unread().sections, 0, "Carol remembers what she could not read")
        // The hard way: no object, nor Carol's database, holds the circle's ids or titles.
        try s.carol.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try leaks([Self.secretTitle, "First dance", secret, track, file, "couple"], store: s, outsider: s.carol), [])
        // Bob writes in the circle; Alice reads it.
        try s.bob.write(sql: "UPDATE albums SET title = 'Kyoto' WHERE id = '\(secret)'")
        try syncAll(s)
        XCTAssertEqual(try title(s.alice, secret), "Kyoto")
        // Carol may not write into it.
        let refused = assertCovenError(.notInCircle) {
            try s.carol.write(sql: "INSERT INTO albums (id, title, audience) VALUES (coven_uuid7(), 'gatecrash', '\(s.circle)')")
        }
        XCTAssertEqual(refused?.details["circle"], s.circle)
        XCTAssertEqual(try s.carol.database.scalar("SELECT count(*) FROM albums").intValue, 1)
        // Nor manage it.
        assertCovenError(.notFound) { _ = try Circles(s.carol).add(s.circle, member: "carol") }
        assertCovenError(.notAdmin) { _ = try Circles(s.bob).add(s.circle, member: "carol") }
    }

    /// A write forged past the local checks (a circle's row put where the store reads it, or
    /// a circle written by a member outside it) is refused by every receiver.
    func testAForgedCircleWriteIsRefusedOnApply() throws {
        let s = try threeMembers()
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(secret)', 'ours', '\(s.circle)')")
        try syncAll(s)
        // Carol's device writes a row of the circle in the store's section, past its checks.
        try s.carol.database.transaction {
            try s.carol.recordWrite { _ in
                try s.carol.database.run("INSERT INTO albums (id, title, audience, _updated_at) VALUES (?1, 'forged', ?2, '9')",
                                         [String(secret.dropLast()) + "e", s.circle])
            }
        }
        // Its push puts the row in a section it holds no key of: refused before publishing.
        assertCovenError(.notInCircle) { _ = try StoreSync(s.carol).sync() }
        // Sealed by hand into the store's section, it is refused by Alice and Bob.
        try s.carol.database.run("DELETE FROM coven_outbox")
        let entry = RowEntry(kind: .upsert, table: "albums", id: String(secret.dropLast()) + "e", stamp: "2099-01-01T00:00:00.000Z-0000-" + s.carol.deviceID,
                             columns: ["id", "title", "audience", "_updated_at"],
                             values: [.text(String(secret.dropLast()) + "e"), .text("forged"), .text(s.circle), .text("2099-01-01T00:00:00.000Z-0000-" + s.carol.deviceID)])
        let provider = try s.carol.connectStorage()
        let seq = UInt64(try provider.list(prefix: "changes/\(s.carol.deviceID)/").count + 1)
        let change = ChangeObject(storeID: s.carol.storeID, device: s.carol.deviceID, seq: seq,
                                  schema: .init(migrations: s.carol.manifest.migrations.count, digest: s.carol.schemaVersion.digest),
                                  frontier: [:], sections: [ChangeSection(audience: "store", entries: [entry])])
        try provider.put(change.path, data: try s.carol.keys.seal(change))
        for device in [s.alice, s.bob] {
            let report = try StoreSync(device).sync()
            XCTAssertEqual(report.pulled.refused, 1, device.deviceName)
            XCTAssertNil(try title(device, String(secret.dropLast()) + "e"))
            XCTAssertEqual(try StoreSync(device).lostValues().map(\.why), ["not_authorized"])
        }
    }

    /// Deleting a circle's row in a later write (no image of it in the change) sends the
    /// delete in the circle's section: its id reaches no outsider. A delete of it forged in
    /// the store's section by a member outside the circle deletes nothing.
    func testACirclesRowDeletedLaterStaysInItsSection() throws {
        let s = try threeMembers()
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        let track = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4d"
        let kept = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f5a"
        try s.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(secret)', '\(Self.secretTitle)', '\(s.circle)'), ('\(kept)', 'kept', '\(s.circle)');
            INSERT INTO tracks (id, album_id, title) VALUES ('\(track)', '\(secret)', 'First dance');
            """)
        try syncAll(s)
        try s.bob.write(sql: "DELETE FROM tracks WHERE id = '\(track)'; DELETE FROM albums WHERE id = '\(secret)'")
        try syncAll(s)
        XCTAssertNil(try title(s.alice, secret))
        XCTAssertEqual(try s.alice.database.scalar("SELECT count(*) FROM tracks").intValue, 0)
        let snapshot = try Snapshots(s.alice).snapshot()
        _ = snapshot
        try s.carol.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try leaks([secret, track, kept], store: s, outsider: s.carol), [], "no delete, tombstone or snapshot names the circle's rows")
        // Carol forges a delete of the kept row in the store's section.
        let stamp = "2099-01-01T00:00:00.000Z-0000-" + s.carol.deviceID
        let provider = try s.carol.connectStorage()
        let seq = UInt64(try provider.list(prefix: "changes/\(s.carol.deviceID)/").count + 1)
        let change = ChangeObject(storeID: s.carol.storeID, device: s.carol.deviceID, seq: seq,
                                  schema: .init(migrations: s.carol.manifest.migrations.count, digest: s.carol.schemaVersion.digest),
                                  frontier: [:], sections: [ChangeSection(audience: "store", entries: [RowEntry(kind: .delete, table: "albums", id: kept, stamp: stamp)])])
        try provider.put(change.path, data: try s.carol.keys.seal(change))
        for device in [s.alice, s.bob] {
            let report = try StoreSync(device).sync()
            XCTAssertEqual(report.pulled.refused, 1, device.deviceName)
            XCTAssertEqual(try title(device, kept), "kept", device.deviceName)
        }
    }

    /// A store member outside the circle who deletes an album while a member moves it into the
    /// circle (neither seeing the other's write) is heard: last writer wins decides, on every
    /// device, whatever order each applies the two writes in.
    func testADeleteThatCrossesAMoveIntoTheCircleIsHeard() throws {
        let s = try threeMembers()
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store')")
        try syncAll(s)
        try s.alice.write(sql: "UPDATE albums SET audience = '\(s.circle)' WHERE id = '\(Self.album)'")
        try s.carol.write(sql: "DELETE FROM albums WHERE id = '\(Self.album)'")  // later: it wins
        _ = try StoreSync(s.carol).sync()  // Bob applies the delete first, Alice the move first
        _ = try StoreSync(s.bob).sync()
        try syncAll(s)
        for device in s.all {
            XCTAssertNil(try title(device, Self.album), device.deviceName)
            XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_lost_values WHERE why = 'not_authorized'").intValue, 0, device.deviceName)
        }
    }

    /// A move into the circle that crosses a write of the row in the store: Alice moves the
    /// album into the circle, Bob (not having seen the move) edits it in the store, and Alice
    /// (not having seen Bob's edit) edits it in the circle. The circle's members keep Alice's
    /// last image, in the circle; Carol, who reads the store only, would have kept Bob's for
    /// good: a device holding the winner retracts the row in the store at the winner's stamp.
    func testAMoveThatCrossesAWriteInTheStoreTakesTheRowOutOfTheStore() throws {
        let s = try threeMembers()
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store')")
        try syncAll(s)
        try s.alice.write(sql: "UPDATE albums SET audience = '\(s.circle)' WHERE id = '\(Self.album)'")
        _ = try StoreSync(s.alice).sync()
        _ = try StoreSync(s.carol).sync()
        XCTAssertNil(try title(s.carol, Self.album), "the move's retract")
        try s.bob.write(sql: "UPDATE albums SET title = 'Abbey Road (Bob)' WHERE id = '\(Self.album)'")  // has not seen the move
        try s.alice.write(sql: "UPDATE albums SET title = '\(Self.secretTitle)' WHERE id = '\(Self.album)'")  // later: it wins
        _ = try StoreSync(s.bob).sync(pull: false)
        _ = try StoreSync(s.carol).sync()
        XCTAssertEqual(try title(s.carol, Self.album), "Abbey Road (Bob)", "Bob's edit came after the move's retract")
        try syncAll(s)
        for device in [s.alice, s.bob] {
            XCTAssertEqual(try title(device, Self.album), Self.secretTitle, device.deviceName)
            XCTAssertEqual(try device.database.scalar("SELECT audience FROM albums WHERE id = ?1", [Self.album]).textValue, s.circle, device.deviceName)
        }
        XCTAssertNil(try title(s.carol, Self.album), "the row left the store")
        for device in s.all {
            XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_lost_values WHERE why = 'not_authorized'").intValue, 0, device.deviceName)
        }
        try s.carol.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try leaks([Self.secretTitle], store: s, outsider: s.carol), [])
    }

    /// A change sealed under a generation of the circle this device has not read yet waits
    /// (`key_unavailable`, shown by status), and applies once the key arrives.
    func testAChangeBeforeItsKeyGenerationWaitsAndAppliesOnceTheKeyArrives() throws {
        let s = try threeMembers()
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(secret)', 'for three', '\(s.circle)')")
        _ = try StoreSync(s.alice).sync()
        // Storage delivers the change before the generation that adds Carol.
        let provider = try s.alice.connectStorage()
        let path = AudienceGeneration.path(audience: s.circle, generation: 2)
        let generation = try XCTUnwrap(try provider.getObject(path))
        try provider.delete(path)
        let next = (try appliedSeq(s.carol, of: s.alice) ?? 0) + 1
        let waiting = try StoreSync(s.carol).sync()
        XCTAssertEqual(waiting.pulled.keyUnavailable, [s.alice.deviceID: next])
        XCTAssertNil(try title(s.carol, secret))
        XCTAssertEqual(try DeviceStatus(of: s.carol).sync.keyUnavailable.keys.sorted(), [s.alice.deviceID])
        // Nothing of it is skipped: once the key is there, it applies.
        try provider.put(path, data: generation)
        let applied = try StoreSync(s.carol).sync()
        XCTAssertEqual(applied.pulled.keyUnavailable, [:])
        XCTAssertEqual(try title(s.carol, secret), "for three")
        XCTAssertEqual(try DeviceStatus(of: s.carol).sync.keyUnavailable, [:])
    }

    /// A member added to a circle later reads what the circle held before: each generation
    /// holds the previous one's key, and the sections it could not open are fetched again.
    func testAMemberAddedLaterReadsTheCirclesHistory() throws {
        let s = try threeMembers()
        let early = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(early)', 'for two', '\(s.circle)')")
        try syncAll(s)
        XCTAssertNil(try title(s.carol, early))
        XCTAssertEqual(try CircleSections(database: s.carol.database).unread().sections, 1)
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        let report = try StoreSync(s.carol).sync()
        XCTAssertEqual(report.pulled.reopenedSections, 1)
        XCTAssertEqual(try title(s.carol, early), "for two")
        XCTAssertEqual(try CircleSections(database: s.carol.database).unread().sections, 0)
        // And writes there now.
        try s.carol.write(sql: "UPDATE albums SET title = 'for three' WHERE id = '\(early)'")
        try syncAll(s)
        XCTAssertEqual(try title(s.bob, early), "for three")
    }

    /// A snapshot holds one part per audience: the store's rows in its own object (sealed under
    /// the store's key), each circle's in a part sealed under the circle's key. A device of a
    /// circle's member that joins from it reads the circle's part, not the changes; a device
    /// of a member outside reads the store's part only.
    func testASnapshotHoldsAPartPerAudienceAndAJoiningDeviceReadsItsOwn() throws {
        let s = try threeMembers()
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        let gone = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4e"
        for title in ["one", "two", "three"] {
            try s.alice.write(sql: "INSERT INTO settings (id, value) VALUES ('\(title)', '\(title)')")
            _ = try StoreSync(s.alice).sync()
        }
        try s.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store'), ('\(secret)', '\(Self.secretTitle)', '\(s.circle)'),
              ('\(gone)', 'deleted later', '\(s.circle)');
            INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(secret)', 'First dance');
            """)
        try syncAll(s)
        try s.bob.write(sql: "DELETE FROM albums WHERE id = '\(gone)'")
        try syncAll(s)
        // Every device's latest change holds no circle's section (a publisher checks its
        // latest is stored).
        for device in s.all { try device.write(sql: "INSERT INTO settings (id, value) VALUES ('\(device.deviceName)', 'x')") }
        try syncAll(s)
        let snapshot = try Snapshots(s.bob).snapshot()
        XCTAssertEqual(snapshot.manifest.rows, 7, "the store's album and settings only")
        XCTAssertEqual(snapshot.manifest.parts, [s.circle: 1])
        XCTAssertEqual(snapshot.parts.map(\.circle), [s.circle])
        XCTAssertEqual(snapshot.parts.first?.rows, 2, "the circle's album and track")
        XCTAssertEqual(snapshot.parts.first?.key, snapshot.key + "." + s.circle)
        // Carol's snapshot has no part: she is in no circle.
        XCTAssertEqual(try Snapshots(s.carol).snapshot().parts, [])
        try syncAll(s)
        XCTAssertEqual(try leaks([Self.secretTitle, "First dance", secret, gone], store: s, outsider: s.carol), [])
        // The changes holding the circle's sections are gone (as if lost): the part has them.
        let provider = try s.alice.connectStorage()
        for device in s.all {
            for seq in try CircleSections(database: s.alice.database).circleSections(of: device.deviceID, from: 1, through: 1000).keys {
                try provider.delete(ChangeObject.path(device: device.deviceID, seq: UInt64(seq)))
            }
        }
        // Bob's new device starts from Bob's snapshot (it covers most) and reads the circle's part.
        let bobIdentity = try MemberIdentity(contentsOf: s.bob.paths.memberIdentity)
        let desktop = try join("bob-desktop", from: s.alice, identity: bobIdentity)
        XCTAssertNil(try title(desktop, secret))
        let report = try StoreSync(desktop).sync()
        XCTAssertEqual(report.pulled.reopenedParts, 1)
        XCTAssertEqual(report.pulled.reopenUnavailable, [:])
        XCTAssertEqual(try title(desktop, Self.album), "Abbey Road")
        XCTAssertEqual(try title(desktop, secret), Self.secretTitle)
        XCTAssertNil(try title(desktop, gone))
        XCTAssertEqual(try desktop.database.scalar("SELECT title FROM tracks").textValue, "First dance")
        XCTAssertEqual(try CircleSections(database: desktop.database).unread().sections, 0)
        // It writes in the circle, and Alice reads it.
        try desktop.write(sql: "UPDATE albums SET title = 'Kyoto' WHERE id = '\(secret)'")
        _ = try StoreSync(desktop).sync()
        try syncAll(s)
        XCTAssertEqual(try title(s.alice, secret), "Kyoto")
        // Carol's new device, from the same snapshot, reads none of it.
        let carolIdentity = try MemberIdentity(contentsOf: s.carol.paths.memberIdentity)
        let tablet = try join("carol-tablet", from: s.alice, identity: carolIdentity)
        let tabletReport = try StoreSync(tablet).sync()
        XCTAssertEqual(tabletReport.pulled.reopenedParts, 0)
        XCTAssertEqual(try title(tablet, Self.album), "Abbey Road")
        XCTAssertNil(try title(tablet, secret))
        try tablet.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try leaks([Self.secretTitle, "First dance", secret], store: s, outsider: tablet), [])
    }

    /// A member added to a circle after an album moved into it reads the album: the move's
    /// retract took it out of its devices, and the move's image (same write, same stamp),
    /// opened later, brings it back.
    func testAMemberAddedAfterAMoveIntoTheCircleReadsTheMovedRow() throws {
        let s = try threeMembers()
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store')")
        try syncAll(s)
        XCTAssertEqual(try title(s.carol, Self.album), "Abbey Road")
        try s.alice.write(sql: "UPDATE albums SET audience = '\(s.circle)' WHERE id = '\(Self.album)'")
        try syncAll(s)
        XCTAssertNil(try title(s.carol, Self.album), "moved out of what Carol reads")
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        _ = try StoreSync(s.carol).sync()
        XCTAssertEqual(try title(s.carol, Self.album), "Abbey Road")
        XCTAssertEqual(try s.carol.database.scalar("SELECT audience FROM albums WHERE id = ?1", [Self.album]).textValue, s.circle)
    }

    /// A member added to a circle after its changes went reads its history from a snapshot's
    /// part; gc deletes a part with its snapshot.
    func testAMemberAddedLaterReadsTheCircleFromASnapshotPart() throws {
        let s = try threeMembers()
        let early = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(early)', 'for two', '\(s.circle)')")
        try syncAll(s)
        let first = try Snapshots(s.alice).snapshot()
        try s.alice.write(sql: "UPDATE albums SET title = 'still for two' WHERE id = '\(early)'")
        try syncAll(s)
        try s.alice.write(sql: "INSERT INTO settings (id, value) VALUES ('latest', 'x')")
        try syncAll(s)
        let second = try Snapshots(s.alice).snapshot()
        XCTAssertEqual(second.parts.count, 1)
        let provider = try s.alice.connectStorage()
        for seq in try CircleSections(database: s.alice.database).circleSections(of: s.alice.deviceID, from: 1, through: 1000).keys {
            try provider.delete(ChangeObject.path(device: s.alice.deviceID, seq: UInt64(seq)))
        }
        XCTAssertEqual(try CircleSections(database: s.carol.database).unread().sections, 2)
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        let report = try StoreSync(s.carol).sync()
        XCTAssertEqual(report.pulled.reopenedParts, 1)
        XCTAssertEqual(report.pulled.reopenedSections, 2)
        XCTAssertEqual(report.pulled.reopenUnavailable, [:])
        XCTAssertEqual(try title(s.carol, early), "still for two")
        XCTAssertEqual(try CircleSections(database: s.carol.database).unread().sections, 0)
        // A third snapshot: gc deletes the first with its part, and keeps the newest two's.
        for device in s.all { try device.write(sql: "INSERT INTO settings (id, value) VALUES ('\(device.deviceName)-2', 'x')") }
        try syncAll(s)
        let third = try Snapshots(s.alice).snapshot()
        try syncAll(s)
        let gc = try collectGarbageByProof(s.alice)
        let deleted = Set(gc.deleted.filter { $0.kind == .snapshot }.map(\.key))
        XCTAssertEqual(deleted, [first.key, first.parts[0].key])
        for kept in [second, third] {
            XCTAssertNotNil(try provider.head(kept.key))
            XCTAssertNotNil(try provider.head(kept.parts[0].key))
        }
    }

    /// gc deletes a change holding a circle's section once the newest retained snapshot has a
    /// part of that circle in storage, and not before (a snapshot by a member outside the
    /// circle has none): a member added to the circle afterwards reads it from the part.
    func testGCDeletesACirclesChangesOnceASnapshotHasItsPart() throws {
        let s = try threeMembers()
        let album = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(album)', '\(Self.secretTitle)', '\(s.circle)')")
        try syncAll(s)
        let circleSeqs = try CircleSections(database: s.alice.database).circleSections(of: s.alice.deviceID, from: 1, through: 1000).keys.sorted()
        XCTAssertFalse(circleSeqs.isEmpty)
        let provider = try s.alice.connectStorage()
        func present() throws -> [Int64] {
            try circleSeqs.filter { try provider.head(ChangeObject.path(device: s.alice.deviceID, seq: UInt64($0))) != nil }
        }
        // Every device publishes a frontier past the circle's changes.
        func settle(_ round: String) throws {
            for device in s.all { try device.write(sql: "INSERT INTO settings (id, value) VALUES ('\(device.deviceName)-\(round)', 'x')") }
            try syncAll(s)
        }
        try settle("1")
        XCTAssertEqual(try Snapshots(s.carol).snapshot().parts, [], "Carol is in no circle")
        try settle("2")
        _ = try collectGarbageByProof(s.alice)
        XCTAssertEqual(try present(), circleSeqs, "the newest snapshot has no part of the circle")
        let snapshot = try Snapshots(s.alice).snapshot()
        XCTAssertEqual(snapshot.parts.map(\.circle), [s.circle])
        try settle("3")
        let gc = try collectGarbageByProof(s.alice)
        XCTAssertTrue(gc.deleted.contains { $0.kind == .change })
        XCTAssertEqual(try present(), [], "the part holds them: \(gc.deleted.map(\.key)) kept \(gc.kept.map { "\($0.key) \($0.reason)" })")
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        let report = try StoreSync(s.carol).sync()
        XCTAssertEqual(report.pulled.reopenedParts, 1)
        XCTAssertEqual(try title(s.carol, album), Self.secretTitle)
    }

    /// Bob writes a track under the circle's album while Alice deletes the album; Bob's pull
    /// applies the delete (his track is taken out) before his push sends the write: the track's
    /// image goes in the circle's section, where its album was, not the store's (before, a row
    /// not here any more went to the store, and Carol held its title as a lost value).
    func testARowTakenOutBeforeItsWriteIsPublishedStaysInItsCircle() throws {
        let s = try threeMembers()
        let album = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(album)', 'for two', '\(s.circle)')")
        try syncAll(s)
        try s.alice.write(sql: "DELETE FROM albums WHERE id = '\(album)'")
        _ = try StoreSync(s.alice).sync()
        try s.bob.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES ('0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4d', '\(album)', '\(Self.secretTitle)')")
        _ = try StoreSync(s.bob).sync(push: false)
        XCTAssertEqual(try s.bob.database.scalar("SELECT count(*) FROM tracks").intValue, 0, "taken out")
        try syncAll(s)
        try s.carol.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        XCTAssertEqual(try leaks([Self.secretTitle], store: s, outsider: s.carol), [])
        XCTAssertEqual(try s.alice.database.scalar("SELECT count(*) FROM coven_lost_values WHERE tbl = 'tracks'").intValue, 1, "Alice keeps it as a lost value")
    }

    /// Moving an album into the circle moves its tracks and cover: new file records in the
    /// circle over the same stored bytes (nothing uploaded, no stored object written), the
    /// rows written again in the circle's section and retracted from the store's. Moving it
    /// back brings them back to everyone.
    func testMovingAnAlbumWithItsTracksAndCoverIntoAndOutOfTheCircle() throws {
        let s = try threeMembers()
        let song = try Staging(s.alice).prepareUserFile(path: try file("song.flac", "the first dance, recorded live"), namespace: "music", place: .cloud)
        let cover = try stageApp(s.alice, text: "cover art")
        let written = try s.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Wedding', 'store');
            INSERT INTO tracks (id, album_id, title, file) VALUES (coven_uuid7(), '\(Self.album)', 'First dance', coven_put_user_file('\(song.id)'));
            INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(cover.id)'));
            """)
        for file in written.files { try StoredFiles.store(s.alice, file: file) }
        try syncAll(s)
        XCTAssertEqual(try s.carol.database.scalar("SELECT count(*) FROM tracks").intValue, 1)
        let provider = try s.alice.connectStorage()
        let storedBefore = try provider.list(prefix: "files/").map(\.key).sorted()
        let objects = try written.files.map { try XCTUnwrap(try s.alice.fileRecord($0)).coordinates.object }

        try s.alice.write(sql: "UPDATE albums SET audience = '\(s.circle)' WHERE id = '\(Self.album)'")
        XCTAssertEqual(try s.alice.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue, 0, "nothing to upload")
        let trackFile = try XCTUnwrap(try s.alice.database.scalar("SELECT file FROM tracks").textValue)
        XCTAssertFalse(written.files.contains(trackFile), "the cell names a new record")
        XCTAssertEqual(try s.alice.fileRecord(trackFile)?.audience, s.circle)
        XCTAssertEqual(try s.alice.fileRecord(trackFile)?.coordinates.object, objects[0], "over the same bytes")
        XCTAssertNil(try s.alice.fileRecord(written.files[0]), "the old record goes with its last reference")
        try syncAll(s)
        XCTAssertEqual(try provider.list(prefix: "files/").map(\.key).sorted(), storedBefore, "no stored object written or deleted")
        // Bob reads it all in the circle; Carol holds none of it any more.
        XCTAssertEqual(try s.bob.database.scalar("SELECT audience FROM albums").textValue, s.circle)
        XCTAssertEqual(try s.bob.database.scalar("SELECT file FROM tracks").textValue, trackFile)
        XCTAssertEqual(try s.bob.fileRecord(trackFile)?.audience, s.circle)
        XCTAssertEqual(try s.bob.database.scalar("SELECT count(*) FROM covers").intValue, 1)
        for table in ["albums", "tracks", "covers"] {
            XCTAssertEqual(try s.carol.database.scalar("SELECT count(*) FROM \(table)").intValue, 0, table)
        }
        XCTAssertNil(try s.carol.fileRecord(written.files[0]))
        XCTAssertNil(try s.carol.fileRecord(trackFile))
        XCTAssertEqual(try StoreSync(s.carol).lostValues(), [], "a move is no conflict")
        XCTAssertEqual(try StoreSync(s.alice).lostValues(), [])

        // Back to the store: everyone has it again, over the same bytes still.
        try s.bob.write(sql: "UPDATE albums SET audience = 'store' WHERE id = '\(Self.album)'")
        try syncAll(s)
        for device in s.all {
            XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM tracks").intValue, 1, device.deviceName)
            let file = try XCTUnwrap(try device.database.scalar("SELECT file FROM tracks").textValue)
            XCTAssertEqual(try device.fileRecord(file)?.audience, "store")
            XCTAssertEqual(try device.fileRecord(file)?.coordinates.object, objects[0])
        }
        XCTAssertEqual(try provider.list(prefix: "files/").map(\.key).sorted(), storedBefore)
        // Carol cannot move a row into the circle, nor out of it.
        assertCovenError(.notInCircle) { try s.carol.write(sql: "UPDATE albums SET audience = '\(s.circle)'") }
    }

    /// make-device-only: `not_in_circle` for a member removed from the file's circle (who
    /// keeps its record), `file_absent` for one never in it.
    func testMakeDeviceOnlyOfACirclesFileNeedsTheCircle() throws {
        let s = try threeMembers()
        let song = try Staging(s.alice).prepareUserFile(path: try file("song.flac", "our song"), namespace: "music", place: .cloud)
        let written = try s.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'ours', '\(s.circle)');
            INSERT INTO tracks (id, album_id, title, file) VALUES (coven_uuid7(), '\(Self.album)', 'our song', coven_put_user_file('\(song.id)'));
            """)
        try StoredFiles.store(s.alice, file: written.files[0])
        try syncAll(s)
        _ = try Circles(s.alice).remove(s.circle, member: "bob")
        try syncAll(s)
        XCTAssertNotNil(try s.bob.fileRecord(written.files[0]), "bob keeps the record")
        let folder = work + "/Music"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let request = [DeviceOnlyRequest(file: written.files[0], names: ["song.flac"], input: "argument 1")]
        let removed = assertCovenError(.notInCircle) { _ = try DeviceOnlyMaker(s.bob).makeDeviceOnly(folder: folder, requests: request) }
        XCTAssertEqual(removed?.details["circle"], s.circle)
        assertCovenError(.fileAbsent) { _ = try DeviceOnlyMaker(s.carol).makeDeviceOnly(folder: folder, requests: request) }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), [])
        _ = try DeviceOnlyMaker(s.alice).makeDeviceOnly(folder: folder, requests: request)
        XCTAssertEqual(try s.alice.fileRecord(written.files[0])?.coordinates.at, .device)
    }

    /// A member who replaces its keys stays in its circles: each gets a generation with the
    /// new recipient, and the member's devices with the new identity read and write there.
    func testAMemberWhoRekeysStaysInItsCircles() throws {
        let s = try threeMembers()
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(secret)', 'before', '\(s.circle)')")
        try syncAll(s)
        let (identity, _) = try Members(s.bob).rekey()
        XCTAssertEqual(try Circles(s.bob).list().first?.generation, 2)
        try s.alice.write(sql: "UPDATE albums SET title = 'after' WHERE id = '\(secret)'")
        try syncAll(s)
        XCTAssertEqual(try Circles(s.bob).list().first?.isMember, true)
        XCTAssertEqual(try title(s.bob, secret), "after")
        try s.bob.write(sql: "UPDATE albums SET title = 'bob again' WHERE id = '\(secret)'")
        try syncAll(s)
        XCTAssertEqual(try title(s.alice, secret), "bob again")
        // A new device of Bob's, with the new identity, reads the circle.
        let tablet = try join("bob-tablet", from: s.alice, identity: identity)
        _ = try StoreSync(tablet).sync()
        XCTAssertEqual(try title(tablet, secret), "bob again")
        XCTAssertEqual(try Circles(tablet).list().map(\.name), ["couple"])
    }

    func appliedSeq(_ device: Device, of other: Device) throws -> Int64? {
        try device.database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [other.deviceID]).intValue
    }

    /// A member removed from a circle keeps what it read and reads nothing sealed after; the
    /// later sections open with no key it holds.
    func testARemovedMemberReadsNothingPublishedAfterTheRemoval() throws {
        let s = try threeMembers()
        let before = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        let after = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4e"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(before)', 'before', '\(s.circle)')")
        try syncAll(s)
        XCTAssertEqual(try title(s.bob, before), "before")
        let removed = try Circles(s.alice).remove(s.circle, member: "bob")
        XCTAssertEqual(removed.member?.name, "bob")
        XCTAssertEqual(removed.circle.generation, 2)
        XCTAssertEqual(try Circles(s.alice).remove(s.circle, member: "bob").objectsWritten, 0, "run again, it is done")
        _ = try Circles(s.alice).rotate(s.circle)
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(after)', 'after', '\(s.circle)')")
        try syncAll(s)
        XCTAssertEqual(try title(s.bob, before), "before", "what it read stays")
        XCTAssertNil(try title(s.bob, after))
        XCTAssertEqual(try Circles(s.bob).list().first?.isMember, false)
        assertCovenError(.notInCircle) { try s.bob.write(sql: "UPDATE albums SET title = 'mine' WHERE id = '\(before)'") }
        // With every key Bob holds, the later section stays shut.
        let provider = try s.alice.connectStorage()
        var shut = 0
        for info in try provider.list(prefix: "changes/\(s.alice.deviceID)/") {
            let change = try s.bob.keys.open(change: try XCTUnwrap(try provider.getObject(info.key)), path: info.key, publisher: s.alice.deviceID)
            if change.sections.flatMap(\.entries).contains(where: { $0.id == after }) { XCTFail("bob opened the section holding '\(after)'") }
            shut += change.unreadSections.filter { $0.audience == s.circle }.count
        }
        XCTAssertEqual(shut, 1)
        XCTAssertEqual(try title(s.alice, after), "after")
    }

    /// A member removed from a circle keeps its record of the circle's file, but holds its
    /// bytes back from no one: once a member deletes the file, gc on a member's device deletes
    /// its bytes (the removed member's device applied the change, its section unread).
    func testARemovedMembersDevicesHoldNoCircleBytesBack() throws {
        let s = try threeMembers()
        let secret = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4c"
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(secret)', 'ours', '\(s.circle)')")
        let cover = try stageApp(s.alice, text: "our cover")
        let file = try s.alice.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(secret)', coven_put_staged('\(cover.id)'))").files[0]
        try StoredFiles.store(s.alice, file: file)
        try syncAll(s)
        let object = try XCTUnwrap(try s.bob.fileRecord(file)).coordinates.object
        _ = try Circles(s.alice).remove(s.circle, member: "bob")
        try s.alice.write(sql: "DELETE FROM covers WHERE file = '\(file)'")
        try syncAll(s)
        XCTAssertNotNil(try s.bob.fileRecord(file), "the removed member keeps its record")
        // Every device publishes a frontier past the delete.
        for device in [s.bob, s.carol] { try device.write(sql: "INSERT INTO settings (id, value) VALUES ('\(device.deviceName)', 'x')") }
        try syncAll(s)
        let gc = try collectGarbageByProof(s.alice)
        XCTAssertEqual(gc.deleted.filter { $0.kind == .file }.map(\.key), [object])
        XCTAssertNil(try s.alice.connectStorage().head(object))
    }

    /// gc leaves bytes alone while this device applied sections it could not read.
    func testGCKeepsBytesWhileSectionsAreUnread() throws {
        let s = try threeMembers()
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store')")
        try syncAll(s)
        let cover = try stageApp(s.carol, text: "carol's cover")
        let file = try s.carol.write(sql: "INSERT INTO covers (id, album_id, file) VALUES ('\(Self.album)', '\(Self.album)', coven_put_staged('\(cover.id)'))").files
        _ = file
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES (coven_uuid7(), 'ours', '\(s.circle)')")
        try syncAll(s)
        try StoredFiles.store(s.carol, file: file[0])
        try syncAll(s)
        try s.carol.write(sql: "DELETE FROM covers WHERE id = '\(Self.album)'")
        try syncAll(s)
        let report = try collectGarbageByProof(s.carol)
        XCTAssertEqual(report.deleted.filter { $0.kind == .file }, [])
        XCTAssertEqual(report.kept.map(\.reason), [.unreadSections])
    }
}

/// The same on S3 (moto).
final class CirclesS3Tests: CirclesTests {
    override class var s3Server: S3TestServer.Kind? { .moto }
    override func testACirclesRowsAndFilesReachItsMembersOnly() throws { try super.testACirclesRowsAndFilesReachItsMembersOnly() }
    override func testAChangeBeforeItsKeyGenerationWaitsAndAppliesOnceTheKeyArrives() throws {
        try super.testAChangeBeforeItsKeyGenerationWaitsAndAppliesOnceTheKeyArrives()
    }
}

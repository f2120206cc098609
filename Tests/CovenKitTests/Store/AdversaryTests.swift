@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// docs/security.md's "refuses" and "detects" lines, each acted out by the party it names
/// (``Adversary``): a removed member with a saved device folder, and anyone who can write to
/// storage. On `file://` here, on moto below.
class AdversaryTests: DeviceTestCase {
    /// alice (owner), bob and carol, a device each, synced; circle `parents` of alice and bob.
    struct Store {
        var alice: Device, bob: Device, carol: Device
        var circle: String
        var all: [Device] { [alice, bob, carol] }
    }

    func store() throws -> Store {
        let alice = try makeDevice(name: "alice")
        let bob = try MemberIdentity(), carol = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bob.recipient.description, admin: false)
        _ = try Members(alice).add(name: "carol", recipient: carol.recipient.description, admin: false)
        let s = Store(alice: alice, bob: try join("bob", from: alice, identity: bob), carol: try join("carol", from: alice, identity: carol),
                      circle: try Circles(alice).create(name: "parents", members: ["bob"]).circle.id)
        try sync(s.all)
        return s
    }

    func sync(_ devices: [Device]) throws {
        for _ in 0..<2 { for device in devices { _ = try StoreSync(device).sync() } }
    }

    func title(_ device: Device, _ id: String) throws -> String? {
        try device.database.scalar("SELECT title FROM albums WHERE id = ?1", [id]).textValue
    }

    static let second = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f42"
    static let third = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f43"

    // MARK: - A removed member with a saved device folder

    /// bob's saved keys open what was published before his removal, and nothing written after
    /// it: no change (envelope or section), file object, snapshot or part, key generation;
    /// only the registry (sealed under generation 1, docs/format.md 10.3).
    func testARemovedMembersSavedKeysOpenNothingWrittenAfter() throws {
        let s = try store()
        try s.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'before', '\(s.circle)')")
        try sync(s.all)
        let saved = try Adversary.save(s.bob, to: work + "/saved-bob")
        let adversary = Adversary(provider: try s.alice.connectStorage())
        let before = try adversary.copy()
        _ = try Members(s.alice).remove("bob")
        // After: a store row, a circle row with a stored cover, a snapshot with the circle's part.
        let cover = try stageApp(s.alice, text: "after bob")
        let written = try s.alice.write(sql: """
            INSERT INTO albums (id, title) VALUES ('\(Self.second)', 'after, store');
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.third)', 'after, circle', '\(s.circle)');
            INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(Self.third)', coven_put_staged('\(cover.id)'));
            """)
        try StoredFiles.store(s.alice, file: written.files[0])
        try sync([s.alice, s.carol])
        _ = try Snapshots(s.alice).snapshot()
        let after = try adversary.copy()
        let keys = try Adversary.keys(of: saved)
        let identity = try Members(saved).identity()
        let publicKey = { (device: String) in try s.alice.keys.publicKey(of: device) }
        // Given the envelope's key too (the store's newest: a stronger adversary), the sections.
        let envelope = { (generation: UInt64) in try s.alice.keys.key(audience: RowAudiences.store, generation: generation) }
        let opens = { (path: String, bytes: [UInt8]) in
            Adversary.opens(path, bytes, keys: keys, identity: identity, store: s.alice.storeID, publicKey: publicKey, envelope: envelope)
        }
        // The adversary is able: what was there before opens.
        XCTAssertTrue(before.contains { $0.key.hasPrefix("changes/") && opens($0.key, $0.value) }, "a change from before the removal")
        var kinds: Set<String> = []
        for (path, bytes) in after.sorted(by: { $0.key < $1.key }) where before[path] != bytes {
            let kind = String(path.prefix { $0 != "/" && $0 != "-" })
            kinds.insert(kind)
            if path.hasPrefix("devices/") { continue }
            XCTAssertFalse(opens(path, bytes), "bob's saved keys open '\(path)', written after his removal")
        }
        XCTAssertTrue(kinds.isSuperset(of: ["audiences", "changes", "files", "snapshots"]), "\(kinds)")
    }

    /// bob's saved device publishes around every check of its own (gone, removed): the others
    /// apply nothing of it, written through coven or straight into its SQLite file.
    func testARemovedMembersSavedDevicePublishesNothingTheOthersApply() throws {
        let s = try store()
        try s.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'ours')")
        try sync(s.all)
        let saved = try Adversary.save(s.bob, to: work + "/saved-bob")
        _ = try Members(s.alice).remove("bob")
        try sync([s.alice, s.carol])
        assertCovenError(.deviceGone) { try StoreSync(saved).sync() }
        // Around coven: a row written into the database, then recorded by coven's own write.
        try saved.database.run("UPDATE albums SET title = 'bob was here, directly' WHERE id = ?1", [Self.album])
        try saved.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.second)', 'bob was here')")
        _ = try StoreSync(saved, storage: try saved.connectStorage()).push(checkHistory: false)
        XCTAssertFalse(try saved.connectStorage().list(prefix: "changes/\(saved.deviceID)/").isEmpty)
        for device in [s.alice, s.carol] {
            _ = try StoreSync(device).sync()
            XCTAssertEqual(try title(device, Self.album), "ours", device.deviceName)
            XCTAssertNil(try title(device, Self.second), device.deviceName)
        }
    }

    /// bob's saved device cannot put himself back: a key generation it signs is `integrity`,
    /// and a removal mark it signs for carol's device is not honoured.
    func testARemovedMemberCannotReAddThemselvesOrRemoveOthers() throws {
        let s = try store()
        let saved = try Adversary.save(s.bob, to: work + "/saved-bob")
        _ = try Members(s.alice).remove("bob")
        try sync([s.alice, s.carol])
        let provider = try saved.connectStorage()
        // The generation bob saved (3, whose roster holds him) put back at the next number, 5.
        let forged = AudienceGeneration.path(audience: RowAudiences.store, generation: 5)
        try Adversary(provider: provider).replay(AudienceGeneration.path(audience: RowAudiences.store, generation: 3), at: forged)
        let refused = assertCovenError(.integrity) { try StoreSync(s.carol).sync() }
        XCTAssertEqual(refused?.details["object"], forged)
        try provider.delete(forged)
        // A removal mark of carol's device, signed by bob's saved device.
        let mark = GoneMark(device: s.carol.deviceID, goneAt: "2026-12-01T00:00:00Z", removedBy: saved.deviceID)
        _ = try provider.putIfAbsent(Device.registryEntryKey(s.carol.deviceID) + Device.goneSuffix, data: try mark.seal(keys: saved.keys, store: saved.storeID))
        let report = try StoreSync(s.alice).sync()
        XCTAssertNotNil(report.pulled.refusedRemovals[s.carol.deviceID])
        XCTAssertNil(try StoreSync(s.carol).removedAt())
        try s.carol.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'carol stays')")
        try sync([s.carol, s.alice])
        XCTAssertEqual(try title(s.alice, Self.album), "carol stays")
        // bob's old registry entry put back under a new device's name: it authenticates for
        // its own path only, and no device takes it.
        let fake = Identifier.uuid4()
        try Adversary(provider: provider).replay(Device.registryEntryKey(s.bob.deviceID), at: Device.registryEntryKey(fake))
        _ = try StoreSync(s.alice).sync()
        XCTAssertNil(try s.alice.database.queryOne("SELECT device FROM coven_device_registry WHERE device = ?1", [fake]))
        try s.carol.write(sql: "UPDATE albums SET title = 'carol syncs on' WHERE id = '\(Self.album)'")
        try sync([s.carol, s.alice])
        XCTAssertEqual(try title(s.alice, Self.album), "carol syncs on")
    }

    // MARK: - Anyone who can write to storage

    /// An old change copied to the next seq path of its device is damaged (its path is
    /// signed): nothing of it is applied twice, and the stream waits.
    func testAChangeReplayedAtANewSeqIsRefused() throws {
        let s = try store()
        try s.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'first')")
        try sync(s.all)
        try s.bob.write(sql: "UPDATE albums SET title = 'bob' WHERE id = '\(Self.album)'")
        try sync(s.all)
        let adversary = Adversary(provider: try s.alice.connectStorage())
        let published = try adversary.provider.list(prefix: "changes/\(s.alice.deviceID)/").map(\.key).sorted()
        let first = try XCTUnwrap(published.first), next = ChangeObject.path(device: s.alice.deviceID, seq: UInt64(published.count + 1))
        try adversary.replay(first, at: next)
        let report = try StoreSync(s.carol).sync()
        XCTAssertEqual(report.pulled.damaged[s.alice.deviceID]?.seq, Int64(published.count + 1))
        XCTAssertEqual(try title(s.carol, Self.album), "bob", "the replay applied nothing")
        // alice's next change meets the replay at its path: her sync stops, naming it (not
        // signed by her: no copy of her device made it), until a person deletes it.
        try s.alice.write(sql: "UPDATE albums SET title = 'alice again' WHERE id = '\(Self.album)'")
        let stopped = assertCovenError(.deviceConflict) { try StoreSync(s.alice).sync() }
        XCTAssertTrue(stopped?.message.contains(next) ?? false, stopped?.message ?? "")
        XCTAssertTrue(stopped?.message.contains("not signed by its device") ?? false, stopped?.message ?? "")
        try adversary.provider.delete(next)
        try sync([s.alice, s.carol])
        XCTAssertEqual(try title(s.carol, Self.album), "alice again")
    }

    /// Storage rolled back whole (a NAS put back from a backup) after a member was added and
    /// rows written: a device that read past the copy stops with `integrity` naming the key
    /// generation storage lost, and builds nothing on the shorter chain.
    func testAWholeStoreRolledBackIsNamed() throws {
        let s = try store()
        let adversary = Adversary(provider: try s.alice.connectStorage())
        let copy = try adversary.copy()
        _ = try Members(s.alice).add(name: "dave", recipient: try MemberIdentity().recipient.description, admin: false)
        try s.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'after the copy')")
        try sync(s.all)
        try adversary.rollBack(to: copy)
        for device in s.all {
            let refused = assertCovenError(.integrity) { try StoreSync(device).sync() }
            XCTAssertEqual(refused?.details["object"], AudienceGeneration.path(audience: RowAudiences.store, generation: 4), device.deviceName)
            XCTAssertEqual(try title(device, Self.album), "after the copy", "nothing read is forgotten")
        }
    }

    /// One prefix rolled back at a time: `changes/<alice>/` (a gap, named, published again
    /// by alice), `audiences/` (`integrity`), `devices/` (a removal is kept).
    func testPrefixesRolledBackAreNamedOrRefused() throws {
        let s = try store()
        let adversary = Adversary(provider: try s.alice.connectStorage())
        // changes/<alice>/: carol applied two changes storage then loses; bob had not.
        let changes = "changes/\(s.alice.deviceID)/"
        let copy = try adversary.copy(prefix: changes)
        try s.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'lost by storage')")
        _ = try StoreSync(s.alice).sync()
        try s.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.second)', 'lost too')")
        _ = try StoreSync(s.alice).sync()
        _ = try StoreSync(s.carol).sync()
        try s.carol.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.third)', 'carol saw them')")
        _ = try StoreSync(s.carol).sync()
        try adversary.rollBack(to: copy, prefix: changes)
        let gap = try StoreSync(s.bob).sync()
        XCTAssertNotNil(gap.pulled.gaps[s.alice.deviceID], "\(gap.pulled)")
        XCTAssertNil(try title(s.bob, Self.album))
        try sync([s.alice, s.bob])
        XCTAssertEqual(try title(s.bob, Self.album), "lost by storage", "alice published them again")
        XCTAssertEqual(try title(s.bob, Self.second), "lost too")
        // audiences/: a circle's generation lost.
        let audiences = try adversary.copy(prefix: "audiences/")
        _ = try Circles(s.alice).add(s.circle, member: "carol")
        try sync(s.all)
        let whole = try adversary.copy(prefix: "audiences/")
        try adversary.rollBack(to: audiences, prefix: "audiences/")
        assertCovenError(.integrity) { try Circles(s.alice).rotate(s.circle) }
        assertCovenError(.integrity) { try StoreSync(s.carol).sync() }
        try adversary.rollBack(to: whole, prefix: "audiences/")
        // devices/: bob's removal marks lost after carol read them.
        let devices = try adversary.copy(prefix: "devices/")
        let saved = try Adversary.save(s.bob, to: work + "/saved-bob")
        _ = try Members(s.alice).remove("bob")
        try sync([s.alice, s.carol])
        try adversary.rollBack(to: devices, prefix: "devices/")
        _ = try StoreSync(s.carol).sync()
        let gone = try s.carol.database.scalar("SELECT gone FROM coven_device_registry WHERE device = ?1", [s.bob.deviceID]).intValue
        XCTAssertEqual(gone, 1, "carol keeps bob's device gone")
        assertCovenError(.deviceGone) { try StoreSync(saved).sync() }
    }
}

/// The same adversaries against a real S3 server (moto, signature-checking).
final class AdversaryS3Tests: AdversaryTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery lists a class's own methods: these run the inherited ones here.
    override func testARemovedMembersSavedKeysOpenNothingWrittenAfter() throws { try super.testARemovedMembersSavedKeysOpenNothingWrittenAfter() }
    override func testARemovedMembersSavedDevicePublishesNothingTheOthersApply() throws { try super.testARemovedMembersSavedDevicePublishesNothingTheOthersApply() }
    override func testARemovedMemberCannotReAddThemselvesOrRemoveOthers() throws { try super.testARemovedMemberCannotReAddThemselvesOrRemoveOthers() }
    override func testAChangeReplayedAtANewSeqIsRefused() throws { try super.testAChangeReplayedAtANewSeqIsRefused() }
    override func testAWholeStoreRolledBackIsNamed() throws { try super.testAWholeStoreRolledBackIsNamed() }
    override func testPrefixesRolledBackAreNamedOrRefused() throws { try super.testPrefixesRolledBackAreNamedOrRefused() }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A store becomes one of members: its first member, the owner, whose keys this device keeps.
class MembersTests: DeviceTestCase {
    static let otherAlbum = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"

    func testTheFirstMemberOwnsTheStoreAndReadsItsRoster() throws {
        let device = try makeDevice(name: "laptop", kind: .noMember)
        let members = Members(device)
        XCTAssertNil(try members.memberID())
        assertCovenError(.invalidState) { try members.roster() }
        let identity = try members.establish(name: "alice")
        let id = try XCTUnwrap(try members.memberID())
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: device.paths.memberIdentity)[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let roster = try members.roster()
        XCTAssertEqual(roster.generation, 1)
        XCTAssertEqual(roster.members, [Members.Member(id: id, name: "alice", role: "owner", recipient: identity.recipient.description, isThisDevicesMember: true, devices: 1)])
        // Generation 1 is the store key: every device that holds it reads it.
        let provider = try device.connectStorage()
        let path = AudienceGeneration.path(audience: "store", generation: 1)
        let opened = try AudienceGeneration.open(try XCTUnwrap(try provider.getObject(path)), path: path, store: device.storeID,
                                                 key: try device.keys.storeKeyBytes(), signerKey: { _ in try device.keys.signingKey().publicKey })
        XCTAssertEqual(opened.generation.roster.map(\.name), ["alice"])
        // The device's entry is vouched for by its member.
        let entry = try DeviceEntry.open(try XCTUnwrap(try provider.getObject(Device.registryEntryKey(device.deviceID))), path: Device.registryEntryKey(device.deviceID), keys: device.keys)
        XCTAssertEqual(entry.member, id)
        XCTAssertNoThrow(try entry.checkCertification(store: device.storeID, recipient: identity.recipient))
        // The identity exported opens the same member; never over a file.
        let exported = work + "/alice.identity"
        try members.export(to: exported)
        XCTAssertEqual(try MemberIdentity(contentsOf: exported).recipient, identity.recipient)
        assertCovenError(.exists) { try members.export(to: exported) }
        // A second establish is refused; a new device joins as a member, not with the key.
        assertCovenError(.exists) { try members.establish(name: "alice") }
        assertCovenError(.usage) {
            try DeviceSetup.join(paths: DevicePaths(database: work + "/keyed/device.db"), storage: device.storage, storeKey: try device.keys.storeKeyBytes(),
                            name: "keyed", environment: s3?.environment)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/keyed/device.db"))
        let other = try join("desktop", from: device, identity: identity)
        XCTAssertEqual(try Members(other).memberID(), id)
        assertCovenError(.exists) { try Members(other).establish(name: "mallory") }
        assertCovenError(.usage) { try Members(other).establish(name: " ") }
        // Sync goes on as before.
        try device.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road')")
        _ = try StoreSync(device).sync()
        _ = try StoreSync(other).sync()
        XCTAssertEqual(try other.database.scalar("SELECT title FROM albums").textValue, "Abbey Road")
    }

    /// Killed after generation 1 was published, before the member was recorded here: the next
    /// run finishes with the same member; another device's identity does not take it over.
    func testAnEstablishmentKilledAfterPublishingIsFinishedByTheNextRun() throws {
        let device = try makeDevice(name: "laptop", kind: .noMember)
        let identity = try Members(device).establish(name: "alice")
        let id = try XCTUnwrap(try Members(device).memberID())
        try device.setSetting(Members.memberSetting, nil)
        let again = try Members(device).establish(name: "alice")
        XCTAssertEqual(again.recipient, identity.recipient)
        XCTAssertEqual(try Members(device).memberID(), id)
        XCTAssertEqual(try Members(device).roster().members.map(\.id), [id])
        // A device of the store (made before members) that holds another identity is refused.
        try device.setSetting(Members.memberSetting, nil)
        try FileManager.default.removeItem(atPath: device.paths.memberIdentity)
        try MemberIdentity().write(to: device.paths.memberIdentity)
        assertCovenError(.exists) { try Members(device).establish(name: "mallory") }
        XCTAssertNil(try Members(device).memberID())
    }

    /// Two admins add a member each at the same time, on two devices: one chain, both members
    /// on its newest roster, every device reading the same.
    func testTwoAdminsAddingAtOnceMakeOneChainWithBoth() throws {
        let laptop = try makeDevice(name: "laptop")
        let carol = try MemberIdentity()
        _ = try Members(laptop).add(name: "carol", recipient: carol.recipient.description, admin: true)
        let carolDevice = try join("carol", from: laptop, identity: carol)
        let dave = try MemberIdentity(), erin = try MemberIdentity()
        let work: [(Device, String, MemberIdentity)] = [(laptop, "dave", dave), (carolDevice, "erin", erin)]
        let box = UncheckedSendable(work)
        let errors = UncheckedSendable(NSMutableArray())
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let (device, name, identity) = box.value[index]
            do { _ = try Members(device).add(name: name, recipient: identity.recipient.description, admin: false) } catch { errors.value.add("\(error)") }
        }
        XCTAssertEqual(errors.value.count, 0, "\(errors.value)")
        let provider = try laptop.connectStorage()
        XCTAssertEqual(try provider.list(prefix: "audiences/store/").count, 4)
        for device in [laptop, carolDevice] {
            XCTAssertEqual(Set(try Members(device).roster().members.map(\.name)), ["alice", "carol", "dave", "erin"])
        }
        _ = try join("dave", from: laptop, identity: dave)
        _ = try join("erin", from: laptop, identity: erin)
    }

    /// A member replaces its keys: its other device, vouched for by the old key, is gone for
    /// good and cannot read what follows; the others read on; a rerun after a kill goes on with
    /// the same new identity.
    func testRekeyLeavesTheMembersOtherDevicesOut() throws {
        let laptop = try makeDevice(name: "laptop")
        let alice = try ownerIdentity(laptop)
        let bob = try MemberIdentity()
        _ = try Members(laptop).add(name: "bob", recipient: bob.recipient.description, admin: false)
        let phone = try join("phone", from: laptop, identity: alice)
        let bobLaptop = try join("bob-laptop", from: laptop, identity: bob)
        // Killed after it kept the new identity aside: the rerun uses that one.
        let aside = try MemberIdentity()
        try aside.write(to: laptop.paths.memberIdentity + ".next")
        let (identity, change) = try Members(laptop).rekey()
        XCTAssertEqual(identity.recipient, aside.recipient)
        XCTAssertNotEqual(identity.recipient, alice.recipient)
        XCTAssertEqual(change.generation, 3)
        XCTAssertEqual(change.devicesGone, [phone.deviceID])
        XCTAssertEqual(try MemberIdentity(contentsOf: laptop.paths.memberIdentity).recipient, identity.recipient)
        XCTAssertFalse(FileManager.default.fileExists(atPath: laptop.paths.memberIdentity + ".next"))
        XCTAssertEqual(try Members(laptop).roster().members.first { $0.name == "alice" }?.recipient, identity.recipient.description)
        try laptop.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'after the rekey')")
        _ = try StoreSync(laptop).sync()
        _ = try StoreSync(bobLaptop).sync()
        XCTAssertEqual(try bobLaptop.database.scalar("SELECT title FROM albums").textValue, "after the rekey")
        assertCovenError(.deviceGone) { try StoreSync(phone).sync() }
        // The old identity joins nothing any more; the new one does.
        XCTAssertThrowsError(try join("old", from: laptop, identity: alice))
        let tablet = try join("tablet", from: laptop, identity: identity)
        _ = try StoreSync(tablet).sync()
        XCTAssertEqual(try tablet.database.scalar("SELECT title FROM albums").textValue, "after the rekey")
    }

    /// A device that never saw the device that rekeyed its member (which joined after its last
    /// sync, and whose entry only the new key vouches for) learns it is left out: device_gone,
    /// not a forged generation.
    func testADeviceThatNeverSawTheRekeyingDeviceIsGoneNotRefusingTheChain() throws {
        let laptop = try makeDevice(name: "laptop")
        let alice = try ownerIdentity(laptop)
        let phone = try join("phone", from: laptop, identity: alice)
        _ = try StoreSync(phone).sync()
        let desk = try join("desk", from: laptop, identity: alice)
        let (_, change) = try Members(desk).rekey()
        XCTAssertEqual(Set(change.devicesGone), [laptop.deviceID, phone.deviceID])
        assertCovenError(.deviceGone) { try StoreSync(phone).sync() }
        assertCovenError(.deviceGone) { try StoreSync(laptop).sync() }
    }

    /// A removed member's device that never saw the admin's device that removed it, until that
    /// admin replaced their keys (its entry vouched for by a key this device never saw), learns
    /// it is gone too.
    func testARemovedDeviceLearnsItIsGoneAfterItsRemoverRekeyed() throws {
        let laptop = try makeDevice(name: "laptop")
        let bob = try MemberIdentity(), carol = try MemberIdentity()
        _ = try Members(laptop).add(name: "bob", recipient: bob.recipient.description, admin: false)
        let bobLaptop = try join("bob-laptop", from: laptop, identity: bob)
        _ = try StoreSync(bobLaptop).sync()
        _ = try Members(laptop).add(name: "carol", recipient: carol.recipient.description, admin: true)
        let carolLaptop = try join("carol-laptop", from: laptop, identity: carol)
        _ = try Members(carolLaptop).remove("bob")
        _ = try Members(carolLaptop).rekey()
        assertCovenError(.deviceGone) { try StoreSync(bobLaptop).sync() }
    }

    /// A store made before members, with two devices: the first's establishment vouches for
    /// both (the owner holds every existing device); the second reads new generations once it
    /// adopts the owner's identity, and its changes are the owner's all along.
    func testAStoreMadeBeforeMembersMigratesWithEveryDeviceTheOwners() throws {
        let first = try makeDevice(name: "laptop", kind: .noMember)
        let second = try join("desktop", from: first)
        try second.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'before')")
        _ = try StoreSync(second).sync()
        let owner = try Members(first).establish(name: "alice")
        let bob = try MemberIdentity()
        _ = try Members(first).add(name: "bob", recipient: bob.recipient.description, admin: false)
        // The second device still writes (format 1, under generation 1, as the owner's), and
        // the first applies it; it cannot read generation 2 until it takes the identity.
        try second.write(sql: "UPDATE albums SET title = 'still the owner''s' WHERE id = '\(Self.album)'")
        _ = try StoreSync(second).sync()
        _ = try StoreSync(first).sync()
        XCTAssertEqual(try first.database.scalar("SELECT title FROM albums").textValue, "still the owner's")
        try first.write(sql: "UPDATE albums SET title = 'generation 2' WHERE id = '\(Self.album)'")
        _ = try StoreSync(first).sync()
        let waiting = try StoreSync(second).sync()
        XCTAssertEqual(waiting.pulled.keyUnavailable[first.deviceID], 1)
        let exported = work + "/alice.identity"
        try Members(first).export(to: exported)
        XCTAssertEqual(try Members(second).adopt(identityAt: exported).recipient, owner.recipient.description)
        _ = try StoreSync(second).sync()
        XCTAssertEqual(try second.database.scalar("SELECT title FROM albums").textValue, "generation 2")
        XCTAssertEqual(try Members(second).roster().members.map(\.name), ["alice", "bob"])
        assertCovenError(.exists) { try Members(second).adopt(identityAt: exported) }
    }

    /// Two members with two devices each: add, join by identity, write and read both ways;
    /// the rules of who may change the roster; then removal: the removed member's devices are
    /// refused and cannot open what is published after, with every key they held.
    func testMembersAddJoinWriteAndRemove() throws {
        let laptop = try makeDevice(name: "laptop")
        let alice = try ownerIdentity(laptop)
        let bob = try MemberIdentity()
        let added = try Members(laptop).add(name: "bob", recipient: bob.recipient.description, admin: false)
        XCTAssertEqual(added.generation, 2)
        XCTAssertEqual(added.member.role, "member")
        let phone = try join("phone", from: laptop, identity: alice)
        let bobLaptop = try join("bob-laptop", from: laptop, identity: bob)
        let bobPhone = try join("bob-phone", from: laptop, identity: bob)
        XCTAssertEqual(try Members(bobPhone).memberID(), added.member.id)
        // Bad input changes nothing.
        assertCovenError(.usage) { try Members(laptop).add(name: "carol", recipient: "coven1notarecipient", admin: false) }
        assertCovenError(.refused) { try Members(laptop).add(name: "bobby", recipient: bob.recipient.description, admin: false) }
        assertCovenError(.exists) { try Members(laptop).add(name: "bob", recipient: try MemberIdentity().recipient.description, admin: false) }
        assertCovenError(.notAdmin) { try Members(bobLaptop).add(name: "carol", recipient: try MemberIdentity().recipient.description, admin: false) }
        assertCovenError(.notAdmin) { try Members(bobLaptop).remove("alice") }
        assertCovenError(.notFound) { try Members(laptop).remove("nobody") }
        assertCovenError(.refused) { try Members(laptop).remove("alice") }
        XCTAssertEqual(try Members(laptop).roster().generation, 2)
        // Both ways, every device.
        try laptop.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'alice''s')")
        try bobPhone.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.otherAlbum)', 'bob''s')")
        for device in [laptop, bobPhone, phone, bobLaptop, laptop] { _ = try StoreSync(device).sync() }
        for device in [laptop, phone, bobLaptop, bobPhone] {
            XCTAssertEqual(try device.database.query("SELECT title FROM albums ORDER BY title").compactMap { $0.string("title") }, ["alice's", "bob's"])
        }
        // Carol, an admin, may remove bob; not the owner.
        let carol = try MemberIdentity()
        _ = try Members(laptop).add(name: "carol", recipient: carol.recipient.description, admin: true)
        let carolDevice = try join("carol", from: laptop, identity: carol)
        _ = try StoreSync(bobLaptop).sync()
        assertCovenError(.refused) { try Members(carolDevice).remove("alice") }
        let keysBefore = try XCTUnwrap(FileManager.default.contents(atPath: bobLaptop.paths.audienceKeys))
        let removed = try Members(carolDevice).remove("bob")
        XCTAssertEqual(removed.generation, 4)
        XCTAssertEqual(Set(removed.devicesGone), [bobLaptop.deviceID, bobPhone.deviceID])
        XCTAssertEqual(removed.objectsWritten, 3)
        // What alice writes now reaches everyone but bob.
        try laptop.write(sql: "UPDATE albums SET title = 'after' WHERE id = '\(Self.album)'")
        _ = try StoreSync(laptop).sync()
        assertCovenError(.deviceGone) { try StoreSync(bobLaptop).sync() }
        _ = try StoreSync(phone).sync()
        XCTAssertEqual(try phone.database.scalar("SELECT title FROM albums WHERE id = '\(Self.album)'").textValue, "after")
        XCTAssertEqual(try bobLaptop.database.scalar("SELECT title FROM albums WHERE id = '\(Self.album)'").textValue, "alice's")
        // Bob's device, with every key it ever held, cannot open alice's change after removal.
        XCTAssertEqual(FileManager.default.contents(atPath: bobLaptop.paths.audienceKeys), keysBefore)
        let provider = try laptop.connectStorage()
        let path = try XCTUnwrap(try provider.list(prefix: "changes/\(laptop.deviceID)/").map(\.key).max())
        let bytes = try XCTUnwrap(try provider.getObject(path))
        XCTAssertEqual(ChangeObject.storeGeneration(of: bytes), 4)
        let bobKeys = Keyring(paths: bobLaptop.paths, database: bobLaptop.database, deviceID: bobLaptop.deviceID)
        assertCovenError(.keyUnavailable) { _ = try bobKeys.open(change: bytes, path: path, publisher: laptop.deviceID) }
        for generation in 1...3 {
            let key = try XCTUnwrap(try bobKeys.key(audience: "store", generation: UInt64(generation)))
            XCTAssertThrowsError(try ChangeObject.open(bytes, path: path, keyOf: { _, _ in key }, publicKey: try laptop.keys.signingKey().publicKey))
        }
        // Nor a snapshot made after: it is sealed under generation 4, which alice's other
        // device reads and a device joining later starts from.
        let snapshot = try Snapshots(laptop).snapshot()
        let info = try XCTUnwrap(try provider.list(prefix: "snapshots/").first { $0.key == snapshot.key })
        assertCovenError(.integrity) { _ = try DeviceSetup.peekManifest(provider: provider, info: info, keys: bobKeys) }
        XCTAssertEqual(try DeviceSetup.peekManifest(provider: provider, info: info, keys: phone.keys), snapshot.manifest)
        var joined = SnapshotJoin()
        let tablet = try join("tablet", from: laptop, identity: alice, started: { joined = $0 })
        XCTAssertEqual(joined.key, snapshot.key)
        _ = try StoreSync(tablet).sync()
        XCTAssertEqual(try tablet.database.scalar("SELECT title FROM albums WHERE id = '\(Self.album)'").textValue, "after")
    }

    /// Who may take a member's device out of the store: an admin's device or one of its own
    /// member's. A mark made anyway, or naming another remover than its signer, is not honoured
    /// (the device stays, syncs, and sync reports the mark).
    func testOnlyAnAdminOrItsOwnMemberRemovesAMembersDevice() throws {
        let laptop = try makeDevice(name: "laptop")
        let alice = try ownerIdentity(laptop)
        let bob = try MemberIdentity(), carol = try MemberIdentity()
        _ = try Members(laptop).add(name: "bob", recipient: bob.recipient.description, admin: false)
        _ = try Members(laptop).add(name: "carol", recipient: carol.recipient.description, admin: true)
        let phone = try join("phone", from: laptop, identity: alice)
        let bobLaptop = try join("bob-laptop", from: laptop, identity: bob)
        let bobPhone = try join("bob-phone", from: laptop, identity: bob)
        let carolDevice = try join("carol", from: laptop, identity: carol)
        for device in [laptop, phone, bobLaptop, bobPhone, carolDevice] { _ = try StoreSync(device).sync() }
        let provider = try laptop.connectStorage()
        func mark(_ device: Device) -> String { Device.registryEntryKey(device.deviceID) + Device.goneSuffix }
        func isGone(_ device: Device, on reader: Device) throws -> Bool {
            try XCTUnwrap(try StoreSync(reader).devices().first { $0.id == device.deviceID }).gone
        }
        // Bob may not remove alice's phone: refused, nothing published.
        assertCovenError(.notAdmin) { try StoreSync(bobLaptop).removeDevice(phone.deviceID) }
        XCTAssertNil(try provider.head(mark(phone)))
        // A mark he makes anyway is not honoured: the phone stays, and syncs.
        let forged = GoneMark(device: phone.deviceID, goneAt: Timestamp.iso8601(Date()), removedBy: bobLaptop.deviceID)
        XCTAssertTrue(try provider.putIfAbsent(mark(phone), data: try forged.seal(keys: bobLaptop.keys, store: bobLaptop.storeID)))
        // Nor one that names alice's laptop, an admin's device, as its remover but is signed by his.
        let lying = GoneMark(device: carolDevice.deviceID, goneAt: Timestamp.iso8601(Date()), removedBy: laptop.deviceID)
        XCTAssertTrue(try provider.putIfAbsent(mark(carolDevice), data: try lying.seal(keys: bobLaptop.keys, store: bobLaptop.storeID,
                                                                                       signer: try bobLaptop.keys.signingKey())))
        let report = try StoreSync(laptop).sync()
        XCTAssertEqual(Set(report.pulled.refusedRemovals.keys), [phone.deviceID, carolDevice.deviceID])
        XCTAssertTrue(report.pulled.refusedRemovals[phone.deviceID]?.contains("not an admin") ?? false, "\(report.pulled.refusedRemovals)")
        XCTAssertTrue(report.pulled.refusedRemovals[carolDevice.deviceID]?.contains("not signed by the device it names") ?? false)
        XCTAssertFalse(try isGone(phone, on: laptop))
        XCTAssertFalse(try isGone(carolDevice, on: laptop))
        _ = try StoreSync(phone).sync()
        // Bob removes his own phone: honoured everywhere.
        _ = try StoreSync(bobLaptop).removeDevice(bobPhone.deviceID)
        _ = try StoreSync(laptop).sync()
        XCTAssertTrue(try isGone(bobPhone, on: laptop))
        // Carol, an admin, removes a device of bob's: honoured everywhere, as her removal of
        // bob's laptop's is when alice's laptop made it.
        _ = try StoreSync(carolDevice).sync()
        _ = try StoreSync(carolDevice).removeDevice(bobLaptop.deviceID)
        let after = try StoreSync(phone).sync()
        XCTAssertTrue(try isGone(bobLaptop, on: phone))
        XCTAssertTrue(try isGone(bobPhone, on: phone))
        XCTAssertEqual(Set(after.pulled.refusedRemovals.keys), [phone.deviceID, carolDevice.deviceID])
        assertCovenError(.deviceGone) { try StoreSync(bobLaptop).sync() }
    }
}

/// The same on S3 (moto, with SigV4 checked).
final class MembersS3Tests: MembersTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery lists a class's own methods: these run the inherited ones here.
    override func testMembersAddJoinWriteAndRemove() throws { try super.testMembersAddJoinWriteAndRemove() }
    override func testRekeyLeavesTheMembersOtherDevicesOut() throws { try super.testRekeyLeavesTheMembersOtherDevicesOut() }
    override func testTwoAdminsAddingAtOnceMakeOneChainWithBoth() throws { try super.testTwoAdminsAddingAtOnceMakeOneChainWithBoth() }
    override func testAStoreMadeBeforeMembersMigratesWithEveryDeviceTheOwners() throws { try super.testAStoreMadeBeforeMembersMigratesWithEveryDeviceTheOwners() }
    override func testOnlyAnAdminOrItsOwnMemberRemovesAMembersDevice() throws { try super.testOnlyAnAdminOrItsOwnMemberRemovesAMembersDevice() }
    override func testADeviceThatNeverSawTheRekeyingDeviceIsGoneNotRefusingTheChain() throws { try super.testADeviceThatNeverSawTheRekeyingDeviceIsGoneNotRefusingTheChain() }
    override func testARemovedDeviceLearnsItIsGoneAfterItsRemoverRekeyed() throws { try super.testARemovedDeviceLearnsItIsGoneAfterItsRemoverRekeyed() }
}

/// A value handed to concurrent work that touches it from one thread at a time.
struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

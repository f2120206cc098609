@testable import CovenKit
import Foundation
import XCTest

/// A store becomes one of members: its first member, the owner, whose keys this device keeps.
final class MembersTests: DeviceTestCase {
    func testTheFirstMemberOwnsTheStoreAndReadsItsRoster() throws {
        let device = try makeDevice(name: "laptop")
        let members = Members(device)
        XCTAssertNil(try members.memberID())
        assertCovenError(.invalidState) { try members.roster() }
        let identity = try members.establish(name: "alice")
        let id = try XCTUnwrap(try members.memberID())
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: device.paths.memberIdentity)[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let roster = try members.roster()
        XCTAssertEqual(roster.generation, 1)
        XCTAssertEqual(roster.members, [Members.Member(id: id, name: "alice", role: "owner", recipient: identity.recipient.description, isThisDevicesMember: true)])
        // Generation 1 is the store key: every device that holds it reads it.
        let provider = try StorageConnector(location: device.storage).connect()
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
        // A second establish, here or on another device of the store, is refused.
        assertCovenError(.exists) { try members.establish(name: "alice") }
        let other = try join("desktop", from: device)
        XCTAssertEqual(assertCovenError(.exists) { try Members(other).establish(name: "mallory") }?.details["object"], path)
        XCTAssertFalse(FileManager.default.fileExists(atPath: other.paths.memberIdentity) && (try? Members(other).memberID()) != nil)
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
        let device = try makeDevice(name: "laptop")
        let identity = try Members(device).establish(name: "alice")
        let id = try XCTUnwrap(try Members(device).memberID())
        try device.setSetting(Members.memberSetting, nil)
        let again = try Members(device).establish(name: "alice")
        XCTAssertEqual(again.recipient, identity.recipient)
        XCTAssertEqual(try Members(device).memberID(), id)
        XCTAssertEqual(try Members(device).roster().members.map(\.id), [id])
        // A device that holds another identity is refused.
        let other = try join("desktop", from: device)
        try MemberIdentity().write(to: other.paths.memberIdentity)
        assertCovenError(.exists) { try Members(other).establish(name: "mallory") }
        XCTAssertNil(try Members(other).memberID())
    }
}

@testable import CovenKit
import Foundation
import XCTest

/// One chain of key generations per audience in real storage (file://), published
/// put-if-absent: concurrent admins end in one chain holding both their changes.
final class AudienceChainTests: XCTestCase {
    private var folder = ""
    private var provider: StorageProvider!
    private let store = "0193a9b2-0000-4000-8000-00000000000a"
    private let alice = try! MemberIdentity()
    private let bob = try! MemberIdentity()
    private let carol = try! MemberIdentity()
    private let dave = try! MemberIdentity()
    private let devices = ["alice-laptop": try! DeviceSigningKey(), "bob-phone": try! DeviceSigningKey(), "carol-pc": try! DeviceSigningKey()]
    private let members = ["alice-laptop": "m-alice", "bob-phone": "m-bob", "carol-pc": "m-carol"]

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "audience-chain-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        provider = try StorageConnector(location: .file(directory: folder)).connect()
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private var chain: AudienceChain {
        AudienceChain(provider: provider, store: store, audience: "store",
                      signerKey: { device in
                          guard let key = self.devices[device] else { throw CovenError(.notFound, "no device \(device)") }
                          return key.publicKey
                      },
                      memberOf: { device, _ in self.members[device] })
    }

    private func member(_ id: String, _ identity: MemberIdentity, _ role: AudienceGeneration.Role = .member) -> AudienceGeneration.Member {
        .init(id: id, name: String(id.dropFirst(2)), role: role, recipient: identity.recipient)
    }

    private func start() throws -> [UInt8] {
        let key = SecureRandom.bytes(32)
        XCTAssertTrue(try chain.publishFirst(roster: [member("m-alice", alice, .owner), member("m-bob", bob, .admin)], key: key,
                                             signer: "alice-laptop", signingKey: devices["alice-laptop"]!))
        return key
    }

    func testTwoAdminsPublishingAtOnceMakeOneChainHoldingBoth() throws {
        let storeKey = try start()
        XCTAssertFalse(try chain.publishFirst(roster: [member("m-bob", bob, .owner)], key: SecureRandom.bytes(32), signer: "bob-phone",
                                              signingKey: devices["bob-phone"]!), "generation 1 exists: a second is refused")
        // Both admins read generation 1; Alice publishes first.
        let seenByBob = try XCTUnwrap(try chain.read(identity: bob))
        XCTAssertEqual(seenByBob.newest?.generation.generation, 1)
        XCTAssertEqual(seenByBob.newest?.key, storeKey)
        _ = try chain.publishNext(identity: alice, signer: "alice-laptop", signingKey: devices["alice-laptop"]!) { $0 + [self.member("m-carol", self.carol)] }
        // Bob's change was built on generation 1: his put at 2 loses, and he builds on 2 at 3.
        var builtOn: [[String]] = []
        let bobs = try chain.publishNext(identity: bob, signer: "bob-phone", signingKey: devices["bob-phone"]!) { roster in
            builtOn.append(roster.map(\.id))
            return roster + [self.member("m-dave", self.dave)]
        }
        XCTAssertEqual(builtOn, [["m-alice", "m-bob", "m-carol"]])
        XCTAssertEqual(bobs.generation.generation, 3)
        XCTAssertEqual(try chain.generations(), [1, 2, 3])
        let seen = try XCTUnwrap(try chain.read(identity: dave))
        XCTAssertEqual(seen.newest?.generation.roster.map(\.id), ["m-alice", "m-bob", "m-carol", "m-dave"])
        XCTAssertEqual(seen.opened.first?.key, storeKey, "a newcomer reads every generation back to the first")
        XCTAssertEqual(seen.opened.count, 3)
    }

    func testARaceLostEveryTimeIsBusyAndWritesNothing() throws {
        _ = try start()
        var losses = 0
        // Another admin publishes just before each attempt: every put is refused.
        assertCovenError(.busy) {
            try chain.publishNext(identity: bob, signer: "bob-phone", signingKey: devices["bob-phone"]!, attempts: 3) { roster in
                losses += 1
                _ = try self.chain.publishNext(identity: self.alice, signer: "alice-laptop", signingKey: self.devices["alice-laptop"]!) { $0 }
                return roster + [self.member("m-dave", self.dave)]
            }
        }
        XCTAssertEqual(losses, 3)
        XCTAssertEqual(try chain.generations(), [1, 2, 3, 4])
        XCTAssertFalse(try chain.read(identity: alice)!.newest!.generation.roster.contains { $0.id == "m-dave" }, "nothing of the lost change was written")
    }

    func testARemovedMemberReadsUpToItsRemovalAndAForgedLinkIsRefused() throws {
        _ = try start()
        _ = try chain.publishNext(identity: alice, signer: "alice-laptop", signingKey: devices["alice-laptop"]!) { $0 + [self.member("m-carol", self.carol)] }
        _ = try chain.publishNext(identity: alice, signer: "alice-laptop", signingKey: devices["alice-laptop"]!) { $0.filter { $0.id != "m-carol" } }
        let carols = try XCTUnwrap(try chain.read(identity: carol))
        XCTAssertEqual(carols.newest?.generation.generation, 2)
        XCTAssertEqual(carols.unreadable, [3])
        assertCovenError(.invalidState) { try chain.publishNext(identity: carol, signer: "carol-pc", signingKey: devices["carol-pc"]!) { $0 } }
        XCTAssertNil(try? chain.read(identity: dave), "never on a roster")
        // Carol's device forges generation 4 (she holds key 2 only, so she cannot even name key 3).
        let forged = AudienceGeneration(store: store, audience: "store", generation: 4, signer: "carol-pc", roster: [member("m-carol", carol, .owner)],
                                        previousHash: AudienceGeneration.hash(try XCTUnwrap(try provider.getObject(AudienceGeneration.path(audience: "store", generation: 3)))))
        XCTAssertTrue(try provider.putIfAbsent(forged.path, data: try forged.seal(key: SecureRandom.bytes(32), previousKey: SecureRandom.bytes(32), signingKey: devices["carol-pc"]!)))
        // Carol reads her forgery, whose link to 3 is refused: the key it holds of 3 is not 3's.
        let error = assertCovenError(.integrity) { try chain.read(identity: carol) }
        XCTAssertEqual(error?.details["object"], "audiences/store/0000000000000004")
        XCTAssertEqual(error?.details["reason"], "previous_key")
        // Alice, who opens 3 and not 4, does not take 4 for her removal: it is signed by a device
        // of a member who was no admin at 3.
        let seenByAlice = assertCovenError(.integrity) { try chain.read(identity: alice) }
        XCTAssertEqual(seenByAlice?.details["object"], "audiences/store/0000000000000004")
        XCTAssertEqual(seenByAlice?.details["reason"], "not_admin")
        try provider.delete(forged.path)
        // A missing generation below the newest is named.
        try provider.delete(AudienceGeneration.path(audience: "store", generation: 2))
        XCTAssertEqual(assertCovenError(.integrity) { try chain.read(identity: alice) }?.details["reason"], "missing")
    }
}

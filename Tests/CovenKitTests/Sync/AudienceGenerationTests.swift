@testable import CovenKit
import Foundation
import XCTest

/// Key generations of an audience: the roster and key wrapped to each member, the history
/// chain, and the checks that refuse a forged or damaged generation.
final class AudienceGenerationTests: XCTestCase {
    private let store = "0193a9b2-0000-4000-8000-00000000000a"
    private let alice = try! MemberIdentity()
    private let bob = try! MemberIdentity()
    private let laptop = try! DeviceSigningKey()      // Alice's device
    private let phone = try! DeviceSigningKey()       // Bob's device
    private let aliceID = "0193a9b2-0000-4000-8000-0000000000a1"
    private let bobID = "0193a9b2-0000-4000-8000-0000000000b1"

    private func keyOf(_ device: String) throws -> DevicePublicKey {
        switch device {
        case "laptop": return laptop.publicKey
        case "phone": return phone.publicKey
        default: throw CovenError(.notFound, "no device \(device)")
        }
    }

    private func memberOf(_ device: String, _ roster: [AudienceGeneration.Member]) -> String? { ["laptop": aliceID, "phone": bobID][device] }

    private func generation(_ number: UInt64, signer: String = "laptop", roster: [AudienceGeneration.Member], previous: [UInt8] = []) -> AudienceGeneration {
        AudienceGeneration(store: store, audience: "store", generation: number, signer: signer, roster: roster, previousHash: previous)
    }

    private var owner: AudienceGeneration.Member { .init(id: aliceID, name: "alice", role: .owner, recipient: alice.recipient) }
    private var member: AudienceGeneration.Member { .init(id: bobID, name: "bob", role: .member, recipient: bob.recipient) }

    func testMembersOnTheRosterOpenTheirGenerationAndNewcomersReadHistory() throws {
        let key1 = SecureRandom.bytes(32)
        let first = generation(1, roster: [owner])
        let bytes1 = try first.seal(key: key1, previousKey: nil, signingKey: laptop)
        let opened1 = try XCTUnwrap(try AudienceGeneration.open(bytes1, path: first.path, store: store, identity: alice, signerKey: keyOf))
        XCTAssertEqual(opened1.generation, first)
        XCTAssertEqual(opened1.key, key1)
        XCTAssertNil(opened1.previousKey)
        XCTAssertNil(try AudienceGeneration.open(bytes1, path: first.path, store: store, identity: bob, signerKey: keyOf), "bob is not on the roster")
        XCTAssertEqual(first.path, "audiences/store/0000000000000001")

        // Bob is added: a new generation with a fresh key, the old one sealed under it.
        let key2 = SecureRandom.bytes(32)
        let second = generation(2, roster: [owner, member], previous: AudienceGeneration.hash(bytes1))
        let bytes2 = try second.seal(key: key2, previousKey: key1, signingKey: laptop)
        let opened2 = try XCTUnwrap(try AudienceGeneration.open(bytes2, path: second.path, store: store, identity: bob, signerKey: keyOf))
        XCTAssertEqual(opened2.key, key2)
        XCTAssertEqual(opened2.previousKey, key1, "a newcomer reads what was published before it joined")
        XCTAssertEqual(opened2.generation.roster.map(\.name), ["alice", "bob"])
        XCTAssertNoThrow(try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: opened2.generation, memberOf: memberOf))

        // Bob is removed: he cannot open generation 3.
        let third = generation(3, roster: [owner], previous: AudienceGeneration.hash(bytes2))
        let bytes3 = try third.seal(key: SecureRandom.bytes(32), previousKey: key2, signingKey: laptop)
        XCTAssertNil(try AudienceGeneration.open(bytes3, path: third.path, store: store, identity: bob, signerKey: keyOf))
        XCTAssertNotNil(try AudienceGeneration.open(bytes3, path: third.path, store: store, identity: alice, signerKey: keyOf))
    }

    /// A member who is no admin replaces its own keys: the link needs no admin, but only its
    /// own recipient may change, and its device must be vouched for by its old key.
    func testAMemberRekeysItselfAndNoOneElse() throws {
        let key1 = SecureRandom.bytes(32)
        let first = generation(1, roster: [owner, member])
        let bytes1 = try first.seal(key: key1, previousKey: nil, signingKey: laptop)
        let newBob = try MemberIdentity()
        var rekey = generation(2, signer: "phone", roster: [owner, .init(id: bobID, name: "bob", role: .member, recipient: newBob.recipient)],
                               previous: AudienceGeneration.hash(bytes1))
        rekey.signerVouch = .init(member: bobID, signature: try bob.signingKey.sign(
            DeviceEntry.certificationMessage(store: store, member: bobID, device: "phone", publicKey: phone.publicKey)))
        let none: (String, [AudienceGeneration.Member]) -> String? = { _, _ in nil }
        XCTAssertNoThrow(try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: rekey, memberOf: none, signerKey: phone.publicKey))
        // Vouched for by the new key only: refused (anyone could name a key of theirs).
        var selfVouched = rekey
        selfVouched.signerVouch = .init(member: bobID, signature: try newBob.signingKey.sign(
            DeviceEntry.certificationMessage(store: store, member: bobID, device: "phone", publicKey: phone.publicKey)))
        XCTAssertThrowsError(try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: selfVouched, memberOf: none, signerKey: phone.publicKey))
        // Replacing another member's key, or one's role, needs an admin.
        var other = rekey
        other.roster = [.init(id: aliceID, name: "alice", role: .owner, recipient: newBob.recipient), member]
        XCTAssertThrowsError(try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: other, memberOf: none, signerKey: phone.publicKey))
        var promoted = rekey
        promoted.roster = [owner, .init(id: bobID, name: "bob", role: .admin, recipient: newBob.recipient)]
        XCTAssertThrowsError(try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: promoted, memberOf: none, signerKey: phone.publicKey))
    }

    func testForgedAndDamagedGenerationsAreRefusedNamingTheObject() throws {
        let key1 = SecureRandom.bytes(32)
        let first = generation(1, roster: [owner, member])
        let bytes1 = try first.seal(key: key1, previousKey: nil, signingKey: laptop)
        func reason(_ body: () throws -> Any?) -> String? {
            do { _ = try body() } catch let error as CovenError {
                XCTAssertEqual(error.code, .integrity, "\(error)")
                XCTAssertNotNil(error.details["object"])
                return error.details["reason"]
            } catch { XCTFail("\(error)") }
            return nil
        }
        // A generation signed by a device whose member is not an admin.
        let byBob = generation(2, signer: "phone", roster: [owner, member], previous: AudienceGeneration.hash(bytes1))
        let forged = try byBob.seal(key: SecureRandom.bytes(32), previousKey: key1, signingKey: phone)
        let opened = try XCTUnwrap(try AudienceGeneration.open(forged, path: byBob.path, store: store, identity: alice, signerKey: keyOf))
        XCTAssertEqual(reason { try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: opened.generation, memberOf: memberOf) }, "not_admin")
        // A wrong previous hash, and a skipped number.
        let stray = generation(2, roster: [owner], previous: AudienceGeneration.hash([1, 2, 3]))
        XCTAssertEqual(reason { try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: stray, memberOf: memberOf) }, "previous_hash")
        let skipped = generation(3, roster: [owner], previous: AudienceGeneration.hash(bytes1))
        XCTAssertEqual(reason { try AudienceGeneration.checkLink(previous: first, previousBytes: bytes1, next: skipped, memberOf: memberOf) }, "chain")
        // Signed by another key than the device it names; a flipped byte; moved; another store.
        let liar = try generation(1, signer: "laptop", roster: [owner]).seal(key: key1, previousKey: nil, signingKey: phone)
        XCTAssertEqual(reason { try AudienceGeneration.open(liar, path: first.path, store: store, identity: alice, signerKey: keyOf) }, "signature")
        var flipped = bytes1
        flipped[flipped.count / 2] ^= 1
        XCTAssertEqual(reason { try AudienceGeneration.open(flipped, path: first.path, store: store, identity: alice, signerKey: keyOf) }, "signature")
        XCTAssertEqual(reason { try AudienceGeneration.open(bytes1, path: "audiences/store/0000000000000002", store: store, identity: alice, signerKey: keyOf) }, "misplaced")
        XCTAssertEqual(reason { try AudienceGeneration.open(bytes1, path: first.path, store: "other", identity: alice, signerKey: keyOf) }, "store")
        let stranger = try generation(1, signer: "tablet", roster: [owner]).seal(key: key1, previousKey: nil, signingKey: phone)
        XCTAssertEqual(reason { try AudienceGeneration.open(stranger, path: first.path, store: store, identity: alice, signerKey: keyOf) }, "signer")
        XCTAssertEqual(reason { try AudienceGeneration.open(Array(bytes1.prefix(40)), path: first.path, store: store, identity: alice, signerKey: keyOf) }, "truncated")
        // An invalid generation is never published.
        XCTAssertThrowsError(try generation(2, roster: [owner]).seal(key: key1, previousKey: nil, signingKey: laptop))
        XCTAssertThrowsError(try generation(1, roster: []).seal(key: key1, previousKey: nil, signingKey: laptop))
    }
}

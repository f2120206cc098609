@testable import CovenKit
import Foundation
import XCTest

/// The keys of members (DESIGN.md "Principals and keys"): X25519 and ChaCha20-Poly1305 from
/// libgcrypt against the RFCs' vectors, age's X25519 stanza against C2SP/CCTV's age vectors,
/// bech32, and the identity file.
final class MemberKeysTests: XCTestCase {
    private func hex(_ text: String) -> [UInt8] { [UInt8](hex: text)! }
    /// age writes base64 without padding.
    private func base64(_ text: String) -> [UInt8] {
        Array(Data(base64Encoded: text + String(repeating: "=", count: (4 - text.count % 4) % 4))!)
    }

    func testX25519MatchesRFC7748AndRefusesALowOrderShare() throws {
        let alice = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
        let bob = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
        XCTAssertEqual(try X25519.publicKey(of: alice).hex, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
        XCTAssertEqual(try X25519.publicKey(of: bob).hex, "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
        let shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
        XCTAssertEqual(try X25519.sharedSecret(secret: alice, share: try X25519.publicKey(of: bob)).hex, shared)
        XCTAssertEqual(try X25519.sharedSecret(secret: bob, share: try X25519.publicKey(of: alice)).hex, shared)
        // libgcrypt 1.10.1 returns zeros with no error for these: refused.
        for lowOrder in [[UInt8](repeating: 0, count: 32), [1] + [UInt8](repeating: 0, count: 31)] {
            XCTAssertEqual(assertCovenError(.integrity) { try X25519.sharedSecret(secret: alice, share: lowOrder) }?.details["reason"], "low_order")
        }
        assertCovenError(.integrity) { try X25519.sharedSecret(secret: alice, share: [1, 2, 3]) }
    }

    func testChaCha20Poly1305MatchesRFC8439() throws {
        let key = Array(UInt8(0x80)...UInt8(0x9f))
        let nonce = hex("070000004041424344454647")
        let aad = hex("50515253c0c1c2c3c4c5c6c7")
        let plaintext = Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8)
        let sealed = try ChaChaPoly.seal(plaintext, key: key, nonce: nonce, aad: aad)
        XCTAssertEqual(Array(sealed.prefix(16)).hex, "d31a8d34648e60db7b86afbc53ef7ec2")
        XCTAssertEqual(Array(sealed.suffix(16)).hex, "1ae10b594f09e26a7e902ecbd0600691")
        XCTAssertEqual(try ChaChaPoly.open(sealed, key: key, nonce: nonce, aad: aad), plaintext)
        var tampered = sealed
        tampered[3] ^= 1
        assertCovenError(.integrity) { try ChaChaPoly.open(tampered, key: key, nonce: nonce, aad: aad) }
        assertCovenError(.integrity) { try ChaChaPoly.open(sealed, key: key, nonce: nonce, aad: []) }
    }

    /// C2SP/CCTV age/testdata: x25519 (success), x25519_low_order and x25519_bad_tag (header failures).
    func testTheStanzaOpensAgesVectorsAndRefusesItsBadOnes() throws {
        let identity = try Bech32.decode("AGE-SECRET-KEY-1EGTZVFFV20835NWYV6270LXYVK2VKNX2MMDKWYKLMGR48UAWX40Q2P2LM0")
        XCTAssertEqual(identity.hrp, "age-secret-key-")
        let stanza = KeyStanza(share: base64("TEiF0ypqr+bpvcqXNyCVJpL7OuwPdVwPL7KQEbFDOCc"), body: base64("hjabGXwSLQ9c3S6Lw2i+S2Tu2fiwQHHslbBN6B41FLE"))
        XCTAssertEqual(try stanza.unwrap(secret: identity.data, keySize: 16, label: KeyStanza.ageLabel, aad: []).hex, "59454c4c4f57205355424d4152494e45")
        let lowOrder = KeyStanza(share: base64("X5yVvKNQjCSx0LFVnIPvWwREXMRYHI6G2CJO3dCfEdc"), body: base64("3E0NpFans/m0WLWF7+54ZBdNj3iqQqpraGDFiaRkvBA"))
        XCTAssertEqual(assertCovenError(.integrity) { try lowOrder.unwrap(secret: identity.data, keySize: 16, label: KeyStanza.ageLabel, aad: []) }?.details["reason"], "low_order")
        var badTag = stanza
        badTag.body[badTag.body.count - 1] ^= 1
        assertCovenError(.integrity) { try badTag.unwrap(secret: identity.data, keySize: 16, label: KeyStanza.ageLabel, aad: []) }
        // The body's length is checked before anything else.
        XCTAssertEqual(assertCovenError(.integrity) { try stanza.unwrap(secret: identity.data, keySize: 32, label: KeyStanza.ageLabel, aad: []) }?.details["reason"], "body_length")
    }

    func testAnAudienceKeyWrappedToAMemberOpensOnlyForItInItsPlace() throws {
        let bob = try MemberIdentity()
        let carol = try MemberIdentity()
        let key = SecureRandom.bytes(32)
        let context = KeyStanza.audienceContext(store: "s", audience: "store", generation: 2)
        let stanza = try KeyStanza.wrap(key, to: bob.recipient.agreement, aad: context)
        XCTAssertEqual(stanza.body.count, 48)
        XCTAssertEqual(try stanza.unwrap(secret: bob.agreementSecret, aad: context), key)
        assertCovenError(.integrity) { try stanza.unwrap(secret: carol.agreementSecret, aad: context) }
        // Moved to another generation, audience or store: refused.
        for moved in [KeyStanza.audienceContext(store: "s", audience: "store", generation: 3),
                      KeyStanza.audienceContext(store: "s", audience: "circle", generation: 2),
                      KeyStanza.audienceContext(store: "t", audience: "store", generation: 2)] {
            assertCovenError(.integrity) { try stanza.unwrap(secret: bob.agreementSecret, aad: moved) }
        }
        // Two wraps of one key share nothing.
        XCTAssertNotEqual(try KeyStanza.wrap(key, to: bob.recipient.agreement, aad: context).share, stanza.share)
        assertCovenError(.integrity) { try KeyStanza.wrap(key, to: [UInt8](repeating: 0, count: 32), aad: context) }
    }

    func testBech32ReadsBIP173AndRefusesDamage() throws {
        XCTAssertEqual(try Bech32.decode("A12UEL5L").hrp, "a")
        XCTAssertEqual(try Bech32.decode("abcdef1qpzry9x8gf2tvdw0s3jn54khce6mua7lmqqqxw").hrp, "abcdef")
        let text = Bech32.encode(hrp: "coven", data: Array(0..<64))
        XCTAssertTrue(text.hasPrefix("coven1"))
        XCTAssertEqual(try Bech32.decode(text).data, Array(0..<64))
        XCTAssertEqual(try Bech32.decode(text.uppercased()).data, Array(0..<64))
        var damaged = Array(text)
        damaged[10] = damaged[10] == "q" ? "p" : "q"
        assertCovenError(.usage) { try Bech32.decode(String(damaged)) }
        assertCovenError(.usage) { try Bech32.decode("Coven1" + text.dropFirst(6)) }
        assertCovenError(.usage) { try Bech32.decode("coven1b" + text.dropFirst(7)) }
        assertCovenError(.usage) { try Bech32.decode("nope") }
    }

    func testAnIdentityFileRoundTripsAndItsRecipientToo() throws {
        let identity = try MemberIdentity()
        let text = identity.fileText
        XCTAssertTrue(text.contains("# recipient: \(identity.recipient)"))
        XCTAssertTrue(text.split(separator: "\n").last?.hasPrefix("COVEN-MEMBER-SECRET-1") == true)
        let again = try MemberIdentity(text: text, source: "x")
        XCTAssertEqual(again.recipient, identity.recipient)
        XCTAssertEqual(again.agreementSecret, identity.agreementSecret)
        XCTAssertEqual(try MemberRecipient(identity.recipient.description), identity.recipient)
        XCTAssertTrue(identity.recipient.description.hasPrefix("coven1"))

        let folder = NSTemporaryDirectory() + "member-keys-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/me.identity"
        try identity.write(to: path)
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        XCTAssertEqual(try MemberIdentity(contentsOf: path).recipient, identity.recipient)
        assertCovenError(.exists) { try MemberIdentity().write(to: path) }
        XCTAssertEqual(try MemberIdentity(contentsOf: path).recipient, identity.recipient, "never overwritten")
        assertCovenError(.io) { try MemberIdentity(contentsOf: folder + "/absent") }
    }

    func testBadIdentitiesAndRecipientsAreRefusedByName() throws {
        let identity = try MemberIdentity()
        let line = String(identity.fileText.split(separator: "\n").last!)
        var damaged = Array(line)
        damaged[30] = damaged[30] == "Q" ? "P" : "Q"
        for text in ["", "# only a comment\n", line + "\n" + line + "\n", String(damaged), line.lowercased(),
                     Bech32.encode(hrp: "COVEN-MEMBER-SECRET-", data: [1, 2, 3]), "AGE-SECRET-KEY-1EGTZVFFV20835NWYV6270LXYVK2VKNX2MMDKWYKLMGR48UAWX40Q2P2LM0"] {
            let error = assertCovenError(.usage) { try MemberIdentity(text: text, source: "bad.identity") }
            XCTAssertTrue(error?.message.contains("'bad.identity' is not a coven member identity") == true, "\(String(describing: error))")
        }
        let recipient = identity.recipient.description
        var changed = Array(recipient)
        changed[12] = changed[12] == "q" ? "p" : "q"
        for text in [String(changed), "age1" + recipient.dropFirst(6), Bech32.encode(hrp: "coven", data: [UInt8](repeating: 7, count: 32)),
                     Bech32.encode(hrp: "coven", data: [UInt8](repeating: 0, count: 32) + identity.recipient.signing.bytes),
                     Bech32.encode(hrp: "coven", data: identity.recipient.agreement + [1] + [UInt8](repeating: 0, count: 31))] {
            assertCovenError(.usage) { try MemberRecipient(text) }
        }
    }
}

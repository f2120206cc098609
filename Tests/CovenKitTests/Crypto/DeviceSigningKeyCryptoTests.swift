import Foundation
import XCTest

@testable import CovenKit

/// Ed25519 through libgcrypt: RFC 8032 vectors, the screens for what libgcrypt 1.10.1 accepts
/// (malleable S) or aborts on (small-order and small-coordinate public keys), run in this process
/// on purpose: without the screens these tests would kill the test runner.
final class DeviceSigningKeyCryptoTests: XCTestCase {
    /// RFC 8032, section 7.1, tests 1–3: seed, public key, message, signature.
    static let rfc8032: [(seed: String, publicKey: String, message: String, signature: String)] = [
        ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
         "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
         "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
        ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
         "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
         "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
        ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
         "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
         "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    ]

    func bytes(_ hex: String) throws -> [UInt8] { try XCTUnwrap([UInt8](hex: hex)) }

    func testRFC8032VectorsSignAndVerify() throws {
        for vector in Self.rfc8032 {
            let key = try DeviceSigningKey(seed: try bytes(vector.seed))
            XCTAssertEqual(key.publicKey.hex, vector.publicKey)
            let message = try bytes(vector.message)
            XCTAssertEqual(try key.sign(message).hex, vector.signature)
            let publicKey = try DevicePublicKey(hex: vector.publicKey)
            XCTAssertNoThrow(try publicKey.verify(try bytes(vector.signature), for: message))
        }
    }

    func testWrongMessageKeyOrAnyFlippedBitIsRefused() throws {
        let vector = Self.rfc8032[1]
        let publicKey = try DevicePublicKey(hex: vector.publicKey)
        let signature = try bytes(vector.signature)
        let message = try bytes(vector.message)
        assertThrowsCoven(.integrity) { try publicKey.verify(signature, for: [0x73]) }
        assertThrowsCoven(.integrity) { try publicKey.verify(signature, for: []) }
        assertThrowsCoven(.integrity) { try publicKey.verify(signature, for: message + [0]) }
        assertThrowsCoven(.integrity) { try DevicePublicKey(hex: Self.rfc8032[0].publicKey).verify(signature, for: message) }
        for bit in 0..<(64 * 8) {
            var flipped = signature
            flipped[bit / 8] ^= 1 << UInt8(bit % 8)
            assertThrowsCoven(.integrity, "bit \(bit)") { try publicKey.verify(flipped, for: message) }
        }
        assertThrowsCoven(.integrity) { try publicKey.verify(Array(signature.prefix(63)), for: message) }
        assertThrowsCoven(.integrity) { try publicKey.verify(signature + [0], for: message) }
    }

    /// S + L verifies in libgcrypt 1.10.1; the Swift check refuses it first.
    func testAMalleableSignatureIsRefused() throws {
        let vector = Self.rfc8032[0]
        let publicKey = try DevicePublicKey(hex: vector.publicKey)
        let signature = try bytes(vector.signature)
        var malleable = signature
        var carry = 0
        for index in 0..<32 {
            let sum = Int(malleable[32 + index]) + Int(Ed25519Screen.order[index]) + carry
            malleable[32 + index] = UInt8(sum & 0xff)
            carry = sum >> 8
        }
        XCTAssertEqual(carry, 0)
        let error = assertThrowsCoven(.integrity) { try publicKey.verify(malleable, for: []) }
        XCTAssertEqual(error?.details["reason"], "malleable")
        // S = L exactly, and S = L − 1 (canonical, so libgcrypt judges it: a bad signature).
        var exactly = signature
        exactly.replaceSubrange(32..<64, with: Ed25519Screen.order)
        XCTAssertEqual(assertThrowsCoven(.integrity) { try publicKey.verify(exactly, for: []) }?.details["reason"], "malleable")
        var below = exactly
        below[32] -= 1
        XCTAssertEqual(assertThrowsCoven(.integrity) { try publicKey.verify(below, for: []) }?.details["reason"], "signature")
    }

    func testCanonicalScalarBoundaries() {
        var scalar = Ed25519Screen.order
        XCTAssertFalse(Ed25519Screen.isCanonicalScalar(scalar))
        scalar[0] -= 1
        XCTAssertTrue(Ed25519Screen.isCanonicalScalar(scalar))
        XCTAssertTrue(Ed25519Screen.isCanonicalScalar([UInt8](repeating: 0, count: 32)))
        XCTAssertFalse(Ed25519Screen.isCanonicalScalar([UInt8](repeating: 0xff, count: 32)))
        XCTAssertFalse(Ed25519Screen.isCanonicalScalar([UInt8](repeating: 0, count: 31)))
        scalar = Ed25519Screen.order
        scalar[16] = 1  // above L in a middle byte
        XCTAssertFalse(Ed25519Screen.isCanonicalScalar(scalar))
    }

    /// Keys libgcrypt 1.10.1 aborts the process on (`mulm_25519: different sizes`), measured
    /// one by one in a child process; here they are refused before libgcrypt sees them. If the
    /// screen were missing, the first verify below would end this test process.
    static let abortingKeys: [(String, String)] = [
        ("all zero (order 4)", "0000000000000000000000000000000000000000000000000000000000000000"),
        ("01 00…00 (the identity)", "0100000000000000000000000000000000000000000000000000000000000000"),
        ("p − 1 (order 2)", "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ("y = 2", "0200000000000000000000000000000000000000000000000000000000000000"),
        ("x = 2", "3126711e11ef574692935381d2cd2bbab5dd113c4010f91fd7c4dd7b12bf431a"),
        ("x < 2^192", "27b3a8aa9e4b78ad66c5008e2dcc7ce93fe3d3feadfd4e45e605b30fd0492dcf"),
        ("y < 2^192", "553223a63841460d3b6aa1e68d682728f610fb1c7fd92d9f0000000000000000"),
        ("y < 2^64, sign set", "3ab4e652e44da7f2000000000000000000000000000000000000000000000080"),
    ]

    /// Keys that libgcrypt rejects or that are small-order or non-canonical without aborting.
    static let refusedKeys: [(String, String)] = [
        ("all zero, sign set", "0000000000000000000000000000000000000000000000000000000000000080"),
        ("identity, sign set", "0100000000000000000000000000000000000000000000000000000000000080"),
        ("p − 1, sign set", "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"),
        ("order 8", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"),
        ("order 8, sign set", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"),
        ("order 8", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
        ("order 8, sign set", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"),
        ("y = p", "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ("y = p + 1", "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ("y = 2^255 − 1", "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ("y = 2^255 − 1, sign set", "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"),
        ("off the curve", "3a1d4ad839d17f67e812a004ef958f8ca637a9c90943386b0944be5deebd2c34"),
    ]

    func testKeysThatWouldAbortLibgcryptAreRefusedInProcess() throws {
        let signature = try bytes(Self.rfc8032[0].signature)
        for (label, hex) in Self.abortingKeys + Self.refusedKeys {
            let error = assertThrowsCoven(.integrity, label) { try DevicePublicKey(hex: hex).verify(signature, for: []) }
            XCTAssertNotNil(error?.details["reason"], label)
        }
        XCTAssertEqual(Ed25519Screen.screenPublicKey(try bytes(Self.abortingKeys[0].1)), .smallOrder)
        XCTAssertEqual(Ed25519Screen.screenPublicKey(try bytes(Self.abortingKeys[4].1)), .smallCoordinate)
        XCTAssertEqual(Ed25519Screen.screenPublicKey(try bytes(Self.refusedKeys[7].1)), .nonCanonical)
        XCTAssertEqual(Ed25519Screen.screenPublicKey(try bytes(Self.refusedKeys[11].1)), .notOnCurve)
        assertThrowsCoven(.integrity) { try DevicePublicKey(bytes: [UInt8](repeating: 9, count: 31)) }
        assertThrowsCoven(.integrity) { try DevicePublicKey(hex: "zz" + String(repeating: "0", count: 62)) }
    }

    /// Points whose coordinates are just above 2^192 pass the screen and libgcrypt judges them
    /// (a bad signature, no abort): the screen refuses no more than it must.
    func testPointsJustAboveTheLimitReachLibgcrypt() throws {
        let signature = try bytes(Self.rfc8032[0].signature)
        for hex in ["0f4a778958d5edddcd544d032a2f0488ac92c0f6979246d7e86164c38ac7cbf5",
                    "fe219541e81fa0f9ff1363f06784da05ee1c00f30191f2bf0100000000000000"] {
            let key = try DevicePublicKey(hex: hex)
            XCTAssertEqual(assertThrowsCoven(.integrity) { try key.verify(signature, for: []) }?.details["reason"], "signature")
        }
    }

    func testGeneratedKeysSignAndVerifyAndDiffer() throws {
        var seen = Set<DevicePublicKey>()
        for round in 0..<20 {
            let key = try DeviceSigningKey()
            XCTAssertTrue(seen.insert(key.publicKey).inserted)
            let message = randomBytes(round * 37, seed: UInt64(round))
            let signature = try key.sign(message)
            XCTAssertEqual(signature.count, 64)
            try key.publicKey.verify(signature, for: message)
            // The seed gives back the same key.
            let again = try key.withSeed { try DeviceSigningKey(seed: $0) }
            XCTAssertEqual(again.publicKey, key.publicKey)
            XCTAssertEqual(try again.sign(message), signature)  // Ed25519 is deterministic
        }
        assertThrowsCoven(.integrity) { try DeviceSigningKey(seed: [1, 2, 3]) }
    }

    func testTheSeedFileIsPrivateAndReadBack() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("coven-signing-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/device.key"
        let key = try DeviceSigningKey(seed: try bytes(Self.rfc8032[2].seed))
        try key.write(to: path)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)).count, 32)
        XCTAssertEqual(try DeviceSigningKey(contentsOf: path).publicKey, key.publicKey)
        chmod(path, 0o644)
        assertThrowsCoven(.io) { try DeviceSigningKey(contentsOf: path) }
        chmod(path, 0o600)
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        assertThrowsCoven(.integrity) { try DeviceSigningKey(contentsOf: path) }
        assertThrowsCoven(.io) { try DeviceSigningKey(contentsOf: folder + "/missing") }
    }
}

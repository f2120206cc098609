import XCTest

@testable import CovenKit

/// Store objects: round trips, fresh salts, wrong keys and damage (docs/format.md, section 5).
final class StoreSealerCryptoTests: XCTestCase {
    static let cs = 65536

    func testRoundTripAtBoundaryLengths() throws {
        let storeKey = FileKey()
        for length in [0, 1, Self.cs - 1, Self.cs, Self.cs + 1, 2 * Self.cs + 500, 3 << 20] {
            let plaintext = randomBytes(length, seed: UInt64(length) &+ 17)
            let sealed = try StoreSealer.seal(plaintext, storeKey: storeKey)
            XCTAssertEqual(Int64(sealed.count), ObjectLayout.encryptedSize(plaintextSize: Int64(length)) + 32)
            XCTAssertEqual(Array(sealed[0..<8]), Array("COVENS".utf8) + [1, 1])
            XCTAssertEqual(try StoreSealer.open(sealed, storeKey: storeKey), plaintext, "length \(length)")
        }
    }

    func testTwoSealsOfTheSamePlaintextDiffer() throws {
        let storeKey = FileKey()
        let plaintext = Array("the same change, twice".utf8)
        let first = try StoreSealer.seal(plaintext, storeKey: storeKey)
        let second = try StoreSealer.seal(plaintext, storeKey: storeKey)
        XCTAssertNotEqual(first[8..<40], second[8..<40], "salts repeat")
        XCTAssertNotEqual(first[40...], second[40...])
        XCTAssertEqual(try StoreSealer.open(first, storeKey: storeKey), plaintext)
        XCTAssertEqual(try StoreSealer.open(second, storeKey: storeKey), plaintext)
    }

    func testWrongStoreKeyFails() throws {
        let sealed = try StoreSealer.seal(Array("secret".utf8), storeKey: FileKey())
        assertThrowsCoven(.integrity) { try StoreSealer.open(sealed, storeKey: FileKey()) }
    }

    func testDamageFails() throws {
        let storeKey = FileKey()
        let plaintext = randomBytes(Self.cs + 10, seed: 3)
        let sealed = try StoreSealer.seal(plaintext, storeKey: storeKey)
        // Every byte of the header and salt, and bytes of both chunks.
        for index in Array(0..<40) + [40, 41, 40 + 65551, 40 + 65552, sealed.count - 1] {
            var damaged = sealed
            damaged[index] ^= 0x01
            let newer = (index == 6 || index == 7) && damaged[index] > 1
            assertThrowsCoven(newer ? .updateRequired : .integrity, "byte \(index)") {
                try StoreSealer.open(damaged, storeKey: storeKey)
            }
        }
        // Truncation at every boundary, and extension.
        for length in [0, 7, 8, 39, 40, 55, 56, 40 + 65552, 40 + 65552 + 16, sealed.count - 1] {
            assertThrowsCoven(.integrity, "cut to \(length)") {
                try StoreSealer.open(Array(sealed[0..<length]), storeKey: storeKey)
            }
        }
        assertThrowsCoven(.integrity) { try StoreSealer.open(sealed + [0], storeKey: storeKey) }
        assertThrowsCoven(.integrity) { try StoreSealer.open(sealed + sealed[40...], storeKey: storeKey) }
    }

    func testVersionTwoNeedsAnUpdate() throws {
        let storeKey = FileKey()
        var sealed = try StoreSealer.seal([1, 2, 3], storeKey: storeKey)
        sealed[6] = 2
        assertThrowsCoven(.updateRequired) { try StoreSealer.open(sealed, storeKey: storeKey) }
        sealed[6] = 1
        sealed[7] = 2
        assertThrowsCoven(.updateRequired) { try StoreSealer.open(sealed, storeKey: storeKey) }
        // Even a truncated newer object asks for an update rather than guessing.
        assertThrowsCoven(.updateRequired) { try StoreSealer.open(Array(sealed[0..<8]), storeKey: storeKey) }
    }

    func testFileObjectIsNotAStoreObject() throws {
        let key = FileKey()
        let file = try sealObject([1, 2, 3], key: key)
        assertThrowsCoven(.integrity) { try StoreSealer.open(file + [UInt8](repeating: 0, count: 32), storeKey: key) }
    }
    func testAPathBoundObjectOpensOnlyUnderItsPath() throws {
        let storeKey = FileKey()
        let plaintext = randomBytes(3 * 65536 + 5, seed: 21)
        let path = "changes/0000/0000000000000001"
        let sealed = try StoreSealer.seal(plaintext, storeKey: storeKey, boundTo: path)
        XCTAssertEqual(try StoreSealer.open(sealed, storeKey: storeKey, boundTo: path), plaintext)
        for other in ["", "changes/0000/0000000000000002", "changes/0001/0000000000000001", path + "/"] {
            assertThrowsCoven(.integrity, other) { try StoreSealer.open(sealed, storeKey: storeKey, boundTo: other) }
        }
        // Unbound is bound to the empty path.
        let unbound = try StoreSealer.seal(plaintext, storeKey: storeKey)
        assertThrowsCoven(.integrity) { try StoreSealer.open(unbound, storeKey: storeKey, boundTo: path) }
        XCTAssertEqual(try StoreSealer.open(unbound, storeKey: storeKey, boundTo: ""), plaintext)
    }
}

/// File keys: randomness, hex round trip, secure-memory handling of bad input.
final class FileKeyCryptoTests: XCTestCase {
    func testRandomKeysDiffer() {
        XCTAssertNotEqual(FileKey().hex, FileKey().hex)
    }

    func testHexRoundTrip() throws {
        let key = FileKey()
        XCTAssertEqual(key.hex.count, 64)
        XCTAssertEqual(try FileKey(hex: key.hex).hex, key.hex)
        XCTAssertEqual(try FileKey(hex: key.hex.uppercased()).hex, key.hex)
        let bytes = (0..<32).map { UInt8($0 * 7 & 0xff) }
        XCTAssertEqual(try FileKey(bytes: bytes).hex, bytes.hex)
    }

    func testBadHexAndLengths() {
        for text in ["", "00", String(repeating: "0", count: 63), String(repeating: "0", count: 65),
                     String(repeating: "g", count: 64), String(repeating: "0", count: 62) + "é"] {
            assertThrowsCoven(.integrity, text) { try FileKey(hex: text) }
        }
        assertThrowsCoven(.integrity) { try FileKey(bytes: [UInt8](repeating: 0, count: 31)) }
        assertThrowsCoven(.integrity) { try FileKey(bytes: [UInt8](repeating: 0, count: 33)) }
    }

    func testManyLiveKeysAndCiphersDoNotExhaustSecureMemory() throws {
        // Cipher handles live in secure memory too; together these need more than the initial
        // 1 MiB pool, which must grow (GCRYCTL_AUTO_EXPAND_SECMEM).
        let keys = (0..<2000).map { _ in FileKey() }
        let ciphers = try keys.map { try ChunkCipher(key: $0) }
        XCTAssertEqual(ciphers.count, 2000)
        XCTAssertEqual(Set(keys.prefix(100).map(\.hex)).count, 100)
    }
}

/// The SHA-256 helpers of Gcrypt.swift, including the empty buffer that has no address.
final class SHA256CryptoTests: XCTestCase {
    func testKnownDigests() throws {
        XCTAssertEqual(SHA256.digest([]).hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(
            SHA256.digest(UnsafeRawBufferPointer(start: nil, count: 0)).hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(
            SHA256.digest(Array("abc".utf8)).hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let hash = try SHA256()
        hash.update(Array("a".utf8))
        hash.update(Array("bc".utf8))
        XCTAssertEqual(hash.finish().hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

}

import Foundation
import XCTest

@testable import CovenKit

/// The vectors of docs/format.md sections 8–10 (signatures, change objects, registry entries),
/// read from the document itself.
final class SyncFormatVectorsTests: XCTestCase {
    func vector(_ name: String) throws -> [String: String] {
        try XCTUnwrap(try FormatVectorsCryptoTests.vectors()[name], "docs/format.md has no vector \(name)")
    }

    func hex(_ vector: [String: String], _ field: String) throws -> [UInt8] {
        try XCTUnwrap([UInt8](hex: try XCTUnwrap(vector[field], "vector lacks \(field)")), "\(field) is not hex")
    }

    func testEd25519() throws {
        let vector = try vector("ed25519-rfc8032-1")
        let key = try DeviceSigningKey(seed: try hex(vector, "seed"))
        XCTAssertEqual(key.publicKey.hex, vector["public-key"])
        let message = try hex(vector, "message")
        XCTAssertEqual(try key.sign(message).hex, vector["signature"])
        try DevicePublicKey(hex: try XCTUnwrap(vector["public-key"])).verify(try hex(vector, "signature"), for: message)
    }

    /// The change of vectors 9.5 and 9.6.
    static var vectorChange: ChangeObject {
        let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
        let stamp = "2026-01-02T03:04:05.678Z-0000-" + device
        return ChangeObject(
            storeID: "9e8d7c6b-5a49-4838-a726-150493827160", device: device, seq: 1,
            schema: .init(migrations: 2, digest: "5e0b"), frontier: ["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d": 3],
            entries: [
                RowEntry(kind: .upsert, table: "notes", id: "n1", stamp: stamp, columns: ["id", "title", "rating", "_updated_at"],
                         values: [.text("n1"), .text("hello"), .real(4.5), .text(stamp)]),
                RowEntry(kind: .delete, table: "notes", id: "n0", stamp: stamp),
            ])
    }

    func testChangeObject() throws {
        let vector = try vector("change-object")
        let storeKey = try FileKey(bytes: try hex(vector, "store-key"))
        let salt = try hex(vector, "salt")
        let key = try DeviceSigningKey(seed: try hex(vector, "seed"))
        XCTAssertEqual(key.publicKey.hex, vector["public-key"])
        let path = try XCTUnwrap(vector["path"])
        let change = Self.vectorChange
        XCTAssertEqual(change.path, path)
        let plaintext = try hex(vector, "plaintext")
        XCTAssertEqual(change.encoded(), plaintext)
        // The compressed bytes are one encoder's output: they decompress to the plaintext, and
        // sealing and signing them gives the published bytes exactly.
        let compressed = try hex(vector, "compressed")
        XCTAssertEqual(try Zstd.decompress(compressed, maximumSize: 1 << 20), plaintext)
        let published = try ChangeObject.publish(
            compressed: compressed, path: path, storeKey: storeKey, signingKey: key, salt: salt)
        XCTAssertEqual(published.count, Int(try XCTUnwrap(vector["published-size"])))
        XCTAssertEqual(published.hex, vector["published"])
        XCTAssertEqual(
            ChangeObject.signedMessage(path: path, sealed: published.dropLast(64)).hex, vector["signed-message"])
        XCTAssertEqual(
            try ChangeObject.open(
                try hex(vector, "published"), path: path, storeKey: storeKey, publicKey: key.publicKey,
                storeID: "9e8d7c6b-5a49-4838-a726-150493827160"),
            change)
        // And coven's own compression of it opens the same.
        let ours = try change.seal(storeKey: storeKey, signingKey: key, salt: salt)
        XCTAssertEqual(try ChangeObject.open(ours, path: path, storeKey: storeKey, publicKey: key.publicKey), change)
    }

    /// Format 2 (docs/format.md 9.6): the change of 9.5 under generation 3 of the store's key.
    func testChangeObjectSections() throws {
        let vector = try vector("change-object-v2")
        let key = try FileKey(bytes: try hex(vector, "store-key"))
        let generation = try XCTUnwrap(UInt64(try XCTUnwrap(vector["store-key-generation"])))
        let seed = try DeviceSigningKey(seed: try hex(vector, "seed"))
        let path = try XCTUnwrap(vector["path"])
        var change = Self.vectorChange
        let device = change.device
        XCTAssertEqual(change.path, path)
        XCTAssertEqual(change.encodedHead(version: 2), try hex(vector, "envelope-plaintext"))
        var section: [UInt8] = []
        ChangeObject.encodeEntries(change.entries, into: &section)
        XCTAssertEqual(section, try hex(vector, "section-plaintext"))
        let head = try hex(vector, "compressed-envelope")
        let compressed = try hex(vector, "compressed-section")
        XCTAssertEqual(try Zstd.decompress(head, maximumSize: 1 << 20), try hex(vector, "envelope-plaintext"))
        XCTAssertEqual(try Zstd.decompress(compressed, maximumSize: 1 << 20), section)
        var salts = [try hex(vector, "envelope-salt"), try hex(vector, "section-salt")]
        let published = try ChangeObject.publishSections(store: change.storeID, device: device, seq: 1, head: head, storeKey: (generation, key),
                                                         sections: [("store", (generation, key), compressed)], signingKey: seed, salt: { salts.removeFirst() })
        XCTAssertEqual(published.count, Int(try XCTUnwrap(vector["published-size"])))
        XCTAssertEqual(published.hex, vector["published"])
        XCTAssertEqual(ChangeObject.storeGeneration(of: published), generation)
        change.generation = generation
        let keyOf: (String, UInt64) throws -> FileKey? = { audience, asked in audience == "store" && asked == generation ? key : nil }
        XCTAssertEqual(try ChangeObject.open(published, path: path, keyOf: keyOf, publicKey: seed.publicKey, storeID: change.storeID), change)
        // Without the generation's key: key_unavailable, not damage.
        XCTAssertEqual(assertCovenError(.keyUnavailable) { _ = try ChangeObject.open(published, path: path, keyOf: { _, asked in asked == 1 ? key : nil },
                                                                                     publicKey: seed.publicKey) }?.details["generation"], "3")
        // A reader of format 1 only (a coven before members) checks the signature, then stops at
        // the header with update_required.
        XCTAssertEqual(assertCovenError(.updateRequired) { _ = try ChangeObject.open(published, path: path, storeKey: key, publicKey: seed.publicKey) }?.code,
                       .updateRequired)
        // Any byte changed, or another device's key: integrity.
        var flipped = published
        flipped[40] ^= 1
        assertCovenError(.integrity) { _ = try ChangeObject.open(flipped, path: path, keyOf: keyOf, publicKey: seed.publicKey) }
        assertCovenError(.integrity) { _ = try ChangeObject.open(published, path: path, keyOf: keyOf, publicKey: try DeviceSigningKey().publicKey) }
        assertCovenError(.integrity) { _ = try ChangeObject.open(published, path: ChangeObject.path(device: device, seq: 2), keyOf: keyOf, publicKey: seed.publicKey) }
        // And coven's own sealing opens the same.
        let ours = try change.sealSections(storeKey: (generation, key), keyOf: { _ in throw CovenError(.internal, "no circle") }, signingKey: seed)
        XCTAssertEqual(try ChangeObject.open(ours, path: path, keyOf: keyOf, publicKey: seed.publicKey), change)
    }

    func testDeviceEntry() throws {
        let vector = try vector("device-entry")
        let storeKey = try FileKey(bytes: try hex(vector, "store-key"))
        let salt = try hex(vector, "salt")
        let path = try XCTUnwrap(vector["path"])
        let entry = DeviceEntry(
            device: "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", name: "laptop", joinedAt: "2026-01-02T03:04:05.678Z",
            publicKey: try DeviceSigningKey(seed: (0x60..<0x80).map { UInt8($0) }).publicKey,
            frontier: ["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d": 3], lastSeq: 1)
        XCTAssertEqual(entry.path, path)
        XCTAssertEqual(String(decoding: try entry.encoded(), as: UTF8.self), vector["plaintext"])
        XCTAssertEqual(try entry.seal(storeKey: storeKey, salt: salt).hex, vector["sealed"])
        XCTAssertEqual(try DeviceEntry.open(try hex(vector, "sealed"), path: path, storeKey: storeKey), entry)
    }
}

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

    func testChangeObject() throws {
        let vector = try vector("change-object")
        let storeKey = try FileKey(bytes: try hex(vector, "store-key"))
        let salt = try hex(vector, "salt")
        let key = try DeviceSigningKey(seed: try hex(vector, "seed"))
        XCTAssertEqual(key.publicKey.hex, vector["public-key"])
        let path = try XCTUnwrap(vector["path"])
        let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
        let stamp = "2026-01-02T03:04:05.678Z-0000-" + device
        let change = ChangeObject(
            storeID: "9e8d7c6b-5a49-4838-a726-150493827160", device: device, seq: 1,
            schema: .init(migrations: 2, digest: "5e0b"), frontier: ["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d": 3],
            entries: [
                RowEntry(kind: .upsert, table: "notes", id: "n1", stamp: stamp, columns: ["id", "title", "rating", "_updated_at"],
                         values: [.text("n1"), .text("hello"), .real(4.5), .text(stamp)]),
                RowEntry(kind: .delete, table: "notes", id: "n0", stamp: stamp),
            ])
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

import Foundation
import XCTest

@testable import CovenKit

/// Change objects: the plaintext codec, sealing bound to the path, the device's signature, and
/// every way a published change can be wrong.
final class ChangeObjectTests: XCTestCase {
    static let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
    static let other = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    static let store = "9e8d7c6b-5a49-4838-a726-150493827160"

    let storeKey = FileKey()
    var signingKey: DeviceSigningKey!

    override func setUpWithError() throws {
        signingKey = try DeviceSigningKey()
    }

    func sample(seq: UInt64 = 7) -> ChangeObject {
        let stamp = "2026-01-02T03:04:05.678Z-0000-" + Self.device
        return ChangeObject(
            storeID: Self.store, device: Self.device, seq: seq,
            schema: .init(migrations: 3, digest: "sha256:abc"), frontier: [Self.other: 12, "third": 1],
            heldObjects: ["files/x/abc"],
            entries: [
                RowEntry(kind: .upsert, table: "notes", id: "n1", stamp: stamp, columns: ["id", "title", "n", "r", "b", "z", "_updated_at"],
                         values: [.text("n1"), .text("héllo"), .integer(-5), .real(12.34), .blob([0, 1, 255]), .null, .text(stamp)]),
                RowEntry(kind: .upsert, table: "notes", id: "n2", stamp: stamp, columns: ["id", "title", "n", "r", "b", "z", "_updated_at"],
                         values: [.text("n2"), .text(stamp), .integer(Int64.max), .real(0.1 + 0.2), .blob([]), .text("n1"), .text("x")]),
                RowEntry(kind: .upsert, table: "notes", id: "n3", stamp: stamp, columns: ["id"], values: [.text("n3")]),
                RowEntry(kind: .upsert, table: "coven_files", id: "f1", stamp: stamp, columns: ["id", "size"], values: [.text("f1"), .integer(0)]),
                RowEntry(kind: .delete, table: "notes", id: "n0", stamp: stamp),
                RowEntry(kind: .retract, table: "lists", id: "l1", stamp: stamp),
                RowEntry(kind: .upsert, table: "notes", id: "n4", stamp: stamp, columns: ["id", "r"],
                         values: [.text("n4"), .real(-0.0)]),
                RowEntry(kind: .upsert, table: "notes", id: "n5", stamp: stamp, columns: ["id", "r"],
                         values: [.text("n5"), .real(1e300)]),
                RowEntry(kind: .upsert, table: "notes", id: "n6", stamp: stamp, columns: ["id", "r"],
                         values: [.text("n6"), .real(.infinity)]),
            ])
    }

    func testPaths() {
        XCTAssertEqual(ChangeObject.path(device: "d", seq: 1), "changes/d/0000000000000001")
        XCTAssertEqual(ChangeObject.path(device: "d", seq: UInt64.max), "changes/d/18446744073709551615")
        XCTAssertEqual(sample(seq: 42).path, "changes/\(Self.device)/0000000000000042")
        XCTAssertEqual(ChangeObject.parsePath("changes/\(Self.device)/0000000000000042")?.seq, 42)
        XCTAssertEqual(ChangeObject.parsePath("changes/\(Self.device)/0000000000000042")?.device, Self.device)
        for bad in ["changes/d/0000000000000000", "changes/d/42", "changes//0000000000000001", "changes/d/000000000000001x",
                    "snapshots/d/0000000000000001", "changes/d/0000000000000001/", "changes/a/b/0000000000000001",
                    "changes/d.x/0000000000000001", "changes/d/99999999999999999"] {
            XCTAssertNil(ChangeObject.parsePath(bad), bad)
        }
    }

    func testPlaintextRoundTrip() throws {
        let change = sample()
        let bytes = change.encoded()
        XCTAssertEqual(bytes[0], 1)
        let decoded = try ChangeObject.decode(bytes)
        XCTAssertEqual(decoded, change)
        // -0.0 keeps its sign, and no REAL changes its bits.
        XCTAssertEqual(decoded.entries[6].values[1], .real(-0.0))
        if case .real(let zero) = decoded.entries[6].values[1] { XCTAssertEqual(zero.sign, .minus) }
        let empty = ChangeObject(storeID: "s", device: "d", seq: 1, schema: .init(migrations: 0, digest: ""), entries: [])
        XCTAssertEqual(try ChangeObject.decode(empty.encoded()), empty)
    }

    func testMalformedPlaintextIsDecodingAndANewerVersionUpdateRequired() throws {
        let bytes = sample().encoded()
        for cut in stride(from: 0, to: bytes.count, by: 7) {
            assertThrowsCoven(.decoding, "cut at \(cut)") { try ChangeObject.decode(Array(bytes[0..<cut])) }
        }
        assertThrowsCoven(.decoding) { try ChangeObject.decode(bytes + [0]) }
        var zero = bytes
        zero[0] = 0
        assertThrowsCoven(.decoding) { try ChangeObject.decode(zero) }
        var newer = bytes
        newer[0] = 2
        XCTAssertEqual(assertThrowsCoven(.updateRequired) { try ChangeObject.decode(newer) }?.details["version"], "2")
        // The device itself in its frontier.
        var selfish = sample()
        selfish.frontier[Self.device] = 3
        assertThrowsCoven(.decoding) { try ChangeObject.decode(selfish.encoded()) }
        assertThrowsCoven(.internal) { try selfish.seal(storeKey: storeKey, signingKey: signingKey) }
        assertThrowsCoven(.internal) { try sample(seq: 0).seal(storeKey: storeKey, signingKey: signingKey) }
    }

    func testSealAndOpen() throws {
        let change = sample()
        let published = try change.seal(storeKey: storeKey, signingKey: signingKey)
        let opened = try ChangeObject.open(
            published, path: change.path, storeKey: storeKey, publicKey: signingKey.publicKey, storeID: Self.store)
        XCTAssertEqual(opened, change)
        // Two seals differ (fresh salt) and both open.
        let again = try change.seal(storeKey: storeKey, signingKey: signingKey)
        XCTAssertNotEqual(again, published)
        XCTAssertEqual(try ChangeObject.open(again, path: change.path, storeKey: storeKey, publicKey: signingKey.publicKey), change)
    }

    func assertRefused(
        _ bytes: [UInt8], path: String? = nil, storeKey: FileKey? = nil, publicKey: DevicePublicKey? = nil,
        storeID: String? = nil, _ label: String, code: ErrorCode = .integrity, line: UInt = #line
    ) {
        let path = path ?? sample().path
        let error = assertThrowsCoven(code, label, line: line) {
            try ChangeObject.open(
                bytes, path: path, storeKey: storeKey ?? self.storeKey, publicKey: publicKey ?? signingKey.publicKey, storeID: storeID)
        }
        XCTAssertEqual(error?.details["path"], path, label, line: line)
    }

    func testTamperedTruncatedAndWrongKeysAreIntegrity() throws {
        let change = sample()
        let published = try change.seal(storeKey: storeKey, signingKey: signingKey)
        for index in [0, 6, 7, 20, 40, published.count / 2, published.count - 65, published.count - 64, published.count - 1] {
            var damaged = published
            damaged[index] ^= 0x01
            assertRefused(damaged, "byte \(index) flipped")
        }
        for cut in [0, 10, 100, published.count - 64, published.count - 1] {
            assertRefused(Array(published[0..<cut]), "cut to \(cut)")
        }
        assertRefused(published + [0], "one byte appended")
        assertRefused(published, storeKey: FileKey(), "another store key")
        assertRefused(published, publicKey: try DeviceSigningKey().publicKey, "another device's key")
        assertRefused(published, storeID: "another-store", "another store id")
        // A change re-signed by another device (it holds the store key too) is still refused.
        let impostor = try DeviceSigningKey()
        let resigned = Array(published.dropLast(64))
            + (try impostor.sign(ChangeObject.signedMessage(path: change.path, sealed: published.dropLast(64))))
        assertRefused(resigned, "signed by another device")
        XCTAssertNoThrow(try ChangeObject.open(resigned, path: change.path, storeKey: storeKey, publicKey: impostor.publicKey))
    }

    func testMovedSwappedAndReplayedChangesAreRefused() throws {
        let change = sample(seq: 7)
        let published = try change.seal(storeKey: storeKey, signingKey: signingKey)
        assertRefused(published, path: ChangeObject.path(device: Self.device, seq: 8), "replayed under the next seq")
        assertRefused(published, path: ChangeObject.path(device: Self.other, seq: 7), "moved to another device")
        // Even a device that signs its bytes again for the new path cannot move a change: the
        // store object is bound to its path.
        let moved = ChangeObject.path(device: Self.device, seq: 8)
        let resigned = Array(published.dropLast(64)) + (try signingKey.sign(ChangeObject.signedMessage(path: moved, sealed: published.dropLast(64))))
        assertRefused(resigned, path: moved, "re-signed for another seq")
        // Sealed and signed for seq 8 but saying seq 7 inside: the decoded fields must match.
        let sealed = try StoreSealer.seal(try Zstd.compress(change.encoded()), storeKey: storeKey, boundTo: moved)
        let misplaced = sealed + (try signingKey.sign(ChangeObject.signedMessage(path: moved, sealed: sealed[...])))
        let error = assertThrowsCoven(.integrity) {
            try ChangeObject.open(misplaced, path: moved, storeKey: storeKey, publicKey: signingKey.publicKey)
        }
        XCTAssertEqual(error?.details["reason"], "misplaced")
        assertThrowsCoven(.internal) {
            try ChangeObject.open(published, path: "changes/x/7", storeKey: storeKey, publicKey: signingKey.publicKey)
        }
    }

    /// Bytes authentic under the store key and the device's signature, but not a valid change.
    func publishedRaw(_ compressed: [UInt8], path: String) throws -> [UInt8] {
        let sealed = try StoreSealer.seal(compressed, storeKey: storeKey, boundTo: path)
        return sealed + (try signingKey.sign(ChangeObject.signedMessage(path: path, sealed: sealed[...])))
    }

    func testAuthenticButMalformedContentIsDecodingOrUpdateRequired() throws {
        let path = sample().path
        assertRefused(try publishedRaw(Array("not zstd".utf8), path: path), "not zstd", code: .decoding)
        let compressed = try Zstd.compress(sample().encoded())
        assertRefused(try publishedRaw(Array(compressed.dropLast(5)), path: path), "truncated zstd", code: .decoding)
        assertRefused(try publishedRaw(try Zstd.compress([1, 2, 3]), path: path), "garbage plaintext", code: .decoding)
        var newer = sample().encoded()
        newer[0] = 9
        assertRefused(try publishedRaw(try Zstd.compress(newer), path: path), "a newer format", code: .updateRequired)
        // A bomb: more than 64 MiB of plaintext.
        let bomb = try Zstd.compress([UInt8](repeating: 0, count: ChangeObject.maximumPlaintextSize + 1))
        XCTAssertLessThan(bomb.count, 16 << 10)
        let error = assertThrowsCoven(.decoding) {
            try ChangeObject.open(try publishedRaw(bomb, path: path), path: path, storeKey: storeKey, publicKey: signingKey.publicKey)
        }
        XCTAssertEqual(error?.details["reason"], "too_large")
    }
}

import Foundation
import XCTest

@testable import CovenKit

/// Device registry entries: the JSON codec and its validation, sealing bound to the path.
final class DeviceEntryTests: XCTestCase {
    static let publicKey = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    static let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"

    func entry(frontier: [String: UInt64]? = nil, lastSeq: UInt64? = nil, gone: Bool = false) throws -> DeviceEntry {
        DeviceEntry(
            device: Self.device, name: "laptop/1", joinedAt: "2026-01-02T03:04:05.678Z",
            publicKey: try DevicePublicKey(hex: Self.publicKey), gone: gone, frontier: frontier, lastSeq: lastSeq)
    }

    func testEncodingIsSortedJSONAndRoundTrips() throws {
        let plain = try entry()
        XCTAssertEqual(
            String(decoding: try plain.encoded(), as: UTF8.self),
            #"{"coven_device":1,"device":"6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b","gone":false,"joined_at":"2026-01-02T03:04:05.678Z","name":"laptop/1","public_key":"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"}"#)
        XCTAssertEqual(try DeviceEntry.decode(try plain.encoded()), plain)
        let full = try entry(frontier: ["a": 3, "b": UInt64.max], lastSeq: 42, gone: true)
        let text = String(decoding: try full.encoded(), as: UTF8.self)
        XCTAssertTrue(text.contains(#""frontier":{"a":3,"b":18446744073709551615}"#), text)
        XCTAssertTrue(text.contains(#""gone":true"#) && text.contains(#""last_seq":42"#), text)
        XCTAssertEqual(try DeviceEntry.decode(try full.encoded()), full)
        // Unknown keys from a later coven are ignored.
        let later = Array(text.replacingOccurrences(of: #"{"coven_device":1,"#, with: #"{"coven_device":1,"circles":["x"],"#).utf8)
        XCTAssertEqual(try DeviceEntry.decode(later), full)
    }

    func decodeText(_ text: String) throws -> DeviceEntry { try DeviceEntry.decode(Array(text.utf8)) }

    func testValidation() throws {
        let good = String(decoding: try entry().encoded(), as: UTF8.self)
        func replacing(_ old: String, _ new: String) -> String { good.replacingOccurrences(of: old, with: new) }
        assertThrowsCoven(.decoding) { try decodeText("") }
        assertThrowsCoven(.decoding) { try decodeText("[]") }
        assertThrowsCoven(.decoding) { try decodeText(#"{"coven_device":"1"}"#) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""coven_device":1"#, #""coven_device":0"#)) }
        XCTAssertEqual(
            assertThrowsCoven(.updateRequired) { try decodeText(replacing(#""coven_device":1"#, #""coven_device":2"#)) }?
                .details["version"], "2")
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""gone":false,"#, "")) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""gone":false"#, #""gone":0"#)) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""gone":false"#, #""gone":false,"last_seq":-1"#)) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""gone":false"#, #""gone":false,"last_seq":1.5"#)) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""gone":false"#, #""gone":false,"frontier":{"a":"1"}"#)) }
        assertThrowsCoven(.decoding) {
            try decodeText(replacing(#""gone":false"#, #""gone":false,"frontier":{"\#(Self.device)":1}"#))
        }
        assertThrowsCoven(.decoding) { try decodeText(replacing(Self.device, "")) }
        assertThrowsCoven(.decoding) { try decodeText(replacing(#""name":"laptop/1","#, "")) }
        // The public key is screened: short, not hex, small order, non-canonical.
        assertThrowsCoven(.integrity) { try decodeText(replacing(Self.publicKey, "d75a98")) }
        assertThrowsCoven(.integrity) { try decodeText(replacing(Self.publicKey, String(repeating: "g", count: 64))) }
        assertThrowsCoven(.integrity) { try decodeText(replacing(Self.publicKey, "01" + String(repeating: "0", count: 62))) }
        assertThrowsCoven(.integrity) {
            try decodeText(replacing(Self.publicKey, "ed" + String(repeating: "f", count: 60) + "7f"))
        }
    }

    func testSealedBoundToItsPath() throws {
        let storeKey = FileKey()
        let full = try entry(frontier: ["a": 1], lastSeq: 2)
        XCTAssertEqual(full.path, "devices/" + Self.device)
        let sealed = try full.seal(storeKey: storeKey)
        XCTAssertEqual(try DeviceEntry.open(sealed, path: full.path, storeKey: storeKey), full)
        let moved = assertThrowsCoven(.integrity) {
            try DeviceEntry.open(sealed, path: "devices/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", storeKey: storeKey)
        }
        XCTAssertEqual(moved?.details["path"], "devices/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
        assertThrowsCoven(.integrity) { try DeviceEntry.open(sealed, path: full.path, storeKey: FileKey()) }
        var damaged = sealed
        damaged[damaged.count / 2] ^= 4
        assertThrowsCoven(.integrity) { try DeviceEntry.open(damaged, path: full.path, storeKey: storeKey) }
        // Sealed for one path but naming another device inside.
        var other = full
        other.device = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
        let misplaced = try StoreSealer.seal(try other.encoded(), storeKey: storeKey, boundTo: full.path)
        XCTAssertEqual(
            assertThrowsCoven(.integrity) { try DeviceEntry.open(misplaced, path: full.path, storeKey: storeKey) }?.details["reason"],
            "misplaced")
    }
}

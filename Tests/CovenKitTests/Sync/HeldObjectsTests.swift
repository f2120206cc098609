import Foundation
import CLinux
import XCTest

@testable import CovenKit

/// The held objects of a change (the stored objects its device's unpublished records name): a
/// library's first push names 100,000 in every change, so they stay bytes, not Strings, from
/// SQLite into the change and from the change into the registry.
final class HeldObjectsTests: XCTestCase {
    static let device = "6f1c7a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"

    /// `count` object names as a library's records name them: `files/<device>/<26 letters>`.
    static func names(_ count: Int) -> [String] {
        var generator = SplitMix64(seed: 23)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)
        return (0..<count).map { _ in
            "files/\(device)/" + String(decoding: (0..<26).map { _ in alphabet[Int(generator.next() % 32)] }, as: UTF8.self)
        }
    }

    func change(held: HeldObjects) -> ChangeObject {
        ChangeObject(storeID: "9e8d7c6b-5a49-4838-a726-150493827160", device: Self.device, seq: 3,
                     schema: .init(migrations: 1, digest: "sha256:0123"), frontier: ["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d": 2],
                     heldObjects: held, entries: [])
    }

    /// The bytes malloc has handed out and not had back.
    static func heapInUse() -> Int {
        let info = mallinfo2()
        return Int(info.uordblks + info.hblkhd)
    }

    func testAChangeHoldingAWholeLibrarysNamesDecodesIntoTheirBytesNotStrings() throws {
        let names = Self.names(100_000)
        let plaintext = change(held: HeldObjects(names)).encoded()
        let nameBytes = names.reduce(0) { $0 + $1.utf8.count + 1 }
        let before = Self.heapInUse()
        let decoded = try ChangeObject.decode(plaintext)
        let grown = Self.heapInUse() - before
        XCTAssertEqual(decoded.heldObjects.count, 100_000)
        // 100,000 Strings of 69 bytes take about 12.8 MB; their bytes 7 MB.
        XCTAssertLessThanOrEqual(grown, nameBytes + nameBytes / 5,
                                 "decoding \(names.count) held names of \(nameBytes) bytes grew the heap by \(grown) bytes")
        XCTAssertEqual(Array(decoded.heldObjects.prefix(3)), Array(names.prefix(3)))
    }

    func testNamesAreWrittenAsAChangeAlwaysWroteThemAndReadBack() throws {
        let names = ["files/x/abc", "", "é\u{1}\"\\", String(repeating: "n", count: 300)] + Self.names(3)
        let held = HeldObjects(names)
        var expected: [UInt8] = []
        RowEntryCodec.writeVarint(UInt64(names.count), into: &expected)
        for name in names { RowEntryCodec.writeString(name, into: &expected) }
        let plaintext = change(held: held).encoded()
        XCTAssertTrue(plaintext.starts(with: change(held: []).encoded().dropLast(4)), "the head before the held names is unchanged")
        XCTAssertEqual(Array(plaintext.suffix(expected.count + 3)).prefix(expected.count), expected[...])
        let decoded = try ChangeObject.decode(plaintext)
        XCTAssertEqual(decoded.heldObjects, held)
        XCTAssertEqual(Array(decoded.heldObjects), names)
        // A change read keeps them as the registry's JSON: the same names, the same bytes again.
        XCTAssertEqual(decoded.heldObjects.json(), held.json())
        XCTAssertEqual(decoded.encoded(), plaintext)
        var grown = decoded.heldObjects
        grown.append("one more")
        XCTAssertEqual(Array(grown), names + ["one more"])
        XCTAssertEqual(held, HeldObjects(names))
        XCTAssertNotEqual(held, HeldObjects(names.dropLast()))
    }

    func testANameThatIsNotUTF8IsADecodingError() throws {
        var plaintext = change(held: ["files/x/ab"]).encoded()
        let at = try XCTUnwrap(plaintext.firstRange(of: Array("ab".utf8))).lowerBound
        plaintext[at] = 0xff
        XCTAssertThrowsError(try ChangeObject.decode(plaintext)) { error in
            XCTAssertEqual((error as? CovenError)?.code, .decoding)
        }
    }

    func testTheRegistryKeepsTheNamesAsJSONAndGCReadsThemBack() throws {
        let names = ["files/x/abc", "quote\" back\\slash", "tab\tcontrol\u{1f}", "é", ""] + Self.names(2)
        XCTAssertEqual(String(decoding: HeldObjects(names).json(), as: UTF8.self), RecordedChanges.json(ids: names))
        XCTAssertEqual(String(decoding: HeldObjects().json(), as: UTF8.self), "[]")
        let database = try Database(path: ":memory:", create: true)
        try database.execute("""
            CREATE TABLE coven_device_registry (device TEXT PRIMARY KEY, applied_seq INTEGER NOT NULL DEFAULT 0, frontier TEXT NOT NULL DEFAULT '{}',
                held_objects TEXT NOT NULL DEFAULT '[]', gone INTEGER NOT NULL DEFAULT 0);
            INSERT INTO coven_device_registry (device) VALUES ('d1');
            """)
        let sync = SyncState(database: database)
        try sync.setApplied(device: "d1", seq: 4, frontier: ["d2": 1], heldObjects: HeldObjects(names))
        XCTAssertEqual(try sync.heldObjects(), ["d1": Set(names)])
        XCTAssertEqual(try database.scalar("SELECT typeof(held_objects) || applied_seq || frontier FROM coven_device_registry").textValue, "text4{\"d2\":1}")
        try sync.setApplied(device: "d1", seq: 5, frontier: [:])
        XCTAssertEqual(try sync.heldObjects(), [:])
    }
}

import XCTest
@testable import CovenKit

final class RowEntryTests: XCTestCase {
    func testRoundTripOfEveryValueType() throws {
        let entries = [
            RowEntry(kind: .upsert, table: "songs", id: "a", stamp: "s1", columns: ["id", "n", "r", "t", "b", "z"],
                     values: [.text("a"), .integer(-1), .real(2.5), .text("héllo\n\t"), .blob([0, 255, 7]), .null]),
            RowEntry(kind: .upsert, table: "songs", id: "b", stamp: "s2", columns: ["n"], values: [.integer(Int64.min)]),
            RowEntry(kind: .upsert, table: "songs", id: "c", stamp: "s2", columns: ["n"], values: [.integer(Int64.max)]),
            RowEntry(kind: .delete, table: "songs", id: "d", stamp: "s3"),
            RowEntry(kind: .retract, table: "lists", id: "e", stamp: "s4"),
        ]
        let bytes = RowEntryCodec.encode(entries)
        XCTAssertEqual(try RowEntryCodec.decode(bytes), entries)
        XCTAssertEqual(try RowEntryCodec.decode(RowEntryCodec.encode([])), [])
    }

    func testTruncatedTrailingAndUnknownTagsAreDecodingErrors() throws {
        let bytes = RowEntryCodec.encode([RowEntry(kind: .upsert, table: "t", id: "i", stamp: "s", columns: ["c"], values: [.text("v")])])
        for cut in 0..<bytes.count {
            XCTAssertThrowsError(try RowEntryCodec.decode(Array(bytes[0..<cut]))) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
        }
        XCTAssertThrowsError(try RowEntryCodec.decode(bytes + [0])) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
        var badKind = bytes
        badKind[1] = 9
        XCTAssertThrowsError(try RowEntryCodec.decode(badKind)) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
        var badTag = bytes
        badTag[badTag.count - 3] = 7
        XCTAssertThrowsError(try RowEntryCodec.decode(badTag)) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
        // A count claiming more entries than bytes does not allocate for them.
        XCTAssertThrowsError(try RowEntryCodec.decode([0xff, 0xff, 0xff, 0xff, 0x0f])) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
    }
}

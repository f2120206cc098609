import Foundation
import XCTest

@testable import coven

/// JSONText.Writer, the writer long lists (`lost --json`) print through, gives the text of
/// Foundation's JSONSerialization (JSONText.render) byte for byte: its key order, its escapes.
final class JSONWriterTests: XCTestCase {
    func testWritesWhatFoundationWrites() throws {
        var awkward = "quote \" backslash \\ slash / tab \t newline \n return \r é 😀 \u{7f} \u{2028}"
        for value in UInt32(0)..<0x20 { awkward.unicodeScalars.append(Unicode.Scalar(value)!) }
        let values: [Any] = [
            [String: Any](),
            ["b": 1, "a": "x", "_updated_at": "2026", "col10": true, "col9": false, "Col2": NSNull(), "col_2": Int64(-7), "colA": 1.5,
             "ÉTÉ": "été", "été": [1, "two", NSNull(), ["nested": ["deeper": Int64.max]]], "": "empty key", "a b": 0.1],
            [awkward: awkward, "k\u{1}": "v\u{1f}"],
            ["id": Int64(3), "table": "tracks", "row": "r", "values": ["title": "b", "file": NSNull(), "_updated_at": "s"],
             "restorable": true, "restored_at": NSNull(), "winner_stamp": "w", "lost_at": "l", "why": "concurrent"],
            [1, 2.25, "x", [Any](), NSNull(), true],
        ]
        let writer = JSONText.Writer()
        for value in values + [values] {
            XCTAssertEqual(try writer.render(value), try JSONText.render(value))
        }
    }
}

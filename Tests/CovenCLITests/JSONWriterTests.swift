@testable import CovenKit
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

    /// `lost --json` writes each lost value by hand as it is read: the text is the one
    /// JSONText.render gives the object it printed before (every kind of value, escapes,
    /// restored or not, with or without a winner).
    func testALostValueIsWrittenAsFoundationWritesIt() throws {
        let writer = JSONText.Writer()
        let values: [String: SQLValue] = [
            "id": .text("r1"), "title": .text("quote \" and \\ and \n and /"), "n": .integer(-42), "r": .real(4999.5),
            "tiny": .real(1e-7), "whole": .real(3), "cover": .blob([0, 1, 2, 255]), "file": .null, "_updated_at": .text("s"), "Été": .text("é"),
        ]
        let cases = [
            LostValue(id: 7, table: "tracks", rowID: "r1", values: values, columns: Array(values.keys), stamp: "s", device: "d",
                      winnerStamp: "w", lostAt: "l", why: "concurrent", restoredAt: nil),
            LostValue(id: 8, table: "tracks", rowID: "r\u{1}", values: [:], columns: [], stamp: "s", device: "d",
                      winnerStamp: nil, lostAt: "l", why: "parent_deleted", restoredAt: "2026-12-01T00:00:00Z"),
            LostValue(id: 9, table: "t", rowID: "r", values: ["id": .text("r")], columns: ["id"], stamp: "s", device: "d",
                      winnerStamp: "w", lostAt: "l", why: "concurrent", restoredAt: "later"),
        ]
        for lost in cases {
            var rendered: [String: Any] = [:]
            for (column, value) in lost.values { rendered[column] = LostCommand.jsonValue(value) }
            let object: [String: Any] = [
                "id": lost.id, "table": lost.table, "row": lost.rowID, "values": rendered, "stamp": lost.stamp, "device": lost.device,
                "winner_stamp": lost.winnerStamp ?? NSNull(), "lost_at": lost.lostAt, "why": lost.why,
                "restorable": lost.restorable && lost.restoredAt == nil, "restored_at": lost.restoredAt ?? NSNull()]
            XCTAssertEqual(try LostCommand.jsonObject(lost, writer: writer), try JSONText.render(object))
        }
    }
}

@testable import CovenKit
import Foundation
import XCTest

/// The name rule of DESIGN.md "Names written by make-device-only", case by case.
final class DeviceOnlyNameTests: XCTestCase {
    func testTable() {
        let cases: [(given: String, written: String)] = [
            ("plain.flac", "plain.flac"),
            ("Why?.flac", "Why\u{FF1F}.flac"),
            ("a\"b", "a\u{FF02}b"), ("a*b", "a\u{FF0A}b"), ("a:b", "a\u{FF1A}b"), ("a<b", "a\u{FF1C}b"),
            ("a>b", "a\u{FF1E}b"), ("a?b", "a\u{FF1F}b"), ("a\\b", "a\u{FF3C}b"), ("a|b", "a\u{FF5C}b"),
            ("AC/DC", "AC\u{FF0F}DC"),
            ("tab\there", "tab\u{2409}here"), ("nul\u{0}x", "nul\u{2400}x"), ("us\u{1F}x", "us\u{241F}x"),
            ("del\u{7F}x", "del\u{2421}x"),
            ("trailing.", "trailing\u{FF0E}"), ("trailing ", "trailing\u{2420}"), ("a..", "a.\u{FF0E}"),
            (".", "\u{FF0E}"), ("..", ".\u{FF0E}"), (".hidden", ".hidden"), ("in side. x", "in side. x"),
            ("CON.flac", "\u{FF23}ON.flac"), ("con", "\u{FF43}on"), ("Con.tar.gz", "\u{FF23}on.tar.gz"),
            ("NUL", "\u{FF2E}UL"), ("aux.txt", "\u{FF41}ux.txt"), ("COM1", "\u{FF23}OM1"), ("lpt9.x", "\u{FF4C}pt9.x"),
            ("COM0", "COM0"), ("CONSOLE", "CONSOLE"), ("LPT10", "LPT10"), ("xCON", "xCON"),
            ("CON.", "\u{FF23}ON\u{FF0E}"),
            // The text coven_path_text shows for a Latin-1 name: its backslash is made fullwidth.
            ("Caf\\xE9.flac", "Caf\u{FF3C}xE9.flac"),
            ("Café.flac", "Café.flac"),
        ]
        for (given, written) in cases {
            XCTAssertEqual(DeviceOnlyName.written(given), written, "name \(given.debugDescription)")
        }
    }

    func testBytesThatAreNotUTF8AreWrittenAsTheirText() {
        // A Latin-1 name that came through argv: the byte 0xE9 is kept as an escape scalar.
        let name = PathText.string(fromOSBytes: Array("Caf".utf8) + [0xE9] + Array(".flac".utf8))
        XCTAssertEqual(PathText.text(PathText.osBytes(name)), "Caf\\xE9.flac")
        XCTAssertEqual(DeviceOnlyName.written(name), "Caf\u{FF3C}xE9.flac")
    }

    func testLongNamesKeepTheirExtensionAndEndInAnEllipsis() {
        let long = String(repeating: "a", count: 300) + ".flac"
        let written = DeviceOnlyName.written(long)
        XCTAssertEqual(written.utf8.count, 255)
        XCTAssertTrue(written.hasSuffix("\u{2026}.flac"), written)
        XCTAssertEqual(written, String(repeating: "a", count: 255 - 3 - 5) + "\u{2026}.flac")

        // Cut at a character boundary: 3-byte characters never split.
        let wide = String(repeating: "日", count: 100) + ".flac" // 305 bytes
        let cut = DeviceOnlyName.written(wide)
        XCTAssertLessThanOrEqual(cut.utf8.count, 255)
        XCTAssertEqual(cut, String(repeating: "日", count: 82) + "\u{2026}.flac")

        // Exactly 255 bytes stays; 256 is cut.
        let exact = String(repeating: "b", count: 250) + ".flac"
        XCTAssertEqual(DeviceOnlyName.written(exact), exact)
        XCTAssertEqual(DeviceOnlyName.written("b" + exact).utf8.count, 255)

        // No extension: the whole name is cut.
        let bare = DeviceOnlyName.written(String(repeating: "c", count: 300))
        XCTAssertEqual(bare, String(repeating: "c", count: 252) + "\u{2026}")

        // Replacements count: 100 '?' are 300 bytes once fullwidth.
        let marks = DeviceOnlyName.written(String(repeating: "?", count: 100))
        XCTAssertEqual(marks, String(repeating: "\u{FF1F}", count: 84) + "\u{2026}")
    }

    func testClashKeysFoldCaseAndUnicodeForm() {
        XCTAssertEqual(DeviceOnlyName.clashKey(["Album", "Track.flac"]), DeviceOnlyName.clashKey(["album", "track.FLAC"]))
        let nfc = "Caf\u{E9}.flac"
        let nfd = "Cafe\u{301}.flac"
        XCTAssertNotEqual(Array(nfc.utf8), Array(nfd.utf8))
        XCTAssertEqual(DeviceOnlyName.clashKey([nfc]), DeviceOnlyName.clashKey([nfd]))
        XCTAssertEqual(DeviceOnlyName.clashKey([DeviceOnlyName.written("Why?.flac")]), DeviceOnlyName.clashKey(["Why\u{FF1F}.flac"]))
        XCTAssertNotEqual(DeviceOnlyName.clashKey(["a", "b"]), DeviceOnlyName.clashKey([DeviceOnlyName.written("a/b")]))
    }
}

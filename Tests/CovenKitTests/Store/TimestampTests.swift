@testable import CovenKit
import Foundation
import XCTest

/// `Timestamp.iso8601`, written digit by digit, says what `String(format:)` said.
final class TimestampTests: XCTestCase {
    /// The text as it was made before: `String(format:)` over `gmtime_r`'s fields.
    private func formatted(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var time = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&time, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                      Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(millis % 1000))
    }

    func testTheTextIsWhatStringFormatMade() {
        XCTAssertEqual(Timestamp.iso8601(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamp.iso8601(Date(timeIntervalSince1970: 1_795_000_000.5)), "2026-11-18T11:06:40.500Z")
        XCTAssertEqual(Timestamp.iso8601(Date(timeIntervalSince1970: 253_402_300_799.999)), "9999-12-31T23:59:59.999Z")
        var random = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let date = Date(timeIntervalSince1970: Double.random(in: 0..<253_402_300_800, using: &random))
            XCTAssertEqual(Timestamp.iso8601(date), formatted(date))
        }
    }

    /// Before 1970 the milliseconds count down from the second before (String(format:) wrote
    /// a negative field there).
    func testADateBefore1970IsThatInstant() {
        XCTAssertEqual(Timestamp.iso8601(Date(timeIntervalSince1970: -1.5)), "1969-12-31T23:59:58.500Z")
        XCTAssertEqual(Timestamp.iso8601(Date(timeIntervalSince1970: -86_400)), "1969-12-31T00:00:00.000Z")
    }
}

import CovenKit
@testable import CovenKit
import Foundation
import XCTest

/// The hybrid logical clock behind `_updated_at`: stamps sort as text in the order they were
/// made, whatever the wall clock does.
final class HybridClockTests: DeviceTestCase {
    func testStampsOnlyGrowWhenTheWallClockStandsStillOrGoesBack() throws {
        let device = try makeDevice()
        let now = Date(timeIntervalSince1970: 1_795_000_000.123)
        var stamps: [String] = []
        for _ in 0..<3 { stamps.append(try HybridClock.next(device: device, now: now)) }
        // The wall clock set back an hour: the clock stays ahead.
        stamps.append(try HybridClock.next(device: device, now: now.addingTimeInterval(-3600)))
        stamps.append(try HybridClock.next(device: device, now: now.addingTimeInterval(1)))
        XCTAssertEqual(stamps, stamps.sorted())
        XCTAssertEqual(Set(stamps).count, stamps.count)
        XCTAssertTrue(stamps[0].hasPrefix("2026-11-18T") && stamps[0].hasSuffix("-0000-" + device.deviceID), stamps[0])
        XCTAssertTrue(stamps[1].contains(".123Z-0001-"), stamps[1])
    }

    /// Past 0xffff stamps in one millisecond the counter would need a fifth digit and sort
    /// wrong as text: the clock moves to the next millisecond.
    func testTheCounterNeverOutgrowsFourDigits() throws {
        let device = try makeDevice()
        let now = Date(timeIntervalSince1970: 1_795_000_000.5)
        try device.setSetting("hlc", "2026-11-18T11:06:40.500Z-fffe-" + device.deviceID)
        let a = try HybridClock.next(device: device, now: now)
        let b = try HybridClock.next(device: device, now: now)
        XCTAssertTrue(a.contains(".500Z-ffff-"), a)
        XCTAssertTrue(b.contains(".501Z-0000-"), b)
        XCTAssertLessThan(a, b)
    }

    /// A stamp's device is all after its fourth `-` (the time's two, the counter's, then the
    /// device id with its own); a stamp of another shape has none.
    func testTheDeviceOfAStampIsAllAfterItsFourthDash() {
        let device = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"
        XCTAssertEqual(HybridClock.device(of: "2026-12-04T10:00:00.000Z-00a1-" + device), device)
        XCTAssertEqual(HybridClock.device(of: "a-b-c-d-"), "")
        XCTAssertEqual(HybridClock.device(of: "a-b-c-d-é-f"), "é-f")
        XCTAssertNil(HybridClock.device(of: "a-b-c-d"))
        XCTAssertNil(HybridClock.device(of: ""))
    }
}

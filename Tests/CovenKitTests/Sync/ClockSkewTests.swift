@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A device whose clock runs ten years fast (issue "Sync that notices damage", item 10): its
/// stamps no longer drag every other device's clock along, the devices that apply its changes
/// say so and `coven devices` shows it, and an edit made after seeing one of its rows still
/// beats it (causality), on every device.
final class ClockSkewTests: DeviceTestCase {
    let album2 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"

    /// Sets `device`'s clock ten years ahead of the wall clock.
    func runFast(_ device: Device) throws {
        let future = Date().addingTimeInterval(10 * 365 * 86400)
        try device.database.transaction {
            try device.setSetting("hlc", Timestamp.iso8601(future) + "-0000-" + device.deviceID)
        }
    }

    func year(_ stamp: String?) -> Int { Int((stamp ?? "").prefix(4)) ?? 0 }
    var thisYear: Int { Calendar(identifier: .gregorian).component(.year, from: Date()) }

    func testAFastDeviceDoesNotDragTheOthersAndEditsOfItsRowsStillWin() throws {
        let fast = try makeDevice(name: "fast")
        let b = try join("b", from: fast)
        try runFast(fast)
        try fast.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'from the future'), ('\(album2)', 'doomed')")
        _ = try StoreSync(fast).sync()
        let pulled = try StoreSync(b).sync()
        XCTAssertGreaterThan(pulled.pulled.clockAhead[fast.deviceID] ?? 0, 9 * 365 * 86400 * 1000)
        XCTAssertGreaterThan(try StoreSync(b).devices().first { $0.id == fast.deviceID }?.clockAhead ?? 0, 9 * 365 * 86400 * 1000)
        XCTAssertNil(try StoreSync(b).devices().first { $0.thisDevice }?.clockAhead)

        // b's own writes stay in its own time.
        try b.write(sql: "INSERT INTO settings (id, value) VALUES ('k', 'now')")
        XCTAssertEqual(year(try b.database.scalar("SELECT _updated_at FROM settings WHERE id = 'k'").textValue), thisYear)

        // An edit and a delete b makes after seeing the fast device's rows beat them.
        try b.write(sql: "UPDATE albums SET title = 'edited on b' WHERE id = '\(Self.album)'")
        try b.write(sql: "DELETE FROM albums WHERE id = '\(album2)'")
        let edited = try XCTUnwrap(b.database.scalar("SELECT _updated_at FROM albums WHERE id = ?1", [Self.album]).textValue)
        XCTAssertGreaterThan(year(edited), thisYear + 8, "stamped after the row it edits")
        XCTAssertTrue(edited.hasSuffix(b.deviceID))
        _ = try StoreSync(b).sync()
        _ = try StoreSync(fast).sync()
        XCTAssertEqual(try fast.database.scalar("SELECT title FROM albums WHERE id = ?1", [Self.album]).textValue, "edited on b")
        XCTAssertEqual(try fast.database.scalar("SELECT count(*) FROM albums WHERE id = ?1", [album2]).intValue, 0)
        XCTAssertEqual(try StoreSync(fast).lostValues().filter { $0.why == "concurrent" }.count, 0, "b had seen those rows: no conflict")

        // An insert over a row the fast device deleted beats the delete too.
        try fast.write(sql: "DELETE FROM albums WHERE id = '\(Self.album)'")
        _ = try StoreSync(fast).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'back')")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(fast).sync()
        XCTAssertEqual(try fast.database.scalar("SELECT title FROM albums WHERE id = ?1", [Self.album]).textValue, "back")
    }

    func testAClockWithinFiveMinutesMovesTheOthersAsBefore() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let ahead = Date().addingTimeInterval(60)
        try a.database.transaction { try a.setSetting("hlc", Timestamp.iso8601(ahead) + "-0000-" + a.deviceID) }
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', 'v')")
        _ = try StoreSync(a).sync()
        let pulled = try StoreSync(b).sync()
        XCTAssertTrue(pulled.pulled.clockAhead.isEmpty)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(b.setting("hlc")), try XCTUnwrap(a.database.scalar("SELECT _updated_at FROM settings").textValue))
    }
}

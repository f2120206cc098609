@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Three devices of one store on a real S3 server on loopback: moto (signature-checking), and
/// SeaweedFS below.
class SyncS3Tests: DeviceTestCase {
    override class var s3Server: S3TestServer.Kind? { .moto }


    func dump(_ device: Device) throws -> [String] {
        try ["albums", "tracks", "settings", "coven_files"].flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { "\(table): \($0.values.map { $0.textValue ?? "NULL" })" }
        }
    }

    func testThreeDevicesConvergeWithConcurrentEditsAndAConflictCopyIsStopped() throws {
        let devices = try makeDevices(3)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(DeviceTestCase.album)', 'first')")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(c).sync()
        XCTAssertEqual(try c.database.scalar("SELECT title FROM albums").textValue, "first")
        try b.write(sql: "UPDATE albums SET title = 'from b'")
        try c.write(sql: "UPDATE albums SET title = 'from c'")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', 'a')")
        for _ in 0..<2 { for device in devices { _ = try StoreSync(device).sync() } }
        let dumps = try devices.map(dump)
        XCTAssertEqual(dumps[0], dumps[1])
        XCTAssertEqual(dumps[0], dumps[2])
        XCTAssertEqual(try a.database.scalar("SELECT title FROM albums").textValue, "from c")
        for device in devices { XCTAssertEqual(try StoreSync(device).lostValues().map { $0.values["title"] }, [.text("from b")]) }
        // A quiet sync asks for one object per other device and lists devices/ once.
        XCTAssertTrue(try StoreSync(a).sync().quiet)

        // Put-if-absent holds on S3 too: a second copy of b that froze a change of its own
        // at the seq b publishes is stopped.
        let copy = DevicePaths(database: work + "/copy/device.db")
        try FileManager.default.createDirectory(atPath: work + "/copy", withIntermediateDirectories: true)
        try b.database.execute("VACUUM INTO '\(copy.database)'")
        try FileManager.default.copyItem(atPath: b.paths.folder, toPath: copy.folder)
        let twin = try Device.open(paths: copy)
        twin.storageEnvironment = b.storageEnvironment
        try twin.write(sql: "INSERT INTO settings (id, value) VALUES ('twin', '1')")
        let failing = CrashingStorage(try twin.connectStorage())
        failing.failBeforePut = true
        XCTAssertThrowsError(try StoreSync(twin, storage: failing).push())
        try b.write(sql: "INSERT INTO settings (id, value) VALUES ('b', '1')")
        _ = try StoreSync(b).sync()
        XCTAssertThrowsError(try StoreSync(twin).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceConflict) }
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM settings WHERE id = 'twin'").intValue, 0)
    }
}

final class SyncSeaweedFSTests: SyncS3Tests {
    override class var s3Server: S3TestServer.Kind? { .seaweedfs }

    // Test discovery on Linux finds a class's own methods only.
    override func testThreeDevicesConvergeWithConcurrentEditsAndAConflictCopyIsStopped() throws {
        try super.testThreeDevicesConvergeWithConcurrentEditsAndAConflictCopyIsStopped()
    }
}

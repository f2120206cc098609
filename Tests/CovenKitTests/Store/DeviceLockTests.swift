import CovenKit
@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The device lock: a second mutating command waits for it, `--no-wait` fails at once with
/// `busy`, and read-only commands never block on it.
final class DeviceLockTests: DeviceTestCase {
    func testASecondHolderIsRefusedWithoutWaiting() throws {
        try makeDevice()
        let held = try DeviceLock(path: paths.lock, wait: false)
        let error = assertCovenError(.busy) { try DeviceLock(path: paths.lock, wait: false) }
        XCTAssertEqual(error?.details["path"], paths.lock)
        _ = held
    }

    func testReleasedWhenTheHolderGoes() throws {
        try makeDevice()
        do { _ = try DeviceLock(path: paths.lock, wait: false) }
        XCTAssertNoThrow(try DeviceLock(path: paths.lock, wait: false))
    }

    func testInProcessWritesRefuseUnderNoWait() throws {
        let device = try makeDevice()
        let held = try DeviceLock(path: paths.lock, wait: false)
        defer { _ = held }
        assertCovenError(.busy) { try device.write(sql: "INSERT INTO settings (id) VALUES ('x')", wait: false) }
        let path = try file("cover.png", "PNG")
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        assertCovenError(.busy) { try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: "covers", place: .cloud, wait: false) }
        assertCovenError(.busy) { try Staging(device).prepareUserFile(path: try file("song.flac", "fLaC"), namespace: "music", place: .cloud, wait: false) }
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [], "--no-wait fails before copying anything")
        // Reads never need it.
        let reader = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try DeviceStatus(of: reader).files.total, 0)
    }

    /// The real binary: a mutating command waits while another holds the lock and runs once
    /// it is released; `--no-wait` fails at once with status 9; `coven sql` and `status` run.
    func testTheBinaryWaitsOrFailsBusyAndReadsNeverBlock() throws {
        let binary = try covenBinary()
        try makeDevice()
        var environment = ProcessInfo.processInfo.environment
        environment["COVEN_DB"] = paths.database
        var held: DeviceLock? = try DeviceLock(path: paths.lock, wait: false)

        let busy = try coven(["--no-wait", "write", "INSERT INTO settings (id, value) VALUES ('theme', 'dark')"], timeout: 10)
        XCTAssertEqual(busy.status, 9, busy.stderr)
        XCTAssertTrue(busy.stderr.hasPrefix("coven: error: busy: "), busy.stderr)

        let read = try coven(["sql", "SELECT count(*) FROM settings"], timeout: 10)
        XCTAssertEqual(read.status, 0, read.stderr)
        XCTAssertEqual(read.stdout, "0\n")
        XCTAssertEqual(try coven(["--json", "status"], timeout: 10).status, 0)
        XCTAssertEqual(try coven(["key", "export"], timeout: 10).status, 0)

        let waiting = try Spawn.start(binary, ["write", "INSERT INTO settings (id, value) VALUES ('theme', 'dark')"],
                                      environment: environment, directory: work)
        Thread.sleep(forTimeInterval: 1.0)
        XCTAssertTrue(Spawn.isRunning(waiting), "the second mutating command waits for the lock")
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM settings"], timeout: 10).stdout, "0\n")
        held = nil
        let result = Spawn.wait(waiting, timeout: 30)
        XCTAssertEqual(result.status, 0)
        XCTAssertFalse(result.timedOut)
        XCTAssertNil(held)
        XCTAssertEqual(try coven(["sql", "SELECT value FROM settings"], timeout: 10).stdout, "dark\n")
    }
}

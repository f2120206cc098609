import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven fsck` killed with SIGKILL part way: the batches it committed stay verified, and the
/// next run goes on (moto behind the fault proxy, which holds one object's GET up).
final class FsckKillCLITests: XCTestCase {
    func testAFsckKilledPartWayKeepsWhatItVerified() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-fsckkill")
        defer { s3.stop() }
        let folder = try TestPaths.temporaryDirectory("fsck-kill")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = s3.location()
        let paths = DevicePaths(database: folder + "/device.db")
        let count = 100
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "fsckkill")
            var last = ""
            for n in 0..<count { last = try StoredFiles.stageApp(device, bytes: [UInt8](repeating: UInt8(n), count: 1000 + n), namespace: "blobs", table: "blobs") }
            _ = try StoredFiles.store(device, file: last)
        }
        // The first 70 GETs of objects go through (the first batch of 64 is verified and
        // committed); the 71st is held up, so the second batch never ends.
        try s3.proxy.inject(#"{"mode": "stall", "seconds": 60, "after_bytes": 0, "method": "GET", "path": "/files/", "skip": 70, "count": 1}"#)
        var environment = s3.server.environment
        environment["COVEN_DB"] = paths.database
        environment["PATH"] = "/usr/bin:/bin"
        let child = try Spawn.start(try Repository.covenBinary(), ["fsck"], environment: environment,
                                    stdout: folder + "/out", stderr: folder + "/err")
        let reader = try Device.open(paths: paths, readOnly: true)
        let deadline = Date().addingTimeInterval(60)
        var verified: Int64 = 0
        while Date() < deadline {
            verified = (try? reader.database.scalar("SELECT count(*) FROM coven_fsck_verified WHERE kind = 'object'").intValue) ?? 0
            let held = s3.proxy.requests().contains { $0.contains("/files/") && $0.hasSuffix(" stall") }
            if verified >= 64 && held { break }
            usleep(20_000)
        }
        XCTAssertEqual(verified, 64, "the first batch, committed")
        XCTAssertEqual(kill(child.pid, SIGKILL), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 30)
        XCTAssertFalse(timedOut)
        XCTAssertNotEqual(status, 0)
        try s3.proxy.clear()

        let fast = try Processes.run(try Repository.covenBinary(), ["--json", "fsck", "--fast"], environment: environment, directory: folder)
        XCTAssertEqual(fast.status, 0, fast.stderrText)
        let summary = try XCTUnwrap(JSONSerialization.jsonObject(with: fast.stdout) as? [String: Any])
        XCTAssertEqual(summary["never_verified"] as? Int, count - 64, "what the killed run verified stays verified")
        let full = try Processes.run(try Repository.covenBinary(), ["--json", "fsck", "--progress-json"], environment: environment, directory: folder)
        XCTAssertEqual(full.status, 0, full.stderrText)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: full.stdout) as? [String: Any])
        XCTAssertEqual(result["never_verified"] as? Int, 0)
        XCTAssertEqual(result["objects_checked"] as? Int, count)
        // Progress: JSON lines on stderr, each one object with its phase.
        let lines = full.stderrText.split(separator: "\n")
        XCTAssertFalse(lines.isEmpty)
        for line in lines {
            let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], String(line))
            XCTAssertNotNil(object["phase"] as? String)
        }
    }
}

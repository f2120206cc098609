import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven fetch-kept` stopped by Ctrl-C (SIGINT): exit 130, the files already fetched stay.
/// The second file's request is held by the fault proxy, so the signal arrives mid-run.
final class FetchKeptSignalTests: XCTestCase {
    func testCtrlCStopsAndKeepsWhatWasFetched() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-sigint")
        defer { s3.stop() }
        let (server, proxy) = (s3.server, s3.proxy)
        let folder = try TestPaths.temporaryDirectory("fetch-kept-sigint")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = s3.location()
        let paths = DevicePaths(database: folder + "/device.db")
        var small = ""
        var large = ""
        var largeObject = ""
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "sigint", table: "keep", kept: true)
            small = try StoredFiles.stageApp(device, bytes: [UInt8](repeating: 1, count: 1000), namespace: "keep", table: "keep")
            try StoredFiles.store(device, file: small)
            large = try StoredFiles.stageApp(device, bytes: (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }, namespace: "keep", table: "keep")
            largeObject = try StoredFiles.store(device, file: large)
        }
        // Hold the large file's first request for a few seconds.
        let name = String(largeObject.split(separator: "/").last ?? "")
        try proxy.inject(#"{"mode": "stall", "seconds": 4, "after_bytes": 0, "method": "GET", "path": "\#(name)", "count": 1}"#)

        var environment = server.environment
        environment["COVEN_DB"] = paths.database
        environment["PATH"] = "/usr/bin:/bin"
        environment["COVEN_STORAGE_BYTES_TIMEOUT"] = "30"
        let out = folder + "/out.json"
        let child = try Spawn.start(try Repository.covenBinary(), ["--json", "fetch-kept"], environment: environment,
                                    stdout: out, stderr: folder + "/err.txt")
        // Wait until the small file is held, then press Ctrl-C while the large one is held up.
        let reader = try Device.open(paths: paths, readOnly: true)
        let smallObject = try reader.requireFile(small).coordinates.object
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let complete = try? reader.database.scalar("SELECT complete FROM coven_cache WHERE object = ?1", [smallObject]).intValue
            if (complete ?? 0) >= 1 { break }
            usleep(20_000)
        }
        usleep(200_000)
        XCTAssertEqual(kill(child.pid, SIGINT), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 60)
        XCTAssertFalse(timedOut)
        XCTAssertEqual(status, 130, (try? String(contentsOfFile: folder + "/err.txt", encoding: .utf8)) ?? "")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out))) as? [String: Any]
        XCTAssertEqual(json?["stop"] as? String, "interrupted")
        XCTAssertEqual((json?["fetched"] as? [[String: Any]])?.compactMap { $0["file"] as? String }, [small])
        XCTAssertEqual(json?["exit_code"] as? Int, 130)
        let after = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try after.database.scalar("SELECT complete FROM coven_cache WHERE object = ?1", [smallObject]).intValue, 2)
        XCTAssertEqual(try after.database.scalar("SELECT complete FROM coven_cache WHERE object = ?1", [largeObject]).intValue ?? 0, 0)
    }
}

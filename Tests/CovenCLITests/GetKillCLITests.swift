import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven get` killed with SIGKILL part way through a fetch: what it recorded stays as a
/// partial, never answered as the file, and the next `get` fetches only the rest.
final class GetKillCLITests: XCTestCase {
    func testAGetKilledPartWayResumesWithTheChunksItRecorded() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-getkill")
        defer { s3.stop() }
        let (server, proxy) = (s3.server, s3.proxy)
        let folder = try TestPaths.temporaryDirectory("get-kill")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = s3.location()
        let paths = DevicePaths(database: folder + "/device.db")
        // 24 MiB: the reader records its chunks every 16 MiB.
        let bytes = (0..<(24 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
        let id: String
        let object: String
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "getkill")
            id = try StoredFiles.stageApp(device, bytes: bytes, namespace: "blobs", table: "blobs")
            object = try StoredFiles.store(device, file: id)
        }
        // The first 18 requests of the object (18 MiB) go through; the 19th is held up.
        let name = String(object.split(separator: "/").last ?? "")
        try proxy.inject(#"{"mode": "stall", "seconds": 60, "after_bytes": 0, "method": "GET", "path": "\#(name)", "skip": 18, "count": 1}"#)
        let before = proxy.stats()["body_bytes"] ?? 0

        var environment = server.environment
        environment["COVEN_DB"] = paths.database
        environment["PATH"] = "/usr/bin:/bin"
        environment["COVEN_STORAGE_BYTES_TIMEOUT"] = "120"
        let child = try Spawn.start(try Repository.covenBinary(), ["get", id], environment: environment,
                                    stdout: folder + "/out", stderr: folder + "/err")
        // Wait until the first 16 MiB are recorded and the held-up request has begun.
        let reader = try Device.open(paths: paths, readOnly: true)
        let deadline = Date().addingTimeInterval(60)
        var recorded: Int64 = 0
        while Date() < deadline {
            recorded = (try? reader.database.scalar("SELECT bytes FROM coven_cache WHERE object = ?1", [object]).intValue) ?? 0
            // The proxy logs a request as it begins; its counters only once it ends.
            let held = proxy.requests().contains { $0.contains(name) && $0.hasSuffix(" stall") }
            if recorded >= 16 << 20 && held { break }
            usleep(20_000)
        }
        XCTAssertGreaterThanOrEqual(recorded, 16 << 20)
        XCTAssertEqual(kill(child.pid, SIGKILL), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 30)
        XCTAssertFalse(timedOut)
        XCTAssertNotEqual(status, 0)

        // A partial: never answered as the file.
        let after = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try after.database.scalar("SELECT complete FROM coven_cache WHERE object = ?1", [object]).intValue, 0)
        XCTAssertEqual(try after.database.scalar("SELECT bytes FROM coven_cache WHERE object = ?1", [object]).intValue, recorded)

        try proxy.clear()
        let resumedFrom = proxy.stats()["body_bytes"] ?? 0
        XCTAssertGreaterThan(resumedFrom, before)
        let again = try Spawn.start(try Repository.covenBinary(), ["get", id], environment: environment,
                                    stdout: folder + "/out", stderr: folder + "/err")
        let (againStatus, againTimedOut) = Spawn.wait(again, timeout: 60)
        XCTAssertFalse(againTimedOut)
        XCTAssertEqual(againStatus, 0, (try? String(contentsOfFile: folder + "/err", encoding: .utf8)) ?? "")
        let path = ((try? String(contentsOfFile: folder + "/out", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes, "the whole file, checked")
        // Only the chunks not recorded were fetched again. (The proxy writes its counters once
        // a request has ended, which may be just after the client has its last byte.)
        let missing = Int64(bytes.count) - recorded
        let expected = missing / ObjectLayout.chunkSize * ObjectLayout.sealedChunkSize
        var fetchedAgain: Int64 = 0
        let counted = Date().addingTimeInterval(5)
        repeat {
            fetchedAgain = Int64((proxy.stats()["body_bytes"] ?? 0) - resumedFrom)
            if fetchedAgain >= expected { break }
            usleep(20_000)
        } while Date() < counted
        XCTAssertEqual(fetchedAgain, expected)
        XCTAssertEqual(try Device.open(paths: paths, readOnly: true).database.scalar(
            "SELECT complete FROM coven_cache WHERE object = ?1", [object]).intValue, 2, "complete, synced and hash-checked")
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven get` of many files stopped by Ctrl-C (SIGINT): exit 130, the lines of the files held
/// before the first one not held printed, nothing after it; the next run holds the rest. The
/// second file's request is held by the fault proxy, so the signal arrives mid-run.
final class GetManySignalTests: XCTestCase {
    func testCtrlCPrintsTheFilesHeldInOrderUpToTheFirstNotHeldAndTheRerunHoldsTheRest() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-get-sigint")
        defer { s3.stop() }
        let (server, proxy) = (s3.server, s3.proxy)
        let folder = try TestPaths.temporaryDirectory("get-many-sigint")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = s3.location()
        let paths = DevicePaths(database: folder + "/device.db")
        let contents: [[UInt8]] = [[UInt8](repeating: 1, count: 1000), (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) },
                                   [UInt8](repeating: 3, count: 2000)]
        var files: [String] = []
        var objects: [String] = []
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "sigint")
            for content in contents {
                let id = try StoredFiles.stageApp(device, bytes: content, namespace: "blobs", table: "blobs")
                files.append(id)
                objects.append(try StoredFiles.store(device, file: id))
            }
        }
        // Hold the large (second) file's first request for a few seconds.
        let name = String(objects[1].split(separator: "/").last ?? "")
        try proxy.inject(#"{"mode": "stall", "seconds": 4, "after_bytes": 0, "method": "GET", "path": "\#(name)", "count": 1}"#)
        var environment = server.environment
        environment["COVEN_DB"] = paths.database
        environment["PATH"] = "/usr/bin:/bin"
        environment["COVEN_STORAGE_BYTES_TIMEOUT"] = "30"
        let out = folder + "/out.txt"
        let child = try Spawn.start(try Repository.covenBinary(), ["get"] + files, environment: environment, stdout: out, stderr: folder + "/err.txt")
        // Wait until the first and third files are held, then press Ctrl-C while the second is held up.
        let reader = try Device.open(paths: paths, readOnly: true)
        func complete(_ object: String) -> Bool {
            ((try? reader.database.scalar("SELECT complete FROM coven_cache WHERE object = ?1", [object]).intValue) ?? 0) >= 1
        }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline && !(complete(objects[0]) && complete(objects[2])) { usleep(20_000) }
        XCTAssertTrue(complete(objects[0]) && complete(objects[2]), "the small files held while the large one is held up")
        usleep(200_000)
        XCTAssertEqual(kill(child.pid, SIGINT), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 60)
        XCTAssertFalse(timedOut)
        let errors = (try? String(contentsOfFile: folder + "/err.txt", encoding: .utf8)) ?? ""
        XCTAssertEqual(status, 130, errors)
        XCTAssertTrue(errors.contains("interrupted"), errors)
        let printed = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        XCTAssertEqual(printed.count, 1, "the first file's line, none after the file not held: \(printed)")
        XCTAssertEqual(printed.first.flatMap { FileManager.default.contents(atPath: $0) }.map { [UInt8]($0) }, contents[0])
        XCTAssertFalse(complete(objects[1]), "the large file not held")

        try proxy.clear()
        let rerun = try Processes.run(try Repository.covenBinary(), ["get"] + files, environment: environment, directory: folder)
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        let lines = String(decoding: rerun.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3)
        for (line, content) in zip(lines, contents) {
            XCTAssertEqual(FileManager.default.contents(atPath: line).map { [UInt8]($0) }, content, line)
        }
    }
}

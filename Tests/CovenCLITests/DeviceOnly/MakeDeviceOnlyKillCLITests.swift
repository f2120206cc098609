import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// make-device-only from a loopback S3 server (moto) through a fault proxy that stalls one
/// download, so the real binary can be caught mid-call: `kill -9` then the next open cleans up;
/// SIGINT cleans up at once; and `coven sql` sees the two phases (copies on disk, records still
/// stored; then one write switching them all).
///
/// `COVEN_SKIP_S3=1` skips them.
final class MakeDeviceOnlyKillCLITests: XCTestCase {
    nonisolated(unsafe) static var server: S3TestServer?
    nonisolated(unsafe) static var bucket = ""
    nonisolated(unsafe) static var startFailure: String?

    override class func setUp() {
        super.setUp()
        guard ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] != "1" else { return }
        do {
            let server = try S3TestServer.start(.moto)
            bucket = "coven-mdo-" + UUID().uuidString.lowercased().prefix(8)
            try server.makeBucket(bucket)
            self.server = server
        } catch {
            startFailure = "cannot start the S3 server: \(error.asCovenError)"
        }
    }

    override class func tearDown() {
        server?.stop()
        server = nil
        super.tearDown()
    }

    var proxy: FaultProxy!
    var cli: CLIDevice!
    var ids: [String] = []
    var objectNames: [String] = []
    let first = patternBytes(300_000, seed: 1)
    let second = patternBytes(400_000, seed: 2)

    override func setUpWithError() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        guard let server = Self.server else { throw TestError(Self.startFailure ?? "no S3 server") }
        proxy = try FaultProxy(upstream: server.endpoint)
        let prefix = "t-" + UUID().uuidString.lowercased().prefix(8)
        var extra = server.environment
        extra["AWS_ENDPOINT_URL"] = proxy.endpoint
        cli = try CLIDevice("mdo-kill", storage: "s3://\(Self.bucket)/\(prefix)?path_style=true", extra: extra)
        ids = try cli.storedFiles([first, second])
        objectNames = try ids.map { id in
            let object = try XCTUnwrap(cli.sql("SELECT json_extract(coordinates, '$.object') FROM coven_files WHERE id = '\(id)'").first)
            return String(object.split(separator: "/").last ?? "")
        }
        try FileManager.default.createDirectory(atPath: cli.work + "/Music/Existing", withIntermediateDirectories: true)
    }

    override func tearDown() {
        proxy?.stop()
        proxy = nil
        cli = nil
    }

    /// Starts the call with the second file's download stalled after 64 KiB, and waits until
    /// the first copy is whole at its final name.
    func startStalled(seconds: Int) throws -> Spawn.Child {
        try proxy.inject("{\"mode\": \"stall\", \"seconds\": \(seconds), \"after_bytes\": 65536, \"method\": \"GET\", \"path\": \"\(objectNames[1])\"}")
        let child = try cli.start(["make-device-only", "--folder", "Music", "--parallel", "1",
                                   "\(ids[0])=Existing/New/one.bin", "\(ids[1])=Other/two.bin"], label: "call")
        let firstCopy = cli.work + "/Music/Existing/New/one.bin"
        XCTAssertTrue(cli.waitUntil(30) {
            FileManager.default.contents(atPath: firstCopy)?.count == first.count
                && cli.tree("Music/Other").contains { $0.hasPrefix(".coven-") }
        }, "the first copy never appeared: \(cli.output("call", "err"))")
        usleep(200_000)
        return child
    }

    func testKillMidDownloadThenTheNextOpenCleansUp() throws {
        let child = try startStalled(seconds: 60)
        // Phase one, seen from coven sql: a whole copy on disk, every record still stored.
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["0"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_device_only_made WHERE committed = 0").first.flatMap(Int.init) ?? 0 > 0, true)

        kill(child.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
        XCTAssertTrue(cli.tree("Music").contains("Existing/New/one.bin"), "\(cli.tree("Music"))")

        // The next command that opens the device cleans up, even one that only reads (coven sql,
        // file-status): no `.coven-<id>.tmp` is left in the person's folder.
        let read = try cli.run(["file-status", ids[0]])
        XCTAssertEqual(read.status, 0, read.stderrText)
        XCTAssertEqual(cli.tree("Music"), ["Existing"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_device_only_made"), ["0"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["2"])

        // Without the fault the call completes, and one write switches both files.
        try proxy.clear()
        let result = try cli.run(["make-device-only", "--folder", "Music", "\(ids[0])=Existing/New/one.bin", "\(ids[1])=Other/two.bin"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(cli.tree("Music"), ["Existing", "Existing/New", "Existing/New/one.bin", "Other", "Other/two.bin"])
        XCTAssertEqual(FileManager.default.contents(atPath: cli.work + "/Music/Other/two.bin").map([UInt8].init), second)
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["2"])
    }

    func testTwoPhasesSeenFromCovenSQL() throws {
        let child = try startStalled(seconds: 2)
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["0"])
        // The stall ends, the download resumes from where it was, and one write switches both.
        XCTAssertEqual(Spawn.wait(child, timeout: 60).status, 0, cli.output("call", "err"))
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT coven_path_text(path) FROM coven_user_files ORDER BY size"),
                       ["\(cli.work)/Music/Existing/New/one.bin", "\(cli.work)/Music/Other/two.bin"])
        XCTAssertEqual(try cli.sql("SELECT count(DISTINCT _updated_at) FROM coven_files"), ["1"])
        XCTAssertEqual(cli.tree("Music"), ["Existing", "Existing/New", "Existing/New/one.bin", "Other", "Other/two.bin"])
    }

    func testSigintRemovesWhatTheCallMade() throws {
        let child = try startStalled(seconds: 3)
        kill(child.pid, SIGINT)
        let status = Spawn.wait(child, timeout: 60).status
        XCTAssertEqual(status, 130, cli.output("call", "err"))
        XCTAssertTrue(cli.output("call", "err").contains("interrupted"), cli.output("call", "err"))
        XCTAssertEqual(cli.tree("Music"), ["Existing"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_device_only_made"), ["0"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["0"])
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// upload-worker against a real S3 server behind the fault proxy: a signal ends a stalled
/// request at once (130, the upload resumable), and a credentials refusal ends the run at once.
final class UploadWorkerStopTests: XCTestCase {
    var s3: ProxiedS3!
    var cli: CLIDevice!

    override func setUpWithError() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        s3 = try ProxiedS3(bucketPrefix: "coven-stop")
        var extra = s3.server.environment
        extra["AWS_ENDPOINT_URL"] = s3.proxy.endpoint
        cli = try CLIDevice("worker-stop", storage: "s3://\(s3.bucket)/store?path_style=true", extra: extra)
    }

    override func tearDown() {
        cli = nil
        s3?.stop()
        s3 = nil
    }

    /// Stages a file of app bytes and puts it in a row; returns the file id.
    func queuedFile(_ bytes: [UInt8]) throws -> String {
        let path = cli.work + "/source-\(UUID().uuidString)"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        let staged = try cli.run(["stage", path, "--namespace", "covers"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        let id = staged.stdoutText.trimmingCharacters(in: .newlines)
        let written = try cli.run(["write", "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_staged('\(id)'), coven_stamp())"])
        XCTAssertEqual(written.status, 0, written.stderrText)
        return written.stdoutText.trimmingCharacters(in: .newlines)
    }

    func testSIGTERMEndsAStalledRequestAtOnceAndTheUploadResumes() throws {
        let file = try queuedFile(patternBytes(300_000, seed: 1))
        try s3.proxy.inject(#"{"mode": "stall", "seconds": 120, "before": true, "method": "PUT", "count": -1}"#)
        for (label, arguments) in [("once", ["upload-worker", "--once"]), ("daemon", ["upload-worker"])] {
            let child = try cli.start(arguments, label: label)
            // Claimed, and its PUT held by the proxy.
            XCTAssertTrue(cli.waitUntil(20) { (try? self.cli.sql("SELECT count(*) FROM coven_upload_queue WHERE worker IS NOT NULL")) == ["1"] }, label)
            sleep(1)
            let sent = Date()
            XCTAssertEqual(kill(child.pid, SIGTERM), 0)
            let (status, timedOut) = Spawn.wait(child, timeout: 10)
            XCTAssertFalse(timedOut, label)
            XCTAssertLessThan(Date().timeIntervalSince(sent), 3, label)
            XCTAssertEqual(status, 130, label + ": " + cli.output(label, "err"))
            XCTAssertTrue(cli.output(label, "err").contains("interrupted"), cli.output(label, "err"))
            XCTAssertEqual(try cli.sql("SELECT state, worker IS NULL, last_error_code IS NULL FROM coven_upload_queue"), ["queued\t1\t1"],
                           "back in the queue, no failure recorded for the stop")
            try s3.proxy.inject(#"{"mode": "stall", "seconds": 120, "before": true, "method": "PUT", "count": -1}"#)
        }
        try s3.proxy.clear()
        let resumed = try cli.run(["upload-worker", "--once"])
        XCTAssertEqual(resumed.status, 0, resumed.stderrText)
        XCTAssertEqual(try cli.run(["file-status", file]).stdoutText, "available\n")
    }

    func testACredentialsRefusalEndsTheRunAtOnceAndTheNextRunTriesAgain() throws {
        let first = try queuedFile(patternBytes(1000, seed: 2))
        _ = try queuedFile(patternBytes(1000, seed: 3))
        let good = cli.environment
        cli.environment["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
        let started = Date()
        let refused = try cli.run(["upload-worker", "--once"])
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "no retries of a refusal")
        XCTAssertEqual(refused.status, 10, refused.stderrText)
        XCTAssertTrue(refused.stderrText.contains("storage refused access"), refused.stderrText)
        // Both the refused upload and the one the run left alone go on the next run.
        cli.environment = good
        let again = try cli.run(["upload-worker", "--once"])
        XCTAssertEqual(again.status, 0, again.stderrText)
        XCTAssertEqual(try cli.run(["file-status", first]).stdoutText, "available\n")
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_upload_queue"), ["0"])
    }
}

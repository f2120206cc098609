import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven upload-worker` in the middle of a batch of many small files on
/// the loopback moto server: every object but one reached storage, none was recorded. The next
/// run records those storage holds without sending them again, sends the last, and every file
/// is available.
final class UploadBatchKillTests: XCTestCase {
    func testKillDuringABatchThenRerunSendsNoStoredObjectAgain() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-batch")
        defer { s3.stop() }
        let (server, proxy, bucket) = (s3.server, s3.proxy, s3.bucket)

        let work = try TestPaths.temporaryDirectory("upload-batch-kill")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        for (key, value) in server.environment { environment[key] = value }
        environment["COVEN_DB"] = work + "/device.db"
        try FileManager.default.createDirectory(atPath: work + "/home", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        func coven(_ arguments: [String]) throws -> ProcessResult {
            try Processes.run(binary, arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "originals", "kind": "user", "budget": "1MiB" } ],
              "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] } ],
              "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json"]).status, 0)
        let count = 24
        var contents: [[UInt8]] = []
        var puts: [String] = []
        for index in 0..<count {
            let bytes = Array("track \(index) ".utf8) + [UInt8](repeating: UInt8(index), count: 3000 + index * 100)
            contents.append(bytes)
            try Data(bytes).write(to: URL(fileURLWithPath: work + "/t\(index).flac"))
            let staged = try coven(["stage", "--user", "t\(index).flac", "--namespace", "originals"])
            XCTAssertEqual(staged.status, 0, staged.stderrText)
            puts.append("(coven_uuid7(), coven_put_user_file('\(staged.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))'), '')")
        }
        // One write: one move of every file, switched once all are stored.
        let write = try coven(["write", "INSERT INTO notes VALUES " + puts.joined(separator: ", ")])
        XCTAssertEqual(write.status, 0, write.stderrText)
        let files = write.stdoutText.split(separator: "\n").map(String.init)
        XCTAssertEqual(files.count, count)

        // The 11th PUT never gets an answer: its lane hangs there while the other sends the
        // rest of the batch, which then waits for it, unrecorded.
        try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "PUT", "path": "/files/", "before": true, "skip": 10, "count": 1}"#)
        let worker = try Spawn.start(binary, ["upload-worker", "--once", "--jobs", "1"], environment: environment, directory: work,
                                     stderr: work + "/worker.err")
        func forwardedPuts() -> [String] {
            proxy.requests().filter { $0.hasPrefix("PUT ") && $0.contains("/files/") && $0.hasSuffix(" forwarded") }
        }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline && forwardedPuts().count < count - 1 { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertEqual(forwardedPuts().count, count - 1, "every PUT but the stalled one reached storage")
        kill(worker.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(worker, timeout: 10).status, 128 + SIGKILL)
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM coven_upload_queue WHERE state = 'sending'"]).stdoutText, "\(count)\n")
        XCTAssertEqual(try coven(["file-status", files[0]]).stdoutText, "uploading\n")

        try proxy.clear()
        let before = forwardedPuts().count
        let rerun = try coven(["upload-worker", "--once"])
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        let sent = Array(forwardedPuts().dropFirst(before))
        XCTAssertEqual(sent.count, 1, "only the object storage never got was sent again:\n" + sent.joined(separator: "\n"))
        for file in files { XCTAssertEqual(try coven(["file-status", file]).stdoutText, "available\n", file) }
        for index in [0, 10, count - 1] {
            let read = try coven(["cat", files[index]])
            XCTAssertEqual(read.status, 0, read.stderrText)
            XCTAssertEqual(Array(read.stdout), contents[index])
        }
    }
}

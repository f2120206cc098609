import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven upload-worker` in the middle of a multipart upload to the
/// loopback moto server, then a second run: no confirmed part is sent again and the object
/// decrypts to the original's bytes.
final class UploadWorkerKillTests: XCTestCase {
    func testKillDuringMultipartThenResumeSendsNoConfirmedPartAgain() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        // moto accepts 64 KiB parts with this (its own setting), so the upload has ten parts.
        setenv("S3_UPLOAD_PART_MIN_SIZE", "65536", 1)
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-kill-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: server.endpoint)
        defer { proxy.stop() }

        let work = try TestPaths.temporaryDirectory("upload-kill")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        for (key, value) in server.environment { environment[key] = value }
        environment["COVEN_DB"] = work + "/device.db"
        environment["COVEN_UPLOAD_PART_SIZE"] = "65536"
        environment["COVEN_UPLOAD_SINGLE_LIMIT"] = "0"
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
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<(10 * 65536 - 100)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try Data(bytes).write(to: URL(fileURLWithPath: work + "/song.flac"))

        let storage = "s3://\(bucket)/store?endpoint=\(proxy.endpoint)&path_style=true"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json"]).status, 0)
        let staged = try coven(["stage", "--user", "song.flac", "--namespace", "originals"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        let id = staged.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let write = try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(id)'), '')"])
        XCTAssertEqual(write.status, 0, write.stderrText)
        let file = write.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)

        // Part 5 never gets an answer: the worker hangs there, having confirmed every other part
        // (it sends two parts at once and records each as soon as the provider confirms it).
        try proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "PUT", "path": "partNumber=5&", "before": true, "count": 1}"#)
        let worker = try Spawn.start(binary, ["upload-worker", "--once", "--jobs", "1"], environment: environment, directory: work,
                                     stderr: work + "/worker.err")
        let deadline = Date().addingTimeInterval(60)
        var confirmed = 0
        while Date() < deadline {
            confirmed = Int(try coven(["sql", "SELECT count(*) FROM coven_upload_parts"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            if confirmed == 9 && proxy.requests().contains(where: { $0.contains("partNumber=5&") }) { break }
            Thread.sleep(forTimeInterval: 0.1)
            if ProcessInfo.processInfo.environment["DEBUG_KILL"] != nil { print("confirmed \(confirmed) requests \(proxy.requests().count)") }
        }
        XCTAssertEqual(confirmed, 9, "parts 1-4 and 6-10 confirmed while part 5 stalls")
        kill(worker.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(worker, timeout: 10).status, 128 + SIGKILL)
        XCTAssertEqual(try coven(["sql", "SELECT state, bytes_confirmed FROM coven_upload_queue"]).stdoutText, "sending\t\(ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) - ObjectLayout.sealedChunkSize)\n")
        XCTAssertEqual(try coven(["file-status", file]).stdoutText, "uploading\n")

        // The next run takes over the dead worker's upload at once and resumes.
        try proxy.clear()
        let resumed = try coven(["upload-worker", "--once"])
        XCTAssertEqual(resumed.status, 0, resumed.stderrText)
        let requests = proxy.requests()
        for number in 1...10 {
            let sent = requests.filter { $0.hasPrefix("PUT ") && $0.contains("partNumber=\(number)&") && $0.hasSuffix(" forwarded") }
            XCTAssertEqual(sent.count, 1, "part \(number) reached the provider once:\n" + requests.joined(separator: "\n"))
        }
        XCTAssertEqual(requests.filter { $0.hasPrefix("GET ") && $0.contains("uploadId=") }.count, 1, "one ListParts reconciled the confirmed parts")
        XCTAssertEqual(try coven(["file-status", file]).stdoutText, "available\n")

        // The object decrypts to the original's bytes, and its record has their hash.
        let row = try coven(["sql", "SELECT hash, json_extract(coordinates, '$.object'), json_extract(coordinates, '$.key') FROM coven_files"]).stdoutText
        let fields = row.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\t").map(String.init)
        XCTAssertEqual(fields.count, 3)
        XCTAssertEqual(fields[0], SHA256.digest(bytes).hex)
        let provider = try S3Storage(location: .s3(bucket: bucket, prefix: "store", endpoint: server.endpoint, region: server.region, pathStyle: true),
                                     options: StorageOptions(environment: [:]), environment: server.environment)
        let reader = try ObjectReader(key: try FileKey(hex: fields[2]), plaintextSize: Int64(bytes.count))
        var plain: [UInt8] = []
        try provider.get(fields[1], range: nil) { chunk in try reader.feed(chunk) { plain.append(contentsOf: $0) } }
        try reader.finish { plain.append(contentsOf: $0) }
        XCTAssertEqual(plain, bytes)
    }
}

/// `coven upload-worker` without `--once`: it keeps looking at the queue, sends what a write
/// queues meanwhile, and stops cleanly on SIGTERM.
final class UploadWorkerDaemonTests: XCTestCase {
    func testRunsUntilSIGTERMAndSendsWhatIsQueuedMeanwhile() throws {
        let work = try TestPaths.temporaryDirectory("upload-daemon")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        environment["COVEN_DB"] = work + "/device.db"
        environment["COVEN_UPLOAD_POLL"] = "0.2"
        try FileManager.default.createDirectory(atPath: work + "/home", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        func coven(_ arguments: [String]) throws -> ProcessResult {
            try Processes.run(binary, arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "thumbs", "kind": "app", "budget": "1MiB" } ],
              "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] } ],
              "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        try Data("a cover\n".utf8).write(to: URL(fileURLWithPath: work + "/cover.txt"))
        XCTAssertEqual(try coven(["init", "--storage", "file://" + work + "/store", "--manifest", "coven.json"]).status, 0)

        let worker = try Spawn.start(binary, ["upload-worker"], environment: environment, directory: work, stderr: work + "/worker.err")
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertTrue(Spawn.isRunning(worker), "with nothing queued it keeps running")
        let staged = try coven(["stage", "cover.txt", "--namespace", "thumbs"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let write = try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), coven_put_staged('\(staged)'), '')"])
        XCTAssertEqual(write.status, 0, write.stderrText)
        let file = write.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let deadline = Date().addingTimeInterval(20)
        var status = ""
        while Date() < deadline {
            status = try coven(["file-status", file]).stdoutText
            if status == "available\n" { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTAssertEqual(status, "available\n")
        kill(worker.pid, SIGTERM)
        XCTAssertEqual(Spawn.wait(worker, timeout: 10).status, 130, (try? String(contentsOfFile: work + "/worker.err", encoding: .utf8)) ?? "")
    }
}

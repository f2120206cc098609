import CovenTestSupport
import Foundation
import XCTest

/// libcurl is loaded only by a process that talks HTTP (Sources/CCurl/shim.h): a command on
/// local files or `file://` storage never maps it and its dependencies. Seen through the dynamic
/// loader's own trace (`LD_DEBUG=files`), which names every library a process opens.
final class LibraryLoadingTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = try TestPaths.temporaryDirectory("library-loading")
        let manifest = """
        { "namespaces": [ { "name": "blobs", "kind": "app" } ],
          "tables": [ { "name": "blobs", "identity": "uuid", "files": [ { "column": "file" } ] } ],
          "migrations": [ "CREATE TABLE blobs (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
        """
        try manifest.write(toFile: folder + "/coven.json", atomically: true, encoding: .utf8)
        try Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: folder + "/song.bin"))
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Runs coven with the loader's trace on; returns stdout and the libraries it opened.
    private func traced(_ arguments: [String], database: String, extra: [String: String] = [:]) throws -> (out: String, opened: String) {
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: folder, binary: binary)
        environment["COVEN_DB"] = database
        environment["LD_DEBUG"] = "files"
        for (name, value) in extra { environment[name] = value }
        let result = try Processes.run(binary, arguments, environment: environment, directory: folder)
        XCTAssertEqual(result.status, 0, "coven \(arguments.joined(separator: " ")): \(result.stderrText.suffix(2000))")
        let opened = result.stderrText.split(separator: "\n").filter { $0.contains("file=") }.joined(separator: "\n")
        return (result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines), opened)
    }

    func testFileStorageCommandsNeverLoadLibcurl() throws {
        let db = folder + "/local/device.db"
        try FileManager.default.createDirectory(atPath: folder + "/local", withIntermediateDirectories: true)
        let steps: [[String]] = [
            ["init", "--storage", "file://\(folder)/store", "--manifest", folder + "/coven.json", "--name", "laptop"],
            ["stage", folder + "/song.bin", "--namespace", "blobs"],
        ]
        var outputs: [String] = []
        var traces: [String] = []
        for step in steps {
            let (out, opened) = try traced(step, database: db)
            outputs.append(out)
            traces.append(opened)
        }
        let staged = outputs[1]
        let (file, writeTrace) = try traced(["write", "INSERT INTO blobs (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_staged('\(staged)'), coven_stamp())"], database: db)
        traces.append(writeTrace)
        traces.append(try traced(["upload-worker", "--once"], database: db).opened)
        traces.append(try traced(["cache", "clear"], database: db).opened)
        let (bytes, catTrace) = try traced(["cat", file, "--offset", "70000", "--length", "10"], database: db)
        traces.append(catTrace)
        XCTAssertFalse(bytes.isEmpty)
        traces.append(try traced(["status", "--json"], database: db).opened)
        for (index, trace) in traces.enumerated() {
            // The trace is real: it names the libraries coven links.
            XCTAssertTrue(trace.contains("libgcrypt"), "step \(index): no loader trace:\n\(trace)")
            XCTAssertFalse(trace.contains("libcurl"), "step \(index) loaded libcurl:\n\(trace)")
        }
    }

    func testS3StorageLoadsLibcurlWhenItConnects() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let server = try S3TestServer.start(.moto)
        defer { server.stop() }
        let bucket = "coven-lazy-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        let db = folder + "/s3/device.db"
        try FileManager.default.createDirectory(atPath: folder + "/s3", withIntermediateDirectories: true)
        let (_, initTrace) = try traced(["init", "--storage", "s3://\(bucket)/store", "--manifest", folder + "/coven.json", "--name", "phone"],
                                        database: db, extra: server.environment)
        XCTAssertTrue(initTrace.contains("libcurl.so.4"), "init on s3:// did not load libcurl:\n\(initTrace)")
        // A command that never reaches storage still does not load it on an s3:// device.
        let (_, stageTrace) = try traced(["stage", folder + "/song.bin", "--namespace", "blobs"], database: db, extra: server.environment)
        XCTAssertTrue(stageTrace.contains("libgcrypt"), "no loader trace:\n\(stageTrace)")
        XCTAssertFalse(stageTrace.contains("libcurl"), "stage loaded libcurl:\n\(stageTrace)")
    }
}

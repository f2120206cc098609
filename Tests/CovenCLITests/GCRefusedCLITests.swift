import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven gc` when the provider refuses its deletes (403) and when the network fails them, on
/// the loopback moto server behind the fault proxy: each is reported (exit 10, the reason per
/// object), nothing is taken as deleted, the candidate stays, and a later run deletes it.
final class GCRefusedCLITests: XCTestCase {
    func testARefusedOrFailedDeleteIsReportedAndKeptForTheNextRun() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-gc-refused")
        defer { s3.stop() }
        let work = try TestPaths.temporaryDirectory("gc-refused")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        var environment = GoldenEnvironment.make(work: work, binary: binary)
        for (key, value) in s3.server.environment { environment[key] = value }
        for folder in ["home", "tmp"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        func coven(_ arguments: [String]) throws -> ProcessResult {
            try Processes.run(binary, ["--db", work + "/a/device.db"] + arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "covers", "kind": "app" } ],
              "tables": [ { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] } ],
              "migrations": [ "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        try Data("bytes to delete".utf8).write(to: URL(fileURLWithPath: work + "/cover.png"))
        let location = s3.location()
        let storage = "s3://\(s3.bucket)/store?endpoint=\(s3.proxy.endpoint)&path_style=true"
        let initialized = try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"])
        XCTAssertEqual(initialized.status, 0, initialized.stderrText)
        let staged = try coven(["stage", "cover.png", "--namespace", "covers"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try coven(["write", "INSERT INTO settings (id, file) VALUES ('one', coven_put_staged('\(staged)'))"]).status, 0)
        XCTAssertEqual(try coven(["upload-worker", "--once"]).status, 0)
        let object = try coven(["sql", "SELECT object FROM coven_files"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try coven(["write", "DELETE FROM settings WHERE id = 'one'"]).status, 0)
        // The trash would keep the bytes for its window: gc judges them now.
        XCTAssertEqual(try coven(["trash", "empty", "--all"]).status, 0)
        let provider = try StorageConnector(location: location, environment: s3.server.environment).connect()

        func gcReport() throws -> (status: Int32, kept: [[String: Any]], deleted: [String]) {
            let result = try coven(["--json", "gc"])
            let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any], result.stderrText)
            let kept = json["kept"] as? [[String: Any]] ?? []
            let deleted = (json["deleted"] as? [[String: Any]] ?? []).compactMap { $0["key"] as? String }
            return (result.status, kept, deleted)
        }
        func candidates() throws -> String {
            try coven(["sql", "SELECT count(*) FROM coven_gc_candidates"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        // Every delete refused: 403 AccessDenied.
        try s3.proxy.inject(#"{"mode": "status", "status": 403, "method": "POST", "path": "delete", "count": -1}"#)
        let refused = try gcReport()
        XCTAssertEqual(refused.status, 10)
        XCTAssertEqual(refused.deleted, [])
        XCTAssertEqual(refused.kept.map { $0["key"] as? String }, [object])
        XCTAssertEqual(refused.kept.first?["reason"] as? String, "storage_refused")
        XCTAssertNotNil(try provider.head(object), "a refused delete deleted nothing")
        XCTAssertEqual(try candidates(), "1", "the candidate stays for the next run")
        XCTAssertEqual(s3.proxy.requests().filter { $0.hasPrefix("DELETE ") }.count, 0, "nothing else was tried: no single deletes after the refusal")

        // The network fails the delete: the connection is reset before any answer.
        try s3.proxy.inject(#"{"mode": "reset", "method": "POST", "path": "delete", "before": true, "count": -1}"#)
        let failed = try gcReport()
        XCTAssertEqual(failed.status, 10)
        XCTAssertEqual(failed.kept.first?["reason"] as? String, "storage_failed")
        XCTAssertNotNil(try provider.head(object), "a failed delete is never taken as done")
        XCTAssertEqual(try candidates(), "1")

        // The provider allows it again: the next run deletes it, once.
        try s3.proxy.clear()
        let done = try gcReport()
        XCTAssertEqual(done.status, 0)
        XCTAssertEqual(done.deleted, [object])
        XCTAssertNil(try provider.head(object))
        XCTAssertEqual(try candidates(), "0")
        XCTAssertEqual(try gcReport().deleted, [])
    }
}

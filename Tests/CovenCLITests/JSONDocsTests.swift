import Foundation
import XCTest

/// docs/json.md documents `coven status --json` exactly as coven prints it: every key path the
/// command prints is in the page's table, and every key path the table lists is printed.
final class JSONDocsTests: XCTestCase {
    private func work() throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("coven-jsondocs-\(UUID().uuidString.prefix(8))")
            .resolvingSymlinksInPath().path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Key paths of a JSON value: objects give `a.b`; an array of objects gives its items'
    /// keys under the array's path (`manifest.namespaces` and `….namespaces` items are not
    /// listed one by one in the table, which names the array).
    private func paths(_ value: Any, prefix: String = "") -> Set<String> {
        guard let object = value as? [String: Any] else { return [] }
        var result: Set<String> = []
        for (key, child) in object {
            let path = prefix.isEmpty ? key : prefix + "." + key
            if let nested = child as? [String: Any], !nested.isEmpty, !["held"].contains(key) {
                result.formUnion(paths(nested, prefix: path))
            } else {
                result.insert(path)
            }
        }
        return result
    }

    /// The first-column key paths of the table under `## coven status --json`.
    private func documentedPaths() throws -> Set<String> {
        let text = try String(contentsOfFile: Repository.path("docs/json.md"), encoding: .utf8)
        let start = try XCTUnwrap(text.range(of: "## coven status --json"), "docs/json.md has no section 'coven status --json'")
        let section = text[start.upperBound...].components(separatedBy: "\n## ").first ?? ""
        var result: Set<String> = []
        for line in section.components(separatedBy: "\n") where line.hasPrefix("| `") {
            let cell = line.split(separator: "|").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            result.insert(String(cell.dropFirst().dropLast()))
        }
        return result
    }

    func testStatusJSONKeysAreDocumentedExactly() throws {
        let folder = try work()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try Data("""
            { "namespaces": [ { "name": "music", "kind": "user", "budget": "1GiB", "kept": true } ],
              "tables": [ { "name": "notes", "identity": "uuid" } ],
              "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: folder + "/coven.json"))
        let initResult = try Processes.coven(["--quiet", "init", "--storage", "file://\(folder)/store", "--manifest", "coven.json",
                                              "--db", folder + "/device.db", "--name", "docs"], directory: folder)
        XCTAssertEqual(initResult.status, 0, initResult.stderrText)
        let status = try Processes.coven(["--json", "status", "--db", folder + "/device.db"], directory: folder)
        XCTAssertEqual(status.status, 0, status.stderrText)
        let object = try JSONSerialization.jsonObject(with: status.stdout)
        let printed = paths(object)
        let documented = try documentedPaths()
        XCTAssertEqual(printed.subtracting(documented).sorted(), [], "printed by 'coven status --json' but not in docs/json.md")
        XCTAssertEqual(documented.subtracting(printed).sorted(), [], "in docs/json.md but not printed by 'coven status --json'")
        // The contract of DESIGN.md, whatever else is added.
        for path in ["store.id", "store.storage", "device.id", "device.name", "files.total", "files.stored", "files.device_only_here",
                     "files.device_only_elsewhere", "files.uploading", "files.missing", "uploads.queued", "uploads.sending",
                     "uploads.failed", "uploads.paused", "uploads.bytes_confirmed", "uploads.bytes_total", "file_cache.budget",
                     "file_cache.used", "file_cache.partial", "file_cache.attachments.held", "file_cache.attachments.not_held_by_reason"] {
            XCTAssertTrue(printed.contains(path), "status --json lacks '\(path)'")
        }
    }
}

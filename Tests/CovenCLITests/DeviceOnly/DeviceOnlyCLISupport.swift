import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A device made by the real `coven init` in a temporary folder, run with the golden tests'
/// fixed environment plus `extra` (S3 credentials and endpoint).
final class CLIDevice {
    let work: String
    let binary: String
    var environment: [String: String]
    var database: String { work + "/device.db" }

    static let manifest = """
    {"namespaces": [{"name": "music", "kind": "user", "budget": "1GiB"}, {"name": "covers", "kind": "app", "budget": "1MiB"}],
     "tables": [{"name": "tracks", "identity": "uuid", "files": [{"column": "file"}]}],
     "migrations": ["CREATE TABLE tracks (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT"]}
    """

    init(_ label: String, storage: String? = nil, extra: [String: String] = [:]) throws {
        work = try TestPaths.temporaryDirectory(label)
        binary = try Repository.covenBinary()
        environment = GoldenEnvironment.make(work: work, binary: binary).merging(extra) { $1 }
        environment["COVEN_DB"] = work + "/device.db"
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        try Self.manifest.write(toFile: work + "/coven.json", atomically: true, encoding: .utf8)
        let result = try run(["init", "--storage", storage ?? "file://\(work)/store", "--manifest", "coven.json", "--name", "cli"])
        guard result.status == 0 else { throw TestError("coven init failed: \(result.stderrText)") }
    }

    deinit { try? FileManager.default.removeItem(atPath: work) }

    /// Runs coven to its end.
    @discardableResult
    func run(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try Processes.run(binary, arguments, environment: environment, directory: work, stdin: stdin)
    }

    /// Starts coven without waiting, its output in files under `work`.
    func start(_ arguments: [String], label: String) throws -> Spawn.Child {
        try Spawn.start(binary, arguments, environment: environment, directory: work,
                        stdout: work + "/\(label).out", stderr: work + "/\(label).err")
    }

    func output(_ label: String, _ stream: String = "out") -> String {
        (try? String(contentsOfFile: work + "/\(label).\(stream)", encoding: .utf8)) ?? ""
    }

    /// One query's rows through `coven sql`, tab-separated lines.
    func sql(_ query: String) throws -> [String] {
        let result = try run(["sql", query])
        guard result.status == 0 else { throw TestError("coven sql failed: \(result.stderrText)") }
        return result.stdoutText.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// Stored files, each referenced by a row, stored the real way by this binary: each staged
    /// as a person's original of `music` (`coven stage --user`), the rows in one `coven write`,
    /// then sent by `coven upload-worker --once`. Returns the file ids, in order.
    func storedFiles(_ contents: [[UInt8]]) throws -> [String] {
        try FileManager.default.createDirectory(atPath: work + "/originals", withIntermediateDirectories: true)
        var staged: [String] = []
        var rows = ""
        for bytes in contents {
            let path = work + "/originals/" + UUID().uuidString.lowercased()
            guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { throw TestError("cannot write \(path)") }
            let stage = try run(["stage", "--user", path, "--namespace", "music"])
            guard stage.status == 0 else { throw TestError("coven stage failed: \(stage.stderrText)") }
            let id = stage.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
            staged.append(id)
            rows += "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file('\(id)'), '');\n"
        }
        try rows.write(toFile: work + "/rows.sql", atomically: true, encoding: .utf8)
        let written = try run(["--json", "write", "-"], stdin: work + "/rows.sql")
        guard written.status == 0,
              let answer = try JSONSerialization.jsonObject(with: written.stdout) as? [String: Any],
              let files = answer["staged"] as? [String: String] else {
            throw TestError("coven write failed: \(written.stderrText)")
        }
        let ids = try staged.map { id in
            guard let file = files[id] else { throw TestError("the write made no file of staged \(id)") }
            return file
        }
        let uploaded = try run(["upload-worker", "--once"])
        guard uploaded.status == 0 else { throw TestError("coven upload-worker failed: \(uploaded.stderrText)") }
        for id in ids {
            let place = try sql("SELECT coven_file_device(coordinates) IS NULL FROM coven_files WHERE id = '\(id)'")
            guard place == ["1"] else { throw TestError("file \(id) is not stored after the upload worker ran") }
        }
        return ids
    }

    /// Everything under `folder` (relative to work), sorted, hidden names included.
    func tree(_ folder: String) -> [String] {
        (FileManager.default.enumerator(atPath: work + "/" + folder)?.allObjects as? [String] ?? []).sorted()
    }

    /// Waits until `condition` holds, at most `seconds`.
    func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(5000)
        }
        return condition()
    }
}

/// Deterministic bytes.
func patternBytes(_ count: Int, seed: UInt8) -> [UInt8] {
    var state = UInt32(seed) &* 2_654_435_761 &+ 7
    return (0..<count).map { _ in
        state = state &* 1_664_525 &+ 1_013_904_223
        return UInt8(truncatingIfNeeded: state >> 24)
    }
}

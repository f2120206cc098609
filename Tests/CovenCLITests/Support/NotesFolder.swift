import CovenKit
import CovenTestSupport
import Foundation

/// A temporary folder for CLI tests of several devices (each at `<work>/<db>/device.db`) of a
/// store of notes: the built `coven`, the golden environment, `home/` and `tmp/`, and the
/// manifest at `coven.json`. Removed when released.
final class NotesFolder {
    let work: String
    let binary: String
    var environment: [String: String]

    /// notes (and, with `files`, a file column of the `files` namespace).
    static func manifest(files: Bool) -> String {
        """
        { "namespaces": [ { "name": "files", "kind": "app" } ],
          "tables": [ { "name": "notes", "identity": "uuid"\(files ? #", "files": [ { "column": "file" } ]"# : "") } ],
          "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, \(files ? "file TEXT, " : "")_updated_at TEXT NOT NULL) STRICT" ] }
        """
    }

    init(_ label: String, files: Bool = false, environment extra: [String: String] = [:]) throws {
        work = try TestPaths.temporaryDirectory(label)
        binary = try Repository.covenBinary()
        environment = GoldenEnvironment.make(work: work, binary: binary).merging(extra) { $1 }
        for folder in ["home", "tmp"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        try Data(Self.manifest(files: files).utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
    }

    deinit { try? FileManager.default.removeItem(atPath: work) }

    /// Runs coven on the device `db` to its end.
    @discardableResult
    func coven(_ arguments: [String], db: String) throws -> ProcessResult {
        try Processes.run(binary, ["--db", database(db)] + arguments, environment: environment, directory: work)
    }

    func database(_ db: String) -> String { work + "/" + db + "/device.db" }
}

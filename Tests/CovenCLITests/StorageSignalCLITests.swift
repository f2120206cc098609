import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A storage read that hangs (a hung NAS: here a change object on file:// that is a FIFO with
/// no writer, so the read waits for good) and is stopped by SIGINT or SIGTERM: exit 130
/// `interrupted`, as docs/exit-codes.md promises, not a storage failure; nothing applied.
final class StorageSignalCLITests: XCTestCase {
    func testASignalDuringAHungStorageReadIsInterrupted() throws {
        let work = try TestPaths.temporaryDirectory("storage-signal")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        let environment = GoldenEnvironment.make(work: work, binary: binary)
        for folder in ["home", "tmp"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        func coven(_ arguments: [String], db: String) throws -> ProcessResult {
            try Processes.run(binary, ["--db", work + "/" + db + "/device.db"] + arguments, environment: environment, directory: work)
        }
        try Data("""
            { "namespaces": [ { "name": "files", "kind": "app" } ],
              "tables": [ { "name": "notes", "identity": "uuid" } ],
              "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        let storage = "file://" + work + "/store"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        try Data(try coven(["key", "export"], db: "a").stdoutText.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
        XCTAssertEqual(try coven(["join", storage, "--key-file", "key.txt", "--name", "b"], db: "b").status, 0)
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'a note', coven_stamp())"], db: "a").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        let folder = work + "/store/changes/" + (try FileManager.default.contentsOfDirectory(atPath: work + "/store/changes").first ?? "")
        let change = folder + "/" + (try FileManager.default.contentsOfDirectory(atPath: folder).first ?? "")
        try FileManager.default.removeItem(atPath: change)
        XCTAssertEqual(mkfifo(change, 0o644), 0)

        for (signal, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
            let child = try Spawn.start(binary, ["--db", work + "/b/device.db", "sync"], environment: environment, directory: work,
                                        stderr: work + "/sync.err")
            Thread.sleep(forTimeInterval: 1.5)
            XCTAssertTrue(Spawn.isRunning(child), "the read hangs")
            kill(child.pid, signal)
            let status = Spawn.wait(child, timeout: 20)
            let stderr = (try? String(contentsOfFile: work + "/sync.err", encoding: .utf8)) ?? ""
            XCTAssertFalse(status.timedOut)
            XCTAssertEqual(status.status, 130, stderr)
            XCTAssertTrue(stderr.contains("coven: error: interrupted: ") && stderr.contains("interrupted by \(name)"), stderr)
            XCTAssertFalse(stderr.contains("Interrupted system call"), stderr)
        }
        XCTAssertEqual(try coven(["sql", "SELECT count(*) FROM notes"], db: "b").stdoutText, "0\n")
    }
}

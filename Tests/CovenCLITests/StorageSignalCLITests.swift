import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A storage read that hangs (a hung NAS: here a stored file's object on file:// that is a FIFO
/// with no writer, so the read waits for good) and is stopped by SIGINT or SIGTERM: exit 130
/// `interrupted`, as docs/exit-codes.md promises, not a storage failure; no byte written.
final class StorageSignalCLITests: XCTestCase {
    func testASignalDuringAHungStorageReadIsInterrupted() throws {
        let folder = try NotesFolder("storage-signal", files: true)
        let work = folder.work, binary = folder.binary, environment = folder.environment
        func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }
        let storage = "file://" + work + "/store"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        try Data(try coven(["key", "export"], db: "a").stdoutText.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))
        XCTAssertEqual(try coven(["join", storage, "--key-file", "key.txt", "--name", "b"], db: "b").status, 0)
        // A stored file, read on b from storage: its object is the hung read.
        try Data("the bytes of a note".utf8).write(to: URL(fileURLWithPath: work + "/note.txt"))
        let staged = try coven(["stage", "note.txt", "--namespace", "files"], db: "a")
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        let stagedID = staged.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'a note', coven_put_staged('\(stagedID)'), coven_stamp())"], db: "a").status, 0)
        XCTAssertEqual(try coven(["upload-worker", "--once"], db: "a").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        XCTAssertEqual(try coven(["sync"], db: "b").status, 0)
        let file = try coven(["sql", "SELECT file FROM notes"], db: "b").stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let objects = work + "/store/files/" + (try FileManager.default.contentsOfDirectory(atPath: work + "/store/files").first ?? "")
        let object = objects + "/" + (try FileManager.default.contentsOfDirectory(atPath: objects).first { !$0.hasPrefix(".") } ?? "")
        try FileManager.default.removeItem(atPath: object)
        XCTAssertEqual(mkfifo(object, 0o644), 0)

        for (signal, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
            let child = try Spawn.start(binary, ["--db", work + "/b/device.db", "cat", file], environment: environment, directory: work,
                                        stdout: work + "/cat.out", stderr: work + "/sync.err")
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
        XCTAssertEqual((try? Data(contentsOf: URL(fileURLWithPath: work + "/cat.out")))?.count ?? 0, 0, "no byte of the file")
    }
}

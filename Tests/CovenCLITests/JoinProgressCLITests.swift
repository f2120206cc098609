import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven join` replaying the store's changes shows its progress on stderr when that is a
/// terminal (as `sync` does), and nothing when it is not.
final class JoinProgressCLITests: XCTestCase {
    func testAJoinShowsItsProgressOnATerminal() throws {
        guard let script = Processes.which("script", path: "/usr/bin:/bin") else { throw XCTSkip("needs script(1) for a terminal") }
        let folder = try NotesFolder("join-progress", environment: ["COVEN_SYNC_CHANGE_BYTES": "1"])
        let work = folder.work, binary = folder.binary, environment = folder.environment
        func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }
        let storage = "file://" + work + "/store"
        XCTAssertEqual(try coven(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a"], db: "a").status, 0)
        for index in 0..<3 {
            XCTAssertEqual(try coven(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'note \(index)', coven_stamp())"], db: "a").status, 0)
        }
        XCTAssertEqual(try coven(["sync"], db: "a").status, 0)
        try Data(try coven(["key", "export"], db: "a").stdoutText.utf8).write(to: URL(fileURLWithPath: work + "/key.txt"))

        for (db, term) in [("b", "xterm"), ("c", "dumb")] {
            var shell = environment
            shell["TERM"] = term
            let line = "\(binary) --db \(work)/\(db)/device.db join \(storage) --key-file key.txt --name \(db)"
            let result = try Processes.run(script, ["-q", "-e", "-c", line, "/dev/null"], environment: shell, directory: work)
            XCTAssertEqual(result.status, 0, result.stdoutText)
            XCTAssertTrue(result.stdoutText.contains("join: applied 1 change (1 row)"), "TERM=\(term): \(result.stdoutText.debugDescription)")
            XCTAssertEqual(result.stdoutText.contains("\u{1B}[K"), term == "xterm", result.stdoutText.debugDescription)
        }
        // Not a terminal: no progress.
        let plain = try coven(["join", storage, "--key-file", "key.txt", "--name", "d"], db: "d")
        XCTAssertEqual(plain.status, 0, plain.stderrText)
        XCTAssertFalse(plain.stderrText.contains("join: applied"), plain.stderrText)
    }
}

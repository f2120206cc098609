import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// What a cron user and a damaged disk hit (issue 11), each through the built binary: the exit
/// status, the message, and that nothing wrong ever reaches stdout.
final class ReliabilityCLITests: XCTestCase {
    /// A device whose `covers` namespace takes app bytes, with one file staged from `bytes`
    /// and put in a row (not uploaded). Returns the device and the file id.
    func stagedAppFile(_ bytes: [UInt8], label: String) throws -> (CLIDevice, String) {
        let device = try CLIDevice(label)
        let source = device.work + "/source.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: source, contents: Data(bytes)))
        let staged = try device.run(["stage", source, "--namespace", "covers"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        let id = staged.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let written = try device.run(["write", "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_staged('\(id)'), coven_stamp())"])
        XCTAssertEqual(written.status, 0, written.stderrText)
        return (device, written.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Runs a shell line with the device's environment (`$COVEN_DB` set), in its folder.
    func shell(_ device: CLIDevice, _ line: String, timeout: TimeInterval = 60) throws -> ProcessResult {
        try Processes.run("/bin/bash", ["-c", line], environment: device.environment, directory: device.work, timeout: timeout)
    }

    /// Overwrites one byte of a file in place.
    func flip(_ path: String, at offset: Int64) throws {
        let fd = open(path, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0, path)
        defer { close(fd) }
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, off_t(offset)), 1)
        byte ^= 0x5a
        XCTAssertEqual(pwrite(fd, &byte, 1, off_t(offset)), 1)
    }

    func copyPath(_ device: CLIDevice) throws -> String {
        let copies = try FileManager.default.contentsOfDirectory(atPath: device.database + ".d/copies")
        XCTAssertEqual(copies.count, 1)
        return device.database + ".d/copies/" + (copies.first ?? "")
    }

    // MARK: - 1. coven's own copy is checked chunk by chunk

    func testADamagedCopyNeverReleasesAWrongByte() throws {
        let bytes = patternBytes(3_000_000, seed: 3)
        let (device, id) = try stagedAppFile(bytes, label: "damaged-copy")
        let copy = try copyPath(device)
        // get checks the copy before handing out its path; undamaged, it prints it.
        let before = try device.run(["get", id])
        XCTAssertEqual(before.status, 0, before.stderrText)
        XCTAssertEqual(before.stdoutText, copy + "\n")
        try flip(copy, at: 1_572_870)  // chunk 24

        let range = try device.run(["cat", id, "--offset", "1572864", "--length", "65536"])
        XCTAssertEqual(range.status, 6, range.stderrText)
        XCTAssertTrue(range.stdout.isEmpty, "not one byte of a chunk that fails its check")
        XCTAssertTrue(range.stderrText.contains("integrity: coven's copy of file '\(id)' fails its check: chunk 24 differs from its recorded hash"), range.stderrText)

        let whole = try device.run(["cat", id])
        XCTAssertEqual(whole.status, 6, whole.stderrText)
        XCTAssertLessThanOrEqual(whole.stdout.count, 24 * 65536, "only chunks checked before the damaged one")
        XCTAssertTrue([UInt8](whole.stdout) == Array(bytes[0..<whole.stdout.count]))

        let get = try device.run(["get", id])
        XCTAssertEqual(get.status, 6, get.stderrText)
        XCTAssertTrue(get.stdout.isEmpty, "no path to damaged bytes")

        // A range of undamaged chunks still reads.
        let good = try device.run(["cat", id, "--offset", "0", "--length", "65536"])
        XCTAssertEqual(good.status, 0, good.stderrText)
        XCTAssertTrue([UInt8](good.stdout) == Array(bytes[0..<65536]))
    }

    // MARK: - 2. A cached file is checked again once written

    func testADamagedCacheFileIsCheckedAgainBeforeGetHandsItOut() throws {
        let device = try CLIDevice("damaged-cache")
        let bytes = patternBytes(700_000, seed: 9)
        let id = try XCTUnwrap(try device.storedFiles([bytes]).first)
        XCTAssertEqual(try device.run(["pin", id]).status, 0)
        let first = try device.run(["get", id])
        XCTAssertEqual(first.status, 0, first.stderrText)
        let path = first.stdoutText.trimmingCharacters(in: .newlines)
        XCTAssertTrue(path.contains("/cache/"), path)

        try flip(path, at: 300_000)
        let again = try device.run(["get", id])
        XCTAssertEqual(again.status, 0, again.stderrText)
        XCTAssertEqual(again.stdoutText, path + "\n")
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes, "the damaged chunk was fetched again")

        try flip(path, at: 600_000)
        let kept = try device.run(["--json", "fetch-kept"])
        XCTAssertEqual(kept.status, 0, kept.stderrText)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: kept.stdout) as? [String: Any])
        XCTAssertEqual(json["already_held"] as? Int, 0, "a file written since it was checked is not held")
        XCTAssertEqual((json["fetched"] as? [[String: Any]])?.compactMap { $0["file"] as? String }, [id])
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
    }

    // MARK: - 3. Every write to stdout is checked

    func testFailedWritesToStdoutAreErrors() throws {
        let bytes = patternBytes(200_000, seed: 5)
        let (device, id) = try stagedAppFile(bytes, label: "stdout-full")
        let full = try shell(device, "coven cat \(id) > /dev/full")
        XCTAssertEqual(full.status, 7, full.stderrText)
        XCTAssertEqual(full.stderrText, "coven: error: no_room: cannot write to stdout: No space left on device\n")

        let closed = try shell(device, "coven cat \(id) >&-")
        XCTAssertEqual(closed.status, 1, closed.stderrText)
        XCTAssertTrue(closed.stderrText.hasPrefix("coven: error: io: cannot write to stdout: it is closed"), closed.stderrText)

        let sql = try shell(device, "coven sql 'SELECT 1' > /dev/full")
        XCTAssertEqual(sql.status, 7, sql.stderrText)
        let write = try shell(device, "coven --json write \"INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), NULL, coven_stamp())\" > /dev/full")
        XCTAssertEqual(write.status, 7, write.stderrText)

        // A staging whose id cannot be printed is taken back: nothing could name it.
        let stagedBefore = try device.sql("SELECT count(*) FROM coven_staged")
        let copiesBefore = try FileManager.default.contentsOfDirectory(atPath: device.database + ".d/copies").count
        let stage = try shell(device, "coven stage source.bin --namespace covers > /dev/full")
        XCTAssertEqual(stage.status, 7, stage.stderrText)
        XCTAssertEqual(try device.sql("SELECT count(*) FROM coven_staged"), stagedBefore)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: device.database + ".d/copies").count, copiesBefore)

        // A reader that goes away ends coven quietly with the conventional status.
        let pipe = try shell(device, "coven cat \(id) | head -c 10 > /dev/null; echo ${PIPESTATUS[0]}")
        XCTAssertEqual(pipe.stdoutText, "141\n")
        XCTAssertEqual(pipe.stderrText, "")
    }

    func testAShortWriteIntoAFullFilesystemIsAnError() throws {
        let bytes = patternBytes(5_000_000, seed: 6)
        let (device, id) = try stagedAppFile(bytes, label: "stdout-tmpfs")
        let small = device.work + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        let mounted = try Spawn.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", small], timeout: 30)
        guard mounted.status == 0 else { throw XCTSkip("cannot mount a tmpfs here (needs root)") }
        defer { _ = try? Spawn.run("/bin/umount", [small], timeout: 30) }
        let result = try shell(device, "coven cat \(id) --length 5000000 > small/out")
        XCTAssertEqual(result.status, 7, result.stderrText)
        XCTAssertTrue(result.stderrText.contains("no_room: cannot write to stdout"), result.stderrText)
    }

    // MARK: - 9. SIGTERM is Ctrl-C

    func testSIGTERMStopsAStagingFromAPipeAndRemovesItsTemporary() throws {
        let device = try CLIDevice("stage-sigterm")
        let fifo = device.work + "/input.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // The writer end, held open with some bytes in it, then silent.
        let writer = open(fifo, O_RDWR)
        XCTAssertGreaterThanOrEqual(writer, 0)
        defer { close(writer) }
        let some = [UInt8](repeating: 1, count: 4096)
        XCTAssertEqual(some.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }, 4096)
        let child = try Spawn.start(device.binary, ["stage", "-", "--namespace", "covers"], environment: device.environment,
                                    directory: device.work, stdin: fifo, stdout: device.work + "/stage.out", stderr: device.work + "/stage.err")
        let temporary = device.database + ".d/tmp"
        XCTAssertTrue(device.waitUntil(20) { ((try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []).contains { $0.contains(".tmp.") } })
        usleep(100_000)
        XCTAssertEqual(kill(child.pid, SIGTERM), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 10)
        XCTAssertFalse(timedOut)
        XCTAssertEqual(status, 130)
        XCTAssertEqual(device.output("stage", "err"), "coven: error: interrupted: reading 'stdin' stopped: interrupted by SIGTERM\n")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: temporary), [], "the temporary went on the way out")
        XCTAssertEqual(try device.sql("SELECT count(*) FROM coven_staged"), ["0"])
    }

    func testSIGTERMStopsACatWhoseReaderStalls() throws {
        let bytes = patternBytes(2_000_000, seed: 7)
        let (device, id) = try stagedAppFile(bytes, label: "cat-sigterm")
        let fifo = device.work + "/out.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let reader = open(fifo, O_RDWR)  // a reader that never reads
        XCTAssertGreaterThanOrEqual(reader, 0)
        defer { close(reader) }
        let child = try Spawn.start(device.binary, ["cat", id], environment: device.environment, directory: device.work,
                                    stdout: fifo, stderr: device.work + "/cat.err")
        usleep(500_000)
        XCTAssertTrue(Spawn.isRunning(child), "blocked on its stdout")
        XCTAssertEqual(kill(child.pid, SIGTERM), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 10)
        XCTAssertFalse(timedOut)
        XCTAssertEqual(status, 130)
        XCTAssertEqual(device.output("cat", "err"), "coven: error: interrupted: writing to stdout stopped: interrupted by SIGTERM\n")
    }

    func testSIGTERMEndsACommandThatDoesNotPollAtOnceWithTheSameMessage() throws {
        let device = try CLIDevice("sql-sigterm")
        // A query that runs for a long time.
        let child = try Spawn.start(device.binary, ["sql", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"],
                                    environment: device.environment, directory: device.work,
                                    stdout: device.work + "/sql.out", stderr: device.work + "/sql.err")
        usleep(500_000)
        XCTAssertEqual(kill(child.pid, SIGTERM), 0)
        let (status, timedOut) = Spawn.wait(child, timeout: 10)
        XCTAssertFalse(timedOut)
        XCTAssertEqual(status, 130)
        XCTAssertEqual(device.output("sql", "err"), "coven: error: interrupted: a signal stopped 'coven sql'\n")
    }

    // MARK: - 14. file-status checks the source it reports on

    func testFileStatusChecksTheSourceOfAnUpload() throws {
        let (device, id) = try stagedAppFile(patternBytes(300_000, seed: 8), label: "status-source")
        XCTAssertEqual(try device.run(["file-status", id]).stdoutText, "uploading\n")
        let copy = try copyPath(device)
        try flip(copy, at: 100_000)
        let damaged = try device.run(["file-status", id])
        XCTAssertEqual(damaged.status, 0, damaged.stderrText)
        XCTAssertEqual(damaged.stdoutText, "missing source file_unavailable\n")
        XCTAssertEqual(unlink(copy), 0)
        XCTAssertEqual(try device.run(["file-status", id]).stdoutText, "missing source file_unavailable\n")

        // A person's original moved away.
        let original = device.work + "/song.flac"
        XCTAssertTrue(FileManager.default.createFile(atPath: original, contents: Data(patternBytes(1000, seed: 1))))
        let staged = try device.run(["stage", "--user", original, "--namespace", "music"])
        let written = try device.run(["write", "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file('\(staged.stdoutText.trimmingCharacters(in: .newlines))'), coven_stamp())"])
        let song = written.stdoutText.trimmingCharacters(in: .newlines)
        XCTAssertEqual(try device.run(["file-status", song]).stdoutText, "uploading\n")
        XCTAssertEqual(rename(original, original + ".moved"), 0)
        XCTAssertEqual(try device.run(["file-status", song]).stdoutText, "missing source user_file_missing\n")
    }

    // MARK: - 4. SQL holding NUL

    func testSQLOnStdinHoldingNULIsRefused() throws {
        let device = try CLIDevice("sql-nul")
        let input = device.work + "/input.sql"
        let text = Array("SELECT 1;".utf8) + [0] + Array("INSERT INTO tracks (id, file, _updated_at) VALUES ('01912345-6789-7abc-8def-0123456789ab', NULL, '')".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: input, contents: Data(text)))
        let write = try device.run(["write", "-"], stdin: input)
        XCTAssertEqual(write.status, 2, write.stderrText)
        XCTAssertTrue(write.stderrText.hasPrefix("coven: error: usage: the SQL on stdin holds a NUL byte (at byte 9)\n"), write.stderrText)
        XCTAssertEqual(try device.sql("SELECT count(*) FROM tracks"), ["0"])
        let sql = try device.run(["sql", "-"], stdin: input)
        XCTAssertEqual(sql.status, 2, sql.stderrText)
        XCTAssertTrue(sql.stdout.isEmpty)
    }

    // MARK: - 5. A device database that cannot be written

    func testAReadOfAWriteProtectedDeviceSucceedsWithoutBookkeeping() throws {
        guard getuid() == 0, let setpriv = Processes.which("setpriv", path: "/usr/bin:/bin") else {
            throw XCTSkip("needs root and setpriv to run coven as a user who cannot write the database")
        }
        let device = try CLIDevice("read-only-db")
        let bytes = patternBytes(300_000, seed: 4)
        let id = try XCTUnwrap(try device.storedFiles([bytes]).first)
        // Everything the other user's, and the database write-protected for them.
        XCTAssertEqual(try Spawn.run("/bin/chown", ["-R", "65534:65534", device.work]).status, 0)
        XCTAssertEqual(chmod(device.work, 0o755), 0)
        XCTAssertEqual(chmod(device.database, 0o444), 0)
        defer { _ = try? Spawn.run("/bin/chown", ["-R", "0:0", device.work]) }
        func asNobody(_ arguments: [String]) throws -> ProcessResult {
            try Processes.run(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups", device.binary] + arguments,
                              environment: device.environment, directory: device.work)
        }
        let cat = try asNobody(["cat", id])
        XCTAssertEqual(cat.status, 0, cat.stderrText)
        XCTAssertEqual(cat.stderrText, "")
        XCTAssertTrue([UInt8](cat.stdout) == bytes)
        let range = try asNobody(["cat", id, "--offset", "70000", "--length", "1000"])
        XCTAssertEqual(range.status, 0, range.stderrText)
        XCTAssertTrue([UInt8](range.stdout) == Array(bytes[70000..<71000]))
        // get needs the cache recorded: it fails before any output, and says why.
        let get = try asNobody(["get", id])
        XCTAssertEqual(get.status, 1, get.stderrText)
        XCTAssertTrue(get.stdout.isEmpty)
        XCTAssertTrue(get.stderrText.contains("the device database cannot be written"), get.stderrText)
    }

    // MARK: - 6. Migrations touch app tables only

    func testAMigrationMayNotTouchCovensTables() throws {
        let device = try CLIDevice("migration-policy")
        let id = try XCTUnwrap(try device.storedFiles([patternBytes(1000, seed: 2)]).first)
        var manifest = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(CLIDevice.manifest.utf8)) as? [String: Any])
        let migrations = try XCTUnwrap(manifest["migrations"] as? [String])
        func migrate(_ extra: String) throws -> ProcessResult {
            manifest["migrations"] = migrations + [extra]
            try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: device.work + "/next.json"))
            return try device.run(["migrate", "--manifest", "next.json"])
        }
        for bad in ["DELETE FROM coven_files; DROP TABLE coven_upload_queue", "DROP TABLE coven_files",
                    "CREATE INDEX i ON coven_files (size)", "ALTER TABLE coven_files ADD COLUMN x TEXT", "PRAGMA foreign_keys = OFF"] {
            let result = try migrate(bad)
            XCTAssertEqual(result.status, 4, bad + ": " + result.stderrText)
            XCTAssertTrue(result.stderrText.hasPrefix("coven: error: migration: migrations[1] changes more than the app's tables"), result.stderrText)
        }
        XCTAssertEqual(try device.sql("SELECT id FROM coven_files"), [id], "nothing changed")
        XCTAssertEqual(try device.sql("SELECT count(*) FROM coven_upload_queue"), ["0"])
        // Schema changes of the app's own tables are what migrations are for.
        let good = try migrate("CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, _updated_at TEXT NOT NULL) STRICT; CREATE INDEX notes_body ON notes (body); ALTER TABLE tracks ADD COLUMN title TEXT; UPDATE tracks SET title = 'x'")
        XCTAssertEqual(good.status, 0, good.stderrText)
        XCTAssertEqual(try device.sql("SELECT title FROM tracks"), ["x"])
    }

    // MARK: - 7. A deleted cache folder

    func testADeletedCacheFolderIsMadeAgain() throws {
        let device = try CLIDevice("cache-folder")
        let bytes = patternBytes(200_000, seed: 3)
        let id = try XCTUnwrap(try device.storedFiles([bytes]).first)
        XCTAssertEqual(try device.run(["get", id]).status, 0)
        try FileManager.default.removeItem(atPath: device.database + ".d/cache")
        let cat = try device.run(["cat", id])
        XCTAssertEqual(cat.status, 0, cat.stderrText)
        XCTAssertEqual(cat.stderrText, "", "a missing cache file is not cached, not a damaged one")
        XCTAssertTrue([UInt8](cat.stdout) == bytes)
        try FileManager.default.removeItem(atPath: device.database + ".d/cache")
        let get = try device.run(["get", id])
        XCTAssertEqual(get.status, 0, get.stderrText)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: get.stdoutText.trimmingCharacters(in: .newlines)) ?? Data()) == bytes)
    }

    // MARK: - 10. Staging a FIFO

    func testStagingAFIFOIsRefusedAtOnce() throws {
        let device = try CLIDevice("stage-fifo")
        XCTAssertEqual(mkfifo(device.work + "/pipe", 0o600), 0)
        let result = try Processes.run(device.binary, ["stage", "pipe", "--namespace", "covers"], environment: device.environment,
                                       directory: device.work, timeout: 10)
        XCTAssertFalse(result.timedOut)
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderrText.hasPrefix("coven: error: io: 'pipe' is not a regular file\n"), result.stderrText)
        XCTAssertEqual(try device.sql("SELECT count(*) FROM coven_staged"), ["0"])
    }
    // MARK: - 16. Progress on a terminal that cannot move the cursor

    /// Runs `line` under `script`, so that coven's stderr is a terminal, with `term` as TERM
    /// (nil: unset). Returns what the terminal received.
    func onATerminal(_ device: CLIDevice, _ line: String, term: String?) throws -> String {
        guard let script = Processes.which("script", path: "/usr/bin:/bin") else { throw XCTSkip("needs script(1) for a terminal") }
        var environment = device.environment
        environment["TERM"] = term
        let result = try Processes.run(script, ["-q", "-e", "-c", line, "/dev/null"], environment: environment, directory: device.work)
        XCTAssertEqual(result.status, 0, result.stdoutText + result.stderrText)
        return result.stdoutText
    }

    func testProgressUnderADumbTerminalHasNoCursorEscapes() throws {
        let device = try CLIDevice("progress-dumb")
        XCTAssertTrue(FileManager.default.createFile(atPath: device.work + "/big.bin", contents: Data(patternBytes(30_000_000, seed: 2))))
        let stage = "coven stage big.bin --namespace covers"
        // A terminal that moves the cursor gets the line redrawn in place, and erased.
        let xterm = try onATerminal(device, stage, term: "xterm")
        XCTAssertTrue(xterm.contains("\u{1B}[K"), xterm)
        for term in ["dumb", nil] {
            let shown = try onATerminal(device, stage, term: term)
            XCTAssertFalse(shown.contains("\u{1B}"), "TERM=\(term ?? "(unset)"): \(shown.debugDescription)")
            let lines = shown.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            XCTAssertTrue(lines.first?.hasPrefix("staging ") ?? false, "a plain line of progress: \(shown.debugDescription)")
            XCTAssertFalse(shown.replacingOccurrences(of: "\r\n", with: "\n").contains("\r"), "no carriage return but the terminal's own: \(shown.debugDescription)")
        }
    }

    // MARK: - 16. Counts of one are singular

    func testACountOfOneIsSingular() throws {
        let device = try CLIDevice("singular")
        let id = try XCTUnwrap(try device.storedFiles([[7]]).first)
        XCTAssertEqual(try device.run(["pin", id]).status, 0)
        let kept = try device.run(["fetch-kept"])
        XCTAssertEqual(kept.status, 0, kept.stderrText)
        XCTAssertEqual(kept.stdoutText, "fetched 1 file (1 byte), 0 already held, 0 failed, 0 left\n")
        XCTAssertEqual(try device.run(["unpin", id]).status, 0)
        let budget = try device.run(["budget"])
        XCTAssertTrue(budget.stdoutText.contains("used   1 byte (0 partial)"), budget.stdoutText)
        let clear = try device.run(["cache", "clear"])
        XCTAssertEqual(clear.status, 0, clear.stderrText)
        XCTAssertEqual(clear.stdoutText, "removed 1 byte\n")
        let range = try device.run(["cat", id, "--offset", "1", "--length", "1"])
        XCTAssertEqual(range.status, 4)
        XCTAssertTrue(range.stderrText.hasPrefix("coven: error: range_out_of_bounds: 1 byte at offset 1 lies outside file '\(id)' of 1 byte"), range.stderrText)
    }
    // MARK: - 16. A kill -9 at any step of a multipart upload's start leaves no part file

    func testAKillAtAnyStepOfAMultipartUploadLeavesNoPartFileBehind() throws {
        guard let strace = Processes.which("strace", path: "/usr/bin:/bin") else { throw XCTSkip("needs strace to kill at a chosen system call") }
        let probe = try Processes.run(strace, ["-o", "/dev/null", "/bin/true"], environment: [:], directory: "/")
        guard probe.status == 0 else { throw XCTSkip("strace cannot trace here: \(probe.stderrText)") }
        let bytes = patternBytes(300_000, seed: 12)
        // Kill the worker on entry to its n-th folder or file sync, rename or mkdir (each counted
        // apart), for every n until a run gets through: every step of the start (the upload's
        // folder built, renamed into place, its record committed) and of the parts after it.
        var killed = 0
        for step in 1...60 {
            let (device, id) = try stagedAppFile(bytes, label: "upload-kill-\(step)")
            var environment = device.environment
            environment["COVEN_UPLOAD_PART_SIZE"] = "65536"
            environment["COVEN_UPLOAD_SINGLE_LIMIT"] = "0"
            let calls = "fsync,rename,mkdir"
            let run = try Processes.run(strace, ["-f", "-qq", "-o", "/dev/null", "-e", "trace=\(calls)", "-e", "inject=\(calls):signal=KILL:when=\(step)",
                                                 device.binary, "upload-worker", "--once", "--jobs", "1"],
                                        environment: environment, directory: device.work)
            if run.status == 0 { break }
            killed += 1
            XCTAssertEqual(run.status, 137, "step \(step): " + run.stderrText)
            let again = try Processes.run(device.binary, ["upload-worker", "--once"], environment: environment, directory: device.work)
            XCTAssertEqual(again.status, 0, "step \(step): " + again.stderrText)
            XCTAssertEqual(try device.run(["file-status", id]).stdoutText, "available\n", "step \(step)")
            let uploads = (try? FileManager.default.contentsOfDirectory(atPath: device.work + "/store/.uploads")) ?? []
            XCTAssertEqual(uploads, [], "step \(step): nothing left of an upload no session names")
            try FileManager.default.removeItem(atPath: device.database + ".d/copies")  // read from storage
            let cat = try device.run(["cat", id])
            XCTAssertEqual(cat.status, 0, cat.stderrText)
            XCTAssertTrue([UInt8](cat.stdout) == bytes, "step \(step)")
        }
        XCTAssertGreaterThan(killed, 5, "the worker was killed at its first steps")
    }
    // MARK: - 15. An object with bytes appended is damage, for cat as for file-status

    func testAStoredObjectWithBytesAppendedFailsCatAndFileStatusAlike() throws {
        let device = try CLIDevice("appended")
        let bytes = patternBytes(300_000, seed: 15)
        let id = try XCTUnwrap(try device.storedFiles([bytes]).first)
        let object = try XCTUnwrap(try device.sql("SELECT json_extract(coordinates, '$.object') FROM coven_files WHERE id = '\(id)'").first)
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: device.work + "/store/" + object))
        handle.seekToEndOfFile()
        handle.write(Data("extra".utf8))
        try handle.close()
        let status = try device.run(["file-status", id])
        XCTAssertEqual(status.status, 6, status.stderrText)
        for arguments in [["cat", id], ["cat", id, "--offset", "70000", "--length", "10"], ["get", id]] {
            let result = try device.run(arguments)
            XCTAssertEqual(result.status, 6, arguments.joined(separator: " ") + ": " + result.stderrText)
            XCTAssertTrue(result.stdout.isEmpty, "no byte of a damaged object")
            XCTAssertTrue(result.stderrText.hasPrefix("coven: error: integrity: the stored object '\(object)' is "), result.stderrText)
        }
    }
}

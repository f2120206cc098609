import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Importing a library in one process (issue 23): `coven stage --files-from`, `coven write
/// --each`, kill -9 of both then a rerun, and `--watch` ending with `--until-empty`.
final class BatchImportCLITests: XCTestCase {
    private var work = ""
    private var binary = ""
    private var environment: [String: String] = [:]

    override func setUpWithError() throws {
        work = try TestPaths.temporaryDirectory("batch-import")
        binary = try Repository.covenBinary()
        environment = GoldenEnvironment.make(work: work, binary: binary)
        environment["COVEN_DB"] = work + "/device.db"
        try FileManager.default.createDirectory(atPath: work + "/home", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/music", withIntermediateDirectories: true)
        try Data("""
            { "namespaces": [ { "name": "tracks", "kind": "user" }, { "name": "blobs", "kind": "app" } ],
              "tables": [ { "name": "tracks", "identity": "uuid", "files": [ { "column": "file" } ] } ],
              "migrations": [ "CREATE TABLE tracks (id TEXT PRIMARY KEY, title TEXT, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
            """.utf8).write(to: URL(fileURLWithPath: work + "/coven.json"))
        XCTAssertEqual(try coven(["init", "--storage", "file://\(work)/store", "--manifest", "coven.json"]).status, 0)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func coven(_ arguments: [String], stdin: String? = nil) throws -> ProcessResult {
        try Processes.run(binary, arguments, environment: environment, directory: work, stdin: stdin)
    }

    private static let insert = "INSERT INTO tracks (id, title, file, _updated_at) VALUES (coven_uuid7(), :path, coven_put_user_file('tracks', :id, 'cloud'), coven_stamp())"

    /// Writes `count` small files under music/ and returns their relative paths.
    private func makeFiles(_ count: Int, size: Int = 3000) throws -> [String] {
        try (0..<count).map { index in
            let name = "music/track-\(index).flac"
            // Each file its own size and bytes (a byte-by-byte fill is slow in a debug build).
            var bytes = Data(repeating: UInt8(truncatingIfNeeded: index), count: size + index)
            bytes.replaceSubrange(0..<8, with: withUnsafeBytes(of: UInt64(index)) { Data($0) })
            try bytes.write(to: URL(fileURLWithPath: work + "/" + name))
            return name
        }
    }

    private func sql(_ query: String) throws -> String {
        let result = try coven(["sql", query])
        XCTAssertEqual(result.status, 0, result.stderrText)
        return result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The import as docs/coven-stage.md and the issue give it, one pipe from find through
    /// stage into write: write reads the pipe to its end before it takes the device lock, which
    /// stage takes between its windows. Before, whichever took the lock first waited forever on
    /// the other (write on its stdin, or stage on a full pipe). 700 files: more lines than a
    /// pipe holds.
    func testTheImportPipelineFromStageIntoWriteEnds() throws {
        let paths = try makeFiles(700, size: 200)
        let script = """
            find music -type f -print0 | timeout -s KILL 60 "$COVEN" --json stage --user --namespace tracks --files-from - -z \
              | timeout -s KILL 60 "$COVEN" write --each - "$INSERT" > written
            """
        var shell = environment
        shell["COVEN"] = binary
        shell["INSERT"] = Self.insert
        let result = try Processes.run("/bin/bash", ["-c", "set -o pipefail; " + script], environment: shell, directory: work, timeout: 150)
        XCTAssertFalse(result.timedOut)
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(try String(contentsOfFile: work + "/written", encoding: .utf8).split(separator: "\n").count, paths.count)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), String(paths.count))
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks WHERE title LIKE 'music/track-%.flac'"), String(paths.count))
        // Nothing is left in the device's temporary folder.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/device.db.d/tmp").filter { $0.hasPrefix("coven-spool-") }, [])
    }

    func testBatchStageReportsBadInputsOnTheirOwnLinesAndStagesTheRestInOrder() throws {
        var paths = try makeFiles(300)
        // Bad inputs among the good: missing, a FIFO, a folder, and (not as root) an unreadable file.
        mkfifo(work + "/music/pipe", 0o644)
        try FileManager.default.createDirectory(atPath: work + "/music/folder", withIntermediateDirectories: true)
        try Data("secret".utf8).write(to: URL(fileURLWithPath: work + "/music/locked"))
        chmod(work + "/music/locked", 0)
        var bad = ["music/missing.flac", "music/pipe", "music/folder"]
        if getuid() != 0 { bad.append("music/locked") }
        for (offset, path) in bad.enumerated() { paths.insert(path, at: 40 + offset * 50) }
        // Names with a newline and with bytes that are not UTF-8 travel NUL-separated.
        let newline = "music/two\nlines.flac"
        try Data("newline".utf8).write(to: URL(fileURLWithPath: work + "/" + newline))
        paths.append(newline)
        var list = Data()
        for path in paths { list.append(contentsOf: Array(path.utf8) + [0]) }
        let latin = Array("music/caf".utf8) + [0xE9] + Array(".flac".utf8)
        let written = PathText.withCString(PathText.string(fromOSBytes: Array((work + "/").utf8) + latin)) { open($0, O_WRONLY | O_CREAT, 0o644) }
        XCTAssertGreaterThanOrEqual(written, 0)
        _ = write(written, "latin", 5)
        close(written)
        list.append(contentsOf: latin + [0])
        try list.write(to: URL(fileURLWithPath: work + "/list"))

        let staged = try coven(["stage", "--user", "--namespace", "tracks", "--files-from", "-", "-z", "--json"], stdin: work + "/list")
        XCTAssertEqual(staged.status, 10, staged.stderrText)
        let lines = staged.stdoutText.split(separator: "\n")
        let good = paths.count - bad.count + 1
        XCTAssertEqual(lines.count, good)
        let objects = try lines.map { try XCTUnwrap(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        // In input order, each with its id and path.
        let expected = paths.filter { !bad.contains($0) } + ["music/caf\\xE9.flac"]
        XCTAssertEqual(objects.map { $0["path"] as? String }, expected)
        XCTAssertEqual(Set(objects.compactMap { $0["id"] as? String }).count, good)
        // Each failure on a line of its own on stderr, then the partial summary.
        let errors = staged.stderrText.split(separator: "\n")
        XCTAssertEqual(errors.count, bad.count + 1, staged.stderrText)
        for (line, path) in zip(errors, bad) { XCTAssertTrue(line.contains("\"path\":\"\(path)\""), String(line)) }
        XCTAssertTrue(errors.last?.contains("\"error\":\"partial\"") ?? false, staged.stderrText)
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), String(good))

        // write --each puts them all in one write; the upload worker sends them.
        try staged.stdout.write(to: URL(fileURLWithPath: work + "/staged.jsonl"))
        let write = try coven(["write", "--each", "-", Self.insert], stdin: work + "/staged.jsonl")
        XCTAssertEqual(write.status, 0, write.stderrText)
        XCTAssertEqual(write.stdoutText.split(separator: "\n").count, good)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), String(good))
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), "0")
        XCTAssertEqual(try sql("SELECT count(DISTINCT file) FROM tracks"), String(good))

        // The text form: id TAB path, a line each.
        let text = try coven(["stage", "--files-from", "list", "-z", "--namespace", "blobs"])
        XCTAssertEqual(text.status, 10)
        XCTAssertEqual(text.stdout.split(separator: 0).count, good * 2)
    }

    func testWriteEachBadRowRefusesTheWholeWriteNamingItsLine() throws {
        let paths = try makeFiles(20)
        try Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/list"))
        let staged = try coven(["stage", "--user", "--namespace", "tracks", "--files-from", "list", "--json"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        var lines = staged.stdoutText.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 20)
        // Line 7 is not an object, then line 12 names a staged id that does not exist.
        var broken = lines
        broken[6] = "[1, 2]"
        try Data((broken.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/broken.jsonl"))
        let refused = try coven(["write", "--each", "broken.jsonl", Self.insert])
        XCTAssertEqual(refused.status, 2)
        XCTAssertTrue(refused.stderrText.contains("line 7 of broken.jsonl is not a JSON object"), refused.stderrText)
        lines[11] = #"{"id": "01a00000-0000-7000-8000-000000000000", "path": "nowhere"}"#
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/unknown.jsonl"))
        let unknown = try coven(["--json", "write", "--each", "unknown.jsonl", Self.insert])
        XCTAssertEqual(unknown.status, 3)
        XCTAssertTrue(unknown.stderrText.contains("\"line\":\"12\""), unknown.stderrText)
        XCTAssertTrue(unknown.stderrText.contains("line 12: no staged file"), unknown.stderrText)
        // Nothing changed: every staged file is still staged, no row was written.
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), "20")
        // A missing parameter names its line too.
        try Data(#"{"path": "x"}"#.utf8).write(to: URL(fileURLWithPath: work + "/noid.jsonl"))
        let noID = try coven(["write", "--each", "noid.jsonl", Self.insert])
        XCTAssertEqual(noID.status, 2)
        XCTAssertTrue(noID.stderrText.contains("line 1: no value for parameter ':id'"), noID.stderrText)
    }

    /// write --each parses its lines ahead of the write on a thread of its own: on an input of
    /// thousands of lines, a bad line far in still names its line after every line before it
    /// ran, and a line the write refuses early ends the command at once (the reading thread,
    /// waiting with its lines parsed ahead, is stopped), both changing nothing.
    func testWriteEachOfManyLinesStopsAtItsFirstBadLine() throws {
        let update = "UPDATE tracks SET title = :title WHERE id = :id"
        var lines = (1...3_000).map { #"{"id": "01a00000-0000-7000-8000-\#(String(format: "%012d", $0))", "title": "t\#($0)"}"# }
        lines[1_999] = "{not json"
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/late.jsonl"))
        let late = try coven(["write", "--each", "late.jsonl", update])
        XCTAssertEqual(late.status, 2)
        XCTAssertTrue(late.stderrText.contains("line 2000 of late.jsonl is not JSON"), late.stderrText)

        lines[1_999] = lines[1_998]
        lines[2] = #"{"title": "no id"}"#
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/early.jsonl"))
        // (Processes.run fails the test should the command not end.)
        let early = try coven(["write", "--each", "-", update], stdin: work + "/early.jsonl")
        XCTAssertEqual(early.status, 2)
        XCTAssertTrue(early.stderrText.contains("line 3: no value for parameter ':id'"), early.stderrText)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "0")
    }

    /// write --each prints the files it put from the device a page at a time (never all
    /// held): the same lines, and under --json the same document, as a write's result.
    func testWriteEachPrintsTheFilesItPutAsAWriteDoes() throws {
        let paths = try makeFiles(30)
        try Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/list"))
        let staged = try coven(["stage", "--user", "--namespace", "tracks", "--files-from", "list", "--json"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        let lines = staged.stdoutText.split(separator: "\n").map(String.init)
        let ids = try lines.map { try XCTUnwrap((JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["id"] as? String) }
        try Data((lines.prefix(20).joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/first.jsonl"))
        try Data((lines.suffix(10).joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: work + "/rest.jsonl"))

        let text = try coven(["write", "--each", "first.jsonl", Self.insert])
        XCTAssertEqual(text.status, 0, text.stderrText)
        let printed = text.stdoutText.split(separator: "\n").map(String.init)
        XCTAssertEqual(printed.count, 20)
        XCTAssertEqual(try sql("SELECT file FROM tracks ORDER BY rowid").split(separator: "\n").map(String.init), printed, "one a line, in the order put")

        let json = try coven(["--json", "write", "--each", "rest.jsonl", Self.insert])
        XCTAssertEqual(json.status, 0, json.stderrText)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        let files = try XCTUnwrap(object["files"] as? [String])
        XCTAssertEqual(try sql("SELECT file FROM tracks ORDER BY rowid LIMIT -1 OFFSET 20").split(separator: "\n").map(String.init), files)
        let map = try XCTUnwrap(object["staged"] as? [String: String])
        XCTAssertEqual(Set(map.keys), Set(ids.suffix(10)))
        // One line, the keys in the order a write's document has them, staged in the order put.
        var expected = "{\"files\":[" + files.map { "\"\($0)\"" }.joined(separator: ",") + "],\"move\":\"\(object["move"] as? String ?? "")\",\"rows\":[],\"staged\":{"
        let stagedOf = Dictionary(uniqueKeysWithValues: map.map { ($1, $0) })
        expected += try files.map { "\"\(try XCTUnwrap(stagedOf[$0]))\":\"\($0)\"" }.joined(separator: ",") + "}}\n"
        XCTAssertEqual(json.stdoutText, expected)
        XCTAssertNotNil(object["move"] as? String, "the files go to the cloud in one move")
        XCTAssertEqual((object["rows"] as? [Any])?.count, 0)
    }

    /// SQLite's temporary files (the statement journal a long `write --each` batch spills, a
    /// sort's runs) go into the device's own folder, not /var/tmp (SQLite's default without
    /// TMPDIR): they hold the device's plaintext rows. strace shows where they are opened.
    func testWriteEachSpillsItsTemporaryFilesIntoTheDevicesFolder() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { throw XCTSkip("strace is not installed") }
        // 12,000 rows: 6,000 no longer spill since a write stamps only the rows its SQL left
        // unstamped.
        let rows = (0..<12_000).map { #"{"title": "track \#($0)"}"# }.joined(separator: "\n") + "\n"
        try Data(rows.utf8).write(to: URL(fileURLWithPath: work + "/rows.jsonl"))
        var bare = environment
        bare["TMPDIR"] = nil
        bare["SQLITE_TMPDIR"] = nil
        let write = try Processes.run("/usr/bin/strace", ["-f", "-qq", "-e", "trace=openat", "-o", work + "/opens.txt", binary,
                                                         "write", "--each", "rows.jsonl",
                                                         "INSERT INTO tracks (id, title, _updated_at) VALUES (coven_uuid7(), :title, coven_stamp())"],
                                      environment: bare, directory: work)
        XCTAssertEqual(write.status, 0, write.stderrText)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "12000")
        let opens = try String(contentsOfFile: work + "/opens.txt", encoding: .utf8).split(separator: "\n").filter { $0.contains("etilqs_") }
        XCTAssertFalse(opens.isEmpty, "the batch spilled nothing: the test no longer shows where spills go")
        for open in opens {
            XCTAssertTrue(open.contains("\"" + work + "/device.db.d/"), String(open))
        }
    }

    func testWriteScriptFromStdinRunsAsOneTransaction() throws {
        var script = ""
        for index in 0..<500 {
            script += "INSERT INTO tracks (id, title, _updated_at)\n  VALUES (coven_uuid7(), 'song \(index); still one', coven_stamp());\n"
        }
        try Data(script.utf8).write(to: URL(fileURLWithPath: work + "/script.sql"))
        let ran = try coven(["write", "-"], stdin: work + "/script.sql")
        XCTAssertEqual(ran.status, 0, ran.stderrText)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "500")
        // A failing statement at the end refuses the whole script.
        try Data((script + "INSERT INTO nowhere VALUES (1);\n").utf8).write(to: URL(fileURLWithPath: work + "/bad.sql"))
        let bad = try coven(["write", "-"], stdin: work + "/bad.sql")
        XCTAssertEqual(bad.status, 4, bad.stderrText)
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "500")
    }

    func testKillDuringBatchStageAndWriteEachThenRerunLosesNothingAndPutsNothingTwice() throws {
        // More than a window (256 files), so the kill comes after the first window is printed.
        let paths = try makeFiles(400, size: 32 << 10)
        try Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/list"))
        let child = try Spawn.start(binary, ["stage", "--files-from", "list", "--namespace", "blobs", "--json"], environment: environment,
                                    directory: work, stdout: work + "/first.jsonl", stderr: work + "/first.err")
        let deadline = Date().addingTimeInterval(60)
        // The kill comes once the first window is out whole: its lines may reach the file in
        // more than one write, and a kill between them is a kill before the window was printed.
        func linesOut() -> Int {
            ((try? Data(contentsOf: URL(fileURLWithPath: work + "/first.jsonl"))) ?? Data()).reduce(0) { $0 + ($1 == 0x0a ? 1 : 0) }
        }
        while Date() < deadline, Spawn.isRunning(child), linesOut() < 256 {
            usleep(2000)
        }
        kill(child.pid, SIGKILL)
        _ = Spawn.wait(child)
        // Every id printed before the kill is staged, its copy whole.
        let printed = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/first.jsonl")), as: UTF8.self).split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertGreaterThanOrEqual(printed.count, 256)
        XCTAssertLessThan(printed.count, 400, "the kill came after the run ended")
        let stagedIDs = Set(try sql("SELECT id FROM coven_staged").split(separator: "\n").map(String.init))
        for object in printed { XCTAssertTrue(stagedIDs.contains(object["id"] as? String ?? ""), "\(object)") }
        // The rerun stages the rest (the paths after the last printed).
        let rest = Array(paths.dropFirst(printed.count))
        try Data(rest.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/rest"))
        let second = try coven(["stage", "--files-from", "rest", "--namespace", "blobs", "--json"])
        XCTAssertEqual(second.status, 0, second.stderrText)
        let all = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/first.jsonl")), as: UTF8.self).split(separator: "\n").prefix(printed.count).joined(separator: "\n")
            + "\n" + second.stdoutText
        try Data(all.utf8).write(to: URL(fileURLWithPath: work + "/all.jsonl"))
        XCTAssertEqual(all.split(separator: "\n").count, 400)
        // No temporary copy is left behind once the device opened again.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/device.db.d/tmp").filter { $0.contains(".tmp.") }, [])

        // write --each killed part way commits nothing; the rerun puts each file once.
        let insert = "INSERT INTO tracks (id, title, file, _updated_at) VALUES (coven_uuid7(), :path, coven_put_staged(:id), coven_stamp())"
        let writer = try Spawn.start(binary, ["write", "--each", "all.jsonl", insert], environment: environment, directory: work,
                                     stdout: work + "/write.out", stderr: work + "/write.err")
        usleep(150_000)
        kill(writer.pid, SIGKILL)
        _ = Spawn.wait(writer)
        let count = try sql("SELECT count(*) FROM tracks")
        XCTAssertTrue(count == "0" || count == "400", count)
        if count == "0" {
            let rerun = try coven(["write", "--each", "all.jsonl", insert])
            XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM tracks"), "400")
        XCTAssertEqual(try sql("SELECT count(DISTINCT file) FROM tracks"), "400")
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), String(stagedIDs.count - printed.count))
    }

    func testSignalDuringBatchStageKeepsWhatWasStagedAndSaysHowFar() throws {
        let paths = try makeFiles(400, size: 32 << 10)
        try Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/list"))
        let child = try Spawn.start(binary, ["stage", "--user", "--files-from", "list", "--namespace", "tracks"], environment: environment,
                                    directory: work, stdout: work + "/out", stderr: work + "/err")
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, Spawn.isRunning(child), (try? Data(contentsOf: URL(fileURLWithPath: work + "/out")).count) ?? 0 == 0 {
            usleep(1000)
        }
        kill(child.pid, SIGINT)
        let (status, _) = Spawn.wait(child, timeout: 20)
        XCTAssertEqual(status, 130)
        let printed = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/out")), as: UTF8.self).split(separator: "\n")
        let errors = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/err")), as: UTF8.self)
        XCTAssertTrue(errors.contains("interrupted: stage stopped: interrupted by SIGINT, after \(printed.count) files staged and 0 failed"), errors)
        // What was printed is what is staged, each id with its path.
        XCTAssertEqual(try sql("SELECT count(*) FROM coven_staged"), String(printed.count))
        XCTAssertEqual(printed.first.map { $0.split(separator: "\t").last.map(String.init) }, "music/track-0.flac")
    }

    func testWatchPrintsAgainOnEachChangeAndEndsWhenEmpty() throws {
        let paths = try makeFiles(30)
        try Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/list"))
        let staged = try coven(["stage", "--user", "--namespace", "tracks", "--files-from", "list", "--json"])
        XCTAssertEqual(staged.status, 0, staged.stderrText)
        try staged.stdout.write(to: URL(fileURLWithPath: work + "/staged.jsonl"))
        XCTAssertEqual(try coven(["write", "--each", "staged.jsonl", Self.insert]).status, 0)
        let watcher = try Spawn.start(binary, ["sql", "--watch", "--until-empty", "SELECT count(*) FROM coven_uploads HAVING count(*) > 0"],
                                      environment: environment, directory: work, stdout: work + "/watch.out", stderr: work + "/watch.err")
        let queue = try Spawn.start(binary, ["uploads", "--watch", "--until-empty", "--json"],
                                    environment: environment, directory: work, stdout: work + "/queue.out", stderr: work + "/queue.err")
        usleep(300_000)
        XCTAssertTrue(Spawn.isRunning(watcher))
        let worker = try coven(["upload-worker", "--once"])
        XCTAssertEqual(worker.status, 0, worker.stderrText)
        let (status, timedOut) = Spawn.wait(watcher, timeout: 20)
        XCTAssertFalse(timedOut)
        let watchErrors = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/watch.err")), as: UTF8.self)
        XCTAssertEqual(status, 0, watchErrors)
        let shown = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/watch.out")), as: UTF8.self)
        XCTAssertTrue(shown.hasPrefix("30\n\n"), shown)
        XCTAssertTrue(shown.hasSuffix("\n\n\n"), shown) // the empty result, then its empty line
        let (queueStatus, queueTimedOut) = Spawn.wait(queue, timeout: 20)
        XCTAssertFalse(queueTimedOut)
        XCTAssertEqual(queueStatus, 0)
        let listings = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work + "/queue.out")), as: UTF8.self).split(separator: "\n")
        XCTAssertGreaterThanOrEqual(listings.count, 2)
        XCTAssertEqual(listings.last, "[]")
        // A watch ends on a signal too, with 130.
        let endless = try Spawn.start(binary, ["sql", "--watch", "SELECT 1"], environment: environment, directory: work,
                                      stdout: work + "/endless.out", stderr: work + "/endless.err")
        usleep(300_000)
        kill(endless.pid, SIGINT)
        let (endStatus, endTimedOut) = Spawn.wait(endless, timeout: 10)
        XCTAssertFalse(endTimedOut)
        XCTAssertEqual(endStatus, 130)
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven make-device-only` run as the built binary on file:// storage: the three input forms,
/// the names as written, progress lines and the switch seen from `coven sql`.
final class MakeDeviceOnlyCLITests: XCTestCase {
    func testStdinLinesJSONLinesAndArguments() throws {
        let cli = try CLIDevice("mdo-cli")
        let contents = (0..<4).map { patternBytes(50_000 + $0, seed: UInt8($0)) }
        let ids = try cli.storedFiles(contents)
        try FileManager.default.createDirectory(atPath: cli.work + "/Music", withIntermediateDirectories: true)

        // Before: stored, nothing listed as an original.
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["4"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["0"])
        // The writes that staged and stored the files, already recorded for publishing.
        let published = try XCTUnwrap(Int(XCTUnwrap(cli.sql("SELECT count(*) FROM coven_outbox").first)))

        // Lines on stdin: each field one name, so AC/DC is one name; a Latin-1 byte is kept as \xE9.
        var lines = Data("\(ids[0])\tAC/DC\tBack in Black.flac\n".utf8)
        lines.append(Data("\(ids[1])\tCaf".utf8) + Data([0xE9]) + Data(".flac\r\n".utf8))
        FileManager.default.createFile(atPath: cli.work + "/list.tsv", contents: lines)
        var result = try cli.run(["make-device-only", "--folder", "Music", "--progress-json"], stdin: cli.work + "/list.tsv")
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stdoutText, "\(ids[0])\t\(cli.work)/Music/AC\u{FF0F}DC/Back in Black.flac\n\(ids[1])\t\(cli.work)/Music/Caf\u{FF3C}xE9.flac\n")
        let progress = result.stderrText.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertFalse(progress.isEmpty, result.stderrText)
        let last = progress.filter { $0["done"] as? Bool == true }
        XCTAssertEqual(Set(last.compactMap { $0["file"] as? String }), [ids[0], ids[1]])
        XCTAssertEqual(progress.last?["call_bytes"] as? Int, contents[0].count + contents[1].count)
        XCTAssertEqual(progress.last?["files_done"] as? Int, 2)

        // JSON lines, then arguments with --json output.
        FileManager.default.createFile(atPath: cli.work + "/list.json", contents: Data("{\"file\": \"\(ids[2])\", \"path\": [\"Why?\", \"CON.flac\"]}\n".utf8))
        result = try cli.run(["make-device-only", "--folder", "Music", "--input-json"], stdin: cli.work + "/list.json")
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stderrText, "")
        result = try cli.run(["--json", "make-device-only", "--folder", cli.work + "/Music", "\(ids[3])=Deep/er/trailing. "])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        let files = try XCTUnwrap(object["files"] as? [[String: Any]])
        XCTAssertEqual(files.first?["relative_path"] as? String, "Deep/er/trailing.\u{2420}")
        XCTAssertEqual(files.first?["size"] as? Int, contents[3].count)

        XCTAssertEqual(cli.tree("Music"), [
            "AC\u{FF0F}DC", "AC\u{FF0F}DC/Back in Black.flac", "Caf\u{FF3C}xE9.flac", "Deep", "Deep/er", "Deep/er/trailing.\u{2420}",
            "Why\u{FF1F}", "Why\u{FF1F}/\u{FF23}ON.flac",
        ])
        XCTAssertEqual(FileManager.default.contents(atPath: cli.work + "/Music/Why\u{FF1F}/\u{FF23}ON.flac").map([UInt8].init), contents[2])
        // After: every file on this device, each copy its original here, one write each call.
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["4"])
        XCTAssertEqual(try cli.sql("SELECT coven_path_text(path) FROM coven_user_files WHERE file = '\(ids[1])'"), ["\(cli.work)/Music/Caf\u{FF3C}xE9.flac"])
        // One write per call, each recorded for publishing.
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_outbox"), ["\(published + 3)"])
        // Again: something is already at each path now.
        result = try cli.run(["make-device-only", "--folder", "Music", "\(ids[3])=Deep/er/trailing. "])
        XCTAssertEqual(result.status, 4)
        XCTAssertTrue(result.stderrText.hasPrefix("coven: error: not_in_cloud: argument 1"), result.stderrText)
    }

    /// The copies are synced together (one sync of their filesystem) before the switch names
    /// them: `kill -9` at that sync (strace kills the process as it enters it) switches nothing,
    /// the next command's open removes the copies, and a rerun brings every file back.
    /// (Before, each copy was synced on its own as it was written, and no such sync was made.)
    func testKillAtTheSyncOfTheCopiesSwitchesNothingAndTheRerunBringsThemBack() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { throw XCTSkip("strace is not installed") }
        let cli = try CLIDevice("mdo-sync-kill")
        let contents = (0..<6).map { patternBytes(20_000 + $0, seed: UInt8($0)) }
        let ids = try cli.storedFiles(contents)
        try FileManager.default.createDirectory(atPath: cli.work + "/Music", withIntermediateDirectories: true)
        let arguments = ["make-device-only", "--folder", "Music"] + ids.enumerated().map { "\($1)=Album/\($0).bin" }
        let killed = try Processes.run("/usr/bin/strace", ["-f", "-qq", "-o", "/dev/null", "-e", "trace=syncfs", "-e", "inject=syncfs:signal=KILL",
                                                          cli.binary] + arguments,
                                       environment: cli.environment, directory: cli.work)
        XCTAssertNotEqual(killed.status, 0, "killed at the sync of the copies: \(killed.stderrText)")
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["6"], "nothing switched")
        // The next command's open cleans up after the killed call.
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["0"])
        XCTAssertEqual(cli.tree("Music").filter { $0.hasSuffix(".bin") }, [], "the copies made before the kill are gone")
        let rerun = try cli.run(arguments)
        XCTAssertEqual(rerun.status, 0, rerun.stderrText)
        for (index, bytes) in contents.enumerated() {
            XCTAssertEqual(FileManager.default.contents(atPath: cli.work + "/Music/Album/\(index).bin").map([UInt8].init), bytes)
        }
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["6"])
    }

    func testAProgressLineOnATerminalOnly() throws {
        guard let script = Processes.which("script", path: "/usr/bin:/bin") else { throw XCTSkip("no 'script' to give coven a terminal") }
        let cli = try CLIDevice("mdo-tty")
        let ids = try cli.storedFiles([patternBytes(300_000, seed: 9)])
        try FileManager.default.createDirectory(atPath: cli.work + "/Music", withIntermediateDirectories: true)
        // script(1) runs coven with stderr on a terminal that moves the cursor: the progress
        // line is drawn, then erased.
        var environment = cli.environment
        environment["TERM"] = "xterm"
        let result = try Processes.run(script, ["-qec", "coven make-device-only --folder Music '\(ids[0])=Album/one.flac' 2>&1 >/dev/null", "/dev/null"],
                                       environment: environment, directory: cli.work)
        XCTAssertEqual(result.status, 0, result.stdoutText + result.stderrText)
        XCTAssertTrue(result.stdoutText.contains("[1/1] Album/one.flac 100% | all 293.0 KiB / 293.0 KiB 100%"), result.stdoutText.debugDescription)
        XCTAssertTrue(result.stdoutText.hasSuffix("\r\u{1B}[K"), result.stdoutText.debugDescription)
        // Under TERM=dumb (the golden environment): plain lines, no cursor escape.
        let more = try cli.storedFiles([patternBytes(300_000, seed: 10)])
        let dumb = try Processes.run(script, ["-qec", "coven make-device-only --folder Music '\(more[0])=Album/two.flac' 2>&1 >/dev/null", "/dev/null"],
                                     environment: cli.environment, directory: cli.work)
        XCTAssertEqual(dumb.status, 0, dumb.stdoutText + dumb.stderrText)
        XCTAssertTrue(dumb.stdoutText.hasPrefix("[0/1] Album/two.flac"), dumb.stdoutText.debugDescription)
        XCTAssertFalse(dumb.stdoutText.contains("\u{1B}"), dumb.stdoutText.debugDescription)
    }

    func testClashesAndLinksFromTheCommandLine() throws {
        let cli = try CLIDevice("mdo-clash")
        let ids = try cli.storedFiles([[1], [2], [3]])
        try FileManager.default.createDirectory(atPath: cli.work + "/Music", withIntermediateDirectories: true)
        var result = try cli.run(["make-device-only", "--folder", "Music", "\(ids[0])=Album/Track.flac", "\(ids[1])=album/track.flac"])
        XCTAssertEqual(result.status, 4)
        XCTAssertEqual(result.stderrText.split(separator: "\n").first.map(String.init),
                       "coven: error: clash: argument 2: the path 'album/track.flac' of file '\(ids[1])' is one with the path 'Album/Track.flac' of file '\(ids[0])' (argument 1)")
        result = try cli.run(["make-device-only", "--folder", "Music", "\(ids[0])=Caf\u{E9}.flac", "\(ids[1])=Cafe\u{301}.flac"])
        XCTAssertEqual(result.status, 4)
        XCTAssertTrue(result.stderrText.hasPrefix("coven: error: clash:"), result.stderrText)
        XCTAssertEqual(symlink(cli.work, cli.work + "/Music/loop"), 0)
        result = try cli.run(["make-device-only", "--folder", "Music", "\(ids[2])=loop/x.flac"])
        XCTAssertEqual(result.status, 4)
        XCTAssertTrue(result.stderrText.hasPrefix("coven: error: link: argument 1: the path 'loop/x.flac'"), result.stderrText)
        // A folder path with a Latin-1 byte, passed as real bytes through a shell.
        result = try Processes.run("/bin/sh", ["-c", "mkdir \"$(printf 'Caf\\351')\" && exec coven make-device-only --folder \"$(printf 'Caf\\351')\" \"$0\"", "\(ids[2])=x"],
                                   environment: cli.environment, directory: cli.work)
        XCTAssertEqual(result.status, 4, result.stderrText)
        XCTAssertEqual(result.stderrText, "coven: error: not_unicode: the folder 'Caf\\xE9' is not valid Unicode\n")
        XCTAssertEqual(cli.tree("Music"), ["loop"])
    }
}

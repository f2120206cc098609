import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// END TO END WITH THE UPLOAD WORKER: moves as `coven upload-worker --once` carries them out.
///
/// The worker is built on another branch (Sources/CovenKit/Upload/); until it is merged these
/// tests skip, naming why. Once `coven upload-worker` exists they run: a move whose original is
/// missing waits and then completes when it comes back, switching all its files in one write;
/// a move whose original changed fails, is listed failed with the original named, holds its
/// files (file_in_move) until `coven move --cancel`, and fails again if moved again.
final class MoveWorkerCLITests: XCTestCase {
    var cli: CLIDevice!

    override func setUpWithError() throws {
        cli = try CLIDevice("move-worker")
        let probe = try cli.run(["upload-worker", "--help"])
        guard probe.status == 0 else {
            throw XCTSkip("needs 'coven upload-worker' from the upload branch; these tests run once it is merged")
        }
    }

    override func tearDown() { cli = nil }

    /// Stages `name` (written with `bytes`) as a device-only original in a new row; returns its file id.
    func deviceOnlyOriginal(_ name: String, _ bytes: [UInt8]) throws -> String {
        FileManager.default.createFile(atPath: cli.work + "/" + name, contents: Data(bytes))
        let stage = try cli.run(["stage", "--user", name, "--namespace", "music", "--place", "device-only"])
        XCTAssertEqual(stage.status, 0, stage.stderrText)
        let prepared = stage.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let write = try cli.run(["write", "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file('\(prepared)'), '')"])
        XCTAssertEqual(write.status, 0, write.stderrText)
        return write.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func drain() throws {
        // `coven retry` (the upload helper's) makes uploads waiting on a backoff due now.
        _ = try? cli.run(["retry"])
        _ = try cli.run(["upload-worker", "--once"])
    }

    func testAMoveWaitsForAMissingOriginalThenSwitchesAllItsFilesTogether() throws {
        let a = try deviceOnlyOriginal("a.flac", patternBytes(100_000, seed: 1))
        let b = try deviceOnlyOriginal("b.flac", patternBytes(200_000, seed: 2))
        let move = try cli.run(["move", a, b]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(rename(cli.work + "/b.flac", cli.work + "/b.unplugged"), 0)

        try drain()
        // b is missing: the move waits, and none of its files switches (a is not switched alone).
        XCTAssertEqual(try cli.sql("SELECT DISTINCT state FROM coven_moves WHERE move = '\(move)'"), ["moving"])
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT waiting_for FROM coven_uploads WHERE file = '\(b)'"), ["source"])

        // The drive comes back: the move completes in one switch.
        XCTAssertEqual(rename(cli.work + "/b.unplugged", cli.work + "/b.flac"), 0)
        try drain()
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL"), ["2"])
        XCTAssertEqual(try cli.sql("SELECT count(DISTINCT _updated_at) FROM coven_files"), ["1"])
        XCTAssertEqual(try cli.sql("SELECT state FROM coven_move_state WHERE id = '\(move)'"), ["done"])
        XCTAssertEqual(try cli.run(["moves"]).stdoutText, "")
    }

    func testAChangedOriginalFailsTheMoveUntilItIsCancelled() throws {
        let a = try deviceOnlyOriginal("a.flac", patternBytes(100_000, seed: 3))
        let b = try deviceOnlyOriginal("b.flac", patternBytes(100_000, seed: 4))
        let move = try cli.run(["move", a, b]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        // An edit that keeps the size.
        FileManager.default.createFile(atPath: cli.work + "/b.flac", contents: Data(patternBytes(100_000, seed: 5)))

        try drain()
        XCTAssertEqual(try cli.sql("SELECT DISTINCT state, error FROM coven_moves WHERE move = '\(move)'"), ["failed\tuser_file_changed"])
        let listed = try cli.run(["moves"]).stdoutText
        XCTAssertTrue(listed.contains("\(move)\tfailed\t\(b)\tuser_file_changed\t\(cli.work)/b.flac"), listed)
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) = coven_device_id()"), ["2"])
        let again = try cli.run(["move", a])
        XCTAssertEqual(again.status, 4)
        XCTAssertTrue(again.stderrText.contains("file_in_move") && again.stderrText.contains(move), again.stderrText)

        XCTAssertEqual(try cli.run(["move", "--cancel", move]).status, 0)
        XCTAssertEqual(try cli.run(["moves"]).stdoutText, "")
        XCTAssertEqual(try cli.sql("SELECT count(*) FROM coven_user_files"), ["2"])
        // Moved again, the changed original fails again: stage it afresh instead.
        let retry = try cli.run(["move", b]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        try drain()
        XCTAssertEqual(try cli.sql("SELECT DISTINCT state FROM coven_moves WHERE move = '\(retry)'"), ["failed"])
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Device-only staging, moves to the cloud and their cancel, against real SQLite and files.
/// The upload worker's part (sending, switching, waiting on a missing original, failing on a
/// changed one) is tested in MoveWorkerCLITests once `coven upload-worker` exists.
final class MovesTests: XCTestCase {
    var fixture: DeviceTestFixture!
    var device: Device { fixture.device }

    override func setUpWithError() throws { fixture = try DeviceTestFixture("moves") }
    override func tearDown() { fixture = nil }

    func queued(_ move: String) throws -> Int64 {
        try fixture.scalar("SELECT count(*) FROM coven_upload_queue WHERE move = ?1", [move]).intValue ?? -1
    }

    // MARK: - Device-only staging

    func testDeviceOnlyStagingOfBothKindsQueuesNothing() throws {
        let bytes = DeviceTestFixture.bytes(70_000)
        let user = try fixture.userFile("song.flac", bytes, place: .deviceOnly)
        let app = try fixture.appFile([1, 2, 3], place: .deviceOnly)
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_upload_queue").intValue, 0)
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_uploads").intValue, 0)
        for id in [user, app] {
            let record = try XCTUnwrap(device.fileRecord(id))
            XCTAssertEqual(record.coordinates.at, .device)
            XCTAssertEqual(record.coordinates.device, device.deviceID)
            XCTAssertEqual(try fixture.scalar("SELECT coven_file_device(coordinates) FROM coven_files WHERE id = ?1", [id]).textValue, device.deviceID)
        }
        // Reads here use the original (listed in coven_user_files) or coven's copy.
        let original = try XCTUnwrap(device.database.queryOne("SELECT coven_path_text(path) AS path, size FROM coven_user_files WHERE file = ?1", [user]))
        XCTAssertEqual(original.string("path"), fixture.root + "/song.flac")
        XCTAssertEqual(original.int("size"), Int64(bytes.count))
        let copy = try XCTUnwrap(fixture.scalar("SELECT l.copy FROM coven_local AS l JOIN coven_files AS f ON l.object = json_extract(f.coordinates, '$.object') WHERE f.id = ?1", [app]).textValue)
        XCTAssertEqual(FileManager.default.contents(atPath: device.paths.folder + "/" + copy), Data([1, 2, 3]))
        // The write's changeset carries the records, as every coven_files change.
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_outbox").intValue, 2)
    }

    // MARK: - Moving

    func testMoveMakesOneMoveListedWithItsFilesAndSurvivesReopening() throws {
        let a = try fixture.userFile("a.flac", [1, 2, 3], place: .deviceOnly)
        let b = try fixture.appFile(DeviceTestFixture.bytes(100_000), place: .deviceOnly)
        let outbox = try fixture.scalar("SELECT count(*) FROM coven_outbox").intValue
        let move = try Moves(device).moveToCloud(files: [a, b])
        XCTAssertTrue(Identifier.isCanonicalUUID(move))
        XCTAssertEqual(try queued(move), 2)
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [move]).textValue, "moving")
        XCTAssertEqual(try fixture.scalar("SELECT bytes_total FROM coven_uploads WHERE file = ?1", [b]).intValue, ObjectLayout.encryptedSize(plaintextSize: 100_000))
        // No row or record changes: the files stay on this device only until they switch.
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_outbox").intValue, outbox)
        XCTAssertEqual(try device.fileRecord(a)?.coordinates.at, .device)
        XCTAssertEqual(try fixture.scalar("SELECT group_concat(move) FROM (SELECT DISTINCT move FROM coven_uploads)").textValue, move)

        let reopened = try Device.open(paths: device.paths)
        let listed = try Moves(reopened).moves()
        XCTAssertEqual(Set(listed.map(\.file)), [a, b])
        XCTAssertTrue(listed.allSatisfy { $0.move == move && $0.state == .moving && $0.error == nil })
        XCTAssertEqual(listed.first { $0.file == a }?.path, fixture.root + "/a.flac")
        XCTAssertNil(listed.first { $0.file == b }?.path)
    }

    func testNothingIsReadAgainAndTwoRecordsOverOneObjectAreOneUpload() throws {
        let a = try fixture.userFile("gone.flac", [1, 2, 3], place: .deviceOnly)
        // A second record over the same bytes (another audience's, say): one object, one upload.
        let twin = try XCTUnwrap(device.write(sql: "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_existing_file(:a), '')",
                                              parameters: ["a": .text(a)]).files.first)
        // The original is unplugged: the move is still made (the worker waits for it).
        try FileManager.default.removeItem(atPath: fixture.root + "/gone.flac")
        let move = try Moves(device).moveToCloud(files: [a, twin, a])
        XCTAssertEqual(try queued(move), 1)
        XCTAssertEqual(Set(try Moves(device).moves().map(\.file)), [a, twin])
        let error = assertCovenError(.fileInMove) { try Moves(device).moveToCloud(files: [twin]) }
        XCTAssertEqual(error?.details["move"], move)
    }

    func testRefusals() throws {
        let here = try fixture.userFile("here.flac", [1], place: .deviceOnly)
        let stored = try fixture.storedFile([2])
        let cloud = try fixture.userFile("cloud.flac", [3], place: .cloud)
        // A file on another device only.
        let elsewhere = try fixture.userFile("else.flac", [4], place: .deviceOnly)
        try device.database.run("UPDATE coven_files SET coordinates = json_set(coordinates, '$.device', 'another-device') WHERE id = ?1", [elsewhere])

        // The staging writes' moves (the stored file's, done; the cloud file's, running).
        let moves = try XCTUnwrap(fixture.scalar("SELECT count(*) FROM coven_move_state").intValue)

        var error = assertCovenError(.notThisDevice) { try Moves(device).moveToCloud(files: [here, elsewhere]) }
        XCTAssertEqual(error?.details["device"], "another-device")
        error = assertCovenError(.notDeviceOnlyHere) { try Moves(device).moveToCloud(files: [stored]) }
        XCTAssertEqual(error?.details["file"], stored)
        // Staged for the cloud: already in its staging write's move.
        let staging = try XCTUnwrap(fixture.scalar("SELECT move FROM coven_uploads WHERE file = ?1", [cloud]).textValue)
        error = assertCovenError(.fileInMove) { try Moves(device).moveToCloud(files: [cloud]) }
        XCTAssertEqual(error?.details["move"], staging)
        assertCovenError(.fileAbsent) { try Moves(device).moveToCloud(files: ["01a228b9-0000-7000-8000-000000000000"]) }
        assertCovenError(.usage) { try Moves(device).moveToCloud(files: []) }
        // Nothing of a refused move stays.
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_move_state").intValue, moves)

        let move = try Moves(device).moveToCloud(files: [here])
        error = assertCovenError(.fileInMove) { try Moves(device).moveToCloud(files: [here]) }
        XCTAssertEqual(error?.details["move"], move)
        XCTAssertTrue(error?.message.contains(move) == true)
        // A failed move holds its files too, until it is cancelled.
        try device.database.run("UPDATE coven_move_state SET state = 'failed', error_code = 'user_file_changed', error = 'changed', error_file = ?2 WHERE id = ?1", [move, fixture.root + "/here.flac"])
        error = assertCovenError(.fileInMove) { try Moves(device).moveToCloud(files: [here]) }
        XCTAssertEqual(error?.details["move"], move)
        // The worker may name the failing original by its file's id: listed as its path.
        XCTAssertEqual(try Moves(device).moves().first { $0.move == move }?.errorFile, fixture.root + "/here.flac")
        try device.database.run("UPDATE coven_move_state SET error_file = ?2 WHERE id = ?1", [move, here])
        let failed = try Moves(device).moves().filter { $0.move == move }
        XCTAssertEqual(failed.map(\.state), [.failed])
        XCTAssertEqual(failed.first?.error, "user_file_changed")
        XCTAssertEqual(failed.first?.errorFile, fixture.root + "/here.flac")
        try Moves(device).cancelMove(move)
        XCTAssertEqual(try Moves(device).moves().map(\.move), [staging])
        XCTAssertNotEqual(try Moves(device).moveToCloud(files: [here]), move)
    }

    func testCancelLeavesTheFilesOnThisDeviceAndEndsTheUploads() throws {
        let a = try fixture.userFile("a.flac", [1, 2], place: .deviceOnly)
        let b = try fixture.userFile("b.flac", [3, 4], place: .deviceOnly)
        let move = try Moves(device).moveToCloud(files: [a, b])
        // The worker began a provider session for b: that upload is retired for it to abort.
        try device.database.run("""
            UPDATE coven_upload_queue SET upload_id = 'mp-1' WHERE object = (SELECT json_extract(coordinates, '$.object') FROM coven_files WHERE id = ?1)
            """, [b])
        try Moves(device).cancelMove(move)
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [move]).textValue, "cancelled")
        // a's upload sent nothing and is gone; b's stays, its move cancelled, for the worker to
        // abort its session and drop it.
        XCTAssertEqual(try fixture.scalar("SELECT group_concat(upload_id) FROM coven_upload_queue WHERE move = ?1", [move]).textValue, "mp-1")
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_upload_queue WHERE move = ?1", [move]).textValue, "queued")
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_upload_parts").intValue, 0)
        XCTAssertEqual(try Moves(device).moves(), [])
        for id in [a, b] { XCTAssertEqual(try device.fileRecord(id)?.coordinates.device, device.deviceID) }
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_user_files").intValue, 2)
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.root + "/a.flac"))

        assertCovenError(.invalidState) { try Moves(device).cancelMove(move) }
        let error = assertCovenError(.notFound) { try Moves(device).cancelMove("01a228b9-0000-7000-8000-000000000000") }
        XCTAssertEqual(error?.details["move"], "01a228b9-0000-7000-8000-000000000000")
        // a moves again at once; b waits until the worker has ended its session.
        XCTAssertNoThrow(try Moves(device).moveToCloud(files: [a]))
        let busy = assertCovenError(.fileInMove) { try Moves(device).moveToCloud(files: [b]) }
        XCTAssertEqual(busy?.details["move"], move)
        try device.database.run("UPDATE coven_move_state SET state = 'done' WHERE id = (SELECT move FROM coven_upload_queue WHERE state = 'queued')")
        assertCovenError(.invalidState) { try Moves(device).cancelMove(try XCTUnwrap(fixture.scalar("SELECT id FROM coven_move_state WHERE state = 'done'").textValue)) }
    }

    func testMoveAndCancelInsideAWrite() throws {
        let a = try fixture.userFile("a.flac", [1], place: .deviceOnly)
        let b = try fixture.appFile([2], place: .deviceOnly)
        // One call is one move; a JSON array (json_group_array) gives it many files.
        let result = try device.write(sql: """
            SELECT coven_move_to_cloud((SELECT json_group_array(file) FROM tracks WHERE file IN (:a, :b))) AS move
            """, parameters: ["a": .text(a), "b": .text(b)])
        let move = try XCTUnwrap(result.rows.first?.string("move"))
        XCTAssertEqual(try queued(move), 2)
        // A failing statement later in the write takes the move back with it.
        let c = try fixture.userFile("c.flac", [3], place: .deviceOnly)
        XCTAssertThrowsError(try device.write(sql: "SELECT coven_move_to_cloud(:c); SELECT no_such_function()", parameters: ["c": .text(c)]))
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_upload_queue WHERE move IS NOT NULL AND move != ?1", [move]).intValue, 0)
        // Cancel and move again in one write, beside the app's own rows.
        let again = try device.write(sql: """
            SELECT coven_cancel_move(:m);
            UPDATE tracks SET _updated_at = '' WHERE file = :a;
            SELECT coven_move_to_cloud(:a, :c) AS move
            """, parameters: ["m": .text(move), "a": .text(a), "c": .text(c)])
        let second = try XCTUnwrap(again.rows.last?.string("move"))
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [move]).textValue, "cancelled")
        XCTAssertEqual(try queued(second), 2)
        XCTAssertEqual(try queued(move), 0)
        // Outside a write the functions refuse.
        XCTAssertThrowsError(try device.database.scalar("SELECT coven_move_to_cloud(?1)", [a]))
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The upload worker end to end on a `file://` store: real SQLite, libgcrypt and directories.
final class UploadWorkerTests: XCTestCase {
    // MARK: Sending and switching

    func testSingleRequestAndMultipartUploadsDecryptAndSwitchInOneWrite() throws {
        let fixture = try UploadFixture()
        let big = UploadFixture.bytes(1_000_000 + 17, seed: 3)
        let small = UploadFixture.bytes(5000, seed: 4)
        let bigPath = try fixture.original("big.bin", big)
        let bigStaged = try Staging(fixture.device).prepareUserFile(path: bigPath, namespace: "originals", place: .cloud)
        let smallStaged = try fixture.stageApp(small)
        let result = try fixture.write("""
            INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(bigStaged.id)'), '');
            INSERT INTO notes VALUES (coven_uuid7(), coven_put_staged('\(smallStaged)'), '');
            """)
        let move = try XCTUnwrap(result.move)
        let outboxBefore = try fixture.count("SELECT count(*) FROM coven_outbox")
        let copy = try XCTUnwrap(fixture.scalar("SELECT copy FROM coven_local WHERE kind = 'app'").textValue)

        // 1 MB in 256 KiB parts (multipart), the small one in one request.
        let summary = try fixture.run(settings: ["COVEN_UPLOAD_PART_SIZE": "262144", "COVEN_UPLOAD_SINGLE_LIMIT": "300000"])
        XCTAssertEqual(summary.stored, 2)
        XCTAssertTrue(summary.complete)

        let files = result.files
        XCTAssertEqual(try fixture.storedPlaintext(files[0]), big)
        XCTAssertEqual(try fixture.storedPlaintext(files[1]), small)
        XCTAssertEqual(try fixture.record(files[0]).hash, SHA256.digest(big).hex)
        XCTAssertEqual(try fixture.record(files[1]).hash, SHA256.digest(small).hex)
        XCTAssertEqual(try fixture.record(files[0]).coordinates.at, .stored)
        XCTAssertNil(try fixture.record(files[0]).coordinates.device)
        // One write switched both, recorded for publishing; the move is done; the queue is empty.
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_outbox"), outboxBefore + 1)
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [move]).textValue, "done")
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_parts"), 0)
        // coven's copy is released; the original is never touched.
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.paths.folder + "/" + copy))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: bigPath)), Data(big))
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(files[0]), .available)
        XCTAssertEqual(try DeviceStatus(of: fixture.device).uploads.queued, 0)
        XCTAssertEqual(try DeviceStatus(of: fixture.device).files.stored, 2)
    }

    func testEmptyFileAndExactChunkBoundaries() throws {
        let fixture = try UploadFixture()
        var ids: [String] = []
        for (index, size) in [0, 65536, 65537, 3 * 65536].enumerated() {
            ids.append(try fixture.addOriginal("f\(index)", UploadFixture.bytes(size, seed: UInt8(index + 1))))
        }
        try fixture.run(settings: ["COVEN_UPLOAD_PART_SIZE": "65536", "COVEN_UPLOAD_SINGLE_LIMIT": "70000"])
        for (index, size) in [0, 65536, 65537, 3 * 65536].enumerated() {
            XCTAssertEqual(try fixture.storedPlaintext(ids[index]), UploadFixture.bytes(size, seed: UInt8(index + 1)), "size \(size)")
        }
    }

    func testBoundUploadSwitchesAloneAndRecordsTheWrite() throws {
        let fixture = try UploadFixture()
        let staged = try fixture.stageApp(UploadFixture.bytes(2000))
        let file = try fixture.write("INSERT INTO thumbnails VALUES (coven_uuid7(), coven_put_staged('\(staged)'), '')").files[0]
        XCTAssertEqual(try fixture.count("SELECT bound FROM coven_upload_queue"), 1)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file), .uploading)
        try fixture.run()
        XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_outbox"), 2)
    }

    // MARK: The source is checked before any byte is sent

    func testOriginalEditedWithSizeAndTimeRestoredFailsItsMoveBeforeAnyByteIsSent() throws {
        let fixture = try UploadFixture()
        let good = UploadFixture.bytes(200_000, seed: 5)
        let bytes = UploadFixture.bytes(400_000, seed: 6)
        let path = try fixture.original("song.flac", bytes)
        let goodPath = try fixture.original("good.flac", good)
        let a = try Staging(fixture.device).prepareUserFile(path: goodPath, namespace: "originals", place: .cloud)
        let b = try Staging(fixture.device).prepareUserFile(path: path, namespace: "originals", place: .cloud)
        let result = try fixture.write("""
            INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(a.id)'), '');
            INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(b.id)'), '');
            """)
        // Change one byte in the last chunk, then put back the size and the exact mtime.
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        var edited = bytes
        edited[399_000] ^= 0xff
        try Data(edited).write(to: URL(fileURLWithPath: path))
        var times = [info.st_atim, info.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)

        let summary = try fixture.run(jobs: 1, settings: ["COVEN_UPLOAD_PART_SIZE": "65536", "COVEN_UPLOAD_SINGLE_LIMIT": "0"])
        XCTAssertFalse(summary.complete)
        XCTAssertEqual(summary.failed.first?.code, .userFileChanged)
        let move = try XCTUnwrap(result.move)
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [move]).textValue, "failed")
        XCTAssertEqual(try fixture.scalar("SELECT error_code FROM coven_move_state WHERE id = ?1", [move]).textValue, "user_file_changed")
        XCTAssertEqual(try fixture.scalar("SELECT error_file FROM coven_move_state WHERE id = ?1", [move]).textValue, result.files[1])
        // No file switched; both stay on this device only and coven_moves lists them, failed.
        for file in result.files { XCTAssertEqual(try fixture.record(file).coordinates.at, .device) }
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_moves WHERE state = 'failed'"), 2)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(result.files[1]), .deviceOnly(device: fixture.device.deviceID))
        // Nothing of the changed file reached storage: no object, no part, no session.
        let changedObject = try fixture.record(result.files[1]).coordinates.object
        XCTAssertFalse(fixture.storeFiles().contains(changedObject))
        XCTAssertFalse(fixture.storeFiles().contains { $0.hasPrefix(".uploads/") && !$0.hasSuffix("/info") && !$0.hasSuffix("/data") && $0.contains("part-") && $0.contains(changedObject) })
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_parts WHERE object = ?1", [changedObject]), 0)
        // A retry does not revive a failed move.
        XCTAssertEqual(try Uploads(fixture.device).retryUploads(), [])
    }

    func testOriginalWithAnotherSizeFailsBeforeReadingAndMissingOriginalWaits() throws {
        let fixture = try UploadFixture()
        let bytes = UploadFixture.bytes(100_000, seed: 7)
        let file = try fixture.addOriginal("a.bin", bytes)
        let path = fixture.directory + "/a.bin"
        // Missing (an unplugged drive): the move waits and retries.
        XCTAssertEqual(rename(path, path + ".away"), 0)
        let first = try fixture.run()
        XCTAssertEqual(first.waiting.first?.code, .userFileMissing)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file), .missing(device: fixture.device.deviceID, reason: .source(.userFileMissing)))
        XCTAssertEqual(try fixture.scalar("SELECT waiting_for FROM coven_uploads").textValue, "source")
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_move_state").textValue, "moving")
        XCTAssertEqual(try DeviceStatus(of: fixture.device).files.missing, 1)
        // Back again: stored.
        XCTAssertEqual(rename(path + ".away", path), 0)
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertTrue(try fixture.run().complete)
        XCTAssertEqual(try fixture.storedPlaintext(file), bytes)
        // Another size fails a fresh move at once.
        let other = try fixture.addOriginal("b.bin", bytes)
        try Data(bytes + [1]).write(to: URL(fileURLWithPath: fixture.directory + "/b.bin"))
        let summary = try fixture.run()
        XCTAssertEqual(summary.failed.first?.code, .userFileChanged)
        XCTAssertEqual(try fixture.record(other).coordinates.at, .device)
    }

    func testDamagedAppCopyIsFileUnavailable() throws {
        let fixture = try UploadFixture()
        let staged = try fixture.stageApp(UploadFixture.bytes(70_000))
        let file = try fixture.write("INSERT INTO notes VALUES (coven_uuid7(), coven_put_staged('\(staged)'), '')").files[0]
        let copy = try XCTUnwrap(fixture.scalar("SELECT copy FROM coven_local").textValue)
        try Data(UploadFixture.bytes(70_000, seed: 99)).write(to: URL(fileURLWithPath: fixture.paths.folder + "/" + copy))
        let summary = try fixture.run(settings: ["COVEN_UPLOAD_ATTEMPTS": "2"])
        XCTAssertEqual(summary.failed.first?.code, .fileUnavailable)
        XCTAssertEqual(try fixture.scalar("SELECT last_error_code FROM coven_upload_queue").textValue, "file_unavailable")
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file), .missing(device: fixture.device.deviceID, reason: .source(.fileUnavailable)))
        XCTAssertEqual(fixture.storeFiles().filter { $0.hasPrefix("files/") }, [])
    }

    // MARK: Pause, network, retry

    func testPauseHoldsTrailingUploadsButNotBoundOnes() throws {
        let fixture = try UploadFixture()
        let trailing = try fixture.addOriginal("t.bin", UploadFixture.bytes(1000))
        let staged = try fixture.stageApp(UploadFixture.bytes(1000, seed: 2))
        let bound = try fixture.write("INSERT INTO thumbnails VALUES (coven_uuid7(), coven_put_staged('\(staged)'), '')").files[0]
        try Uploads(fixture.device).setUploadsPaused(true)
        XCTAssertEqual(try Uploads(fixture.device).uploadPause().paused, true)
        XCTAssertEqual(try Uploads(fixture.device).uploadPause().queued, 1)
        XCTAssertTrue(try fixture.run().complete)
        XCTAssertEqual(try fixture.record(bound).coordinates.at, .stored)
        XCTAssertEqual(try fixture.record(trailing).coordinates.at, .device)
        XCTAssertEqual(try fixture.scalar("SELECT waiting_for FROM coven_uploads").textValue, "pause")
        try Uploads(fixture.device).setUploadsPaused(false)
        try fixture.run()
        XCTAssertEqual(try fixture.record(trailing).coordinates.at, .stored)
    }

    func testUnmeteredOnlyWaitsOnAMeteredNetwork() throws {
        let fixture = try UploadFixture()
        let file = try fixture.addOriginal("t.bin", UploadFixture.bytes(1000))
        try Uploads(fixture.device).setUnmeteredOnly(true)
        try fixture.run(settings: ["COVEN_NETWORK_METERED": "1"])
        XCTAssertEqual(try fixture.scalar("SELECT waiting_for FROM coven_uploads").textValue, "network")
        XCTAssertEqual(try fixture.count("SELECT metered FROM coven_network"), 1)
        try fixture.run(settings: ["COVEN_NETWORK_METERED": "0"])
        XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
    }

    func testBoundUploadsIgnoreUnmeteredOnlyAndRetryMakesABackoffDueNow() throws {
        let fixture = try UploadFixture()
        let staged = try fixture.stageApp(UploadFixture.bytes(1000, seed: 3))
        let bound = try fixture.write("INSERT INTO thumbnails VALUES (coven_uuid7(), coven_put_staged('\(staged)'), '')").files[0]
        let trailing = try fixture.addOriginal("t.bin", UploadFixture.bytes(1000))
        try Uploads(fixture.device).setUnmeteredOnly(true)
        try fixture.run(settings: ["COVEN_NETWORK_METERED": "1"])
        XCTAssertEqual(try fixture.record(bound).coordinates.at, .stored, "writes wait for bound uploads: they run on a metered network")
        XCTAssertEqual(try fixture.record(trailing).coordinates.at, .device)
        // An upload waiting out a long backoff is due at once after coven retry.
        try Uploads(fixture.device).setUnmeteredOnly(false)
        try fixture.device.database.run("UPDATE coven_upload_queue SET attempts = 1, next_attempt_at = ?1", [Date().timeIntervalSince1970 + 3600])
        XCTAssertEqual(try fixture.scalar("SELECT waiting_for FROM coven_uploads").textValue, "retry")
        XCTAssertEqual(try Uploads(fixture.device).retryUploads(), [trailing])
        XCTAssertEqual(try fixture.count("SELECT attempts FROM coven_upload_queue"), 0)
        try fixture.run()
        XCTAssertEqual(try fixture.record(trailing).coordinates.at, .stored)
    }

    // MARK: A file's upload goes on past its last reference

    /// Its row deleted before the attempt, the file's upload still goes: the record's image
    /// switches to stored (published, so a row that wins over the delete elsewhere brings the
    /// record back stored), and gc frees the bytes and coven's copy once the delete is published.
    func testLastReferenceGoneBeforeTheAttemptStoresItsImageAndGCFreesIt() throws {
        let fixture = try UploadFixture()
        let staged = try fixture.stageApp(UploadFixture.bytes(3000))
        let file = try fixture.write("INSERT INTO notes VALUES ('01a22c3e-0000-7000-8000-000000000001', coven_put_staged('\(staged)'), '')").files[0]
        let copy = try XCTUnwrap(fixture.scalar("SELECT copy FROM coven_local").textValue)
        let object = try fixture.record(file).coordinates.object
        try fixture.write("DELETE FROM notes")
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 1)
        try fixture.run()
        XCTAssertEqual(fixture.storeFiles().filter { $0.hasPrefix("files/") }, [object])
        XCTAssertNil(try fixture.device.fileRecord(file))
        XCTAssertEqual(try fixture.device.fileRecords.image(file)?.coordinates.at, .stored)
        XCTAssertEqual(try fixture.device.fileRecords.image(file)?.coordinates.object, object)
        XCTAssertEqual(try fixture.device.fileRecords.image(file)?.hash, SHA256.digest(UploadFixture.bytes(3000)).hex)
        let switched = try RowEntryCodec.decode(try XCTUnwrap(fixture.device.database.scalar("SELECT entries FROM coven_outbox ORDER BY seq DESC LIMIT 1").bytesValue))
        XCTAssertTrue(switched.contains { $0.table == "coven_files" && $0.kind == .upsert && $0.id == file && $0.value("coordinates")?.textValue?.contains("stored") == true })
        _ = try StoreSync(fixture.device).sync()
        XCTAssertEqual(try collectGarbageByProof(fixture.device).deleted.map(\.key), [object])
        XCTAssertEqual(fixture.storeFiles().filter { $0.hasPrefix("files/") }, [])
        XCTAssertNil(try fixture.device.fileRecords.image(file))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.paths.folder + "/" + copy))
    }

    /// Its row deleted while a worker sends it: the attempt finishes and switches the image.
    func testLastReferenceGoneDuringTheUploadStillSwitchesItsImage() throws {
        let fixture = try UploadFixture()
        let staged = try fixture.stageApp(UploadFixture.bytes(3000))
        let file = try fixture.write("INSERT INTO notes VALUES ('01a22c3e-0000-7000-8000-000000000002', coven_put_staged('\(staged)'), '')").files[0]
        let worker = WorkerIdentity.current()
        let claim = try Uploads(fixture.device).claimUpload(worker: worker, lease: 60, excluded: []).get()
        try fixture.write("DELETE FROM notes")
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_upload_queue").textValue, "sending")
        let sender = UploadSender(device: fixture.device, providers: [try fixture.provider()], settings: UploadSettings(environment: [:]), worker: worker) { _, _, _ in }
        try sender.send(claim)
        let end = try Uploads(fixture.device).finishAttempt(claim, worker: worker, end: .stored, settings: UploadSettings(environment: [:]))
        XCTAssertEqual(end.outcome, .stored)
        try fixture.run()
        XCTAssertNil(try fixture.device.fileRecord(file))
        XCTAssertEqual(try fixture.device.fileRecords.image(file)?.coordinates.at, .stored)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
    }

    func testPartBookkeepingSkipsTheDiskSyncButTheUploadEndsWithFullSync() throws {
        let fixture = try UploadFixture()
        _ = try fixture.addOriginal("s.bin", UploadFixture.bytes(400_000))
        _ = try fixture.addOriginal("t.bin", UploadFixture.bytes(400_000, seed: 2))
        let worker = WorkerIdentity.current()
        let settings = UploadSettings(environment: ["COVEN_UPLOAD_PART_SIZE": "65536", "COVEN_UPLOAD_SINGLE_LIMIT": "0"])
        func synchronous() throws -> Int64? { try fixture.device.database.scalar("PRAGMA synchronous").intValue }
        XCTAssertEqual(try synchronous(), 2)
        var during: [Int64?] = []
        var stopAfterTwo = false
        let sender = UploadSender(device: fixture.device, providers: [try fixture.provider()], settings: settings, worker: worker) { _, confirmed, _ in
            if confirmed > 0 { during.append(try? synchronous()) }
            if stopAfterTwo, confirmed >= 2 * 65552 { try? fixture.device.database.run("UPDATE coven_upload_queue SET worker = 'someone else'") }
        }
        // A whole upload: parts recorded with NORMAL, FULL again once it completed.
        let first = try Uploads(fixture.device).claimUpload(worker: worker, lease: 60, excluded: []).get()
        try sender.send(first)
        XCTAssertFalse(during.isEmpty)
        XCTAssertEqual(Set(during), [1])
        XCTAssertEqual(try synchronous(), 2)
        // An upload that stops part way (its lease lost) leaves FULL behind too.
        let second = try Uploads(fixture.device).claimUpload(worker: worker, lease: 60, excluded: [first.object]).get()
        stopAfterTwo = true
        XCTAssertThrowsError(try sender.send(second))
        XCTAssertEqual(try synchronous(), 2)
    }

    func testRetiredMultipartSessionIsAbortedBeforeTheUploadGoes() throws {
        let fixture = try UploadFixture()
        let file = try fixture.addOriginal("m.bin", UploadFixture.bytes(300_000))
        let object = try fixture.record(file).coordinates.object
        // A session that an earlier (killed) worker started.
        let uploadID = try fixture.provider().createMultipart(object, totalSize: 300_080, partSize: 65552)
        try fixture.device.database.run("UPDATE coven_upload_queue SET upload_id = ?1, part_size = 65536", [uploadID])
        try fixture.write("DELETE FROM notes")
        // Retired by an older coven (a record's end no longer retires its upload: FileRecords).
        try fixture.device.database.run("UPDATE coven_upload_queue SET state = 'retired'")
        XCTAssertTrue(fixture.storeFiles().contains { $0.contains(uploadID) })
        let summary = try fixture.run()
        XCTAssertEqual(summary.dropped, 1)
        XCTAssertFalse(fixture.storeFiles().contains { $0.contains(uploadID) })
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_local"), 0)
    }

    func testCancelledMoveStopsItsUploadsAndSwitchesNothing() throws {
        let fixture = try UploadFixture()
        let file = try fixture.addOriginal("c.bin", UploadFixture.bytes(3000))
        try fixture.device.database.run("UPDATE coven_move_state SET state = 'cancelled'")
        let summary = try fixture.run()
        XCTAssertEqual(summary.dropped, 1)
        XCTAssertEqual(try fixture.record(file).coordinates.at, .device)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_local"), 1)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file), .deviceOnly(device: fixture.device.deviceID))
        XCTAssertEqual(fixture.storeFiles().filter { $0.hasPrefix("files/") }, [])
    }

    // MARK: Leases

    func testALiveLeaseIsNeverClaimedTwiceAndADeadOneIsTakenOver() throws {
        let fixture = try UploadFixture()
        _ = try fixture.addOriginal("l.bin", UploadFixture.bytes(3000))
        let first = WorkerIdentity.current()
        _ = try Uploads(fixture.device).claimUpload(worker: first, lease: 60, excluded: []).get()
        let second = WorkerIdentity.current()
        guard case .failure(let box) = try Uploads(fixture.device).claimUpload(worker: second, lease: 60, excluded: []) else {
            return XCTFail("claimed an upload held by a live worker")
        }
        XCTAssertEqual(box.wait.heldElsewhere, 1)
        // A holder whose process is gone (kill -9) loses the upload at once.
        let dead = WorkerIdentity(host: WorkerIdentity.hostName(), pid: 999_999, token: "dead")
        try fixture.device.database.run("UPDATE coven_upload_queue SET worker = ?1", [dead.text])
        XCTAssertNoThrow(try Uploads(fixture.device).claimUpload(worker: second, lease: 60, excluded: []).get())
        XCTAssertEqual(try fixture.count("SELECT attempts FROM coven_upload_queue"), 2)
    }

    func testTwoRunsAtOnceStoreEveryFileOnce() throws {
        let fixture = try UploadFixture()
        var files: [String] = []
        for index in 0..<8 { files.append(try fixture.addOriginal("p\(index)", UploadFixture.bytes(150_000, seed: UInt8(index + 10)))) }
        let paths = fixture.paths
        let results = UnsafeMutableBufferPointer<Int>.allocate(capacity: 2)
        results.initialize(repeating: -1)
        defer { results.deallocate() }
        let shared = SendableResults(results)
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let summary = try? UploadWorker.run(paths: paths, jobs: 2, once: true, settings: UploadSettings(environment: ["COVEN_UPLOAD_PART_SIZE": "65536", "COVEN_UPLOAD_SINGLE_LIMIT": "100000"]), storageOptions: UploadFixture.quickOptions)
            shared.set(index, summary?.stored ?? -1)
        }
        XCTAssertEqual(results[0] + results[1], 8, "each upload stored by exactly one run")
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(150_000, seed: UInt8(index + 10)))
        }
    }
}

/// Result slots for the concurrent runs. @unchecked: each iteration writes its own slot.
private final class SendableResults: @unchecked Sendable {
    let buffer: UnsafeMutableBufferPointer<Int>
    init(_ buffer: UnsafeMutableBufferPointer<Int>) { self.buffer = buffer }
    func set(_ index: Int, _ value: Int) { buffer[index] = value }
}

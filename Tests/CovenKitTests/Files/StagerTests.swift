@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Staging: a person's original read once and checked again at the write; app bytes copied,
/// crash-safe; names that are not UTF-8; times before 1970; many files in one write.
final class StagerTests: AlbumDeviceTestCase {
    private func putTrack(_ prepared: String) throws -> WriteResult {
        try device.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_user_file('\(prepared)'))")
    }

    /// Sets a file's modification time exactly (utimensat).
    private func setModified(_ path: String, seconds: Int, nanos: Int) {
        var times = [timespec(tv_sec: seconds, tv_nsec: nanos), timespec(tv_sec: seconds, tv_nsec: nanos)]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0, String(cString: strerror(errno)))
    }

    func testPreparedOriginalRecordsSizeExactTimeAndHashes() throws {
        let bytes = (0..<(65536 * 2 + 100)).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let path = try file("song.flac", bytes)
        setModified(path, seconds: 1_767_323_045, nanos: 123_456_789)
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
        XCTAssertEqual(prepared.kind, .user)
        XCTAssertEqual(prepared.size, Int64(bytes.count))
        XCTAssertEqual(prepared.modifiedSeconds, 1_767_323_045)
        XCTAssertEqual(prepared.modifiedNanos, 123_456_789)
        XCTAssertEqual(prepared.contentHash, SHA256.digest(bytes).hex)
        let row = try XCTUnwrap(try device.database.queryOne("SELECT * FROM coven_staged WHERE id = ?1", [prepared.id]))
        XCTAssertEqual(row.bytes("chunk_hashes"), SHA256.digest(Array(bytes[0..<65536])) + SHA256.digest(Array(bytes[65536..<131072])) + SHA256.digest(Array(bytes[131072...])))
        XCTAssertEqual(row.bytes("path"), Array(path.utf8))
        XCTAssertNil(row.string("copy"))
        // The original is untouched, and nothing was copied.
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), Data(bytes))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [])
    }

    /// spec/files.md: "half a second before the epoch is -1 and 500,000,000".
    func testTimesBefore1970CountNanosForward() throws {
        for (seconds, nanos) in [(-1, 500_000_000), (-2, 750_000_000), (-86_400 * 365 * 30, 1), (0, 0), (-1, 999_999_999)] {
            let path = try file("old-\(seconds)-\(nanos).flac", "old")
            setModified(path, seconds: seconds, nanos: nanos)
            let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
            XCTAssertEqual(prepared.modifiedSeconds, Int64(seconds))
            XCTAssertEqual(prepared.modifiedNanos, Int64(nanos))
            _ = try putTrack(prepared.id)
            let row = try XCTUnwrap(try device.database.queryOne("SELECT modified_seconds, modified_nanos FROM coven_user_files WHERE path = ?1", [Array(path.utf8)]))
            XCTAssertEqual(row.int("modified_seconds"), Int64(seconds))
            XCTAssertEqual(row.int("modified_nanos"), Int64(nanos))
        }
    }

    /// A Latin-1 `Caf\xE9.flac`: staged by its bytes, shown by coven_path_text.
    func testANameThatIsNotUTF8() throws {
        let name: [UInt8] = Array("Caf".utf8) + [0xE9] + Array(".flac".utf8)
        let pathBytes = Array(work.utf8) + [UInt8(ascii: "/")] + name
        let fd = (pathBytes + [0]).withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { open($0, O_WRONLY | O_CREAT | O_EXCL, 0o644) }
        }
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(write(fd, "abc", 3), 3)
        close(fd)
        let path = PathText.string(fromOSBytes: pathBytes)
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
        XCTAssertEqual(prepared.size, 3)
        let file = try putTrack(prepared.id).files[0]
        let row = try XCTUnwrap(try device.database.queryOne("SELECT path, coven_path_text(path) AS text FROM coven_user_files WHERE file = ?1", [file]))
        XCTAssertEqual(row.bytes("path"), pathBytes)
        XCTAssertEqual(row.string("text"), work + "/Caf\\xE9.flac")
        XCTAssertEqual(PathText.text(name), "Caf\\xE9.flac")
        // And a backslash already in a name stays as it is.
        XCTAssertEqual(PathText.text(Array("a\\xE9".utf8)), "a\\xE9")
        XCTAssertEqual(PathText.text([0xC3, 0xA9, 0xFF, 0xC3]), "é\\xFF\\xC3")
    }

    func testAMovedOriginalIsMissingAtTheWrite() throws {
        let path = try file("song.flac", "fLaC stream")
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
        XCTAssertEqual(rename(path, work + "/moved.flac"), 0)
        let error = assertCovenError(.userFileMissing) { try putTrack(prepared.id) }
        XCTAssertEqual(error?.details["path"], path)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged WHERE id = ?1", [prepared.id]), 1, "still prepared")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_files"), 0)
        // Back where it was, the write goes through.
        XCTAssertEqual(rename(work + "/moved.flac", path), 0)
        XCTAssertEqual(try putTrack(prepared.id).files.count, 1)
    }

    func testAnEditedOriginalIsChangedAtTheWrite() throws {
        let path = try file("song.flac", "fLaC stream")
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
        try Data("fLaC stream, longer".utf8).write(to: URL(fileURLWithPath: path))
        assertCovenError(.userFileChanged) { try putTrack(prepared.id) }
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 1)
    }

    /// An edit that keeps the size and restores the modification time (utimensat) is still
    /// caught: the change time moved, so the bytes are compared.
    func testAnEditWithSizeAndTimeRestoredIsChangedAtTheWrite() throws {
        let path = try file("song.flac", "fLaC stream")
        setModified(path, seconds: 1_588_748_889, nanos: 500_000_000)
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .cloud)
        let fd = open(path, O_WRONLY)
        XCTAssertEqual(pwrite(fd, "X", 1, 3), 1)
        close(fd)
        setModified(path, seconds: 1_588_748_889, nanos: 500_000_000)
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(info.st_size, 11)
        XCTAssertEqual(info.st_mtim.tv_sec, 1_588_748_889)
        XCTAssertEqual(info.st_mtim.tv_nsec, 500_000_000)
        assertCovenError(.userFileChanged) { try putTrack(prepared.id) }
        // Touched but with the same bytes: compared, and accepted.
        let same = try file("same.flac", "same bytes")
        let preparedSame = try Staging(device).prepareUserFile(path: same, namespace: "music", place: .cloud)
        chmod(same, 0o600)
        XCTAssertEqual(try putTrack(preparedSame.id).files.count, 1)
    }

    func testRefusals() throws {
        let path = try file("cover.png", "PNG")
        assertCovenError(.undeclaredNamespace) { try stageApp(device, path, namespace: "photos") }
        assertCovenError(.namespaceKind) { try stageApp(device, path, namespace: "music") }
        assertCovenError(.namespaceKind) { try Staging(device).prepareUserFile(path: path, namespace: "covers", place: .cloud) }
        assertCovenError(.undeclaredNamespace) { try Staging(device).prepareUserFile(path: path, namespace: "nope", place: .cloud) }
        assertCovenError(.userFileMissing) { try Staging(device).prepareUserFile(path: work + "/none.flac", namespace: "music", place: .cloud) }
        assertCovenError(.userFileMissing) { try Staging(device).prepareUserFile(path: path + "/below", namespace: "music", place: .cloud) }
        assertCovenError(.io) { try Staging(device).prepareUserFile(path: work, namespace: "music", place: .cloud) }
        // A FIFO where an original should be is refused at once, not waited on.
        XCTAssertEqual(mkfifo(work + "/fifo.flac", 0o600), 0)
        assertCovenError(.io) { try Staging(device).prepareUserFile(path: work + "/fifo.flac", namespace: "music", place: .cloud) }
        let folder = open(work, O_RDONLY | O_DIRECTORY)
        defer { close(folder) }
        assertCovenError(.io) { try Staging(device).stageAppBytes(from: folder, sourceName: work, namespace: "covers", place: .cloud) }
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.temporary), [])
    }

    func testAppBytesAreCopiedAndSynced() throws {
        let bytes = (0..<(3 * 65536 + 5)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let staged = try stageApp(device, try file("blob.bin", bytes))
        XCTAssertEqual(staged.size, Int64(bytes.count))
        XCTAssertEqual(staged.contentHash, SHA256.digest(bytes).hex)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: paths.copies + "/" + staged.id)), Data(bytes))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [staged.id])
        XCTAssertEqual(try device.database.scalar("SELECT copy FROM coven_staged WHERE id = ?1", [staged.id]).textValue, "copies/" + staged.id)
    }

    /// kill -9 of the real `coven stage -` while it copies stdin (fed slowly through a FIFO):
    /// no record names the half copy, and the next open removes the temporary file.
    func testKillDuringAppStagingLeavesNoHalfCopy() throws {
        let binary = try covenBinary()
        let fifo = work + "/feed"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        var environment = ProcessInfo.processInfo.environment
        environment["COVEN_DB"] = paths.database
        device = nil
        // Opened read-write first: posix_spawn waits for the child to exec, and the child's
        // read-only open of a FIFO would otherwise wait for a writer that is that parent.
        let writer = open(fifo, O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(writer, 0)
        let child = try Spawn.start(binary, ["stage", "-", "--namespace", "covers"], environment: environment, directory: work, stdin: fifo)
        let block = [UInt8](repeating: 0x5A, count: 256 * 1024)
        var temporary: String?
        var fed = 0
        let deadline = Date().addingTimeInterval(30)
        // Feed a quarter MiB at a time until a temporary copy with bytes in it shows up.
        while temporary == nil && Date() < deadline {
            XCTAssertEqual(write(writer, block, block.count), block.count)
            fed += block.count
            Thread.sleep(forTimeInterval: 0.05)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: paths.temporary)) ?? []
            if let name = names.first(where: { $0.contains(".tmp.") }) {
                var info = stat()
                if stat(paths.temporary + "/" + name, &info) == 0, info.st_size > 0 { temporary = name }
            }
        }
        let name = try XCTUnwrap(temporary, "no temporary copy appeared after \(fed) bytes")
        XCTAssertTrue(Spawn.isRunning(child), "still copying: its stdin is open")
        kill(child.pid, SIGKILL)
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
        close(writer)
        XCTAssertTrue(name.hasSuffix(".tmp.\(child.pid)"))

        // The half copy is there, and nothing names it.
        let reader = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try count(reader, "SELECT count(*) FROM coven_staged"), 0)
        XCTAssertEqual(try count(reader, "SELECT count(*) FROM coven_local"), 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: paths.temporary + "/" + name), "a read-only open changes nothing")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [], "nothing is in copies/ before it is whole")
        // The next open that may change the device removes it.
        device = try Device.open(paths: paths)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.temporary), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies), [])
        // And staging works as before.
        XCTAssertEqual(try stageApp(device, text: "after").size, 5)
    }

    /// The crash states of a staging, as the next open finds them under tmp/ (the writer's pid
    /// gone): a copy linked into copies/ whose record never committed goes with its temporary
    /// name; a copy whose record committed stays and only its temporary name goes; a live
    /// writer's temporary file stays; a copy in copies/ with no temporary name is not touched
    /// (the open never lists copies/).
    func testCrashLeftoversAreSweptFromTheTemporaryFolder() throws {
        let dead = try deadPid()
        let recorded = try stageApp(device, text: "kept")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.temporary), [], "a staging removes its temporary name")
        // Crash after the record committed, before the temporary name went.
        XCTAssertEqual(link(paths.copies + "/" + recorded.id, paths.temporary + "/\(recorded.id).tmp.\(dead)"), 0)
        // Crash after the link, before the record.
        let orphan = "01a228b5-0000-7000-8000-00000000dead"
        try Data("orphan".utf8).write(to: URL(fileURLWithPath: paths.temporary + "/\(orphan).tmp.\(dead)"))
        XCTAssertEqual(link(paths.temporary + "/\(orphan).tmp.\(dead)", paths.copies + "/" + orphan), 0)
        // Crash before the link: only the temporary file.
        let early = "01a228b5-0000-7000-8000-00000000beef"
        try Data("half".utf8).write(to: URL(fileURLWithPath: paths.temporary + "/\(early).tmp.\(dead)"))
        // A temporary name whose id names some other file in copies/: not the same inode, kept.
        let other = "01a228b5-0000-7000-8000-0000000000aa"
        try Data("other".utf8).write(to: URL(fileURLWithPath: paths.copies + "/" + other))
        try Data("stray".utf8).write(to: URL(fileURLWithPath: paths.temporary + "/\(other).tmp.\(dead)"))
        // A live writer.
        try Data("live".utf8).write(to: URL(fileURLWithPath: paths.temporary + "/x.tmp.\(getpid())"))

        device = try Device.open(paths: paths)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.copies).sorted(), [recorded.id, other].sorted())
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.temporary), ["x.tmp.\(getpid())"])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: paths.copies + "/" + recorded.id)), Data("kept".utf8))
    }

    /// The pid of a process that has exited and been reaped.
    private func deadPid() throws -> Int32 {
        let child = try Spawn.start("/bin/true", [], environment: [:])
        XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 0)
        return child.pid
    }

    /// 10,000 small files staged and referenced in one write, well within a minute.
    func testTenThousandFilesInOneWrite() throws {
        let count = 10_000
        let start = Date()
        let source = try file("small.bin", "small")
        var ids: [String] = []
        ids.reserveCapacity(count)
        for index in 0..<count {
            if index % 2 == 0 {
                ids.append("coven_put_staged('\(try stageApp(device, source).id)')")
            } else {
                ids.append("coven_put_user_file('\(try Staging(device).prepareUserFile(path: source, namespace: "music", place: .cloud).id)')")
            }
        }
        let staging = Date().timeIntervalSince(start)
        let values = ids.map { "(coven_uuid7(), '\(album)', \($0))" }.joined(separator: ",\n")
        let outboxBefore = try self.count(device, "SELECT count(DISTINCT hlc) FROM coven_outbox")
        let writeStart = Date()
        let result = try device.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES \(values)")
        let writing = Date().timeIntervalSince(writeStart)
        print("10,000 files: staged in \(String(format: "%.1f", staging)) s, written in \(String(format: "%.1f", writing)) s")
        XCTAssertEqual(result.files.count, count)
        XCTAssertEqual(Set(result.files).count, count)
        XCTAssertEqual(try self.count(device, "SELECT count(*) FROM coven_files"), Int64(count))
        XCTAssertEqual(try self.count(device, "SELECT count(*) FROM coven_upload_queue"), Int64(count))
        XCTAssertEqual(try self.count(device, "SELECT count(DISTINCT move) FROM coven_upload_queue"), 1)
        XCTAssertEqual(try self.count(device, "SELECT count(*) FROM coven_staged"), 0)
        XCTAssertEqual(try self.count(device, "SELECT count(*) FROM coven_user_files"), Int64(count / 2))
        XCTAssertEqual(try self.count(device, "SELECT count(DISTINCT hlc) FROM coven_outbox"), outboxBefore + 1, "one recorded write")
        // Its 10,000 rows and 10,000 file records, in pieces of about a MiB.
        XCTAssertEqual(try self.count(device, "SELECT sum(rows) FROM coven_outbox WHERE hlc = (SELECT max(hlc) FROM coven_outbox)"), Int64(2 * count))
        XCTAssertLessThanOrEqual(try self.count(device, "SELECT max(length(entries)) FROM coven_outbox"), Int64(Outbox.pieceBytes + 4096))
    }

    /// `coven sql` over the views, through the real binary.
    func testCovenSqlOverTheViews() throws {
        let song = try file("song.flac", "fLaC stream")
        setModified(song, seconds: -1, nanos: 500_000_000)
        let prepared = try Staging(device).prepareUserFile(path: song, namespace: "music", place: .cloud)
        let local = try stageApp(device, text: "local", place: .deviceOnly)
        let cover = try stageApp(device, text: "tiny")
        let result = try device.write(sql: """
            INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_user_file('\(prepared.id)'));
            INSERT INTO settings (id, file) VALUES ('local', coven_put_staged('\(local.id)'));
            INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover.id)'))
            """)
        let (songFile, localFile, coverFile) = (result.files[0], result.files[1], result.files[2])
        device = nil

        func sql(_ query: String) throws -> [[String: Any]] {
            let run = try coven(["--json", "sql", query])
            XCTAssertEqual(run.status, 0, run.stderr)
            return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [[String: Any]], run.stdout)
        }
        let files = try sql("SELECT id, audience, namespace, size, hash, coven_file_device(coordinates) = coven_device_id() AS here FROM coven_files ORDER BY namespace, size")
        XCTAssertEqual(files.map { $0["id"] as? String }, [coverFile, localFile, songFile])
        XCTAssertEqual(files.map { $0["size"] as? Int }, [4, 5, 11])
        XCTAssertEqual(files.map { $0["here"] as? Int }, [1, 1, 1])
        XCTAssertTrue(files.allSatisfy { $0["hash"] is NSNull && $0["audience"] as? String == "store" })

        let users = try sql("SELECT file, hex(path) AS path, coven_path_text(path) AS text, size, modified_seconds, modified_nanos FROM coven_user_files")
        XCTAssertEqual(users.count, 1)
        XCTAssertEqual(users.first?["file"] as? String, songFile)
        XCTAssertEqual(users.first?["text"] as? String, song)
        XCTAssertEqual(users.first?["path"] as? String, Array(song.utf8).hex.uppercased())
        XCTAssertEqual(users.first?["modified_seconds"] as? Int, -1)
        XCTAssertEqual(users.first?["modified_nanos"] as? Int, 500_000_000)

        let uploads = try sql("SELECT file, position, move, sending, bytes_confirmed, bytes_total, waiting_for FROM coven_uploads ORDER BY position")
        XCTAssertEqual(uploads.map { $0["file"] as? String }, [songFile, coverFile], "the device-only file has no upload")
        XCTAssertEqual(uploads.map { $0["bytes_total"] as? Int }, [8 + 11 + 16, 8 + 4 + 16])
        XCTAssertEqual(uploads.map { $0["waiting_for"] as? String }, ["storage", "storage"])
        XCTAssertEqual(uploads.map { $0["sending"] as? Int }, [0, 0])
        XCTAssertEqual(uploads.first?["move"] as? String, result.move)
        XCTAssertTrue(uploads.last?["move"] is NSNull, "a bound upload is in no move")

        let pause = try sql("SELECT paused, queued FROM coven_upload_pause")
        XCTAssertEqual(pause.first?["paused"] as? Int, 0)
        XCTAssertEqual(pause.first?["queued"] as? Int, 1, "only trailing uploads count")

        // Text and -z.
        let text = try coven(["sql", "SELECT namespace, size FROM coven_files ORDER BY namespace, size"])
        XCTAssertEqual(text.stdout, "covers\t4\ncovers\t5\nmusic\t11\n")
        let nul = try coven(["sql", "-z", "SELECT namespace FROM coven_files ORDER BY namespace, size"])
        XCTAssertEqual(nul.stdout, "covers\0covers\0music\0")
    }

    // MARK: - Many files in one run

    func testBatchStagingReportsAFileChangedWhileReadOnItsLineAndStagesTheRest() throws {
        let paths = try (0..<300).map { try file("batch-\($0).flac", [UInt8(truncatingIfNeeded: $0), 1, 2, 3]) }
        let victim = paths[57]
        var remaining = paths[...]
        var outcomes: [BatchStaging.Outcome] = []
        var windows = 0
        // The 58th file changes between its read and the check after it.
        let summary = try Staging(device).stageBatch(kind: .user, namespace: "music", place: .cloud, next: { remaining.popFirst() },
                                            report: { outcomes.append($0) }, windowReported: { windows += 1 }, afterRead: { path in
            guard path == victim, let handle = FileHandle(forWritingAtPath: path) else { return }
            handle.seekToEndOfFile()
            handle.write(Data([9]))
            handle.closeFile()
        })
        XCTAssertEqual(summary, BatchStaging.Summary(read: 300, staged: 299, failed: 1))
        XCTAssertEqual(windows, 2) // 256 files, then 44: each recorded in one transaction
        XCTAssertEqual(outcomes.map(\.index), Array(0..<300))
        XCTAssertEqual(outcomes.map(\.path), paths)
        guard case .failure(let error) = outcomes[57].result else { return XCTFail("the changed file was staged") }
        XCTAssertEqual(error.code, .userFileChanged)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 299)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged WHERE path = ?1", [Array(victim.utf8)]), 0)
        // Each staged id is the one recorded for its path.
        for outcome in outcomes {
            guard case .success(let staged) = outcome.result else { continue }
            XCTAssertEqual(try device.database.queryOne("SELECT path FROM coven_staged WHERE id = ?1", [staged.id])?.bytes("path"), Array(outcome.path.utf8))
        }
    }

    func testBatchStagingStopsAfterTheWindowInHandKeepingWhatWasStaged() throws {
        let paths = try (0..<300).map { try file("stop-\($0).bin", [UInt8(truncatingIfNeeded: $0)]) }
        var remaining = paths[...]
        var reported = 0
        let stop = Stop()
        let error = assertCovenError(.interrupted) {
            try Staging(device).stageBatch(kind: .app, namespace: "covers", place: .cloud, stop: stop, next: { remaining.popFirst() },
                                  report: { _ in reported += 1 }, windowReported: { stop.request("asked by the test") })
        }
        XCTAssertEqual(reported, 256)
        XCTAssertEqual(error?.message, "stage stopped: asked by the test, after 256 files staged and 0 failed of the 256 read")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 256)
        // No temporary copy is left; every recorded copy is there.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: paths.isEmpty ? "" : device.paths.temporary).filter { $0.contains(".tmp.") }, [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: device.paths.copies).count, 256)
    }

    /// A window is read while the one before it is recorded: a report that fails (stdout
    /// closed) ends the run with the first window recorded and the second, read meanwhile,
    /// left behind whole: none of its copies stays in the temporary folder, none is staged.
    func testBatchStagingThatFailsToReportLeavesNoCopyOfTheWindowReadMeanwhile() throws {
        let paths = try (0..<300).map { try file("report-\($0).bin", [UInt8(truncatingIfNeeded: $0), 1]) }
        var remaining = paths[...]
        struct Closed: Error {}
        XCTAssertThrowsError(try Staging(device).stageBatch(kind: .app, namespace: "covers", place: .cloud, next: { remaining.popFirst() },
                                                            report: { _ in throw Closed() })) { error in
            XCTAssertTrue(error is Closed, "\(error)")
        }
        XCTAssertTrue(remaining.isEmpty, "the second window was taken while the first was recorded")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 256)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: device.paths.temporary).filter { $0.contains(".tmp.") }, [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: device.paths.copies).count, 256)
    }

    /// An input that fails while the first window is hashed ends the run once that window is
    /// recorded and reported, as it did when windows were read one after the other.
    func testBatchStagingRecordsTheWindowsReadBeforeTheInputFailed() throws {
        let paths = try (0..<300).map { try file("input-\($0).bin", [UInt8(truncatingIfNeeded: $0), 2]) }
        var remaining = paths[...]
        struct Broken: Error {}
        var reported: [Int] = []
        XCTAssertThrowsError(try Staging(device).stageBatch(kind: .user, namespace: "music", place: .cloud, next: {
            if remaining.count == 10 { throw Broken() }
            return remaining.popFirst()
        }, report: { reported.append($0.index) })) { error in
            XCTAssertTrue(error is Broken, "\(error)")
        }
        XCTAssertEqual(reported, Array(0..<256))
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 256)
    }
}

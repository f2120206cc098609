@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// make-device-only against real SQLite, real libgcrypt and file:// storage; stored files are
/// staged and sent by the real upload worker (``DeviceTestFixture/storedFile(_:namespace:hash:)``).
final class MakeDeviceOnlyTests: XCTestCase {
    var fixture: DeviceTestFixture!
    var folder = ""

    override func setUpWithError() throws {
        fixture = try DeviceTestFixture("mdo")
        folder = fixture.root + "/Music"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() { fixture = nil }

    var device: Device { fixture.device }

    func request(_ file: String, _ names: [String], _ input: String = "argument 1") -> DeviceOnlyRequest {
        DeviceOnlyRequest(file: file, names: names, input: input)
    }

    /// Everything under `folder`, relative, sorted.
    func tree() throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: folder) else { return [] }
        return (enumerator.allObjects as? [String] ?? []).sorted()
    }

    func journalRows() throws -> Int64 {
        try fixture.scalar("SELECT count(*) FROM coven_device_only_made").intValue ?? -1
    }

    // MARK: - The whole call

    func testBringsFilesBackAndSwitchesThemInOneWrite() throws {
        let first = DeviceTestFixture.bytes(200_000, seed: 1)
        let second = DeviceTestFixture.bytes(65536, seed: 2)
        let empty: [UInt8] = []
        let a = try fixture.storedFile(first)
        let b = try fixture.storedFile(second)
        let c = try fixture.storedFile(empty)
        let outboxBefore = try fixture.scalar("SELECT count(*) FROM coven_outbox").intValue ?? 0
        let progress = ProgressLog()
        let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [
            request(a, ["AC/DC", "Back in Black.flac"]), request(b, ["AC/DC", "Hells Bells?.flac"], "argument 2"),
            request(c, ["Empty", "nothing"], "argument 3"),
        ], progress: progress.record)
        XCTAssertEqual(copies.map(\.file), [a, b, c])
        XCTAssertEqual(try tree(), ["AC\u{FF0F}DC", "AC\u{FF0F}DC/Back in Black.flac", "AC\u{FF0F}DC/Hells Bells\u{FF1F}.flac", "Empty", "Empty/nothing"])
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/AC\u{FF0F}DC/Back in Black.flac").map([UInt8].init), first)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/AC\u{FF0F}DC/Hells Bells\u{FF1F}.flac").map([UInt8].init), second)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/Empty/nothing").map([UInt8].init), empty)

        // Every file now on this device only, with its copy as its original here.
        for id in [a, b, c] {
            let record = try XCTUnwrap(device.fileRecord(id))
            XCTAssertEqual(record.coordinates.at, .device)
            XCTAssertEqual(record.coordinates.device, device.deviceID)
        }
        let listed = try device.database.query("SELECT file, coven_path_text(path) AS path, size FROM coven_user_files ORDER BY size")
        XCTAssertEqual(listed.map { $0.string("file") }, [c, b, a])
        XCTAssertEqual(listed.last?.string("path"), folder + "/AC\u{FF0F}DC/Back in Black.flac")
        // The copy's content hash is recorded (checked as it came down); its chunk hashes are
        // not: a later move derives them from the bytes once they match the content hash.
        let local = try XCTUnwrap(device.database.queryOne("SELECT l.* FROM coven_local AS l JOIN coven_files AS f ON l.object = json_extract(f.coordinates, '$.object') WHERE f.id = ?1", [a]))
        XCTAssertEqual(local.bytes("content_hash"), SHA256.digest(first))
        XCTAssertEqual(local.bytes("chunk_hashes"), [])
        var info = stat()
        XCTAssertEqual(stat(folder + "/AC\u{FF0F}DC/Back in Black.flac", &info), 0)
        XCTAssertEqual(local.int("modified_seconds"), Int64(info.st_mtim.tv_sec))
        XCTAssertEqual(local.int("modified_nanos"), Int64(info.st_mtim.tv_nsec))
        XCTAssertEqual(local.string("change_stamp"), OriginalIdentity(info).changeStamp)
        // One write, recorded for publishing.
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_outbox").intValue, outboxBefore + 1)
        let changes = try RowEntryCodec.decode(try XCTUnwrap(fixture.scalar("SELECT entries FROM coven_outbox ORDER BY seq DESC LIMIT 1").bytesValue))
        XCTAssertEqual(changes.count, 3)
        XCTAssertTrue(changes.allSatisfy { $0.table == "coven_files" && $0.kind == .upsert })
        XCTAssertEqual(Set(changes.map(\.id)), Set([a, b, c]))
        XCTAssertTrue(changes.allSatisfy { ($0.value("coordinates")?.textValue ?? "").contains("\"at\":\"device\"") })
        XCTAssertEqual(try journalRows(), 0)
        // Progress: each file done once, the call's bytes adding up.
        XCTAssertEqual(progress.doneFiles.sorted(), [a, b, c].sorted())
        XCTAssertEqual(progress.lastCallBytes, Int64(first.count + second.count))
        // A file made device-only can move back to the cloud, by the real upload worker: the
        // same bytes, stored again under a new object.
        let move = try Moves(device).moveToCloud(files: [a])
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_uploads WHERE move = ?1", [move]).intValue, 1)
        try StoredFiles.store(device, file: a)
        let stored = try XCTUnwrap(device.fileRecord(a))
        XCTAssertEqual(stored.coordinates.at, .stored)
        // Read from storage: the cache cleared, and the copy here is no longer the file's bytes.
        _ = try Cache(device).clearCache()
        var read: [UInt8] = []
        let report = try Reader(device).readFile(a) { read.append(contentsOf: $0) }
        XCTAssertEqual(report.source, .storage)
        XCTAssertEqual(read, first)
    }

    /// The first upload attempt derives the chunk hashes from the copy and records them, so a
    /// retry checks against them without reading the whole file again.
    func testDerivedChunkHashesAreRecordedForLaterAttempts() throws {
        let bytes = DeviceTestFixture.bytes(200_000, seed: 4)
        let id = try fixture.storedFile(bytes)
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["b.flac"])])
        let object = try XCTUnwrap(device.fileRecord(id)).coordinates.object
        XCTAssertEqual(try fixture.scalar("SELECT length(chunk_hashes) FROM coven_local WHERE object = ?1", [object]).intValue, 0)
        let source = try UploadSource.open(object: object, device: device)
        let expected = stride(from: 0, to: bytes.count, by: 65536).flatMap { SHA256.digest(Array(bytes[$0..<min($0 + 65536, bytes.count)])) }
        XCTAssertEqual(source.chunkHashes, expected)
        XCTAssertEqual(try fixture.scalar("SELECT chunk_hashes FROM coven_local WHERE object = ?1", [object]).bytesValue, expected)
        XCTAssertEqual(try UploadSource.open(object: object, device: device).chunkHashes, expected)
    }

    /// Files made device-only and moved back together go as one batch: the worker derives each
    /// copy's chunk hashes on its job's thread and records them, and each sender opens its copy
    /// in its turn and checks every chunk against them.
    func testCopiesWithoutChunkHashesGoBackAsOneBatch() throws {
        let contents = (0..<3).map { DeviceTestFixture.bytes(70_000 + $0 * 1000, seed: UInt8(20 + $0)) }
        let ids = try contents.map { try fixture.storedFile($0) }
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: ids.enumerated().map { request($0.element, ["t\($0.offset).flac"]) })
        _ = try Moves(device).moveToCloud(files: ids)
        _ = try StoredFiles.store(device, file: ids[0])
        _ = try Cache(device).clearCache()
        for (id, bytes) in zip(ids, contents) {
            let record = try XCTUnwrap(device.fileRecord(id))
            XCTAssertEqual(record.coordinates.at, .stored)
            var read: [UInt8] = []
            XCTAssertEqual(try Reader(device).readFile(id) { read.append(contentsOf: $0) }.source, .storage)
            XCTAssertEqual(read, bytes)
        }
    }

    /// A copy edited after make-device-only, with its size and modification time put back: the
    /// move fails before any byte is sent (the derived chunk hashes need the bytes to match the
    /// recorded content hash first), the file stays on this device only and nothing is stored.
    func testAnEditedCopyFailsItsMoveBeforeAnyByteIsSent() throws {
        let bytes = DeviceTestFixture.bytes(200_000, seed: 3)
        let id = try fixture.storedFile(bytes)
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["a.flac"])])
        let path = folder + "/a.flac"
        var before = stat()
        XCTAssertEqual(stat(path, &before), 0)
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: 150_000)
        try handle.write(contentsOf: Data([bytes[150_000] ^ 0xFF]))
        try handle.close()
        var times = [before.st_atim, before.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        let objectsBefore = try storedObjects()

        let move = try Moves(device).moveToCloud(files: [id])
        _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
        XCTAssertEqual(try XCTUnwrap(device.fileRecord(id)).coordinates.at, .device)
        let states = try device.database.query("SELECT DISTINCT state, error FROM coven_moves WHERE move = ?1", [move])
        XCTAssertEqual(states.map { $0.string("state") }, ["failed"])
        XCTAssertEqual(states.map { $0.string("error") }, ["user_file_changed"])
        XCTAssertEqual(try storedObjects(), objectsBefore, "nothing of the changed copy was stored")
    }

    /// The object files under the file:// store's files/ folder.
    private func storedObjects() throws -> [String] {
        guard case .file(directory: let root) = device.storage else { throw XCTSkip("not file:// storage") }
        guard let enumerator = FileManager.default.enumerator(atPath: root + "/files") else { return [] }
        return (enumerator.allObjects as? [String] ?? []).sorted()
    }

    func testAFolderThatWasThereStaysAndNewFoldersAreMade() throws {
        let a = try fixture.storedFile([1, 2, 3])
        try FileManager.default.createDirectory(atPath: folder + "/Existing", withIntermediateDirectories: true)
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(a, ["Existing", "New", "Deeper", "x.bin"])])
        XCTAssertEqual(try tree(), ["Existing", "Existing/New", "Existing/New/Deeper", "Existing/New/Deeper/x.bin"])
    }

    // MARK: - Refusals, before any byte downloads

    func testRefusals() throws {
        let stored = try fixture.storedFile([1, 2, 3])
        let other = try fixture.storedFile([4, 5, 6])
        let deviceOnly = try fixture.userFile("orig.flac", [7, 8], place: .deviceOnly)
        let app = try fixture.storedFile([9], namespace: "covers")

        var error = assertCovenError(.empty) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, [])]) }
        XCTAssertEqual(error?.details["input"], "argument 1")
        assertCovenError(.empty) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["a", ""])]) }
        assertCovenError(.empty) { try DeviceOnlyRequest.argument("\(stored)=", position: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.argument("\(stored)=a//b", position: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.tabLine(stored, number: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.jsonLine("{\"file\": \"\(stored)\", \"path\": []}", number: 4) }

        let latin1 = PathText.string(fromOSBytes: Array((fixture.root + "/Caf").utf8) + [0xE9])
        error = assertCovenError(.notUnicode) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: latin1, requests: [request(stored, ["a"])]) }
        XCTAssertEqual(error?.details["path"], fixture.root + "/Caf\\xE9")

        error = assertCovenError(.fileAbsent) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["a"]), request("01a228b9-0000-7000-8000-000000000000", ["b"], "argument 2")]) }
        XCTAssertEqual(error?.details["input"], "argument 2")
        error = assertCovenError(.notInCloud) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(deviceOnly, ["a"])]) }
        XCTAssertEqual(error?.details["device"], device.deviceID)
        error = assertCovenError(.namespaceKind) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(app, ["a"], "line 3")]) }
        XCTAssertEqual(error?.details["input"], "line 3")

        // Something already there: a file, or a file where a folder goes.
        try fixture.writeFile("Music/taken.flac", [0])
        error = assertCovenError(.exists) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["taken.flac"])]) }
        XCTAssertEqual(error?.details["path"], "[\"taken.flac\"]")
        assertCovenError(.exists) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["taken.flac", "inside"])]) }
        // The written name is what is checked: "Why?" is there as "Why？".
        try fixture.writeFile("Music/Why\u{FF1F}", [0])
        assertCovenError(.exists) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["Why?"])]) }

        // A symbolic link below the folder, to a folder or dangling.
        try FileManager.default.createDirectory(atPath: fixture.root + "/elsewhere", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(fixture.root + "/elsewhere", folder + "/Linked"), 0)
        error = assertCovenError(.link) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["Linked", "a.flac"])]) }
        XCTAssertEqual(error?.details["at"], folder + "/Linked")
        XCTAssertEqual(symlink("/nonexistent", folder + "/dangling"), 0)
        assertCovenError(.link) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["dangling"])]) }

        // Clashes: by the rule, by case, by Unicode form, and a file where a folder goes.
        error = assertCovenError(.clash) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["Why?.flac"]), request(other, ["Why\u{FF1F}.flac"], "argument 2")])
        }
        XCTAssertEqual(error?.details["path"], "[\"Why\u{FF1F}.flac\"]")
        XCTAssertEqual(error?.details["other_path"], "[\"Why?.flac\"]")
        error = assertCovenError(.clash) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [
                DeviceOnlyRequest(file: stored, names: ["Album", "Track.flac"], input: "argument 1", given: "Album/Track.flac"),
                DeviceOnlyRequest(file: other, names: ["album", "track.flac"], input: "argument 2", given: "album/track.flac"),
            ])
        }
        XCTAssertEqual(error?.details["path"], "album/track.flac")
        XCTAssertEqual(error?.details["other_path"], "Album/Track.flac")
        XCTAssertTrue(error?.message.contains("'album/track.flac'") == true && error?.message.contains("'Album/Track.flac'") == true, error?.message ?? "")
        assertCovenError(.clash) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["Caf\u{E9}.flac"]), request(other, ["Cafe\u{301}.flac"], "argument 2")])
        }
        assertCovenError(.clash) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["Disc"]), request(other, ["disc", "1.flac"], "argument 2")])
        }
        assertCovenError(.usage) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(stored, ["x"]), request(stored, ["y"], "argument 2")])
        }

        // Nothing was made or switched by any of them.
        XCTAssertEqual(try tree(), ["Linked", "Why\u{FF1F}", "dangling", "taken.flac"])
        XCTAssertEqual(try device.fileRecord(stored)?.coordinates.at, .stored)
        XCTAssertEqual(try journalRows(), 0)
    }

    // MARK: - Through the read path

    /// A file held whole in the cache comes from it, even once storage lost its object (as
    /// `coven cat` serves it), and its cache entry goes with the switch: the copy holds the
    /// bytes, which the cache does not hold twice.
    func testAFileHeldInTheCacheComesFromItAndItsEntryGoes() throws {
        let bytes = DeviceTestFixture.bytes(300_000, seed: 9)
        let id = try fixture.storedFile(bytes)
        let object = try XCTUnwrap(device.fileRecord(id)).coordinates.object
        let usedBefore = try Cache(device).cacheSummary().used
        var read: [UInt8] = []
        try Reader(device).readFile(id) { read.append(contentsOf: $0) }
        XCTAssertEqual(read, bytes)
        XCTAssertEqual(try Cache(device).cacheSummary().used, usedBefore + Int64(bytes.count))
        try fixture.provider.delete(object)

        let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "cached.bin"])])
        XCTAssertEqual(FileManager.default.contents(atPath: copies[0].path).map([UInt8].init), bytes)
        XCTAssertEqual(try device.fileRecord(id)?.coordinates.at, .device)
        XCTAssertEqual(try Cache(device).cacheSummary().used, usedBefore, "the entry is no longer counted")
        XCTAssertNil(try Cache(device).cacheRow(object))
        let files = Cache(device).cachePaths(object: object)
        XCTAssertFalse(FileManager.default.fileExists(atPath: files.data))
        XCTAssertFalse(FileManager.default.fileExists(atPath: files.tags))
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_uncache").intValue, 0)
        XCTAssertEqual(try DeviceStatus(of: device).files.deviceOnlyHere, 1)
    }

    /// A partial entry gives its chunks, storage the rest; the download adds nothing to the
    /// cache, and the entry goes with the switch.
    func testAPartialEntryGivesItsChunksAndTheDownloadKeepsNothing() throws {
        let bytes = DeviceTestFixture.bytes(5 << 20 + 123, seed: 10)
        let id = try fixture.storedFile(bytes)
        let object = try XCTUnwrap(device.fileRecord(id)).coordinates.object
        try Reader(device).readFile(id, range: ReadRange(offset: 1 << 20, length: 100)) { _ in }
        let cached = try XCTUnwrap(Cache(device).cacheRow(object)).bytes
        XCTAssertGreaterThan(cached, 0)
        XCTAssertLessThan(cached, Int64(bytes.count))
        let progress = ProgressLog()
        let paths = device.paths
        let seen = Samples()
        let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "partial.bin"])], progress: { report in
            // While it downloads, the cache holds no more than it did.
            if !report.done, let row = try? Cache(Device.open(paths: paths, readOnly: true)).cacheRow(object) { seen.add(row.bytes) }
            progress.record(report)
        })
        XCTAssertFalse(seen.values.isEmpty)
        XCTAssertTrue(seen.values.allSatisfy { $0 == cached }, "\(seen.values)")
        XCTAssertEqual(FileManager.default.contents(atPath: copies[0].path).map([UInt8].init), bytes)
        XCTAssertNil(try Cache(device).cacheRow(object))
        XCTAssertEqual(try Cache(device).cacheSummary().used, 0)
        XCTAssertEqual(progress.reports.last?.callBytes, Int64(bytes.count))
    }

    /// A file another record still reads from storage (a record over the same bytes in
    /// another audience) keeps its cache entry.
    func testAnEntryAnotherStoredRecordReadsStays() throws {
        let bytes = DeviceTestFixture.bytes(100_000, seed: 11)
        let id = try fixture.storedFile(bytes)
        let object = try XCTUnwrap(device.fileRecord(id)).coordinates.object
        let other = try device.write(sql: "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_existing_file(:f), '')",
                                     parameters: ["f": .text(id)]).files[0]
        try Reader(device).readFile(other) { _ in }
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "shared.bin"])])
        XCTAssertEqual(try device.fileRecord(other)?.coordinates.at, .stored)
        XCTAssertEqual(try Cache(device).cacheRow(object)?.bytes, Int64(bytes.count))
    }

    // MARK: - Until the switch commits, nothing stays

    func testAFailedDownloadRemovesWhatTheCallMade() throws {
        let good = try fixture.storedFile(DeviceTestFixture.bytes(100_000))
        let bad = try fixture.storedFile(DeviceTestFixture.bytes(1000, seed: 3), hash: String(repeating: "0", count: 64))
        try FileManager.default.createDirectory(atPath: folder + "/Kept", withIntermediateDirectories: true)
        assertCovenError(.integrity) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(good, ["Kept", "New", "good.bin"]), request(bad, ["Other", "bad.bin"], "argument 2")], parallel: 1)
        }
        XCTAssertEqual(try tree(), ["Kept"])
        XCTAssertEqual(try device.fileRecord(good)?.coordinates.at, .stored)
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_user_files").intValue, 0)
        XCTAssertEqual(try journalRows(), 0)
    }

    func testATamperedObjectFailsItsCheckAndNothingStays() throws {
        let good = try fixture.storedFile(DeviceTestFixture.bytes(200_000, seed: 4))
        let bad = try fixture.storedFile(DeviceTestFixture.bytes(200_000, seed: 5))
        let object = try XCTUnwrap(device.fileRecord(bad)).coordinates.object
        // Truncated by the provider: the last chunk is gone.
        var bytes = [UInt8](try XCTUnwrap(FileManager.default.contents(atPath: fixture.root + "/store/" + object)))
        bytes.removeLast(1000)
        try fixture.provider.put(object, data: bytes)
        let error = assertCovenError(.integrity) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(good, ["A", "good.bin"]), request(bad, ["A", "bad.bin"], "argument 2")])
        }
        XCTAssertEqual(error?.details["reason"], "truncated")
        XCTAssertEqual(try tree(), [])
        XCTAssertEqual(try device.fileRecord(good)?.coordinates.at, .stored)
        XCTAssertEqual(try journalRows(), 0)
    }

    func testAMissingObjectFailsWithMissing() throws {
        let id = try fixture.storedFile([1, 2, 3])
        let object = try XCTUnwrap(device.fileRecord(id)).coordinates.object
        try fixture.provider.delete(object)
        let error = assertCovenError(.missing) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["a", "b"])]) }
        XCTAssertEqual(error?.details["file"], id)
        XCTAssertEqual(try tree(), [])
    }

    func testACancelRemovesWhatTheCallMade() throws {
        let ids = try (0..<3).map { try fixture.storedFile(DeviceTestFixture.bytes(300_000, seed: UInt8($0))) }
        let stop = Stop()
        let error = assertCovenError(.interrupted) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: ids.enumerated().map { request($1, ["Album", "\($0).bin"], "argument \($0 + 1)") },
                                      parallel: 1, stop: stop, progress: { progress in
                                          if progress.done { stop.request("interrupted by SIGINT") }
                                      })
        }
        XCTAssertTrue(error?.message.contains("SIGINT") == true)
        XCTAssertEqual(try tree(), [])
        XCTAssertTrue(try ids.allSatisfy { try device.fileRecord($0)?.coordinates.at == .stored })
    }

    func testProgressAtTheFirstBytesThenEveryMebibyte() throws {
        let bytes = DeviceTestFixture.bytes(3 << 20 + 1000, seed: 4)
        let id = try fixture.storedFile(bytes)
        let progress = ProgressLog()
        let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["big.bin"])], progress: progress.record)
        XCTAssertEqual(FileManager.default.contents(atPath: copies[0].path), Data(bytes))
        // The first chunk, then every MiB past the last report, then its whole size once it
        // is synced at its final name, then one report of it done.
        let running = progress.reports.filter { !$0.done }.map(\.bytes)
        XCTAssertEqual(running, [65536, 65536 + (1 << 20), 65536 + (2 << 20), Int64(bytes.count)])
        XCTAssertEqual(progress.reports.filter(\.done).map(\.bytes), [Int64(bytes.count)])
        XCTAssertEqual(progress.reports.last?.callBytes, Int64(bytes.count))
    }

    func testSomethingTakingTheNameMeanwhileIsNeverReplaced() throws {
        let id = try fixture.storedFile(DeviceTestFixture.bytes(1000))
        let path = folder + "/Album/late.bin"
        let error = assertCovenError(.exists) {
            try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "late.bin"])], progress: { progress in
                // Someone saves a file at the path while the download runs.
                if !progress.done, !FileManager.default.fileExists(atPath: path) {
                    _ = FileManager.default.createFile(atPath: path, contents: Data("mine".utf8))
                }
            })
        }
        XCTAssertNotNil(error)
        // Their file and the folder it is in stay; coven's temporary is gone.
        XCTAssertEqual(try tree(), ["Album", "Album/late.bin"])
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("mine".utf8))
    }

    func testARecordChangingMeanwhileFailsTheSwitchAndRemovesTheCopies() throws {
        let moved = try fixture.storedFile(DeviceTestFixture.bytes(2000, seed: 1))
        let deleted = try fixture.storedFile(DeviceTestFixture.bytes(2000, seed: 2))
        // Another writer (a sync applying another device's write) changes a record mid-call.
        let other = UncheckedBox(try Database(path: device.paths.database))
        for (id, code, change) in [(moved, ErrorCode.notInCloud, "UPDATE coven_files SET coordinates = json_set(coordinates, '$.at', 'device', '$.device', 'another') WHERE id = ?1"),
                                   (deleted, ErrorCode.fileAbsent, "DELETE FROM coven_files WHERE id = ?1")] {
            let changed = ProgressLog()
            let error = assertCovenError(code) {
                try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "x.bin"])], progress: { progress in
                    if progress.done, changed.doneFiles.isEmpty {
                        changed.record(progress)
                        try? other.value.run(change, [id])
                    }
                })
            }
            XCTAssertEqual(error?.details["file"], id)
            XCTAssertEqual(try tree(), [])
            XCTAssertEqual(try journalRows(), 0)
        }
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_user_files").intValue, 0)
    }

    func testStorageThatIsNotThereFailsAndMakesNothing() throws {
        let id = try fixture.storedFile([1, 2, 3])
        try FileManager.default.removeItem(atPath: fixture.root + "/store")
        let error = assertCovenError(.storage) { try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [request(id, ["Album", "x.bin"])]) }
        XCTAssertEqual(error?.storageFailure, .network)
        XCTAssertEqual(try tree(), [])
        XCTAssertEqual(try device.fileRecord(id)?.coordinates.at, .stored)
    }

    // MARK: - After a crash, the next open

    func testTheNextOpenCleansUpAfterACallWhoseProcessIsGone() throws {
        let id = try fixture.storedFile(DeviceTestFixture.bytes(1000))
        // What a killed call leaves: its journal, a folder it made, a whole copy linked at its
        // final name with its temporary, and a folder that was there before.
        try FileManager.default.createDirectory(atPath: folder + "/Before", withIntermediateDirectories: true)
        let plan = try DeviceOnlyPlanner(device: device).plan(folder: folder, requests: [request(id, ["Before", "Made", "x.bin"])])
        XCTAssertEqual(plan.folders, [folder + "/Before/Made"])
        let copy = plan.copies[0]
        var entries = plan.folders.map { DeviceOnlyJournal.Entry(kind: "folder", path: $0, pair: nil) }
        entries.append(.init(kind: "temporary", path: copy.temporary, pair: nil))
        entries.append(.init(kind: "file", path: copy.final, pair: copy.temporary))
        let journal = try DeviceOnlyJournal.begin(database: device.database, entries: entries)
        XCTAssertEqual(mkdir(folder + "/Before/Made", 0o755), 0)
        try journal.markMade([folder + "/Before/Made"])
        XCTAssertTrue(FileManager.default.createFile(atPath: copy.temporary, contents: Data([1, 2])))
        XCTAssertEqual(link(copy.temporary, copy.final), 0)
        // A process that is gone: a child that exited.
        let child = try Spawn.start("/bin/true", [])
        Spawn.wait(child)
        try device.database.run("UPDATE coven_device_only_made SET pid = ?1", [Int64(child.pid)])

        // A live call is left alone by an open.
        let live = try DeviceOnlyJournal.begin(database: device.database, entries: [.init(kind: "temporary", path: folder + "/.coven-live.tmp", pair: nil)])
        XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/.coven-live.tmp", contents: nil))

        _ = try Device.open(paths: device.paths)
        XCTAssertEqual(try tree(), [".coven-live.tmp", "Before"])
        XCTAssertEqual(try fixture.scalar("SELECT count(*) FROM coven_device_only_made WHERE call = ?1", [journal.call]).intValue, 0)
        try live.cleanUp()
        XCTAssertEqual(try tree(), ["Before"])
        XCTAssertEqual(try journalRows(), 0)
    }

    func testACrashAfterTheSwitchCommittedRemovesOnlyTheTemporaries() throws {
        let id = try fixture.storedFile(DeviceTestFixture.bytes(1000))
        let plan = try DeviceOnlyPlanner(device: device).plan(folder: folder, requests: [request(id, ["x.bin"])])
        let copy = plan.copies[0]
        let journal = try DeviceOnlyJournal.begin(database: device.database, entries: [
            .init(kind: "temporary", path: copy.temporary, pair: nil), .init(kind: "file", path: copy.final, pair: copy.temporary),
        ])
        XCTAssertTrue(FileManager.default.createFile(atPath: copy.temporary, contents: Data([1])))
        XCTAssertEqual(link(copy.temporary, copy.final), 0)
        try device.database.transaction { try journal.markCommitted() }
        let child = try Spawn.start("/bin/true", [])
        Spawn.wait(child)
        try device.database.run("UPDATE coven_device_only_made SET pid = ?1", [Int64(child.pid)])
        _ = try Device.open(paths: device.paths)
        XCTAssertEqual(try tree(), ["x.bin"])
        XCTAssertEqual(try journalRows(), 0)
    }

    func testAFileSomeoneElsePutAtAFinalNameIsNotRemovedByCleanup() throws {
        // A journal naming a final path that holds someone else's file (not linked to our
        // temporary) leaves it, and a folder someone filled stays.
        let madeFolder = folder + "/Made"
        let journal = try DeviceOnlyJournal.begin(database: device.database, entries: [
            .init(kind: "folder", path: madeFolder, pair: nil),
            .init(kind: "temporary", path: madeFolder + "/.coven-x.tmp", pair: nil),
            .init(kind: "file", path: madeFolder + "/theirs.bin", pair: madeFolder + "/.coven-x.tmp"),
        ])
        XCTAssertEqual(mkdir(madeFolder, 0o755), 0)
        try journal.markMade([madeFolder])
        XCTAssertTrue(FileManager.default.createFile(atPath: madeFolder + "/.coven-x.tmp", contents: Data([1])))
        XCTAssertTrue(FileManager.default.createFile(atPath: madeFolder + "/theirs.bin", contents: Data([2])))
        try journal.cleanUp()
        XCTAssertEqual(try tree(), ["Made", "Made/theirs.bin"])
    }
}

/// A value handed to a download thread's callback while its owner waits (tests only).
final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Numbers collected from the download threads.
final class Samples: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [Int64] = []
    func add(_ value: Int64) { lock.lock(); list.append(value); lock.unlock() }
    var values: [Int64] { lock.lock(); defer { lock.unlock() }; return list }
}

/// Progress reports, collected from the download threads.
final class ProgressLog: @unchecked Sendable {
    private let lock = NSLock()
    private(set) var doneFiles: [String] = []
    private(set) var lastCallBytes: Int64 = 0
    private(set) var reports: [DeviceOnlyProgress] = []

    var record: @Sendable (DeviceOnlyProgress) -> Void {
        { [self] progress in
            lock.lock()
            defer { lock.unlock() }
            reports.append(progress)
            if progress.done { doneFiles.append(progress.file) }
            lastCallBytes = max(lastCallBytes, progress.callBytes)
        }
    }
}

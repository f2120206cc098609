@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The worker pays per batch, not per file: many small files are claimed, checked and recorded
/// a batch at a time, sent on the lanes at once, and a kill between the sends and the record
/// re-sends nothing storage already holds.
final class UploadBatchTests: XCTestCase {
    func testManyFilesAreRecordedStoredInAFewWrites() throws {
        let fixture = try UploadFixture()
        var files: [String] = []
        for index in 0..<150 {
            files.append(try fixture.addOriginal("m\(index)", UploadFixture.bytes(1000 + index * 37, seed: UInt8(index % 250 + 1))))
        }
        let before = try fixture.count("SELECT count(*) FROM coven_outbox")
        let summary = try fixture.run(jobs: 2)
        XCTAssertEqual(summary.stored, 150)
        XCTAssertTrue(summary.complete)
        // One write switches a batch of files to stored (per file, 150 writes).
        let writes = try fixture.count("SELECT count(*) FROM coven_outbox") - before
        XCTAssertGreaterThan(writes, 0)
        XCTAssertLessThanOrEqual(writes, 8, "the switches to stored were recorded a batch at a time")
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_files WHERE json_extract(coordinates, '$.at') = 'stored' AND hash IS NOT NULL"), 150)
        for index in [0, 63, 64, 149] {
            XCTAssertEqual(try fixture.storedPlaintext(files[index]), UploadFixture.bytes(1000 + index * 37, seed: UInt8(index % 250 + 1)))
        }
    }

    /// A move of many files is switched to stored a page of its queue at a time (never all of
    /// its objects in memory): with pages far smaller than the move and than a batch, every
    /// file is switched, once, in the one write of the batch that completes the move.
    func testAMoveSwitchesAPageOfItsQueueAtATimeEachFileOnce() throws {
        let fixture = try UploadFixture()
        let count = 150
        var prepared: [String] = []
        for index in 0..<count {
            let path = try fixture.original("p\(index)", UploadFixture.bytes(700 + index, seed: UInt8(index % 250 + 1)))
            prepared.append(try Staging(fixture.device).prepareUserFile(path: path, namespace: "originals", place: .cloud).id)
        }
        var index = 0
        try fixture.device.writeEach(sql: "INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file(:id), '')") {
            guard index < prepared.count else { return nil }
            defer { index += 1 }
            return (index + 1, ["id": .text(prepared[index])])
        }
        let files = try fixture.device.database.query("SELECT file FROM notes ORDER BY rowid").compactMap { $0.string("file") }
        XCTAssertEqual(files.count, count)
        XCTAssertEqual(try fixture.count("SELECT count(DISTINCT move) FROM coven_upload_queue"), 1, "one move")
        let before = try fixture.scalar("SELECT max(seq) FROM coven_outbox").intValue ?? 0

        let summary = try fixture.run(jobs: 2, pageSize: 7)
        XCTAssertEqual(summary.stored, count)
        XCTAssertTrue(summary.complete)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_move_state WHERE state = 'done'"), 1)
        // The switch is recorded once per file, all in one write (its pieces share a stamp).
        var switched: [String] = []
        var stamps: Set<String> = []
        for row in try fixture.device.database.query("SELECT seq, hlc FROM coven_outbox WHERE seq > ?1 ORDER BY seq", [before]) {
            stamps.insert(row.string("hlc") ?? "")
            switched += try Outbox(database: fixture.device.database).entries(seq: row.int("seq") ?? 0).filter { $0.table == "coven_files" }.map(\.id)
        }
        XCTAssertEqual(switched.sorted(), files.sorted(), "each file switched once")
        XCTAssertEqual(stamps.count, 1, "by one write")
        for (index, file) in files.enumerated() where index % 37 == 0 || index == count - 1 {
            XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(700 + index, seed: UInt8(index % 250 + 1)))
        }
    }

    func testObjectsStoredBeforeAKillAreRecordedWithoutBeingSentAgain() throws {
        let fixture = try UploadFixture()
        var files: [String] = []
        for index in 0..<6 {
            files.append(try fixture.addOriginal("k\(index)", UploadFixture.bytes(5000 + index, seed: UInt8(index + 40))))
        }
        // A worker a kill -9 stopped: it claimed the batch and stored three objects whole, but
        // never recorded them.
        let dead = WorkerIdentity(host: WorkerIdentity.hostName(), pid: 999_999, token: "dead")
        let claims = try Uploads(fixture.device).claimUploads(worker: dead, lease: 300, excluded: [], limit: 64, objectBytes: 1 << 20, batchBytes: 64 << 20).get()
        XCTAssertEqual(claims.count, 6)
        let provider = try fixture.provider()
        var inodes: [String: ino_t] = [:]
        guard case .file(let root) = fixture.location else { return XCTFail("a file:// store") }
        var sealer: ObjectSealer?
        for (claim, result) in zip(claims.prefix(3), try UploadSender.prepareWhole(Array(claims.prefix(3)), device: fixture.device)) {
            try provider.put(claim.object, data: try result.get().seal(reusing: &sealer))
        }
        for claim in claims.prefix(3) {
            var info = stat()
            XCTAssertEqual(stat(root + "/" + claim.object, &info), 0)
            inodes[claim.object] = info.st_ino
        }
        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 6)
        for (object, inode) in inodes {
            var info = stat()
            XCTAssertEqual(stat(root + "/" + object, &info), 0)
            XCTAssertEqual(info.st_ino, inode, "'\(object)' was stored before the kill and not sent again")
        }
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(5000 + index, seed: UInt8(index + 40)))
        }
    }

    func testABatchStopsAtALargeObjectWhichGoesAlone() throws {
        let fixture = try UploadFixture()
        _ = try fixture.addOriginal("s0", UploadFixture.bytes(2000, seed: 1))
        _ = try fixture.addOriginal("s1", UploadFixture.bytes(2000, seed: 2))
        _ = try fixture.addOriginal("big", UploadFixture.bytes(300_000, seed: 3))
        _ = try fixture.addOriginal("s2", UploadFixture.bytes(2000, seed: 4))
        let worker = WorkerIdentity.current()
        let first = try Uploads(fixture.device).claimUploads(worker: worker, lease: 60, excluded: [], limit: 64, objectBytes: 100_000, batchBytes: 1 << 20).get()
        XCTAssertEqual(first.map(\.bytesTotal), [2000, 2000].map { ObjectLayout.encryptedSize(plaintextSize: $0) })
        let second = try Uploads(fixture.device).claimUploads(worker: worker, lease: 60, excluded: [], limit: 64, objectBytes: 100_000, batchBytes: 1 << 20).get()
        XCTAssertEqual(second.map(\.bytesTotal), [ObjectLayout.encryptedSize(plaintextSize: 300_000)])
        let third = try Uploads(fixture.device).claimUploads(worker: worker, lease: 60, excluded: [], limit: 64, objectBytes: 100_000, batchBytes: 1 << 20).get()
        XCTAssertEqual(third.count, 1)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue WHERE state = 'sending'"), 4)
    }

    /// A batch of small objects on file:// pays one sync of their folder, not one an object:
    /// each object's bytes are synced before its rename, and the folder once, before the batch
    /// is recorded stored.
    func testABatchOfSmallObjectsSyncsTheStoreFolderOnce() throws {
        let fixture = try UploadFixture()
        // The store's folder of this device's objects exists before the run (a first object's
        // folder costs syncs of its parents, once).
        _ = try fixture.addOriginal("first", UploadFixture.bytes(10, seed: 99))
        try fixture.run(jobs: 1)
        var files: [String] = []
        for index in 0..<77 {
            files.append(try fixture.addOriginal("f\(index)", UploadFixture.bytes(700 + index, seed: UInt8(index + 1))))
        }
        let before = FileStorage.folderSyncs
        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 77)
        XCTAssertTrue(summary.complete)
        let syncs = FileStorage.folderSyncs - before
        XCTAssertGreaterThan(syncs, 0, "the objects' folder is synced before they are recorded stored")
        XCTAssertLessThanOrEqual(syncs, 2, "one folder sync a batch (64 objects at most), not one an object")
        for (index, file) in files.enumerated() where index % 19 == 0 {
            XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
        }
        XCTAssertEqual(try fixture.storedPlaintext(files[76]), UploadFixture.bytes(776, seed: 77))
    }

    /// Objects a kill -9 left renamed into place, their folder perhaps never synced: the next run
    /// sends none of them again, but syncs their folder before it records them stored.
    func testObjectsAKillLeftUnrecordedAreMadeDurableBeforeTheyAreRecorded() throws {
        let fixture = try UploadFixture()
        var files: [String] = []
        for index in 0..<4 {
            files.append(try fixture.addOriginal("d\(index)", UploadFixture.bytes(3000 + index, seed: UInt8(index + 70))))
        }
        let dead = WorkerIdentity(host: WorkerIdentity.hostName(), pid: 999_999, token: "dead")
        let claims = try Uploads(fixture.device).claimUploads(worker: dead, lease: 300, excluded: [], limit: 64, objectBytes: 1 << 20, batchBytes: 64 << 20).get()
        XCTAssertEqual(claims.count, 4)
        let provider = try fixture.provider()
        var sealer: ObjectSealer?
        let prepared = try UploadSender.prepareWhole(claims, device: fixture.device)
        XCTAssertEqual(prepared.count, claims.count)
        for (claim, result) in zip(claims, prepared) {
            try provider.put(claim.object, data: try result.get().seal(reusing: &sealer))
        }
        let before = FileStorage.folderSyncs
        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 4)
        XCTAssertEqual(FileStorage.folderSyncs - before, 1, "found whole, not sent again, and made durable once")
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(3000 + index, seed: UInt8(index + 70)))
        }
    }

    /// An original changed (same size, same time) among a batch: its move fails before any of its
    /// bytes is sent, as alone; the batch's other files are stored.
    func testAChangedOriginalInABatchFailsAloneTheOthersAreStored() throws {
        let fixture = try UploadFixture()
        var files: [String] = []
        var paths: [String] = []
        for index in 0..<12 {
            let path = try fixture.original("c\(index)", UploadFixture.bytes(4000 + index, seed: UInt8(index + 100)))
            paths.append(path)
            let staged = try Staging(fixture.device).prepareUserFile(path: path, namespace: "originals", place: .cloud)
            files.append(try fixture.write("INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(staged.id)'), '')").files[0])
        }
        var info = stat()
        XCTAssertEqual(stat(paths[5], &info), 0)
        var edited = UploadFixture.bytes(4005, seed: 105)
        edited[10] ^= 0xff
        try Data(edited).write(to: URL(fileURLWithPath: paths[5]))
        var times = [info.st_atim, info.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, paths[5], &times, 0), 0)

        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 11)
        XCTAssertEqual(summary.failed.map(\.code), [.userFileChanged])
        XCTAssertEqual(summary.failed.first?.files, [files[5]])
        XCTAssertEqual(try fixture.record(files[5]).coordinates.at, .device)
        XCTAssertFalse(fixture.storeFiles().contains { $0.hasSuffix(try! fixture.record(files[5]).coordinates.object) })
        for (index, file) in files.enumerated() where index != 5 {
            XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(4000 + index, seed: UInt8(index + 100)))
        }
    }

    /// The record ids of a batch's objects, read in one query, are those each object's own
    /// query reads; an object nothing names has none.
    func testTheRecordIdsOfABatchAreReadAtOnce() throws {
        let fixture = try UploadFixture()
        var objects: [String] = []
        for index in 0..<5 {
            let file = try fixture.addOriginal("r\(index)", UploadFixture.bytes(100 + index, seed: UInt8(index + 3)))
            objects.append(try fixture.record(file).coordinates.object)
        }
        objects.append("files/nobody/none")
        let records = fixture.device.fileRecords
        let named = try records.ids(objects: objects)
        for object in objects {
            XCTAssertEqual(named[object] ?? [], try records.ids(object: object), object)
        }
        XCTAssertNil(named["files/nobody/none"])
        XCTAssertEqual(named.count, 5)
    }
}

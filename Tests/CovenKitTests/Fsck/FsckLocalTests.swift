@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven fsck` of this device's bytes and of published changes and snapshots, and `--repair`.
class FsckLocalTests: FsckTestCase {
    /// A track on this device only, from the person's original at `name`; returns the file id.
    func deviceOnlyTrack(_ device: Device, _ name: String, _ bytes: [UInt8]) throws -> String {
        let path = try file(name, bytes)
        let staged = try Staging(device).prepareUserFile(path: path, namespace: "music", place: .deviceOnly)
        try device.write(sql: "INSERT OR IGNORE INTO albums (id, title, _updated_at) VALUES ('\(Self.album)', 'a', coven_stamp())")
        let result = try device.write(sql: "INSERT INTO tracks (id, album_id, file, _updated_at) VALUES (coven_uuid7(), '\(Self.album)', coven_put_user_file('\(staged.id)'), coven_stamp())")
        return try XCTUnwrap(result.staged[staged.id])
    }

    /// A changed original (bytes, or size) and a missing one are reported, and left as they are,
    /// even under --repair.
    func testChangedAndMissingOriginalsAreReportedNeverTouched() throws {
        let device = try makeDevice()
        _ = try deviceOnlyTrack(device, "same.flac", Array(repeating: 1, count: 5000))
        let edited = try deviceOnlyTrack(device, "edited.flac", Array(repeating: 2, count: 5000))
        _ = try deviceOnlyTrack(device, "grown.flac", Array(repeating: 3, count: 5000))
        _ = try deviceOnlyTrack(device, "gone.flac", Array(repeating: 4, count: 5000))
        XCTAssertEqual(try fsck(device).problems, [])
        // Same size and modification time, other bytes: only the hash tells.
        let editedPath = work + "/edited.flac"
        var info = stat()
        stat(editedPath, &info)
        try Data(Array(repeating: 9, count: 5000)).write(to: URL(fileURLWithPath: editedPath))
        var times = [info.st_atim, info.st_mtim]
        utimensat(AT_FDCWD, editedPath, &times, 0)
        let grown = try FileHandle(forWritingTo: URL(fileURLWithPath: work + "/grown.flac"))
        grown.seekToEndOfFile()
        grown.write(Data([7]))
        try grown.close()
        try FileManager.default.removeItem(atPath: work + "/gone.flac")
        let report = try fsck(device) { $0.repair = true }
        XCTAssertEqual(Set(report.problems.map { "\($0.subject.rawValue) \($0.kind.rawValue) \(($0.key as NSString).lastPathComponent)" }),
                       ["original changed edited.flac", "original changed grown.flac", "original missing gone.flac"])
        XCTAssertFalse(report.problems.contains { $0.mended })
        XCTAssertEqual(report.problems.first { $0.key.hasSuffix("edited.flac") }?.files, [edited])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: editedPath)), Data(Array(repeating: 9, count: 5000)), "never touched")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: work + "/grown.flac")).count, 5001)
    }

    /// coven's copy of a device-only file and a staged copy that fail their hashes, and a cache
    /// entry with a chunk that fails its tag; --repair forgets the chunk, which a read fetches
    /// again.
    func testDamagedCopiesAndCacheEntriesAreFound() throws {
        let device = try makeDevice()
        let copy = try StoredFiles.stageApp(device, bytes: Array(repeating: 5, count: 3000), namespace: "covers", table: "settings", place: .deviceOnly)
        let staged = try stageApp(device, text: "staged bytes, no row yet")
        let stored = try storeFiles(device, count: 1, size: 200_000)[0]
        _ = try Reader(device).holdFile(stored.file)
        XCTAssertEqual(try fsck(device).problems, [])
        func flip(_ path: String, at offset: UInt64) throws {
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
            handle.seek(toFileOffset: offset)
            let byte = handle.readData(ofLength: 1)
            handle.seek(toFileOffset: offset)
            handle.write(Data([byte[0] ^ 0x40]))
            try handle.close()
        }
        let copyName = try XCTUnwrap(device.database.scalar("SELECT copy FROM coven_local WHERE object = (SELECT object FROM coven_files WHERE id = ?1)", [copy]).textValue)
        try flip(device.paths.folder + "/" + copyName, at: 10)
        let stagedName = try XCTUnwrap(device.database.scalar("SELECT copy FROM coven_staged WHERE id = ?1", [staged.id]).textValue)
        try flip(device.paths.folder + "/" + stagedName, at: 3)
        try flip(Cache(device).cachePaths(object: stored.object).data, at: 70_000)
        let report = try fsck(device)
        XCTAssertEqual(Set(report.problems.map { "\($0.subject.rawValue) \($0.kind.rawValue)" }), ["copy hash", "staged hash", "cache damaged"])
        XCTAssertEqual(report.problems.first { $0.subject == .copy }?.files, [copy])
        let mended = try fsck(device) { $0.repair = true }
        XCTAssertEqual(mended.problems.first { $0.subject == .cache }?.mendedFrom, "dropped")
        XCTAssertFalse(try XCTUnwrap(Cache(device).cacheRow(stored.object)).whole, "the bad chunk is forgotten")
        var read: [UInt8] = []
        try Reader(device).readFile(stored.file) { read += $0 }
        XCTAssertEqual(read, (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        XCTAssertEqual(try fsck(device).problems.filter { $0.subject == .cache }, [])
    }

    /// A damaged and a missing stored object are sealed again from a complete cache entry and
    /// from an original this device records, byte for byte, and checked again; one with no
    /// source is named as gone for good with its row.
    func testRepairSealsObjectsAgainFromLocalSources() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 3, size: 150_000)
        let p = try provider(device)
        let before = try stored.map { try read(device, $0.object) }
        _ = try Reader(device).holdFile(stored[0].file)
        // An original this device still records for the second (as before its upload finished).
        let bytes = (0..<151_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 1) }
        let original = try file("original.bin", bytes)
        var info = stat()
        stat(original, &info)
        let identity = OriginalIdentity(info)
        try device.database.transaction {
            try device.fileRecords.recordLocal(LocalBytes(
                object: stored[1].object, kind: .user, path: PathText.osBytes(original), copy: nil, size: Int64(bytes.count),
                modifiedSeconds: identity.modifiedSeconds, modifiedNanos: identity.modifiedNanos, changeStamp: identity.changeStamp,
                contentHash: try { let h = try SHA256(); h.update(bytes); return h.finish() }(), chunkHashes: []))
        }
        var flipped = before[0]
        flipped[70_000] ^= 1
        try p.put(stored[0].object, data: flipped)
        try p.delete(stored[1].object)
        try p.delete(stored[2].object)
        let report = try fsck(device) { $0.repair = true }
        let byKey = Dictionary(uniqueKeysWithValues: report.problems.map { ($0.key, $0) })
        XCTAssertEqual(byKey[stored[0].object]?.mendedFrom, "cache")
        XCTAssertEqual(byKey[stored[1].object]?.mendedFrom, "original")
        XCTAssertEqual(byKey[stored[2].object]?.mended, false)
        XCTAssertFalse(report.allMended)
        XCTAssertEqual(report.lost.map(\.file), [stored[2].file])
        XCTAssertEqual(report.lost.first?.rows.count, 1)
        XCTAssertEqual(try read(device, stored[0].object), before[0], "byte for byte")
        XCTAssertEqual(try read(device, stored[1].object), before[1])
        XCTAssertEqual(try fsck(device).problems.map(\.key), [stored[2].object])
    }

    /// Published changes flipped, cut, removed or swapped, and a damaged snapshot, are found on
    /// another device; the publisher's --repair publishes its own again.
    func testDamagedChangesAndSnapshotsAreFoundAndOwnChangesRepublished() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        for n in 0..<5 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(n)', 'v')")
            _ = try StoreSync(a).sync()
        }
        _ = try Snapshots(a).snapshot()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try fsck(b).problems, [])
        XCTAssertGreaterThanOrEqual(try fsck(b).changesChecked, 5)
        let p = try provider(a)
        let path = { (seq: UInt64) in ChangeObject.path(device: a.deviceID, seq: seq) }
        var flipped = try read(a, path(2))
        flipped[flipped.count / 2] ^= 1
        try p.put(path(2), data: flipped)
        let cut = try read(a, path(3))
        try p.put(path(3), data: Array(cut.dropLast(5)))
        try p.delete(path(4))
        try p.put(path(5), data: try read(a, path(1)))
        let snapshotKey = try XCTUnwrap(p.list(prefix: "snapshots/").first?.key)
        var snapshot = try read(a, snapshotKey)
        snapshot[60] ^= 1
        try p.put(snapshotKey, data: snapshot)
        let report = try fsck(b)
        XCTAssertEqual(Set(report.problems.map { "\($0.subject.rawValue) \($0.kind.rawValue) \($0.key)" }), [
            "change damaged \(path(2))", "change damaged \(path(3))", "change missing \(path(4))", "change damaged \(path(5))",
            "snapshot damaged \(snapshotKey)",
        ])
        let mended = try fsck(a) { $0.repair = true }
        XCTAssertEqual(Set(mended.problems.filter(\.mended).map(\.key)), [path(2), path(3), path(4), path(5)])
        XCTAssertEqual(try fsck(b).problems.map(\.key), [snapshotKey])
    }

    /// An object a snapshot names that storage no longer holds is reported, also when no
    /// record of this device names it any more.
    func testAnObjectASnapshotNamesThatIsGoneIsReported() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 1)[0]
        _ = try StoreSync(device).sync()
        _ = try Snapshots(device).snapshot()
        try device.write(sql: "DELETE FROM settings WHERE file = '\(stored.file)'")
        XCTAssertEqual(try fsck(device).problems, [])
        try provider(device).delete(stored.object)
        XCTAssertEqual(try fsck(device).problems.map { "\($0.subject.rawValue) \($0.kind.rawValue) \($0.key)" }, ["snapshot missing \(stored.object)"])
    }

    /// One of this device's changes sealed and signed as its own but not what it recorded
    /// publishing (another frontier) is found by this device; others cannot tell.
    func testAnOwnChangeThatDiffersFromWhatWasRecordedIsFound() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        for n in 0..<2 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(n)', 'v')")
            _ = try StoreSync(a).sync()
        }
        XCTAssertEqual(try fsck(a).problems, [])
        let path = ChangeObject.path(device: a.deviceID, seq: 2)
        var change = try a.keys.open(change: try read(a, path), path: path, publisher: a.deviceID, storeID: a.storeID)
        change.frontier[b.deviceID] = 7
        try provider(a).put(path, data: try a.keys.seal(change))
        XCTAssertEqual(try fsck(a).problems.map { "\($0.kind.rawValue) \($0.key)" }, ["differs \(path)"])
        XCTAssertEqual(try fsck(b).problems, [])
    }
}

/// Changes, snapshots and repairs on S3 (moto).
final class FsckLocalS3Tests: FsckLocalTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    override func testRepairSealsObjectsAgainFromLocalSources() throws { try super.testRepairSealsObjectsAgainFromLocalSources() }
    override func testDamagedChangesAndSnapshotsAreFoundAndOwnChangesRepublished() throws {
        try super.testDamagedChangesAndSnapshotsAreFoundAndOwnChangesRepublished()
    }
}

/// A repair's multipart upload, on file:// (whose parts may be of any size).
final class FsckMultipartRepairTests: FsckTestCase {
    /// An object past the single-request limit of a repair (16 MiB; 1 MiB here) is sent again
    /// as a multipart upload (of 1 MiB parts here), completed only once whole: byte for byte as before.
    func testALargeObjectIsMendedByAMultipartUpload() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 1, size: (3 << 20) + 5)[0]
        let before = try read(device, stored.object)
        _ = try Reader(device).holdFile(stored.file)
        try provider(device).delete(stored.object)
        let report = try fsck(device) {
            $0.repair = true
            $0.repairSingleLimit = 1 << 20
            $0.repairPartSize = 1 << 20
        }
        XCTAssertEqual(report.problems.map(\.mendedFrom), ["cache"])
        XCTAssertTrue(report.allMended)
        XCTAssertTrue(try read(device, stored.object) == before, "byte for byte")
    }
}

/// Repair on SeaweedFS.
final class FsckLocalSeaweedFSTests: FsckLocalTests {
    override class var s3Server: S3TestServer.Kind? { .seaweedfs }

    override func testRepairSealsObjectsAgainFromLocalSources() throws { try super.testRepairSealsObjectsAgainFromLocalSources() }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// File records between devices: bound and trailing references, reads from the other device,
/// and a switch to device-only elsewhere.
final class SyncFilesTests: DeviceTestCase {

    private func read(_ device: Device, _ file: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try Reader(device).readFile(file) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// A bound reference holds its write (and every later one) until the file is stored; then
    /// one push sends the row with the stored record, so the other device reads it at once.
    func testABoundCoverArrivesWithItsRowOnlyOnceStored() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let cover = try stageApp(a, try file("cover.jpg", "tiny jpeg"))
        let written = try a.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(cover.id)'))")
        try a.write(sql: "UPDATE albums SET title = 'later'")
        let held = try StoreSync(a).sync()
        XCTAssertEqual(held.pushed.published, [1], "the album's first write goes; the cover's and the later write wait")
        XCTAssertEqual(held.pushed.held, 2)
        XCTAssertEqual(try DeviceStatus(of: a).sync.heldByUploads, 2)
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums").textValue, "x")
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM covers").intValue, 0)

        try StoredFiles.store(a, file: written.files[0])
        let sent = try StoreSync(a).sync()
        XCTAssertEqual(sent.pushed.published, [2], "one push sends the cover, its switch and the later write")
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums").textValue, "later")
        let record = try XCTUnwrap(try b.fileRecord(written.files[0]))
        XCTAssertEqual(record.coordinates.at, .stored)
        XCTAssertEqual(try read(b, written.files[0]), Array("tiny jpeg".utf8))
    }

    /// A trailing reference goes out at once: the other device sees the file on the staging
    /// device (device_only naming it) until the switch arrives, then reads it from storage.
    func testATrailingTrackIsReadOnTheOtherDeviceOnceItsUploadArrives() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let song = try stageApp(a, try file("song.flac", "a song's bytes"), namespace: "covers")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(song.id)'))").files[0]
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertThrowsError(try read(b, track)) { error in
            XCTAssertEqual((error as? CovenError)?.code, .deviceOnly)
            XCTAssertEqual((error as? CovenError)?.details["device"], a.deviceID)
        }
        XCTAssertEqual(try DeviceStatus(of: b).files.deviceOnlyElsewhere, 1)
        try StoredFiles.store(a, file: track)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try read(b, track), Array("a song's bytes".utf8))
        XCTAssertEqual(try DeviceStatus(of: b).files.stored, 1)
    }

    /// make-device-only on one device: the other drops its pin and cached bytes of the file,
    /// and reading it there says which device has it.
    func testMakeDeviceOnlyElsewhereDropsThePinAndTheCacheHere() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let song = try Staging(a).prepareUserFile(path: try file("song.flac", "bytes kept here and there"), namespace: "music", place: .cloud)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_user_file('\(song.id)'))").files[0]
        try StoredFiles.store(a, file: track)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try KeptFiles(b).pin([track])
        XCTAssertEqual(try read(b, track), Array("bytes kept here and there".utf8))
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM coven_cache").intValue, 1)

        let folder = work + "/picked"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try DeviceOnlyMaker(a).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: track, names: ["song.flac"], input: "argument 1")])
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM coven_pins").intValue, 0)
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM coven_cache").intValue, 0)
        XCTAssertThrowsError(try read(b, track)) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceOnly) }
        XCTAssertEqual(try DeviceStatus(of: b).cache.used, 0)
    }
    /// A write of many rows, each naming a file it puts, published in several changes: each
    /// row goes right after its record, in the same change, so a device pulling them change by
    /// change never holds a row without its record (nothing is taken out, no lost value left
    /// behind to restore) nor a record without its row at a change's end (none is ended, with a
    /// tombstone and a gc candidate, and brought back with its row: 100,000 of each for a
    /// library imported at once, when the records all went first), whatever the split.
    func testAWriteOfManyFilesSplitOverChangesArrivesWithNoRowTakenOut() throws {
        setenv("COVEN_SYNC_CHANGE_BYTES", "2000", 1)
        defer { unsetenv("COVEN_SYNC_CHANGE_BYTES") }
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        // 120 rows of 10 KB: more than one piece of the outbox (Outbox.pieceBytes), each its own change.
        let title = String(repeating: "t", count: 10_000)
        var values: [String] = []
        for index in 0..<120 {
            let song = try Staging(a).prepareUserFile(path: try file("song\(index).flac", "song \(index)"), namespace: "music", place: .cloud)
            values.append("(coven_uuid7(), '\(Self.album)', '\(title)', coven_put_user_file('\(song.id)'))")
        }
        try a.write(sql: "INSERT INTO tracks (id, album_id, title, file) VALUES " + values.joined(separator: ", "))
        let pushed = try StoreSync(a).sync().pushed
        XCTAssertGreaterThan(pushed.published.count, 2, "the write spans several changes")
        let pulled = try StoreSync(b).sync().pulled
        XCTAssertEqual(pulled.takenOut, 0)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_lost_values"), 0, "no row was taken out and brought back")
        XCTAssertEqual(try count(b, "SELECT count(*) FROM tracks"), 120)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM tracks t JOIN coven_files f ON f.id = t.file"), 120)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_tombstones WHERE tbl = 'coven_files'"), 0, "no record was ended at a change's end")
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_gc_candidates"), 0)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_deleted_files"), 0)
        for track in try b.database.query("SELECT file FROM tracks").compactMap({ $0.string("file") }) {
            XCTAssertNotNil(try b.fileRecord(track))
        }
    }
}

/// Two devices make one stored file device-only at once: the later write wins on both; the
/// losing device's copy goes (with the folder coven made for it) when the winning write
/// arrives, and the losing switch is kept as a lost value of the file record.
final class SyncDeviceOnlyConflictTests: DeviceTestCase {
    /// Two devices of a store with one stored file, which each makes device-only into its own
    /// picked folder (`picked-a`, then `picked-b`: b's switch is the later) at `names`.
    private func bothMakeDeviceOnly(_ names: [String]) throws -> (Device, Device, String) {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let song = try Staging(a).prepareUserFile(path: try file("song.flac", "the one song"), namespace: "music", place: .cloud)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_user_file('\(song.id)'))").files[0]
        try StoredFiles.store(a, file: track)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        for (device, name) in [(a, "picked-a"), (b, "picked-b")] {
            let folder = work + "/" + name
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: track, names: names, input: "argument 1")])
        }
        return (a, b, track)
    }

    func testConcurrentMakeDeviceOnlyTheLaterWinsAndTheLosersCopyGoes() throws {
        let (a, b, track) = try bothMakeDeviceOnly(["Album", "song.flac"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/picked-a/Album/song.flac"))
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        // b's switch is later: the file is on b only, on both devices.
        for device in [a, b] {
            XCTAssertEqual(try device.fileRecord(track)?.coordinates.device, b.deviceID)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/picked-a/Album/song.flac"), "the losing copy goes")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/picked-a/Album"), "with the folder coven made for it")
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/picked-a"), "not the folder the person picked")
        XCTAssertEqual(try String(contentsOfFile: work + "/picked-b/Album/song.flac", encoding: .utf8), "the one song")
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM coven_local").intValue, 0)
        for device in [a, b] {
            XCTAssertTrue(try StoreSync(device).lostValues().contains { $0.table == "coven_files" && $0.rowID == track }, "the losing switch is a lost value")
        }
        XCTAssertEqual(try DeviceStatus(of: b).files.deviceOnlyHere, 1)
        XCTAssertEqual(try DeviceStatus(of: a).files.deviceOnlyElsewhere, 1)
    }

    /// A losing copy the person changed stays.
    func testALosingCopyThePersonChangedStays() throws {
        let (a, b, track) = try bothMakeDeviceOnly(["song.flac"])
        try Data("edited by the person".utf8).write(to: URL(fileURLWithPath: work + "/picked-a/song.flac"))
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try String(contentsOfFile: work + "/picked-a/song.flac", encoding: .utf8), "edited by the person")
        XCTAssertEqual(try a.fileRecord(track)?.coordinates.device, b.deviceID)
    }

}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// What a write naming a deleted file record does, and what a restore of a lost file record
/// may do (issue 19, items A, C, D, E and 8), with three devices.
final class FileRecordRuleTests: DeviceTestCase {

    /// Three devices of a store with one stored track, synced everywhere.
    private func storedTrack() throws -> (a: Device, b: Device, c: Device, track: String) {
        let devices = try makeDevices(3)
        let a = devices[0], b = devices[1], c = devices[2]
        let song = try Staging(a).prepareUserFile(path: try file("song.flac", "the one song"), namespace: "music", place: .cloud)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_user_file('\(song.id)'))").files[0]
        try StoredFiles.store(a, file: track)
        for device in devices { _ = try StoreSync(device).sync() }
        return (a, b, c, track)
    }

    private func makeDeviceOnly(_ device: Device, _ track: String, folder name: String, as file: String) throws {
        let folder = work + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: track, names: [file], input: "argument 1")])
    }

    private func syncAll(_ devices: [Device], rounds: Int = 2) throws {
        for _ in 0..<rounds { for device in devices { _ = try StoreSync(device).sync() } }
    }

    // MARK: A

    /// Item A: a restore of a losing make-device-only switch would name a copy that is gone
    /// (the loser's copy went when the winner's switch arrived): it is refused on the loser
    /// and on the winner, nothing changes, and the winner's copy stays the file's bytes.
    func testARestoreOfALosingDeviceOnlySwitchIsRefusedAndTheFileStaysReadable() throws {
        let (a, b, c, track) = try storedTrack()
        try makeDeviceOnly(b, track, folder: "BR", as: "b.flac")
        try makeDeviceOnly(c, track, folder: "CR", as: "c.flac")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(c).sync()
        _ = try StoreSync(b).sync()
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/BR/b.flac"), "the loser's copy goes")
        for device in [b, c] {
            let lost = try XCTUnwrap(try StoreSync(device).lostValues().first { $0.table == "coven_files" && $0.rowID == track })
            let error = assertCovenError(.bytesAbsent) { try StoreSync(device).restoreLost(lost.id) }
            XCTAssertEqual(error?.details["file"], track)
            XCTAssertNil(try StoreSync(device).lostValues().first { $0.id == lost.id }?.restoredAt, "nothing changed")
            XCTAssertEqual(try device.fileRecord(track)?.coordinates.device, c.deviceID)
        }
        try syncAll([a, b, c])
        for device in [a, b, c] {
            XCTAssertEqual(try device.fileRecord(track)?.coordinates.device, c.deviceID)
        }
        XCTAssertEqual(try String(contentsOfFile: work + "/CR/c.flac", encoding: .utf8), "the one song")
    }

    // MARK: D

    /// Item D: b deletes a track whose file a still uploads; a's upload finishes before a
    /// hears of the delete, and its switch to stored arrives later than the delete. The record
    /// does not come back (no row names it) on any device, and the stored bytes go at gc once
    /// every device has the delete.
    func testASwitchOfARecordDeletedMeanwhileDoesNotBringItBackAndItsBytesGo() throws {
        let devices = try makeDevices(3)
        let a = devices[0], b = devices[1], c = devices[2]
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let song = try stageApp(a, try file("song.flac", "a song's bytes"))
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(song.id)'))").files[0]
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "DELETE FROM tracks")
        _ = try StoreSync(b).sync()
        let object = try StoredFiles.store(a, file: track)
        try syncAll(devices, rounds: 3)
        for device in devices {
            XCTAssertNil(try device.fileRecord(track), "no record on \(device.deviceName)")
            XCTAssertEqual(try count(device, "SELECT count(*) FROM tracks"), 0)
        }
        XCTAssertTrue(try a.connectStorage().head(object) != nil)
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(report.deleted.map(\.key), [object], "\(report.kept)")
        XCTAssertNil(try a.connectStorage().head(object))
    }

    // MARK: 8 and E

    /// Item 8: b deletes a track (its record goes with it); c, later, retitles it. The later
    /// edit wins, as on a table with no file column: the track is on every device with c's
    /// title, its record comes back with it, nothing is taken out, the file reads, and gc
    /// keeps its bytes.
    func testALaterEditOfARowWhoseFileRecordWasDeletedWinsWithItsFile() throws {
        let (a, b, c, track) = try storedTrack()
        let row = try XCTUnwrap(try a.database.scalar("SELECT id FROM tracks").textValue)
        try b.write(sql: "DELETE FROM tracks")
        try c.write(sql: "UPDATE tracks SET title = 'later'")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(c).sync()
        try syncAll([a, b, c])
        for device in [a, b, c] {
            XCTAssertEqual(try device.database.scalar("SELECT title FROM tracks WHERE id = ?1", [row]).textValue, "later", device.deviceName)
            XCTAssertNotNil(try device.fileRecord(track), device.deviceName)
            XCTAssertFalse(try StoreSync(device).lostValues().contains { $0.why == "file_deleted" }, device.deviceName)
            var bytes: [UInt8] = []
            try Reader(device).readFile(track) { bytes.append(contentsOf: $0) }
            XCTAssertEqual(bytes, Array("the one song".utf8))
        }
        XCTAssertTrue(try collectGarbageByProof(b).deleted.isEmpty, "a record names the bytes again")
        XCTAssertTrue(try collectGarbageByProof(a).deleted.isEmpty)
    }

    /// A device that joins from a snapshot made after the delete brings the record back too
    /// when the later edit arrives (the snapshot holds the deleted record's image).
    func testADeviceJoinedFromASnapshotAfterTheDeleteBringsTheRecordBackToo() throws {
        let (a, b, c, track) = try storedTrack()
        try b.write(sql: "DELETE FROM tracks")
        try c.write(sql: "UPDATE tracks SET title = 'later'")
        _ = try StoreSync(b).sync()
        _ = try Snapshots(b).snapshot()
        let d = try join("d", from: a)
        XCTAssertEqual(try count(d, "SELECT count(*) FROM tracks"), 0)
        try syncAll([a, b, c, d])
        for device in [a, b, c, d] {
            XCTAssertEqual(try device.database.scalar("SELECT title FROM tracks").textValue, "later", device.deviceName)
            XCTAssertNotNil(try device.fileRecord(track), device.deviceName)
        }
    }

    /// albums whose cover is a file column, tracks cascading on albums.
    static let coverManifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [
            { "name": "albums", "identity": "uuid", "files": [ { "column": "cover" } ] },
            { "name": "tracks", "identity": "uuid" }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, cover TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id) ON DELETE CASCADE, title TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    private func coverDevices() throws -> [Device] {
        let first = try makeDevice(Self.coverManifest, name: "a")
        return [first, try join("b", from: first), try join("c", from: first)]
    }

    /// a sets a new stored cover on album X; returns its file id.
    @discardableResult
    private func setCover(_ device: Device, _ text: String) throws -> String {
        let staged = try stageApp(device, text: text)
        let file = try device.write(sql: "UPDATE albums SET cover = coven_put_staged('\(staged.id)') WHERE id = '\(Self.album)'").files[0]
        try StoredFiles.store(device, file: file)
        return file
    }

    private func assertSame(_ devices: [Device], file: StaticString = #filePath, line: UInt = #line) throws {
        let rows = try devices.map { device in
            try (device.manifest.tables.map(\.name) + ["coven_files"]).map { table in
                try device.database.query("SELECT * FROM \(table) ORDER BY id").map { $0.values.map { "\($0)" }.joined(separator: "|") }
            }
        }
        for (device, image) in zip(devices, rows) where image != rows[0] {
            XCTFail("\(device.deviceName) differs from \(devices[0].deviceName): \(image) vs \(rows[0])", file: file, line: line)
        }
    }

    /// Item E as the issue tells it: b clears album X's cover (its record S1 goes); c, later,
    /// retitles X (its image still names S1); a sets a new cover S3 on X. X's children never
    /// vanish: X and its track T are on every device, with a's cover, and nothing is taken out.
    func testARowNamingADeletedRecordKeepsItsChildrenOnEveryDevice() throws {
        let devices = try coverDevices()
        let a = devices[0], b = devices[1], c = devices[2]
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let s1 = try setCover(a, "cover one")
        try a.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(Self.album)', 't')")
        try syncAll(devices, rounds: 1)
        try b.write(sql: "UPDATE albums SET cover = NULL")
        XCTAssertNil(try b.fileRecord(s1))
        try c.write(sql: "UPDATE albums SET title = 'retitled'")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync()
        let s3 = try setCover(a, "cover three")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try syncAll(devices, rounds: 3)
        for device in devices {
            XCTAssertEqual(try device.database.scalar("SELECT cover FROM albums").textValue, s3, device.deviceName)
            XCTAssertEqual(try count(device, "SELECT count(*) FROM tracks"), 1, device.deviceName)
            XCTAssertFalse(try StoreSync(device).lostValues().contains { $0.why != "concurrent" }, device.deviceName)
        }
        try assertSame(devices)
    }

    /// Item E, where the record's image is gone (gc freed its bytes): the row naming it is
    /// taken out, and its children with it, each listed (no cascade removes them unrecorded),
    /// so they come back with their parent.
    func testARowTakenOutForAFreedRecordTakesItsChildrenOutListed() throws {
        let devices = try coverDevices()
        let a = devices[0], b = devices[1]
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let s1 = try setCover(a, "cover one")
        try a.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(Self.album)', 't')")
        try syncAll([a, b], rounds: 1)
        try b.write(sql: "UPDATE albums SET cover = NULL")
        try a.write(sql: "UPDATE albums SET title = 'retitled'")
        _ = try StoreSync(a).sync()
        try b.database.execute("DELETE FROM coven_deleted_files")
        _ = try StoreSync(b).sync()
        XCTAssertNil(try b.fileRecord(s1))
        XCTAssertEqual(try count(b, "SELECT count(*) FROM albums"), 0)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM tracks"), 0)
        XCTAssertEqual(Set(try StoreSync(b).lostValues().filter { $0.restoredAt == nil && $0.why != "concurrent" }.map { "\($0.table) \($0.why)" }),
                       ["albums file_deleted", "tracks parent_deleted"])
    }

    // MARK: C

    /// albums whose cover is a bound file column.
    static let boundCoverManifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [
            { "name": "albums", "identity": "uuid", "files": [ { "column": "cover", "bound": true, "bound_limit": 64 } ] }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, cover TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    /// Runs every device's upload worker once (what a device cannot store yet stays queued).
    private func uploadAll(_ devices: [Device]) throws {
        for device in devices {
            let connector = StorageConnector(location: device.storage, environment: device.storageEnvironment)
            _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]),
                                     connect: { try connector.connect() })
        }
    }

    private func setBoundCover(_ device: Device, _ text: String) throws {
        let staged = try stageApp(device, text: text)
        try device.write(sql: "UPDATE albums SET cover = coven_put_staged('\(staged.id)') WHERE id = '\(Self.album)'")
    }

    /// Item C: a lost-value restore while a bound cover write is held: after uploads and syncs
    /// everywhere, the devices agree on the album.
    func testALostValueRestoreWhileABoundWriteIsHeldConverges() throws {
        let first = try makeDevice(Self.boundCoverManifest, name: "a")
        let a = first, b = try join("b", from: first), c = try join("c", from: first)
        let devices = [a, b, c]
        try b.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        _ = try StoreSync(c).sync()
        try setBoundCover(c, "c's cover")
        try setBoundCover(b, "b's cover")
        try a.write(sql: "UPDATE albums SET title = 'from a'")
        try uploadAll([b])
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        try setBoundCover(b, "b's other cover")
        let lost = try XCTUnwrap(try StoreSync(a).lostValues().first { $0.table == "albums" && $0.restoredAt == nil && $0.why == "concurrent" })
        try StoreSync(a).restoreLost(lost.id)
        for _ in 0..<3 {
            try uploadAll(devices)
            try syncAll(devices, rounds: 1)
        }
        try assertSame(devices)
    }

    /// A winning write held by a bound upload names a record deleted elsewhere: its device
    /// applies the delete (the record comes back there) and publishes its frontier while the
    /// write is held, so gc on the deleter must still keep the bytes (the device says it holds
    /// them) until the write arrives and names the record everywhere.
    func testAHeldWinningWriteKeepsTheBytesOfTheRecordItNames() throws {
        let first = try makeDevice(Self.boundCoverManifest, name: "a")
        let a = first, b = try join("b", from: first), c = try join("c", from: first)
        let other = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x'), ('\(other)', 'y')")
        let cover = try stageApp(a, text: "cover one")
        let s1 = try a.write(sql: "UPDATE albums SET cover = coven_put_staged('\(cover.id)') WHERE id = '\(Self.album)'").files[0]
        let object = try StoredFiles.store(a, file: s1)
        try syncAll([a, b, c], rounds: 1)
        try b.write(sql: "UPDATE albums SET cover = NULL WHERE id = '\(Self.album)'")
        let held = try stageApp(c, text: "held cover")
        try c.write(sql: "UPDATE albums SET cover = coven_put_staged('\(held.id)') WHERE id = '\(other)'")
        try c.write(sql: "UPDATE albums SET title = 'later' WHERE id = '\(Self.album)'")
        _ = try StoreSync(b).sync()
        XCTAssertTrue(try StoreSync(c).sync().pushed.held > 0, "c's writes wait for the bound upload")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try collectGarbageByProof(b)
        XCTAssertTrue(try b.connectStorage().head(object) != nil, "the bytes the held write names stay")
        try uploadAll([c])
        try syncAll([a, b, c])
        for device in [a, b, c] {
            XCTAssertEqual(try device.database.scalar("SELECT cover FROM albums WHERE id = ?1", [Self.album]).textValue, s1, device.deviceName)
            var bytes: [UInt8] = []
            try Reader(device).readFile(s1) { bytes.append(contentsOf: $0) }
            XCTAssertEqual(bytes, Array("cover one".utf8))
        }
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A file is never lost to concurrent use or a restored backup (issue 33): each case of the
/// issue, as its reproduction in shared/repro/file-records/ drives it through the CLI, on a store
/// of members. Each ends with every live device holding the same rows and file records, and
/// every row's file reading its bytes on at least one device, after gc ran everywhere.
class FileRecordConvergenceTests: DeviceTestCase {

    /// The reproductions' manifest: albums with a bound cover, tracks (a user's file) deleted
    /// with their album.
    static let music = """
        {
          "namespaces": [
            { "name": "tracks", "kind": "user", "budget": "2GiB", "kept": true },
            { "name": "covers", "kind": "app", "budget": "256MiB" }
          ],
          "tables": [
            { "name": "albums", "identity": "uuid", "audience_column": "audience",
              "files": [ { "column": "cover", "bound": true } ] },
            { "name": "tracks", "identity": "uuid", "audience_from": "album_id",
              "files": [ { "column": "file", "write_once": true } ] }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT NOT NULL, audience TEXT NOT NULL DEFAULT 'store', cover TEXT, _updated_at TEXT NOT NULL) STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id) ON DELETE CASCADE, title TEXT NOT NULL, file TEXT, _updated_at TEXT NOT NULL) STRICT"
          ]
        }
        """
    static let x = "11111111-1111-4111-8111-111111111111"
    static let t = "22222222-2222-4222-8222-222222222222"

    /// A store of members (as `coven init` makes) with devices a, b and c of its owner.
    func store() throws -> (a: Device, b: Device, c: Device) {
        let a = try makeDevice(Self.music, name: "a")
        let owner = try ownerIdentity(a)
        let b = try join("b", from: a, identity: owner)
        let c = try join("c", from: a, identity: owner)
        for device in [a, b, c] { _ = try StoreSync(device).sync() }
        return (a, b, c)
    }

    func write(_ device: Device, _ sql: String) throws { try device.write(sql: sql) }

    func addAlbum(_ device: Device, title: String = "album") throws {
        try write(device, "INSERT INTO albums (id, title, _updated_at) VALUES ('\(Self.x)', '\(title)', coven_stamp())")
    }

    /// Track t under album x on `device`, naming a new original of `size` bytes in its Music folder.
    @discardableResult
    func addTrack(_ device: Device, id: String = FileRecordConvergenceTests.t, place: Place = .cloud, size: Int = 17) throws -> String {
        let path = try file("\(device.deviceName)-music-\(id).flac", (0..<size).map { _ in UInt8.random(in: 0...255) })
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "tracks", place: place)
        return try device.write(sql: """
            INSERT INTO tracks (id, album_id, title, file, _updated_at)
            VALUES ('\(id)', '\(Self.x)', 'track', coven_put_user_file('tracks', '\(prepared.id)'), coven_stamp())
            """).files[0]
    }

    func setCover(_ device: Device, size: Int) throws {
        let staged = try stageApp(device, try file("\(device.deviceName)-cover-\(UUID().uuidString)", (0..<size).map { _ in UInt8.random(in: 0...255) }))
        try write(device, "UPDATE albums SET cover = coven_put_staged('\(staged.id)'), _updated_at = coven_stamp() WHERE id = '\(Self.x)'")
    }

    func upload(_ device: Device) throws {
        let connector = StorageConnector(location: device.storage, environment: device.storageEnvironment)
        _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: ["COVEN_UPLOAD_BACKOFF": "0"]),
                                 connect: { try connector.connect() })
    }

    func sync(_ devices: Device...) throws { for device in devices { _ = try StoreSync(device).sync() } }

    /// The reproductions' "settle": four rounds of an upload and a sync on every device.
    func settle(_ devices: [Device]) throws {
        for _ in 0..<4 { for device in devices { try upload(device); _ = try StoreSync(device).sync() } }
    }

    /// What must hold at the end: the same rows and file records on every device, then gc
    /// twice everywhere (with syncs), and every row's file still reads on some device.
    func assertConverged(_ devices: [Device], file: StaticString = #filePath, line: UInt = #line) throws {
        try assertSame(devices, file: file, line: line)
        for _ in 0..<2 { for device in devices { _ = try GarbageCollection(device).collectGarbage(); _ = try StoreSync(device).sync() } }
        try assertSame(devices, file: file, line: line)
        for (table, column) in [("albums", "cover"), ("tracks", "file")] {
            for row in try devices[0].database.query("SELECT id, \(column) AS f FROM \(table) WHERE \(column) IS NOT NULL") {
                let id = row.string("f") ?? ""
                let readers = devices.filter { device in
                    var bytes = 0
                    guard (try? Reader(device).readFile(id) { bytes += $0.count }) != nil else { return false }
                    return Int64(bytes) == (try? device.fileRecord(id))??.size
                }
                XCTAssertFalse(readers.isEmpty, "\(table) row \(row.string("id") ?? "") names file \(id), which no device reads", file: file, line: line)
            }
        }
    }

    func assertSame(_ devices: [Device], file: StaticString = #filePath, line: UInt = #line) throws {
        let images = try devices.map { device in
            try ["albums", "tracks", "coven_files"].map { table in
                try device.database.query("SELECT * FROM \(table) ORDER BY id").map { $0.values.map { "\($0)" }.joined(separator: "|") }
            }
        }
        for (device, image) in zip(devices, images) where image != images[0] {
            XCTFail("\(device.deviceName) differs from \(devices[0].deviceName): \(image) vs \(images[0])", file: file, line: line)
        }
    }

    /// A copy of `device`'s database and folder, as a backup holds them.
    func backUp(_ device: Device) throws -> String {
        let copy = work + "/backup-\(device.deviceName)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        try device.database.execute("VACUUM INTO '\(copy)/device.db'")
        try FileManager.default.copyItem(atPath: device.paths.folder, toPath: DevicePaths(database: copy + "/device.db").folder)
        return copy
    }

    /// Puts `backup` back in place of `device`'s database and folder, and opens it.
    func putBack(_ backup: String, as device: Device) throws -> Device {
        let paths = device.paths
        try FileManager.default.removeItem(atPath: paths.database)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: paths.database + suffix) }
        try FileManager.default.removeItem(atPath: paths.folder)
        try FileManager.default.copyItem(atPath: backup + "/device.db", toPath: paths.database)
        try FileManager.default.copyItem(atPath: DevicePaths(database: backup + "/device.db").folder, toPath: paths.folder)
        let restored = try Device.open(paths: paths)
        restored.storageEnvironment = device.storageEnvironment
        return restored
    }

    // MARK: 1. A removed device, a late puller

    /// C writes album x and track t; a applies it, removes c, and retitles t; b pulls c's change
    /// only after the removal (and a's edit). b applies c's change first, and keeps a's title.
    func testARemovedDevicesChangeComesBeforeTheEditsThatFollowIt() throws { try removedDevice(place: .cloud) }
    func testARemovedDevicesChangeComesBeforeTheEditsThatFollowItWithADeviceOnlyFile() throws { try removedDevice(place: .deviceOnly) }

    func removedDevice(place: Place) throws {
        do {
            let (a, b, c) = try store()
            try addAlbum(c)
            let file = try addTrack(c, place: place)
            try upload(c)
            try sync(c, a)
            _ = try StoreSync(a).removeDevice(c.deviceID)
            try write(a, "UPDATE tracks SET title = 'edited by a', _updated_at = coven_stamp()")
            try settle([a, b])
            try assertSame([a, b])
            XCTAssertEqual(try b.database.scalar("SELECT title FROM tracks").textValue, "edited by a", "\(place)")
            XCTAssertFalse(try StoreSync(b).lostValues().contains { $0.why == "file_deleted" }, "\(place)")
            if place == .cloud { try assertConverged([a, b]) } else { XCTAssertNotNil(try b.fileRecord(file)) }
        }
    }

    // MARK: 2. Lost restore of a deleted parent

    /// a deletes album x while b adds a track under it; a brings the album back with `coven lost
    /// restore`: the track comes back on a too, as on the others.
    func testALostRestoreOfADeletedParentBringsItsChildrenBackEverywhere() throws {
        let (a, b, c) = try store()
        try addAlbum(a, title: "first")
        try sync(a, b)
        try write(a, "UPDATE albums SET title = 'title by a', _updated_at = coven_stamp()")
        try write(b, "UPDATE albums SET title = 'title by b', _updated_at = coven_stamp()")
        try sync(b, a, b)
        try write(a, "DELETE FROM albums")
        try write(b, "INSERT INTO tracks (id, album_id, title, _updated_at) VALUES ('\(Self.t)', '\(Self.x)', 'track by b', coven_stamp())")
        try sync(b, a, b)
        let lost = try XCTUnwrap(try StoreSync(a).lostValues().first { $0.table == "albums" && $0.restorable })
        _ = try StoreSync(a).restoreLost(lost.id)
        try settle([a, b, c])
        try assertSame([a, b, c])
        XCTAssertEqual(try count(a, "SELECT count(*) FROM tracks"), 1)
    }

    // MARK: 3. A child edited after its parent was deleted elsewhere

    /// a deletes album x (its track with it); b, not having seen that, retitles the track: the
    /// track is taken out everywhere, and so is its file record, on every device (none keeps an
    /// orphan record naming the object gc deletes).
    func testAChildEditedAfterItsParentWasDeletedLeavesNoOrphanRecord() throws {
        let (a, b, c) = try store()
        try addAlbum(a)
        let file = try addTrack(a)
        try settle([a, b, c])
        try write(a, "DELETE FROM albums")
        try write(b, "UPDATE tracks SET title = 'edited by b', _updated_at = coven_stamp()")
        try sync(a, b)
        try settle([a, b, c])
        for device in [a, b, c] { XCTAssertNil(try device.fileRecord(file), device.deviceName) }
        try assertConverged([a, b, c])
    }

    // MARK: 4. An upload's switch after a delete, then a later edit

    /// b writes track t; a applies it (the file on b only); b's upload stores it (not published);
    /// a deletes t; b, later, edits t. The edit wins everywhere and brings the record back
    /// stored on every device: gc deletes nothing a row names, and the file reads.
    func testAnUploadsSwitchAfterADeleteReachesTheRecordThatComesBack() throws { try switchAfterDelete(deleteAlbum: false) }
    func testAnUploadsSwitchAfterItsAlbumsDeleteLeavesNothingBehind() throws { try switchAfterDelete(deleteAlbum: true) }

    func switchAfterDelete(deleteAlbum: Bool) throws {
        do {
            let (a, b, c) = try store()
            try addAlbum(a)
            try sync(a, b)
            let file = try addTrack(b)
            try sync(b, a)
            try upload(b)
            try write(a, deleteAlbum ? "DELETE FROM albums" : "DELETE FROM tracks")
            try sync(a)
            try write(b, "UPDATE tracks SET title = 'edited on b', _updated_at = coven_stamp()")
            try sync(b, a)
            try settle([a, b, c])
            if !deleteAlbum {
                XCTAssertEqual(try a.fileRecord(file)?.coordinates.at, .stored)
            }
            try assertConverged([a, b, c])
        }
    }

    // MARK: 5. An edit over a delete of a file not yet uploaded

    /// a writes track t (its upload queued), b deletes it, a edits it before any upload: the edit
    /// wins, and the file is uploaded and reads everywhere.
    func testAnEditOverADeleteOfAFileNotUploadedYetKeepsItsUpload() throws { try editOverDelete(place: .cloud) }
    func testAnEditOverADeleteOfAFileOnOneDeviceOnlyKeepsItReadable() throws { try editOverDelete(place: .deviceOnly) }

    func editOverDelete(place: Place) throws {
        do {
            let (a, b, c) = try store()
            try addAlbum(a)
            try addTrack(a, place: place)
            try sync(a, b)
            try write(b, "DELETE FROM tracks")
            try sync(b)
            try write(a, "UPDATE tracks SET title = 'edited on a', _updated_at = coven_stamp()")
            try sync(a)
            try settle([a, b, c])
            try assertConverged([a, b, c])
        }
    }

    /// The same when the delete is made on the uploading device itself: a deletes t while its
    /// upload is queued; b, later, edits it. a still holds the original, and uploads it.
    func testADeleteOnTheUploadingDeviceThenALaterEditElsewhereKeepsTheFile() throws {
        let (a, b, c) = try store()
        try addAlbum(a)
        try addTrack(a, size: 1000)
        try sync(a, b)
        try write(a, "DELETE FROM tracks")
        try write(b, "UPDATE tracks SET title = 'later edit on b', _updated_at = coven_stamp()")
        try sync(a, b, a)
        try settle([a, b, c])
        XCTAssertEqual(try a.database.scalar("SELECT title FROM tracks").textValue, "later edit on b")
        try assertConverged([a, b, c])
    }

    // MARK: 6. A second bound cover

    /// b sets cover b1, then b2, before any upload; a sets a1 later. Every write b publishes
    /// names a cover whose bytes exist; a's restore of b's b1 version brings a readable cover.
    func testARestoreOfABoundWriteReplacedBeforeItsUploadNamesBytesThatExist() throws {
        let (a, b, c) = try store()
        try addAlbum(a, title: "x")
        try sync(a, b)
        try setCover(b, size: 1000)
        try setCover(b, size: 1)
        try setCover(a, size: 65536)
        try sync(b, a, b)
        for device in [a, b] { try upload(device); _ = try StoreSync(device).sync() }
        try sync(a)
        if let lost = try StoreSync(a).lostValues().first(where: { $0.restorable && $0.values["cover"]?.textValue != nil }) {
            do {
                _ = try StoreSync(a).restoreLost(lost.id)
            } catch let error as CovenError where error.code == .bytesAbsent {
                // Refused: the value names bytes gone for good; nothing changed.
            }
        }
        try settle([a, b, c])
        try assertConverged([a, b, c])
    }

    // MARK: 7 and 8. A put-back device finds its bytes again

    /// a stores track t; a's backup is taken; a makes t device-only into a folder and publishes
    /// it; the backup is put back. Its catch-up records the copy in the folder again (the change's
    /// notes, sealed for a alone), so after gc the file still reads on a, and status counts
    /// nothing missing.
    func testAPutBackDeviceRecordsAgainTheCopyMakeDeviceOnlyMadeAfterItsBackup() throws {
        var (a, b, c) = try store()
        try addAlbum(a)
        let file = try addTrack(a, size: 2000)
        try settle([a, b, c])
        let backup = try backUp(a)
        let folder = work + "/Restored"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try DeviceOnlyMaker(a).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: file, names: ["t.flac"], input: "argument 1")])
        try sync(a, b)
        a = try putBack(backup, as: a)
        try settle([a, b, c])
        XCTAssertEqual(try a.fileRecord(file)?.coordinates.device, a.deviceID)
        XCTAssertEqual(try DeviceStatus(of: a).files.missing, 0)
        XCTAssertEqual(try DeviceStatus(of: a).files.deviceOnlyHere, 1)
        try assertConverged([a, b, c])
        XCTAssertEqual(try a.connectStorage().list(prefix: "files/").count, 0, "the stored copy went once the file was on a only")
    }

    /// a's backup is taken; a writes a track with a new original and publishes it before any
    /// upload; the backup is put back. Its catch-up queues the upload again, and the file is
    /// stored and reads everywhere.
    func testAPutBackDeviceQueuesAgainTheUploadOfAFileItPlacedAfterItsBackup() throws {
        var (a, b, c) = try store()
        try addAlbum(a)
        try settle([a, b, c])
        let backup = try backUp(a)
        let file = try addTrack(a)
        try sync(a)
        a = try putBack(backup, as: a)
        try settle([a, b, c])
        XCTAssertEqual(try a.fileRecord(file)?.coordinates.at, .stored)
        try assertConverged([a, b, c])
    }

    /// What truly is gone is named: the original removed before the put-back device caught up,
    /// status counts the file missing, never as held.
    func testAPutBackDeviceNamesAFileWhoseBytesAreGoneAsMissing() throws {
        var (a, b, c) = try store()
        try addAlbum(a)
        try settle([a, b, c])
        let backup = try backUp(a)
        try addTrack(a, place: .deviceOnly)
        try sync(a)
        try FileManager.default.removeItem(atPath: work + "/a-music-\(Self.t).flac")
        a = try putBack(backup, as: a)
        try settle([a, b, c])
        XCTAssertEqual(try DeviceStatus(of: a).files.missing, 1)
        XCTAssertEqual(try DeviceStatus(of: a).files.deviceOnlyHere, 0)
        let fsck = try Fsck(device: a, options: FsckOptions()).run(provider: nil)
        XCTAssertTrue(fsck.problems.contains { $0.kind == .missing && $0.files.count == 1 }, "\(fsck.problems)")
    }

    // MARK: 9. A put-back device catches up in the order it wrote

    /// a's backup is taken; b sets cover c1 and a pulls it; b sets c2 (uploaded, not published);
    /// a retitles the album (naming c1) and publishes; a's backup is put back. Its catch-up
    /// applies b's c1 change before its own edit: a's version wins on every device and c1 reads.
    func testAPutBackDeviceCatchesUpItsOwnChangesAfterThoseTheyFollowed() throws {
        var (a, b, c) = try store()
        try addAlbum(a, title: "x")
        try sync(a, b)
        let backup = try backUp(a)
        try setCover(b, size: 100)
        try upload(b)
        try sync(b, a)
        try setCover(b, size: 200)
        try upload(b)
        try write(a, "UPDATE albums SET title = 'edited on a', _updated_at = coven_stamp()")
        try sync(a)
        a = try putBack(backup, as: a)
        try settle([a, b, c])
        XCTAssertFalse(try StoreSync(a).lostValues().contains { $0.why == "file_deleted" })
        try assertConverged([a, b, c])
    }
}

/// The same cases on a real S3 server on loopback.
final class FileRecordConvergenceS3Tests: FileRecordConvergenceTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery on Linux finds a class's own methods only.
    override func testARemovedDevicesChangeComesBeforeTheEditsThatFollowIt() throws { try super.testARemovedDevicesChangeComesBeforeTheEditsThatFollowIt() }
    override func testARemovedDevicesChangeComesBeforeTheEditsThatFollowItWithADeviceOnlyFile() throws { try super.testARemovedDevicesChangeComesBeforeTheEditsThatFollowItWithADeviceOnlyFile() }
    override func testALostRestoreOfADeletedParentBringsItsChildrenBackEverywhere() throws { try super.testALostRestoreOfADeletedParentBringsItsChildrenBackEverywhere() }
    override func testAChildEditedAfterItsParentWasDeletedLeavesNoOrphanRecord() throws { try super.testAChildEditedAfterItsParentWasDeletedLeavesNoOrphanRecord() }
    override func testAnUploadsSwitchAfterADeleteReachesTheRecordThatComesBack() throws { try super.testAnUploadsSwitchAfterADeleteReachesTheRecordThatComesBack() }
    override func testAnUploadsSwitchAfterItsAlbumsDeleteLeavesNothingBehind() throws { try super.testAnUploadsSwitchAfterItsAlbumsDeleteLeavesNothingBehind() }
    override func testAnEditOverADeleteOfAFileNotUploadedYetKeepsItsUpload() throws { try super.testAnEditOverADeleteOfAFileNotUploadedYetKeepsItsUpload() }
    override func testAnEditOverADeleteOfAFileOnOneDeviceOnlyKeepsItReadable() throws { try super.testAnEditOverADeleteOfAFileOnOneDeviceOnlyKeepsItReadable() }
    override func testADeleteOnTheUploadingDeviceThenALaterEditElsewhereKeepsTheFile() throws { try super.testADeleteOnTheUploadingDeviceThenALaterEditElsewhereKeepsTheFile() }
    override func testARestoreOfABoundWriteReplacedBeforeItsUploadNamesBytesThatExist() throws { try super.testARestoreOfABoundWriteReplacedBeforeItsUploadNamesBytesThatExist() }
    override func testAPutBackDeviceRecordsAgainTheCopyMakeDeviceOnlyMadeAfterItsBackup() throws { try super.testAPutBackDeviceRecordsAgainTheCopyMakeDeviceOnlyMadeAfterItsBackup() }
    override func testAPutBackDeviceQueuesAgainTheUploadOfAFileItPlacedAfterItsBackup() throws { try super.testAPutBackDeviceQueuesAgainTheUploadOfAFileItPlacedAfterItsBackup() }
    override func testAPutBackDeviceNamesAFileWhoseBytesAreGoneAsMissing() throws { try super.testAPutBackDeviceNamesAFileWhoseBytesAreGoneAsMissing() }
    override func testAPutBackDeviceCatchesUpItsOwnChangesAfterThoseTheyFollowed() throws { try super.testAPutBackDeviceCatchesUpItsOwnChangesAfterThoseTheyFollowed() }
}

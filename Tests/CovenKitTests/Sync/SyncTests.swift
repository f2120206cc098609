@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Two and three devices of one store on file://, in one test each.
final class SyncTests: DeviceTestCase {
    let track1 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f51"
    let track2 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f52"


    func dump(_ device: Device, _ tables: [String] = ["albums", "tracks", "covers", "settings", "coven_files"]) throws -> [String] {
        try tables.flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { row in
                table + ": " + zip(row.columns, row.values).map { "\($0)=\($1.textValue ?? "NULL")" }.joined(separator: " ")
            }
        }
    }

    func testRowsTravelBothWaysAndAQuietSyncDoesNothing() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road')")
        let b = try join("b", from: a)
        XCTAssertEqual(try StoreSync(b).devices().map(\.name), ["b", "a"])
        let first = try StoreSync(a).sync()
        XCTAssertEqual(first.pushed.published, [1])
        let pulled = try StoreSync(b).sync()
        XCTAssertEqual(pulled.pulled.applied[a.deviceID], [1])
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums").textValue, "Abbey Road")
        try b.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES ('\(track1)', '\(Self.album)', 'Come Together')")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertTrue(try StoreSync(a).sync().quiet)
        XCTAssertTrue(try StoreSync(b).sync().quiet)
        XCTAssertEqual(try StoreSync(a).devices().first { $0.id == b.deviceID }?.seq, 1)
    }

    /// Concurrent edits of one row, both orders, and of different columns: last writer wins
    /// whole rows, both devices end with the same row and the loser kept as a lost value.
    func testConcurrentEditsConvergeAndKeepTheLoser() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'Abbey Road', 'store')")
        let b = try join("b", from: a)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try a.write(sql: "UPDATE albums SET title = 'from a'")
        try b.write(sql: "UPDATE albums SET title = 'from b'") // later: wins
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try a.database.scalar("SELECT title FROM albums").textValue, "from b")
        for device in [a, b] {
            let lost = try StoreSync(device).lostValues()
            XCTAssertEqual(lost.count, 1, "each device that saw both sides keeps the loser")
            XCTAssertEqual(lost.first?.values["title"], .text("from a"))
            XCTAssertEqual(lost.first?.why, "concurrent")
        }
        // A later edit that saw the other is no conflict.
        try a.write(sql: "UPDATE albums SET title = 'seen'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try StoreSync(b).lostValues().count, 1)
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums").textValue, "seen")
        // Restoring the lost value is a new write that travels.
        let lost = try XCTUnwrap(try StoreSync(a).lostValues().first)
        try StoreSync(a).restoreLost(lost.id)
        XCTAssertThrowsError(try StoreSync(a).restoreLost(lost.id)) { XCTAssertEqual(($0 as? CovenError)?.code, .invalidState) }
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT title FROM albums").textValue, "from a")
    }

    /// Delete against update: the later wins; a row inserted under a parent deleted elsewhere
    /// is taken out on both.
    func testDeletesTombstonesAndTakeOuts() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x'); INSERT INTO tracks (id, album_id, title) VALUES ('\(track1)', '\(Self.album)', 't1')")
        let b = try join("b", from: a)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "UPDATE tracks SET title = 'edited'")
        try a.write(sql: "DELETE FROM tracks") // later: the delete wins
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM tracks").intValue, 0)
        XCTAssertEqual(try dump(a), try dump(b))
        // b inserts a track under the album a deletes.
        try b.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES ('\(track2)', '\(Self.album)', 'orphan')")
        try a.write(sql: "DELETE FROM albums")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM tracks").intValue, 0)
        XCTAssertTrue(try StoreSync(a).lostValues().contains { $0.why == "parent_deleted" && $0.rowID == track2 && !$0.restorable })
        // It may still come back: a drop refuses it and --all leaves it.
        let takenOut = try XCTUnwrap(try StoreSync(a).lostValues().first { $0.why == "parent_deleted" && $0.rowID == track2 })
        XCTAssertThrowsError(try StoreSync(a).dropLost([takenOut.id])) { XCTAssertEqual(($0 as? CovenError)?.code, .invalidState) }
        XCTAssertFalse(try StoreSync(a).dropLost(before: nil).contains(takenOut.id))
        XCTAssertTrue(try StoreSync(a).lostValues().contains { $0.id == takenOut.id })
    }

    /// Three devices with an album; b adds a track to it (unpublished) while c deletes the
    /// album and publishes that.
    func trackUnderADeletedAlbum() throws -> (Device, Device, Device) {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        for device in [a, b, c] { _ = try StoreSync(device).sync() }
        try b.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES ('\(track1)', '\(Self.album)', 'new on b')")
        try c.write(sql: "DELETE FROM albums")
        _ = try StoreSync(c).sync()
        return (a, b, c)
    }

    /// A track written on one device under an album another device deletes while a third
    /// edits it later (so the album lives on): the track is taken out where the delete arrives
    /// first and comes back with the album, so every device ends with the album and the track.
    func testATakenOutRowComesBackWhenAConcurrentWriteKeepsItsParent() throws {
        let (a, b, c) = try trackUnderADeletedAlbum()
        try a.write(sql: "UPDATE albums SET title = 'kept by a'")  // later than c's delete: wins
        // a applies c's delete (it loses there) before it publishes: b applies c's change first.
        _ = try StoreSync(a).sync(push: false)
        _ = try StoreSync(a).sync()
        // b: c's delete takes the track out, a's edit brings the album and then the track back.
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT title FROM tracks").textValue, "new on b")
        XCTAssertTrue(try StoreSync(b).lostValues().contains { $0.why == "parent_deleted" && $0.rowID == track1 && $0.restoredAt != nil })
        for _ in 0..<2 { for device in [c, a, b] { _ = try StoreSync(device).sync() } }
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try dump(a), try dump(c))
        XCTAssertEqual(try c.database.scalar("SELECT title FROM albums").textValue, "kept by a")
        XCTAssertEqual(try c.database.scalar("SELECT count(*) FROM tracks").intValue, 1)
    }

    /// The same when the device that took the track out writes the album's id again itself:
    /// the track comes back in that write, and travels with it.
    func testATakenOutRowComesBackWithALocalWriteOfItsParent() throws {
        let (a, b, c) = try trackUnderADeletedAlbum()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM tracks").intValue, 0, "taken out")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'again')")
        XCTAssertEqual(try a.database.scalar("SELECT title FROM tracks").textValue, "new on b", "back with the album")
        for _ in 0..<2 { for device in [a, b, c] { _ = try StoreSync(device).sync() } }
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try dump(a), try dump(c))
        XCTAssertEqual(try c.database.scalar("SELECT count(*) FROM tracks").intValue, 1)
    }

    /// Equal shared keys merge: one row, last writer's values.
    func testSharedKeysMerge() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('theme', 'dark')")
        try b.write(sql: "INSERT INTO settings (id, value) VALUES ('theme', 'light')")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try a.database.scalar("SELECT value FROM settings").textValue, "light")
    }

    /// A copied database publishing as the same device, while this one had frozen a change
    /// of its own at the same seq, is stopped, never overwriting.
    func testACopiedDatabaseIsStoppedWithDeviceConflict() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        let copyPaths = DevicePaths(database: work + "/copy/device.db")
        try FileManager.default.createDirectory(atPath: work + "/copy", withIntermediateDirectories: true)
        try a.database.execute("VACUUM INTO '\(copyPaths.database)'")
        try FileManager.default.copyItem(atPath: paths.folder, toPath: copyPaths.folder)
        // a freezes change 1 and fails before storage takes it.
        let failing = CrashingStorage(try StorageConnector(location: a.storage).connect())
        failing.failBeforePut = true
        XCTAssertThrowsError(try StoreSync(a, storage: failing).push())
        let copy = try Device.open(paths: copyPaths)
        try copy.write(sql: "INSERT INTO settings (id, value) VALUES ('k2', 'copy')")
        _ = try StoreSync(copy).sync()
        let object = try XCTUnwrap(FileManager.default.contents(atPath: storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: 1)))
        XCTAssertThrowsError(try StoreSync(a).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceConflict) }
        XCTAssertEqual(FileManager.default.contents(atPath: storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: 1)), object, "never overwritten")
        XCTAssertThrowsError(try StoreSync(a).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceConflict) }
    }

    /// A tampered, truncated or swapped change is refused as damage, naming the object, and
    /// nothing of it is applied; the other devices' streams go on.
    func testTamperedTruncatedSwappedAndMissingChangesAreRefused() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k2', '2')")
        _ = try StoreSync(a, storage: try StorageConnector(location: a.storage).connect()).push()
        try c.write(sql: "INSERT INTO settings (id, value) VALUES ('c', '3')")
        _ = try StoreSync(c).sync()
        let path = storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: 1)
        let good = try XCTUnwrap(FileManager.default.contents(atPath: path))
        // Each is damage: named, reported to a, a's stream stops there and c's goes on.
        func expectDamage(line: UInt = #line) {
            let report = try? StoreSync(b).sync()
            XCTAssertEqual(report?.pulled.damaged[a.deviceID]?.object, ChangeObject.path(device: a.deviceID, seq: 1), line: line)
            XCTAssertTrue(report?.pulled.damaged[a.deviceID]?.message.contains(ChangeObject.path(device: a.deviceID, seq: 1)) ?? false, line: line)
            XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings WHERE id = 'k'").intValue, 0, line: line)
            XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings WHERE id = 'c'").intValue, 1, line: line)
            XCTAssertTrue(FileManager.default.fileExists(atPath: storeFolder + "/" + ChangeDamage.reportKey(device: a.deviceID, seq: 1)), line: line)
        }
        var flipped = [UInt8](good)
        flipped[flipped.count / 2] ^= 1
        try Data(flipped).write(to: URL(fileURLWithPath: path))
        expectDamage()
        try Data(good.prefix(good.count - 5)).write(to: URL(fileURLWithPath: path))
        expectDamage()
        // c's change 1 put in a's place.
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: storeFolder + "/" + ChangeObject.path(device: c.deviceID, seq: 1), toPath: path)
        expectDamage()
        try Data(good).write(to: URL(fileURLWithPath: path))
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 3)
    }

    /// A device removed for good is refused when it syncs again.
    func testARemovedDeviceIsRefused() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try StoreSync(a).removeDevice("b")
        XCTAssertTrue(try StoreSync(a).devices().first { $0.name == "b" }?.gone ?? false)
        XCTAssertThrowsError(try StoreSync(b).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceGone) }
        // Its uploads stop too.
        let cover = try stageApp(b, try file("cover.jpg", "bytes"))
        try b.write(sql: "INSERT INTO settings (id, file) VALUES ('k', coven_put_staged('\(cover.id)'))")
        XCTAssertThrowsError(try UploadWorker.run(paths: b.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))) {
            XCTAssertEqual(($0 as? CovenError)?.code, .deviceGone)
        }
        XCTAssertThrowsError(try StoreSync(a).removeDevice("a")) { XCTAssertEqual(($0 as? CovenError)?.code, .invalidState) }
    }

    /// Issue 19 B: b inserts an album, every device applies it; c deletes it and syncs; a pulls
    /// the delete and then removes c. b never applied c's delete: it learns of it only from a's
    /// published frontier, so a's removal must publish that frontier, and b then applies the
    /// delete too.
    func testARemovalAfterADeleteLeavesTheDevicesTheSame() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        try b.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'X')")
        for device in [b, a, c, a] { _ = try StoreSync(device).sync() }
        try c.write(sql: "DELETE FROM albums")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync(push: false)
        try StoreSync(a).removeDevice("c")
        for _ in 0..<3 {
            _ = try StoreSync(a).sync()
            _ = try StoreSync(b).sync()
        }
        XCTAssertEqual(try count(a, "SELECT count(*) FROM albums"), 0)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM albums"), 0, "b applies c's delete, which a applied before removing c")
        XCTAssertEqual(try dump(a), try dump(b))
    }

    /// A wrong key is refused before anything is written.
    func testJoinWithAWrongKeyWritesNothing() throws {
        let a = try makeDevice(name: "a", kind: .noMember)
        let target = DevicePaths(database: work + "/wrong/device.db")
        XCTAssertThrowsError(try DeviceSetup.join(paths: target, storage: a.storage, storeKey: [UInt8](repeating: 7, count: 32), name: "w")) {
            XCTAssertEqual(($0 as? CovenError)?.code, .integrity)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.database))
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.folder))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeFolder + "/devices").count, 1)
    }

    /// In a store of members, a join by key and one by an identity not on the roster are
    /// refused and write nothing.
    func testJoinOfAStoreOfMembersWithoutAMembersIdentityWritesNothing() throws {
        let a = try makeDevice(name: "a")
        let target = DevicePaths(database: work + "/wrong/device.db")
        assertCovenError(.usage) { try DeviceSetup.join(paths: target, storage: a.storage, storeKey: try a.keys.storeKeyBytes(), name: "w") }
        assertCovenError(.notFound) { try DeviceSetup.join(paths: target, storage: a.storage, identity: try MemberIdentity(), name: "w") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.database))
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.folder))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeFolder + "/devices").count, 1)
    }

    /// A sync that publishes many rows gives the pages they took in the outbox back to the
    /// file system: on a device made now (auto_vacuum incremental) and on one of an older
    /// release (none: turned incremental once, by a VACUUM).
    func testPublishingManyRowsGivesTheFreePagesBack() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try b.database.execute("PRAGMA auto_vacuum = NONE")
        try b.database.execute("VACUUM")
        XCTAssertEqual(try b.database.scalar("PRAGMA auto_vacuum").intValue, 0, "as an older device")
        for device in [a, b] {
            try device.write(sql: """
                WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
                INSERT INTO settings (id, value) SELECT '\(device.deviceName)' || x, printf('%0200d', x) FROM c
                """)
            try device.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            let written = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: device.paths.database)[.size] as? Int)
            _ = try StoreSync(device).sync(pull: false)
            let pageSize = try device.database.scalar("PRAGMA page_size").intValue ?? 0
            let free = (try device.database.scalar("PRAGMA freelist_count").intValue ?? 0) * pageSize
            let synced = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: device.paths.database)[.size] as? Int)
            XCTAssertLessThan(free, 1 << 20, "\(device.deviceName): free pages given back")
            XCTAssertLessThan(synced, written * 3 / 4, "\(device.deviceName): the file shrinks (\(written) -> \(synced) bytes)")
            XCTAssertEqual(try device.database.scalar("PRAGMA auto_vacuum").intValue, 2)
            XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM settings").intValue, 20000)
        }
    }

    /// A join stopped after it announced its device but before the device was made (its
    /// database still aside): run again, it starts clean as a new device, and the one it had
    /// announced is marked gone, so gc on the others does not wait for it for good.
    func testAJoinStoppedAfterItAnnouncedItselfStartsCleanAndMarksThatDeviceGone() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road')")
        _ = try StoreSync(a).sync()
        let paths = DevicePaths(database: work + "/b/device.db")
        let first = try join("b", from: a)
        let announced = first.deviceID
        // As a kill between the announcement and the rename leaves it.
        XCTAssertEqual(rename(paths.database, paths.database + ".init"), 0)
        try Data(announced.utf8).write(to: URL(fileURLWithPath: paths.folder + "/joining"))
        let again = try join("b", from: a)
        XCTAssertNotEqual(again.deviceID, announced)
        XCTAssertFalse(FileManager.default.fileExists(atPath: paths.database + ".init"))
        _ = try StoreSync(again).sync()
        XCTAssertEqual(try again.database.scalar("SELECT count(*) FROM albums").intValue, 1)
        _ = try StoreSync(a).sync()
        let devices = try StoreSync(a).devices()
        XCTAssertEqual(devices.first { $0.id == announced }?.gone, true)
        XCTAssertEqual(devices.first { $0.id == again.deviceID }?.gone, false)
    }
}

/// Storage around the real file:// provider that counts the requests made through it, and
/// fails on cue: after a put went through (a crash between storage's answer and the
/// database's commit), or on the n-th get.
final class CrashingStorage: StorageProvider {
    let inner: StorageProvider
    var failAfterPut = false
    var failBeforePut = false
    var failOnGet: Int?
    var gets = 0
    /// Every request, as `METHOD key`.
    var requests: [String] = []
    init(_ inner: StorageProvider) { self.inner = inner }
    struct Crash: Error {}

    var singleRequestLimit: Int64 { inner.singleRequestLimit }
    var minimumPartSize: Int64 { inner.minimumPartSize }
    func put(_ key: String, data: [UInt8]) throws { requests.append("PUT " + key); try inner.put(key, data: data) }
    func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool {
        requests.append("PUT " + key)
        if failBeforePut { throw Crash() }
        let stored = try inner.putIfAbsent(key, data: data)
        if failAfterPut { throw Crash() }
        return stored
    }
    func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64? {
        requests.append("GET " + key)
        gets += 1
        if gets == failOnGet { throw Crash() }
        return try inner.get(key, range: range, sink: sink)
    }
    func head(_ key: String) throws -> ObjectInfo? { requests.append("HEAD " + key); return try inner.head(key) }
    func delete(_ key: String) throws { requests.append("DELETE " + key); try inner.delete(key) }
    func list(prefix: String) throws -> [ObjectInfo] { requests.append("LIST " + prefix); return try inner.list(prefix: prefix) }
    func list(prefix: String, after startAfter: String, limit: Int) throws -> [ObjectInfo] {
        requests.append("LIST " + prefix)
        return try inner.list(prefix: prefix, after: startAfter, limit: limit)
    }
    func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String { try inner.createMultipart(key, totalSize: totalSize, partSize: partSize) }
    func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart {
        try inner.uploadPart(key, uploadID: uploadID, number: number, offset: offset, data: data)
    }
    func listParts(_ key: String, uploadID: String) throws -> [UploadedPart] { try inner.listParts(key, uploadID: uploadID) }
    func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws { try inner.completeMultipart(key, uploadID: uploadID, parts: parts) }
    func abortMultipart(_ key: String, uploadID: String) throws { try inner.abortMultipart(key, uploadID: uploadID) }
    func uploadsInProgress(_ key: String) throws -> [String] { try inner.uploadsInProgress(key) }
    func uploadsInProgress(prefix: String) throws -> [UploadInProgress] { try inner.uploadsInProgress(prefix: prefix) }
}

final class SyncCrashTests: DeviceTestCase {
    /// A crash after storage took a change but before this device recorded it: the rerun finds
    /// its own bytes there (no conflict), publishes nothing twice and goes on.
    func testACrashAfterAPutPublishesNothingTwice() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        let storage = CrashingStorage(try StorageConnector(location: a.storage).connect())
        storage.failAfterPut = true
        XCTAssertThrowsError(try StoreSync(a, storage: storage).push())
        XCTAssertEqual(try a.database.scalar("SELECT count(*) FROM coven_push").intValue, 1, "still frozen")
        // status counts the frozen change's write as not yet published.
        XCTAssertEqual(try DeviceStatus(of: a).sync.waiting, 1)
        XCTAssertEqual(try DeviceStatus(of: a).sync.frozen, 1)
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k2', '2')")
        XCTAssertEqual(try DeviceStatus(of: a).sync.waiting, 2)
        XCTAssertEqual(try DeviceStatus(of: a).sync.frozenWrites, 1)
        storage.failAfterPut = false
        let report = try StoreSync(a, storage: storage).push()
        XCTAssertEqual(report.published, [1, 2])
        XCTAssertEqual(try DeviceStatus(of: a).sync.waiting, 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeFolder + "/changes/" + a.deviceID).count, 2)
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 2)
    }

    /// A crash in the middle of a pull: what was applied stays, the rerun applies the rest,
    /// nothing twice.
    func testACrashDuringAPullAppliesNothingTwice() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        for index in 0..<3 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(index)', '\(index)')")
            _ = try StoreSync(a).sync()
        }
        let storage = CrashingStorage(try StorageConnector(location: b.storage).connect())
        storage.failOnGet = 2
        XCTAssertThrowsError(try StoreSync(b, storage: storage).pull())
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 1)
        XCTAssertEqual(try StoreSync(b).devices().first { $0.id == a.deviceID }?.seq, 1)
        storage.failOnGet = nil
        let rest = try StoreSync(b, storage: storage).pull()
        XCTAssertEqual(rest.applied[a.deviceID], [2, 3])
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 3)
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM coven_sync_log WHERE device = ?1", [a.deviceID]).intValue, 3)
    }

    /// A storage that lost a change: the pull of that device stops at the gap and says so,
    /// never skipping to the next.
    func testAGapStopsThatDevicesPull() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        for index in 0..<3 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(index)', '\(index)')")
            _ = try StoreSync(a).sync()
        }
        _ = try StoreSync(c).sync() // c applies a's three changes and publishes that
        try c.write(sql: "INSERT INTO settings (id, value) VALUES ('c', 'c')")
        _ = try StoreSync(c).sync()
        try FileManager.default.removeItem(atPath: storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: 2))
        let report = try StoreSync(b).sync()
        XCTAssertEqual(report.pulled.applied[a.deviceID], [1])
        XCTAssertEqual(report.pulled.gaps[a.deviceID], 2)
        XCTAssertEqual(report.pulled.waiting[c.deviceID], 3, "c's change needs a's third, which waits behind the gap")
        XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 1)
    }
}

/// Changes that are well signed but carry what this device must not apply: a newer schema,
/// an unknown table or column, a non-canonical id in a uuid table. Each is refused, naming the
/// object, and nothing of it is applied; an older schema's change is applied.
final class SyncRefusalTests: DeviceTestCase {
    /// Publishes `entries` as device `writer`'s next change, signed with its own key.
    func publish(_ writer: Device, _ entries: [RowEntry], migrations: Int? = nil) throws {
        let seq = UInt64((try StoreSync(writer).devices().first { $0.thisDevice }?.seq ?? 0) + 1)
        let schema = writer.schemaVersion
        let change = ChangeObject(storeID: writer.storeID, device: writer.deviceID, seq: seq,
                                  schema: .init(migrations: migrations ?? schema.count, digest: schema.digest), entries: entries)
        let provider = try StorageConnector(location: writer.storage).connect()
        XCTAssertTrue(try provider.putIfAbsent(change.path, data: try change.seal(storeKey: try writer.keys.storeKey(), signingKey: try writer.keys.signingKey())))
    }

    func setting(_ id: String, _ columns: [String: SQLValue], stamp: String = "2030-01-01T00:00:00.000Z-0000-x") -> RowEntry {
        let names = ["id"] + columns.keys.sorted()
        return RowEntry(kind: .upsert, table: "settings", id: id, stamp: stamp, columns: names + ["_updated_at"],
                        values: [.text(id)] + columns.keys.sorted().map { columns[$0]! } + [.text(stamp)])
    }

    func testRefusedChangesNameTheObjectAndApplyNothing() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        func expect(_ code: ErrorCode, line: UInt = #line) {
            XCTAssertThrowsError(try StoreSync(b).sync(), line: line) { error in
                XCTAssertEqual((error as? CovenError)?.code, code, "\(error)", line: line)
                XCTAssertEqual((error as? CovenError)?.details["object"], ChangeObject.path(device: a.deviceID, seq: 1), line: line)
            }
            XCTAssertEqual(try b.database.scalar("SELECT count(*) FROM settings").intValue, 0, line: line)
        }
        let path = storeFolder + "/" + ChangeObject.path(device: a.deviceID, seq: 1)
        // A newer schema: update_required, with a hint to migrate.
        try publish(a, [setting("k", ["value": .text("v")])], migrations: 99)
        expect(.updateRequired)
        try FileManager.default.removeItem(atPath: path)
        // A table this device does not sync.
        try publish(a, [RowEntry(kind: .upsert, table: "secrets", id: "x", stamp: "s", columns: ["id"], values: [.text("x")])])
        expect(.decoding)
        try FileManager.default.removeItem(atPath: path)
        // A column this device does not have.
        try publish(a, [setting("k", ["colour": .text("red")])])
        expect(.decoding)
        try FileManager.default.removeItem(atPath: path)
        // A non-canonical id in a uuid table.
        try publish(a, [RowEntry(kind: .upsert, table: "albums", id: "NOT-A-UUID", stamp: "s", columns: ["id", "_updated_at"], values: [.text("NOT-A-UUID"), .text("s")])])
        expect(.invalidId)
        try FileManager.default.removeItem(atPath: path)
        // An older schema's change (fewer migrations) applies; the columns it lacks keep their values.
        try b.database.execute("INSERT INTO settings (id, value, file, _updated_at) VALUES ('k', 'old', NULL, '2000')")
        try publish(a, [RowEntry(kind: .upsert, table: "settings", id: "k", stamp: "2030", columns: ["id", "_updated_at"], values: [.text("k"), .text("2030")])],
                    migrations: 3)
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT value || '/' || _updated_at FROM settings").textValue, "old/2030")
    }
}

class SyncRequestTests: DeviceTestCase {
    /// A quiet sync with 10 devices lists devices/ once, lists each other device's changes
    /// after the applied one (a gap shows there), and this device's own after the published
    /// one (a restored database shows there): one request per device; in a store of members
    /// (as `coven init` makes it), one listing of the circles' key generations and one of the
    /// store's newest two; nothing else.
    func testAQuietSyncOfTenDevicesMakesOneRequestPerDeviceAndOneListing() throws {
        let a = try makeDevice(name: "d0")
        var devices = [a]
        for index in 1..<10 {
            devices.append(try join("d\(index)", from: a))
        }
        for device in devices {
            try device.write(sql: "INSERT INTO settings (id, value) VALUES ('\(device.deviceName)', 'x')")
        }
        for _ in 0..<2 { for device in devices { _ = try StoreSync(device).sync() } }
        let counting = CrashingStorage(try StorageConnector(location: a.storage).connect())
        let report = try StoreSync(devices[3], storage: counting).sync()
        XCTAssertTrue(report.quiet)
        let keys = Self.storeKind == .members ? ["LIST audiences/", "LIST audiences/store/"] : []
        XCTAssertEqual(counting.requests.filter { $0.hasPrefix("LIST ") }.sorted(),
                       (["LIST devices/"] + devices.map { "LIST changes/\($0.deviceID)/" } + keys).sorted())
        XCTAssertEqual(counting.requests.count, 11 + keys.count, counting.requests.joined(separator: "\n"))
    }
}

/// The quiet sync on a store without members: the key generations are not listed.
final class SyncRequestNoMemberTests: SyncRequestTests {
    override class var storeKind: TestStoreKind { .noMember }

    override func testAQuietSyncOfTenDevicesMakesOneRequestPerDeviceAndOneListing() throws {
        try super.testAQuietSyncOfTenDevicesMakesOneRequestPerDeviceAndOneListing()
    }
}

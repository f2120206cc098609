@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Damage a household meets, noticed at the next sync and recovered from (issue "Sync that
/// notices damage"): a change storage lost or damaged, a database restored from a backup, a
/// lost device key, a device joined from a snapshot that holds gc back.
class SyncDamageTests: DeviceTestCase {
    /// The store's objects, read and damaged through the provider (file:// or the class's S3
    /// server).
    var store: StorageProvider!
    func change(_ device: Device, _ seq: UInt64) -> String { ChangeObject.path(device: device.deviceID, seq: seq) }
    func exists(_ key: String) throws -> Bool { try store.head(key) != nil }
    func remove(_ key: String) throws { try store.delete(key) }
    func bytes(_ key: String) throws -> [UInt8] { try XCTUnwrap(try store.getObject(key)) }
    func replace(_ key: String, with bytes: [UInt8]) throws { try store.put(key, data: bytes) }
    func flip(_ key: String, at offset: Int? = nil) throws {
        var data = try bytes(key)
        data[offset ?? data.count / 2] ^= 1
        try replace(key, with: data)
    }

    override func makeDevice(_ json: String = DeviceTestCase.albumManifest, name: String = "test") throws -> Device {
        let device = try super.makeDevice(json, name: name)
        store = try device.connectStorage()
        return device
    }

    /// A copy of `device`'s database and folder, as a backup takes them.
    func backup(_ device: Device, to folder: String) throws -> DevicePaths {
        let backup = DevicePaths(database: work + "/\(folder)/device.db")
        try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true)
        try device.database.execute("VACUUM INTO '\(backup.database)'")
        try FileManager.default.copyItem(atPath: device.paths.folder, toPath: backup.folder)
        return backup
    }

    func open(_ paths: DevicePaths, like device: Device) throws -> Device {
        let opened = try Device.open(paths: paths)
        opened.storageEnvironment = device.storageEnvironment
        return opened
    }

    func settings(_ device: Device) throws -> [String] {
        try device.database.query("SELECT id || '=' || coalesce(value, '') AS v FROM settings ORDER BY id").compactMap { $0.string("v") }
    }

    /// Three writes and syncs on a, then writes 0, 1, 2 as a's changes 1, 2, 3.
    func threeChanges(_ a: Device) throws {
        for index in 0..<3 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(index)', '\(index)')")
            _ = try StoreSync(a).sync()
        }
    }

    // MARK: Item 1: a missing change is a gap, even when no device claims it

    func testAMissingChangeBelowOneStorageHoldsIsAGap() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try threeChanges(a)
        try remove(change(a, 2))
        let report = try StoreSync(b).sync()
        XCTAssertEqual(report.pulled.applied[a.deviceID], [1])
        XCTAssertEqual(report.pulled.gaps[a.deviceID], 2, "change 3 is in storage, 2 is not")
        XCTAssertFalse(report.quiet)
        XCTAssertEqual(try ChangeDamage(device: b).problems().map { "\($0.kind.rawValue) \($0.seq)" }, ["gap 2"])
        // A device that joins later says so too.
        let c = try join("c", from: a)
        XCTAssertEqual(try StoreSync(c).sync().pulled.gaps[a.deviceID], 2)
        XCTAssertEqual(try StoreSync(b).sync().pulled.gaps[a.deviceID], 2, "it stays until the change is back")
        XCTAssertTrue(try exists(ChangeDamage.reportKey(device: a.deviceID, seq: 2)))
        // The publisher, told, publishes it again from what it holds; the others go on.
        XCTAssertEqual(try StoreSync(a).sync().pushed.republished, [2])
        XCTAssertEqual(try StoreSync(b).sync().pulled.applied[a.deviceID], [2, 3])
        XCTAssertEqual(try ChangeDamage(device: b).problems(), [])
        _ = try StoreSync(c).sync()
        XCTAssertEqual(try settings(b), try settings(a))
        XCTAssertEqual(try settings(c), try settings(a))
    }

    /// A restored database whose own later change storage lost cannot go on after it: it is
    /// stopped, naming the object, before publishing anything.
    func testARestoredDatabaseMissingItsOwnLaterChangeIsStopped() throws {
        let a = try makeDevice(name: "a")
        let backup = try backup(a, to: "backup")
        try threeChanges(a)
        try remove(change(a, 2))
        let restored = try open(backup, like: a)
        try restored.write(sql: "INSERT INTO settings (id, value) VALUES ('new', 'x')")
        XCTAssertThrowsError(try StoreSync(restored).sync()) { error in
            XCTAssertEqual((error as? CovenError)?.code, .deviceConflict, "\(error)")
            XCTAssertEqual((error as? CovenError)?.details["object"], ChangeObject.path(device: a.deviceID, seq: 2))
        }
        XCTAssertFalse(try exists(change(a, 2)), "nothing new published in its place")
    }

    /// The latest change lost from storage: nobody else can tell, so its publisher checks it
    /// at every sync and publishes it again.
    func testALostLatestChangeIsPublishedAgainByItsPublisher() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try threeChanges(a)
        try remove(change(a, 3))
        XCTAssertTrue(try StoreSync(b).sync().pulled.gaps.isEmpty, "b cannot tell")
        XCTAssertEqual(try StoreSync(a).sync().pushed.republished, [3])
        XCTAssertEqual(try StoreSync(b).sync().pulled.applied[a.deviceID], [3])
        XCTAssertEqual(try settings(b), try settings(a))
    }

    // MARK: Item 2: a damaged change is reported to its publisher, which publishes it again

    func testADamagedChangeIsPublishedAgainByItsPublisherAndTheOthersGoOn() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        try threeChanges(a)
        try a.write(sql: "UPDATE settings SET value = 'later' WHERE id = 'k0'")
        try flip(change(a, 2))

        let first = try StoreSync(b).sync()
        XCTAssertEqual(first.pulled.applied[a.deviceID], [1])
        XCTAssertEqual(first.pulled.damaged[a.deviceID]?.seq, 2)
        XCTAssertEqual(first.pulled.damaged[a.deviceID]?.object, ChangeObject.path(device: a.deviceID, seq: 2))
        XCTAssertTrue(try exists(ChangeDamage.reportKey(device: a.deviceID, seq: 2)))
        XCTAssertEqual(try ChangeDamage(device: b).problems().map { "\($0.kind.rawValue) \($0.seq)" }, ["damaged 2"])
        // c meets it too, and goes on with the others.
        XCTAssertEqual(try StoreSync(c).sync().pulled.damaged[a.deviceID]?.seq, 2)

        // The publisher learns of it at its next sync and publishes it again.
        let republished = try StoreSync(a).sync()
        XCTAssertEqual(republished.pushed.republished, [2])
        XCTAssertFalse(try exists(ChangeDamage.reportKey(device: a.deviceID, seq: 2)))
        let again = try StoreSync(b).sync()
        XCTAssertEqual(again.pulled.applied[a.deviceID], [2, 3, 4])
        XCTAssertTrue(again.pulled.damaged.isEmpty)
        XCTAssertEqual(try ChangeDamage(device: b).problems(), [])
        _ = try StoreSync(c).sync()
        XCTAssertEqual(try settings(b), ["k0=later", "k1=1", "k2=2"])
        XCTAssertEqual(try settings(c), try settings(a))
        XCTAssertEqual(try settings(b), try settings(a))
    }

    /// A change published again holds each row as it is now: a row whose file record was
    /// written again later (an upload's switch to stored) arrives before its record, which
    /// travels in the later change; the row comes back with the record, as everywhere else.
    func testARowOfAChangePublishedAgainComesBackWithItsRecordFromALaterChange() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let cover = try stageApp(a, try file("cover.jpg", "cover bytes"))
        try a.write(sql: "INSERT INTO settings (id, value, file) VALUES ('k', 'v', coven_put_staged('\(cover.id)'))")
        _ = try StoreSync(a).sync()
        let connector = StorageConnector(location: a.storage, environment: a.storageEnvironment)
        _ = try UploadWorker.run(paths: a.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]), connect: { try connector.connect() })
        XCTAssertEqual(try StoreSync(a).sync().pushed.published, [2], "the switch to stored")
        try flip(change(a, 1))
        XCTAssertEqual(try StoreSync(b).sync().pulled.damaged[a.deviceID]?.seq, 1)
        XCTAssertEqual(try StoreSync(a).sync().pushed.republished, [1])
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try b.database.scalar("SELECT value FROM settings WHERE id = 'k'").textValue, "v")
        XCTAssertEqual(try dumpFiles(b), try dumpFiles(a))
        XCTAssertTrue(try StoreSync(b).lostValues().allSatisfy { $0.restoredAt != nil }, "a row taken out on the way is back")
    }

    func dumpFiles(_ device: Device) throws -> [String] {
        try device.database.query("SELECT id || ' ' || place || ' ' || _updated_at AS v FROM coven_files ORDER BY id").compactMap { $0.string("v") }
    }

    /// A read that failed once (a bad transfer) is read again before it counts as damage; a
    /// report of a change that storage holds intact is removed without publishing anything.
    func testAReportOfAnIntactChangeIsDroppedWithoutPublishing() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try threeChanges(a)
        let good = try bytes(change(a, 2))
        try flip(change(a, 2), at: 10)
        XCTAssertEqual(try StoreSync(b).sync().pulled.damaged[a.deviceID]?.seq, 2)
        try replace(change(a, 2), with: good)
        XCTAssertEqual(try StoreSync(a).sync().pushed.republished, [])
        XCTAssertEqual(try bytes(change(a, 2)), good)
        XCTAssertFalse(try exists(ChangeDamage.reportKey(device: a.deviceID, seq: 2)))
        XCTAssertEqual(try StoreSync(b).sync().pulled.applied[a.deviceID], [2, 3])
    }

    /// A damaged change of a device gone for good is named as lost for good and gone past, so
    /// the others are not stopped forever.
    func testADamagedChangeOfAGoneDeviceIsNamedAndGonePast() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        try threeChanges(a)
        _ = try StoreSync(c).sync() // c applied a's three changes; its next change's frontier says so
        try c.write(sql: "INSERT INTO settings (id, value) VALUES ('c', 'c')")
        _ = try StoreSync(c).sync()
        try flip(change(a, 2))
        XCTAssertEqual(try StoreSync(b).sync().pulled.damaged[a.deviceID]?.seq, 2)
        try StoreSync(c).removeDevice(a.deviceID)
        let report = try StoreSync(b).sync()
        XCTAssertEqual(report.pulled.lostForGood.map { "\($0.seq) \($0.why.rawValue)" }, ["2 damaged"])
        XCTAssertEqual(report.pulled.applied[a.deviceID], [3])
        XCTAssertTrue(report.pulled.damaged.isEmpty)
        XCTAssertEqual(try ChangeDamage(device: b).problems(), [])
    }

    // MARK: Item 3: a database restored from a backup catches up on its own changes

    func testARestoredDatabaseAppliesItsOwnPublishedChangesAndGoesOn() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('before', '1')")
        // The backup: a's database and folder as they are now (its write not yet published).
        let backup = try backup(a, to: "backup")
        _ = try StoreSync(a).sync()
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('after', '2')")
        try a.write(sql: "UPDATE settings SET value = 'changed' WHERE id = 'before'")
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try StoreSync(a).devices().first { $0.thisDevice }?.seq, 2)

        // The disk dies; the backup comes back in its place.
        let restored = try open(backup, like: a)
        let report = try StoreSync(restored).sync()
        XCTAssertEqual(report.pushed.caughtUp, [1, 2], "its own published changes, applied before anything new is published")
        XCTAssertEqual(report.pushed.published, [], "the write of the backup's outbox is in change 1 already")
        XCTAssertEqual(try settings(restored), ["after=2", "before=changed"])
        try restored.write(sql: "INSERT INTO settings (id, value) VALUES ('new', '3')")
        XCTAssertEqual(try StoreSync(restored).sync().pushed.published, [3])
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try settings(b), ["after=2", "before=changed", "new=3"])
        XCTAssertTrue(try StoreSync(restored).sync().quiet)
    }

    // MARK: Item 4: a lost or damaged device key is refused, never replaced silently

    func testALostDeviceKeyIsRefusedAndNothingIsPublished() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        try FileManager.default.removeItem(atPath: a.paths.signingKey)
        let reopened = try open(a.paths, like: a)
        XCTAssertThrowsError(try StoreSync(reopened).sync()) { error in
            XCTAssertEqual((error as? CovenError)?.code, .io, "\(error)")
            XCTAssertTrue((error as? CovenError)?.message.contains("is missing") ?? false, "\(error)")
            XCTAssertNotNil((error as? CovenError)?.hint)
        }
        XCTAssertFalse(try exists(change(a, 1)))
        XCTAssertFalse(FileManager.default.fileExists(atPath: a.paths.signingKey), "no new key is made")
    }

    func testADamagedDeviceKeyIsRefusedAndNothingIsPublished() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        var key = try XCTUnwrap(FileManager.default.contents(atPath: a.paths.signingKey))
        key[3] ^= 0x40
        try key.write(to: URL(fileURLWithPath: a.paths.signingKey))
        let reopened = try open(a.paths, like: a)
        XCTAssertThrowsError(try StoreSync(reopened).sync()) { error in
            XCTAssertEqual((error as? CovenError)?.code, .io, "\(error)")
            XCTAssertTrue((error as? CovenError)?.message.contains("not the key this device registered") ?? false, "\(error)")
        }
        XCTAssertFalse(try exists(change(a, 1)))
        // A key file of the wrong size is io too, not integrity.
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: a.paths.signingKey))
        XCTAssertThrowsError(try StoreSync(open(a.paths, like: a)).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .io, "\($0)") }
    }

    // MARK: Item 6: a device joined from a snapshot publishes its frontier at its first sync

    func testADeviceJoinedFromASnapshotPublishesItsFrontierAtItsFirstSync() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k', '1')")
        _ = try StoreSync(a).sync()
        _ = try Snapshots(a).snapshot()
        let b = try join("b", from: a)
        XCTAssertEqual(try StoreSync(b).devices().first { $0.id == a.deviceID }?.seq, 1, "from the snapshot")
        let report = try StoreSync(b).sync()
        XCTAssertEqual(report.pushed.published, [1], "an empty change carrying its frontier")
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try StoreSync(a).devices().first { $0.id == b.deviceID }?.frontier[a.deviceID], 1)
        XCTAssertTrue(try StoreSync(b).sync().quiet)
    }
}

/// The same damage on the signature-checking S3 server (moto) on loopback.
final class SyncDamageS3Tests: SyncDamageTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery on Linux finds a class's own methods only.
    override func testAMissingChangeBelowOneStorageHoldsIsAGap() throws { try super.testAMissingChangeBelowOneStorageHoldsIsAGap() }
    override func testARestoredDatabaseMissingItsOwnLaterChangeIsStopped() throws { try super.testARestoredDatabaseMissingItsOwnLaterChangeIsStopped() }
    override func testALostLatestChangeIsPublishedAgainByItsPublisher() throws { try super.testALostLatestChangeIsPublishedAgainByItsPublisher() }
    override func testARowOfAChangePublishedAgainComesBackWithItsRecordFromALaterChange() throws {
        try super.testARowOfAChangePublishedAgainComesBackWithItsRecordFromALaterChange()
    }
    override func testADamagedChangeIsPublishedAgainByItsPublisherAndTheOthersGoOn() throws { try super.testADamagedChangeIsPublishedAgainByItsPublisherAndTheOthersGoOn() }
    override func testAReportOfAnIntactChangeIsDroppedWithoutPublishing() throws { try super.testAReportOfAnIntactChangeIsDroppedWithoutPublishing() }
    override func testADamagedChangeOfAGoneDeviceIsNamedAndGonePast() throws { try super.testADamagedChangeOfAGoneDeviceIsNamedAndGonePast() }
    override func testARestoredDatabaseAppliesItsOwnPublishedChangesAndGoesOn() throws { try super.testARestoredDatabaseAppliesItsOwnPublishedChangesAndGoesOn() }
    override func testALostDeviceKeyIsRefusedAndNothingIsPublished() throws { try super.testALostDeviceKeyIsRefusedAndNothingIsPublished() }
    override func testADamagedDeviceKeyIsRefusedAndNothingIsPublished() throws { try super.testADamagedDeviceKeyIsRefusedAndNothingIsPublished() }
    override func testADeviceJoinedFromASnapshotPublishesItsFrontierAtItsFirstSync() throws { try super.testADeviceJoinedFromASnapshotPublishesItsFrontierAtItsFirstSync() }
}

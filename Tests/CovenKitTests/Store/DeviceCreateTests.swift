import CovenKit
@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven init`: a store and its first device, with random ids and key, refusing to overwrite,
/// and leaving nothing behind when it fails.
final class DeviceCreateTests: DeviceTestCase {
    func testRandomIdsKeyAndModes() throws {
        let device = try makeDevice()
        let other = try DeviceSetup.create(paths: DevicePaths(database: work + "/dev2/device.db"), storage: .file(directory: work + "/store2"),
                                      manifest: try manifest(), name: nil)
        for id in [device.storeID, device.deviceID, other.storeID, other.deviceID] {
            XCTAssertTrue(Identifier.isCanonicalUUID(id), id)
        }
        XCTAssertEqual(Set([device.storeID, device.deviceID, other.storeID, other.deviceID]).count, 4)
        XCTAssertEqual(device.deviceName, "test")
        XCTAssertEqual(other.deviceName, ProcessInfo.processInfo.hostName)
        XCTAssertEqual(device.storage, .file(directory: storeFolder))

        let key = try device.keys.storeKeyBytes()
        XCTAssertEqual(key.count, 32)
        XCTAssertNotEqual(key, try other.keys.storeKeyBytes())
        XCTAssertNotEqual(key, [UInt8](repeating: 0, count: 32))
        func mode(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        XCTAssertEqual(try mode(paths.storeKey), 0o600)
        XCTAssertEqual(try mode(paths.database), 0o600)
        XCTAssertEqual(try mode(paths.folder), 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] {
            XCTAssertEqual(try mode(folder), 0o700, folder)
        }
        // WAL, durable commits.
        XCTAssertEqual(try device.database.scalar("PRAGMA journal_mode").textValue, "wal")
        XCTAssertEqual(try device.database.scalar("PRAGMA synchronous").intValue, 2)

        // store.json: the id and format, no secret.
        let storeJSON = try XCTUnwrap(FileManager.default.contents(atPath: storeFolder + "/store.json"))
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: storeJSON) as? [String: Any])
        XCTAssertEqual(object["id"] as? String, device.storeID)
        XCTAssertEqual(object["coven_store"] as? Int, 1)
        XCTAssertEqual(Set(object.keys), ["id", "coven_store", "created_at"])
        XCTAssertFalse(String(decoding: storeJSON, as: UTF8.self).contains(key.hex))
        // The key is nowhere in the database either.
        let database = try XCTUnwrap(FileManager.default.contents(atPath: paths.database))
        XCTAssertNil(database.range(of: Data(key)))
        XCTAssertNil(database.range(of: Data(key.hex.utf8)))
    }

    /// DESIGN "Storage layout": `devices/<device>`, sealed under the store key.
    func testRegistryEntryIsSealedUnderTheStoreKey() throws {
        let device = try makeDevice(name: "laptop")
        let sealed = try XCTUnwrap(FileManager.default.contents(atPath: storeFolder + "/devices/" + device.deviceID))
        XCTAssertEqual(Array(sealed.prefix(6)), Array("COVENS".utf8))
        // Sealed bound to its path, carrying the device's signing key's public half.
        let path = "devices/" + device.deviceID
        let plaintext = try StoreSealer.open([UInt8](sealed), storeKey: try device.keys.storeKey(), boundTo: path)
        let entry = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(plaintext)) as? [String: Any])
        XCTAssertEqual(entry["device"] as? String, device.deviceID)
        XCTAssertEqual(entry["name"] as? String, "laptop")
        XCTAssertEqual(entry["coven_device"] as? Int, 1)
        XCTAssertNotNil(entry["joined_at"] as? String)
        let decoded = try DeviceEntry.open([UInt8](sealed), path: path, keys: device.keys)
        XCTAssertEqual(decoded.publicKey, try device.keys.signingKey().publicKey)
        // Under another key, or at another path, it does not open.
        assertCovenError(.integrity) { try StoreSealer.open([UInt8](sealed), storeKey: FileKey(), boundTo: path) }
        assertCovenError(.integrity) { try StoreSealer.open([UInt8](sealed), storeKey: try device.keys.storeKey(), boundTo: "devices/other") }
        // Nothing else is in the store yet.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeFolder + "/devices"), [device.deviceID])
        XCTAssertEqual(try device.database.query("SELECT device, name FROM coven_device_registry").map { $0.string("device") }, [device.deviceID])
    }

    func testRefusesAnExistingStoreAndLeavesNothing() throws {
        try makeDevice()
        let before = try FileManager.default.subpathsOfDirectory(atPath: storeFolder).sorted()
        let second = DevicePaths(database: work + "/a/b/device.db")
        let error = assertCovenError(.alreadyExists) {
            try DeviceSetup.create(paths: second, storage: .file(directory: storeFolder), manifest: try manifest(), name: "x")
        }
        XCTAssertEqual(error?.message, "a store already exists at 'file://\(storeFolder)'")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/a"), "the refused device's folders are gone")
        XCTAssertEqual(try FileManager.default.subpathsOfDirectory(atPath: storeFolder).sorted(), before)
    }

    func testRefusesAnExistingDeviceAndLeavesNothing() throws {
        try makeDevice()
        let error = assertCovenError(.alreadyExists) {
            try DeviceSetup.create(paths: paths, storage: .file(directory: work + "/new/store"), manifest: try manifest(), name: "x")
        }
        XCTAssertEqual(error?.details["path"], paths.database)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/new"), "no storage folder made for a refused init")
        // A device folder left without its database is refused too.
        let half = DevicePaths(database: work + "/half/device.db")
        try FileManager.default.createDirectory(atPath: half.folder, withIntermediateDirectories: true)
        assertCovenError(.alreadyExists) {
            try DeviceSetup.create(paths: half, storage: .file(directory: work + "/s3"), manifest: try manifest(), name: "x")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: half.folder), "what was there stays")
    }

    /// A failure after store.json is written (here the registry entry cannot be: `devices` is a
    /// file) removes store.json again, and the device's folders.
    func testFailingMidwayLeavesNothing() throws {
        try FileManager.default.createDirectory(atPath: storeFolder, withIntermediateDirectories: true)
        try Data("in the way".utf8).write(to: URL(fileURLWithPath: storeFolder + "/devices"))
        let error = assertCovenError(.storage) { try makeDevice() }
        XCTAssertNotNil(error)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeFolder), ["devices"], "store.json was removed again")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/dev"), "the device's folders are gone")
        // With the obstacle gone, init succeeds.
        try FileManager.default.removeItem(atPath: storeFolder + "/devices")
        XCTAssertNoThrow(try makeDevice())
    }

    func testFailingMigrationLeavesNothing() throws {
        assertCovenError(.migration) { try makeDevice("{ \"migrations\": [ \"CREATE TABLE broken (\" ] }") }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work), [])
    }

    func testOpenNeedsADevice() throws {
        assertCovenError(.noDevice) { try Device.open(paths: paths) }
        try FileManager.default.createDirectory(atPath: work + "/dev", withIntermediateDirectories: true)
        try Data("not sqlite at all, and long enough to be read as a header".utf8).write(to: URL(fileURLWithPath: paths.database))
        assertCovenError(.noDevice) { try Device.open(paths: paths) }
        assertCovenError(.noDevice) { try Device.open(paths: paths, readOnly: true) }
        // An SQLite file that is not coven's.
        let other = DevicePaths(database: work + "/other.db")
        do { try Database(path: other.database, create: true).execute("CREATE TABLE t (a)") }
        assertCovenError(.noDevice) { try Device.open(paths: other) }
    }

    func testNewerDatabaseNeedsAnUpdate() throws {
        try makeDevice()
        try Database(path: paths.database).execute("PRAGMA user_version = 99")
        assertCovenError(.updateRequired) { try Device.open(paths: paths) }
    }
}

import Foundation
import XCTest

@testable import CovenKit

/// Device names are unique among a store's live devices: a join without a name takes the host
/// name with the first free suffix.
final class DeviceNameTests: DeviceTestCase {
    func testJoinsWithoutANameTakeTheHostNameMadeUnique() throws {
        let host = ProcessInfo.processInfo.hostName
        let first = try DeviceSetup.create(paths: paths, storage: .file(directory: storeFolder), manifest: try manifest(), name: nil)
        XCTAssertEqual(first.deviceName, host)
        var names: [String] = []
        for index in 1...2 {
            let joined = try DeviceSetup.join(paths: DevicePaths(database: work + "/j\(index)/device.db"), storage: first.storage,
                                         storeKey: try first.keys.storeKeyBytes(), name: nil)
            names.append(joined.deviceName)
        }
        XCTAssertEqual(names, ["\(host)-2", "\(host)-3"])
        // A gone device's name is free again.
        let removed = try StoreSync(first).removeDevice("\(host)-2")
        XCTAssertEqual(try StoreSync(first).devices().first { $0.id == removed.id }?.name, "\(host)-2")
        let again = try DeviceSetup.join(paths: DevicePaths(database: work + "/j3/device.db"), storage: first.storage,
                                    storeKey: try first.keys.storeKeyBytes(), name: nil)
        XCTAssertEqual(again.deviceName, "\(host)-2")
    }

    func testUniqueNameSkipsTakenSuffixes() {
        XCTAssertEqual(DeviceSetup.uniqueName("host", taken: []), "host")
        XCTAssertEqual(DeviceSetup.uniqueName("host", taken: ["host", "host-2", "host-4"]), "host-3")
    }
}

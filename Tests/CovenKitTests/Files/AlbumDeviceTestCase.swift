@testable import CovenKit
import Foundation

/// A device with one album row, for the staging and write tests: tracks reference files and
/// take their audience from the album.
class AlbumDeviceTestCase: DeviceTestCase {
    let album = DeviceTestCase.album
    var device: Device!

    override func setUpWithError() throws {
        try super.setUpWithError()
        device = try makeDevice()
        try device.write(sql: "INSERT INTO albums (id, title) VALUES ('\(album)', 'Abbey Road')")
    }

    override func tearDownWithError() throws {
        device = nil
        try super.tearDownWithError()
    }
}

import Foundation

/// The sync surface of a device (DESIGN.md "Sync"): publishing its writes, applying the other
/// devices' changes, the device registry, removals and lost values. It takes from ``Device``
/// (its database, ids, manifest and keys) and adds nothing to it.
///
/// ```swift
/// let report = try StoreSync(device).sync()        // push, pull, push
/// let devices = try StoreSync(device).devices()
/// ```
///
/// Not Sendable, as its device.
public struct StoreSync {
    /// The device it syncs.
    public let device: Device

    /// The sync surface of `device`.
    public init(_ device: Device) {
        self.device = device
    }

    // What the engine reads of its device, by the names it always had.
    var database: Database { device.database }
    var deviceID: String { device.deviceID }
    var deviceName: String { device.deviceName }
    var storeID: String { device.storeID }
    var manifest: Manifest { device.manifest }
    var paths: DevicePaths { device.paths }
    var keys: Keyring { device.keys }
    var schemaVersion: (count: Int, digest: String) { device.schemaVersion }
}

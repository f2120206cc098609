import Foundation

/// The sync surface of a device (DESIGN.md "Sync"): publishing its writes, applying the other
/// devices' changes, the device registry, removals and lost values. It takes from ``Device``
/// (its database, ids, manifest and keys) and adds nothing to it.
///
/// ```swift
/// let report = try StoreSync(device).sync()        // push, pull, push
/// let devices = try StoreSync(device).devices()
/// let pushed = try StoreSync(device, storage: failing).push()   // a storage of the caller's
/// ```
///
/// It holds the storage it talks to once connected (``sync(push:pull:wait:stop:progress:)``
/// connects once for all its steps) and takes the keys from its device: nothing below it is
/// handed a keyring or a storage per call.
///
/// Not Sendable, as its device.
public struct StoreSync {
    /// The device it syncs.
    public let device: Device
    /// The storage given or connected; nil: connected when first needed, per call.
    private let held: StorageProvider?

    /// The sync surface of `device`, talking to `storage` (the device's own when nil).
    public init(_ device: Device, storage: StorageProvider? = nil) {
        self.device = device
        self.held = storage
    }

    /// The storage this sync talks to: the one it holds, or the device's, connected now.
    func storage() throws -> StorageProvider {
        if let held { return held }
        return try device.connectStorage()
    }

    /// This sync holding a connected storage, for a run of steps that share one.
    func connected() throws -> StoreSync {
        held == nil ? StoreSync(device, storage: try device.connectStorage()) : self
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

import Foundation

/// The owner of a device's storage URL once the device exists: where the store now is when
/// the NAS moved or the bucket was renamed. The URL is kept in `coven_meta` (``DeviceSettings``,
/// key `storage`); a device reads it when it opens.
public struct StorageURL {
    let device: Device

    public init(device: Device) {
        self.device = device
    }

    /// The storage URL this device syncs with.
    public var current: StorageLocation { device.storage }

    /// Points this device at `location`, once the store there is shown to be this device's
    /// store: its `store.json` has this store's id and its sealed manifest opens under this
    /// device's store key. Holds the device lock; nothing is changed on a refusal.
    ///
    /// - Parameter environment: the environment for S3 credentials (the process's when nil).
    /// - Throws: `.missing` when no store is at `location`; `.invalidState` for another store;
    ///   `.integrity` when its manifest does not open under this device's key; `.decoding`,
    ///   `.updateRequired`, `.storage`.
    public func set(_ location: StorageLocation, environment: [String: String]? = nil, wait: Bool = true) throws {
        let lock = try device.lock(wait: wait)
        defer { _ = lock }
        try DeviceSetup.refuseMissingFolder(location)
        let provider = try StorageConnector(location: location, environment: environment ?? device.storageEnvironment).connect()
        let storeID = try DeviceSetup.readStoreID(provider: provider, storage: location)
        guard storeID == device.storeID else {
            throw CovenError(.invalidState, "the store at '\(location)' is store \(storeID), not this device's store \(device.storeID)",
                             hint: "give the URL where store \(device.storeID) now is", details: ["store": storeID, "storage": location.description])
        }
        guard let sealed = try provider.getObject(Device.manifestKey) else {
            throw CovenError(.missing, "the store at '\(location)' has no manifest", details: ["object": Device.manifestKey])
        }
        do {
            _ = try device.keys.open(sealed)
        } catch let error as CovenError where error.code == .integrity {
            throw CovenError(.integrity, "this device's store key does not open the store at '\(location)'", hint: "is it a copy of another store with the same id?",
                             cause: error.description, details: ["object": Device.manifestKey])
        }
        try device.database.transaction { try device.setSetting("storage", location.description) }
    }
}

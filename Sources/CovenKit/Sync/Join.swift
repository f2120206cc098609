import Foundation

extension Device {
    /// Makes a new device of the existing store at `storage`, with a fresh device id: reads the
    /// store's sealed manifest (refusing a wrong key before anything is written), builds the
    /// database by the manifest's migrations, announces the device in `devices/`, and learns of
    /// the other devices. The caller pulls next.
    ///
    /// - Throws: `.noStorage`/`.missing` when no store is there; `.integrity` when `storeKey`
    ///   does not open it; `.updateRequired` for a store of a newer format; `.alreadyExists`
    ///   for a device already at `paths`; `.storage`.
    public static func join(paths: DevicePaths, storage: StorageLocation, storeKey keyBytes: [UInt8], name: String?,
                            environment: [String: String]? = nil) throws -> Device {
        try refuseExisting(paths)
        guard keyBytes.count == 32 else {
            throw CovenError(.usage, "a store key is 32 bytes (64 hex digits, as 'coven key export' prints it), not \(keyBytes.count)")
        }
        let storeKey = try FileKey(bytes: keyBytes)
        let provider = try StorageConnector(location: storage, environment: environment).connect()
        guard let storeJSON = try provider.getObject("store.json") else {
            throw CovenError(.missing, "no store at '\(storage)'", hint: "check the URL, or create a store with 'coven init'", details: ["object": "store.json"])
        }
        guard let store = try? JSONSerialization.jsonObject(with: Data(storeJSON)) as? [String: Any], let storeID = store["id"] as? String else {
            throw CovenError(.decoding, "'\(storage)/store.json' is not a coven store", details: ["object": "store.json"])
        }
        let format = (store["coven_store"] as? NSNumber)?.intValue ?? 0
        guard format <= storeFormat else {
            throw CovenError(.updateRequired, "the store at '\(storage)' has format \(format), newer than this coven writes", hint: "update coven")
        }
        guard let sealedManifest = try provider.getObject(manifestKey) else {
            throw CovenError(.missing, "the store at '\(storage)' has no manifest", hint: "run 'coven migrate --manifest FILE' on one of its devices to publish it",
                             details: ["object": manifestKey])
        }
        let manifestText: [UInt8]
        do {
            manifestText = try StoreSealer.open(sealedManifest, storeKey: storeKey)
        } catch let error as CovenError where error.code == .integrity {
            throw CovenError(.integrity, "this key does not open the store at '\(storage)'", hint: "pass the key 'coven key export' prints on one of its devices",
                             cause: error.description, details: ["object": manifestKey])
        }
        let manifest = try Manifest(json: Data(manifestText))

        let parent = (paths.database as NSString).deletingLastPathComponent
        var created = false
        defer { if !created { try? FileManager.default.removeItem(atPath: paths.folder) } }
        try makeFolder(parent, mode: 0o700)
        try makeFolder(paths.folder, mode: 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] { try makeFolder(folder, mode: 0o700) }
        let lock = try DeviceLock(path: paths.lock, wait: false)
        defer { _ = lock }
        let deviceID = Identifier.uuid4()
        let deviceName = name ?? ProcessInfo.processInfo.hostName
        let now = Timestamp.iso8601(Date())
        defer { for suffix in ["", "-wal", "-shm"] { unlink(building(paths) + suffix) } }
        let signingKey = try DeviceSigningKey()
        // The newest snapshot this device can read becomes its database; the pull that follows
        // brings the rest.
        let snapshot = try restoreSnapshot(provider: provider, storeKey: storeKey, storeID: storeID, manifest: manifest,
                                           into: building(paths), temporary: paths.temporary)
        try buildDatabase(paths: paths, storeID: storeID, deviceID: deviceID, deviceName: deviceName, storage: storage, manifest: manifest,
                          joinedAt: now, publicKey: signingKey.publicKey, fromSnapshot: snapshot.manifest)
        try AtomicFile.write(paths.storeKey, bytes: keyBytes, mode: 0o600)
        try signingKey.write(to: paths.signingKey)
        let entry = registryEntryKey(deviceID)
        let sealedEntry = try DeviceEntry(device: deviceID, name: deviceName, joinedAt: now, publicKey: signingKey.publicKey).seal(storeKey: storeKey)
        guard try provider.putIfAbsent(entry, data: sealedEntry) else {
            throw CovenError(.alreadyExists, "the device registry of '\(storage)' already has an entry '\(entry)'")
        }
        guard rename(building(paths), paths.database) == 0 else {
            try? provider.delete(entry)
            throw CovenError.posix("rename database into", path: paths.database)
        }
        try AtomicFile.syncFolder(parent)
        created = true
        let device = try open(paths: paths)
        device.storageEnvironment = environment
        device.joinedFrom = snapshot
        try device.refreshDevices(provider: provider, storeKey: storeKey)
        return device
    }
}

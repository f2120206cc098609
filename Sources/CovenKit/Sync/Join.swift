import Foundation

extension Device {
    /// Makes a new device of the existing store at `storage`, with a fresh device id: reads the
    /// store's sealed manifest (refusing a wrong key before anything is written), builds the
    /// database by the manifest's migrations, announces the device in `devices/`, and learns of
    /// the other devices. The caller pulls next.
    ///
    /// - Throws: `.noStorage`/`.missing` when no store is there; `.integrity` when `storeKey`
    ///   does not open it; `.updateRequired` for a store of a newer format; `.alreadyExists`
    ///   for a device already at `paths`; `.usage` for a name holding a control character;
    ///   `.exists` for a name a live device of the store holds (a name left out becomes the
    ///   host name, made unique with `-2`, `-3`, …); `.storage`.
    public static func join(paths: DevicePaths, storage: StorageLocation, storeKey keyBytes: [UInt8], name: String?,
                            environment: [String: String]? = nil) throws -> Device {
        try refuseExisting(paths)
        if let name { try checkDeviceName(name) }
        guard keyBytes.count == 32 else {
            throw CovenError(.usage, "a store key is 32 bytes (64 hex digits, as 'coven key export' prints it), not \(keyBytes.count)")
        }
        let storeKey = try FileKey(bytes: keyBytes)
        try refuseMissingFolder(storage)
        let provider = try StorageConnector(location: storage, environment: environment).connect()
        let storeID = try readStoreID(provider: provider, storage: storage)
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
        let taken = try liveDeviceNames(provider: provider, storeKey: storeKey)
        if let name, let holder = taken[name] {
            throw CovenError(.exists, "device '\(holder)' of the store at '\(storage)' is already called '\(name)'",
                             hint: "pick another --name, or remove that device first ('coven device remove \(holder)' on another device)",
                             details: ["device": holder, "name": name])
        }

        let parent = (paths.database as NSString).deletingLastPathComponent
        var created = false
        defer { if !created { try? FileManager.default.removeItem(atPath: paths.folder) } }
        try makeFolder(parent, mode: 0o700)
        try makeFolder(paths.folder, mode: 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] { try makeFolder(folder, mode: 0o700) }
        let lock = try DeviceLock(path: paths.lock, wait: false)
        defer { _ = lock }
        let deviceID = Identifier.uuid4()
        let deviceName = name ?? uniqueName(ProcessInfo.processInfo.hostName, taken: Set(taken.keys))
        let now = Timestamp.iso8601(Date())
        defer { for suffix in ["", "-wal", "-shm"] { unlink(building(paths) + suffix) } }
        let signingKey = try DeviceSigningKey()
        // The newest snapshot this device can read becomes its database; the pull that follows
        // brings the rest.
        let snapshot = try restoreSnapshot(provider: provider, storeKey: storeKey, storeID: storeID, manifest: manifest,
                                           into: building(paths), temporary: paths.temporary)
        try buildDatabase(paths: paths, storeID: storeID, deviceID: deviceID, deviceName: deviceName, storage: storage, manifest: manifest,
                          joinedAt: now, publicKey: signingKey.publicKey, storeKeyCheck: try storeKeyCheck(keyBytes), fromSnapshot: snapshot.manifest)
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

    /// The id of the store at `storage`, read from its `store.json`.
    ///
    /// - Throws: `.missing` when no store is there (no `store.json`, or for `file://` no
    ///   folder); `.decoding` for a `store.json` that is not a coven store's;
    ///   `.updateRequired` for a store of a newer format; `.storage`.
    static func readStoreID(provider: StorageProvider, storage: StorageLocation) throws -> String {
        try refuseMissingFolder(storage)
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
        return storeID
    }

    /// For a `file://` store: `.missing` when its folder is not there (before a connection,
    /// which would call that a storage failure).
    static func refuseMissingFolder(_ storage: StorageLocation) throws {
        guard case .file(let directory) = storage, !FileManager.default.fileExists(atPath: directory) else { return }
        throw CovenError(.missing, "no store at '\(storage)': the folder '\(directory)' is not there",
                         hint: "check the URL (is the disk or network share mounted?), or create a store with 'coven init'",
                         details: ["object": "store.json", "path": directory])
    }

    /// Refuses a device name that is empty or holds a control character (a newline or tab
    /// would break every line-based listing of devices).
    ///
    /// - Throws: `.usage`.
    public static func checkDeviceName(_ name: String) throws {
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw CovenError(.usage, "--name takes a name, not an empty word", hint: "leave --name out to use the host name")
        }
        if let bad = name.unicodeScalars.first(where: { $0.properties.generalCategory == .control }) {
            throw CovenError(.usage, "a device name cannot hold a control character (\(DeviceNameText.escape(String(bad))) in '\(DeviceNameText.escape(name))')",
                             hint: "pass a name of letters, digits, spaces and punctuation with --name", details: ["name": name])
        }
    }

    /// The names of the store's devices not gone for good, each with its device's id, read
    /// from `devices/` (one listing, one read per entry).
    static func liveDeviceNames(provider: StorageProvider, storeKey: FileKey) throws -> [String: String] {
        let listed = try provider.list(prefix: "devices/").map { String($0.key.dropFirst("devices/".count)) }
        let gone = Set(listed.filter { $0.hasSuffix(goneSuffix) }.map { String($0.dropLast(goneSuffix.count)) })
        var names: [String: String] = [:]
        for id in listed where Identifier.isCanonicalUUID(id) && !gone.contains(id) {
            guard let sealed = try provider.getObject(registryEntryKey(id)) else { continue }
            let entry = try DeviceEntry.open(sealed, path: registryEntryKey(id), storeKey: storeKey)
            names[entry.name] = entry.device
        }
        return names
    }

    /// `base`, or `base-2`, `base-3`, … : the first that no name in `taken` is.
    static func uniqueName(_ base: String, taken: Set<String>) -> String {
        guard taken.contains(base) else { return base }
        var number = 2
        while taken.contains("\(base)-\(number)") { number += 1 }
        return "\(base)-\(number)"
    }
}

/// Device names in text output: a control character (left by an older coven) or a backslash
/// printed as an escape (`\t`, `\n`, `\\`, `\xNN`), so one name stays on one line and field.
public enum DeviceNameText {
    public static func escape(_ name: String) -> String {
        var text = ""
        for scalar in name.unicodeScalars {
            switch scalar {
            case "\\": text += "\\\\"
            case "\t": text += "\\t"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            default:
                if scalar.properties.generalCategory == .control {
                    text += scalar.value < 0x100 ? String(format: "\\x%02x", scalar.value) : String(format: "\\u{%x}", scalar.value)
                } else {
                    text.unicodeScalars.append(scalar)
                }
            }
        }
        return text
    }
}

import Foundation

/// Making a device: joining a store (by its key, or as a member with an identity), from the
/// newest snapshot this device can read, resumable after a kill. The first device of a store is
/// made by ``create(paths:storage:manifest:name:provider:)`` (Create.swift).
///
/// ```swift
/// let device = try DeviceSetup.join(paths: paths, storage: url, identity: identity, name: "laptop")
/// ```
public enum DeviceSetup {
    /// Makes a new device of the existing store at `storage`, with a fresh device id: reads the
    /// store's sealed manifest (refusing a wrong key before anything is written), builds the
    /// database by the manifest's migrations, announces the device in `devices/`, and learns of
    /// the other devices. The caller pulls next.
    ///
    /// - Throws: `.noStorage`/`.missing` when no store is there; `.integrity` when `storeKey`
    ///   does not open it; `.updateRequired` for a store of a newer format; `.alreadyExists`
    ///   for a device of another store (or under another key) already at `paths`, or a join
    ///   into `paths` under way in another process; `.usage` for a name holding a control
    ///   character; `.exists` for a name a live device of the store holds (a name left out
    ///   becomes the host name, made unique with `-2`, `-3`, …); `.storage`.
    ///
    /// Run again after a kill or a failure, it goes on: a device already at `paths` of this
    /// store is returned as it is (``SnapshotJoin/resumed``; the caller's pull finishes the
    /// join), and what an unfinished join left (`<db>.d/` with its marker, `<db>.init`) is
    /// removed and the join starts clean; the device that join announced, if it got that far,
    /// is marked gone (it never published anything).
    ///
    /// `started` is told what the device started from: the snapshot used and those passed over,
    /// or that an earlier join here is resumed (``SnapshotJoin``), for the caller to report.
    public static func join(paths: DevicePaths, storage: StorageLocation, storeKey keyBytes: [UInt8], name: String?,
                            environment: [String: String]? = nil, started: (SnapshotJoin) -> Void = { _ in }) throws -> Device {
        try join(paths: paths, storage: storage, storeKey: keyBytes, name: name, environment: environment, asMember: false, started: started)
    }

    /// `asMember`: the join by identity, which vouches for the device next; a join by key of a
    /// store of members is refused, as its device would belong to no member.
    static func join(paths: DevicePaths, storage: StorageLocation, storeKey keyBytes: [UInt8], name: String?,
                     environment: [String: String]?, asMember: Bool, generations: [UInt64: FileKey] = [:],
                     started: (SnapshotJoin) -> Void) throws -> Device {
        if let name { try DeviceNameText.check(name) }
        let target = try joinTarget(paths)
        guard keyBytes.count == 32 else {
            throw CovenError(.usage, "a store key is 32 bytes (64 hex digits, as 'coven key export' prints it), not \(keyBytes.count)")
        }
        // A member's device reads snapshots made under later generations of the store's key.
        let keys = Keyring(storeKey: try FileKey(bytes: keyBytes), generations: generations)
        let (provider, storeID, manifest) = try reachStore(storage, environment: environment, keys: keys, asMember: asMember)
        var unfinished: String?
        switch target {
        case .joined:
            let device = try resumeJoin(paths: paths, storage: storage, storeID: storeID, storeKey: keyBytes, environment: environment)
            started(SnapshotJoin(resumed: true))
            return device
        case .unfinished(let previous):
            unfinished = previous
        case .fresh:
            break
        }
        // The device an unfinished join here announced is marked gone below: its name is free.
        let taken = try liveDeviceNames(provider: provider, keys: keys).filter { $0.value != unfinished }
        if let name, let holder = taken[name] {
            throw CovenError(.exists, "device '\(holder)' of the store at '\(storage)' is already called '\(name)'",
                             hint: "pick another --name, or remove that device first ('coven device remove \(holder)' on another device)",
                             details: ["device": holder, "name": name])
        }
        let parent = (paths.database as NSString).deletingLastPathComponent
        var created = false
        defer { if !created { try? FileManager.default.removeItem(atPath: paths.folder) } }
        try AtomicFile.makeFolder(parent, mode: 0o700)
        try AtomicFile.makeFolder(paths.folder, mode: 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] { try AtomicFile.makeFolder(folder, mode: 0o700) }
        let lock = try DeviceLock(path: paths.lock, wait: false)
        defer { _ = lock }
        let deviceID = Identifier.uuid4()
        // The marker says a join is under way here, and which device it announces: a rerun
        // after a kill starts clean from it.
        try AtomicFile.write(joinMarker(paths), bytes: Array(deviceID.utf8), mode: 0o600)
        let signingKey = try DeviceSigningKey()
        if let previous = unfinished, previous != deviceID {
            try markUnfinishedGone(previous, by: deviceID, signingKey: signingKey, provider: provider, keys: keys, storeID: storeID)
        }
        let deviceName = name ?? uniqueName(ProcessInfo.processInfo.hostName, taken: Set(taken.keys))
        let now = Timestamp.iso8601(Date())
        defer { for suffix in ["", "-wal", "-shm"] { unlink(DeviceSetup.building(paths) + suffix) } }
        // The newest snapshot this device can read becomes its database; the pull that follows
        // brings the rest.
        let snapshot = try restoreSnapshot(provider: provider, keys: keys, storeID: storeID, manifest: manifest,
                                           into: DeviceSetup.building(paths), temporary: paths.temporary)
        try DeviceSetup.buildDatabase(paths: paths, storeID: storeID, deviceID: deviceID, deviceName: deviceName, storage: storage, manifest: manifest,
                          joinedAt: now, publicKey: signingKey.publicKey, storeKeyCheck: try Keyring.storeKeyCheck(keyBytes), fromSnapshot: snapshot.manifest)
        try AtomicFile.write(paths.storeKey, bytes: keyBytes, mode: 0o600)
        try signingKey.write(to: paths.signingKey)
        let entry = Device.registryEntryKey(deviceID)
        let sealedEntry = try DeviceEntry(device: deviceID, name: deviceName, joinedAt: now, publicKey: signingKey.publicKey).seal(keys: keys)
        guard try provider.putIfAbsent(entry, data: sealedEntry) else {
            throw CovenError(.alreadyExists, "the device registry of '\(storage)' already has an entry '\(entry)'")
        }
        guard rename(DeviceSetup.building(paths), paths.database) == 0 else {
            try? provider.delete(entry)
            throw CovenError.posix("rename database into", path: paths.database)
        }
        try AtomicFile.syncFolder(parent)
        created = true
        unlink(joinMarker(paths))
        let device = try Device.openKernel(paths: paths)
        device.storageEnvironment = environment
        started(snapshot)
        try DeviceRegistry(device).refresh(provider: provider)
        return device
    }

    /// The store a join by key reaches at `storage`: its provider, id and manifest, opened with
    /// `keys`. A join by key (`asMember` false) of a store of members is refused.
    private static func reachStore(_ storage: StorageLocation, environment: [String: String]?, keys: Keyring,
                                   asMember: Bool) throws -> (StorageProvider, String, Manifest) {
        try refuseMissingFolder(storage)
        let provider = try StorageConnector(location: storage, environment: environment).connect()
        let storeID = try readStoreID(provider: provider, storage: storage)
        if !asMember, try !provider.list(prefix: "audiences/\(RowAudiences.store)/", after: "audiences/\(RowAudiences.store)/", limit: 1).isEmpty {
            throw CovenError(.usage, "the store at '\(storage)' has members: a new device joins as one of them",
                             hint: "join with the member's identity: 'coven join URL --identity FILE' ('coven member export' writes it on one of the member's devices)")
        }
        guard let sealedManifest = try provider.getObject(Device.manifestKey) else {
            throw CovenError(.missing, "the store at '\(storage)' has no manifest", hint: "run 'coven migrate --manifest FILE' on one of its devices to publish it",
                             details: ["object": Device.manifestKey])
        }
        let manifestText: [UInt8]
        do {
            manifestText = try keys.open(sealedManifest)
        } catch let error as CovenError where error.code == .integrity {
            throw CovenError(.integrity, "this key does not open the store at '\(storage)'", hint: "pass the key 'coven key export' prints on one of its devices",
                             cause: error.description, details: ["object": Device.manifestKey])
        }
        return (provider, storeID, try Manifest(json: Data(manifestText)))
    }

    /// Marks gone the device `previous` that a killed join at the same path announced (it never
    /// published anything), unless it is gone already.
    private static func markUnfinishedGone(_ previous: String, by deviceID: String, signingKey: DeviceSigningKey, provider: StorageProvider,
                                           keys: Keyring, storeID: String) throws {
        guard try provider.head(Device.registryEntryKey(previous)) != nil, try provider.head(Device.registryEntryKey(previous) + Device.goneSuffix) == nil else { return }
        let mark = GoneMark(device: previous, goneAt: Timestamp.iso8601(Date()), removedBy: deviceID)
        _ = try provider.putIfAbsent(Device.registryEntryKey(previous) + Device.goneSuffix, data: try mark.seal(keys: keys, store: storeID, signer: signingKey))
    }

    /// Makes a new device of the store at `storage` for the member whose identity is
    /// `identity` (`coven join URL --identity FILE`): the store's keys come from its chain of
    /// key generations, opened with the identity (no store key is passed around); the device is
    /// made as ``join(paths:storage:storeKey:name:environment:)`` makes one, then its entry is
    /// vouched for by the member and every link of the chain checked against the registry.
    ///
    /// - Throws: `.notFound` when the store has no members or the identity is not on its
    ///   newest roster; `.integrity` naming the object for a forged or broken chain; as the
    ///   join by key otherwise.
    public static func join(paths: DevicePaths, storage: StorageLocation, identity: MemberIdentity, name: String?,
                            environment: [String: String]? = nil, started: (SnapshotJoin) -> Void = { _ in }) throws -> Device {
        if let name { try DeviceNameText.check(name) }
        try refuseMissingFolder(storage)
        let provider = try StorageConnector(location: storage, environment: environment).connect()
        let storeID = try readStoreID(provider: provider, storage: storage)
        // A first look at the chain, before the registry can be read: the keys only. The
        // device checks every link and signature once it is made (``Members/adopt``).
        let firstLook = AudienceChain(provider: provider, store: storeID, audience: RowAudiences.store, signerKey: { _ in nil },
                                      memberOf: { _, roster in roster.first(where: { $0.role.isAdmin })?.id })
        guard let state = try firstLook.read(identity: identity), let first = state.opened.first else {
            throw CovenError(.notFound, "the store at '\(storage)' has no members", hint: "join it with the store key: 'coven join URL --key-file FILE'")
        }
        guard state.unreadable.isEmpty else {
            throw CovenError(.notFound, "this identity is not on the newest roster of the store at '\(storage)'", hint: "ask an admin of the store to add it ('coven member add')")
        }
        var generations: [UInt64: FileKey] = [:]
        for opened in state.opened { generations[opened.generation.generation] = try FileKey(bytes: opened.key) }
        let device = try join(paths: paths, storage: storage, storeKey: first.key, name: name, environment: environment, asMember: true,
                              generations: generations, started: started)
        try Members(device).adopt(identity, provider: provider)
        return device
    }

    /// What a join finds at its path.
    enum JoinTarget: Equatable {
        /// Nothing: a new device.
        case fresh
        /// A coven device (the caller checks its store).
        case joined
        /// What a killed or failed join left, which it removed; the device that join meant to
        /// announce, if it said.
        case unfinished(String?)
    }

    /// The file in `<db>.d/` that marks a join under way, holding the id of the device it
    /// announces.
    static func joinMarker(_ paths: DevicePaths) -> String { paths.folder + "/joining" }

    /// Looks at `paths`: nothing there, a device, or the leftovers of a join that did not
    /// finish (`<db>.d/` with the join's marker and no database), removed here under the
    /// device lock, which a join holds while it works.
    ///
    /// - Throws: as ``refuseExisting(_:)`` for anything else; `.alreadyExists` when another
    ///   process is joining there now.
    static func joinTarget(_ paths: DevicePaths) throws -> JoinTarget {
        do {
            try DeviceSetup.refuseExisting(paths)
            return .fresh
        } catch let error as CovenError where error.code == .alreadyExists {
            var info = stat()
            if lstat(paths.database, &info) == 0 { return .joined }
            let marker = joinMarker(paths)
            guard access(marker, F_OK) == 0 || access(DeviceSetup.building(paths), F_OK) == 0 else { throw error }
            guard let lock = try? DeviceLock(path: paths.lock, wait: false) else {
                throw CovenError(.alreadyExists, "a join into '\(paths.database)' is under way in another process",
                                 hint: "wait for it to finish, or pass another --db", details: ["path": paths.database])
            }
            defer { _ = lock }
            let previous = (try? String(contentsOfFile: marker, encoding: .utf8)).flatMap { $0.isEmpty ? nil : $0 }
            for suffix in ["", "-wal", "-shm", "-journal"] { unlink(DeviceSetup.building(paths) + suffix) }
            // No database, so no journal of one: a stale one would be replayed into the new.
            for suffix in ["-wal", "-shm", "-journal"] { unlink(paths.database + suffix) }
            do {
                try FileManager.default.removeItem(atPath: paths.folder)
            } catch {
                throw CovenError(.io, "cannot remove what an unfinished join left at '\(paths.folder)'", hint: "remove it, then run the join again",
                                 cause: String(describing: error), details: ["path": paths.folder])
            }
            return .unfinished(previous)
        }
    }

    /// A join run again where it made a device already: the device, if it is of store
    /// `storeID` under this key, for the caller's pull to finish.
    private static func resumeJoin(paths: DevicePaths, storage: StorageLocation, storeID: String, storeKey keyBytes: [UInt8],
                                   environment: [String: String]?) throws -> Device {
        let device = try Device.openKernel(paths: paths)
        guard device.storeID == storeID, try device.keys.storeKeyBytes() == keyBytes else {
            throw CovenError(.alreadyExists, "a coven device ('\(device.deviceName)', \(device.deviceID)) of store \(device.storeID) already exists at '\(paths.database)'",
                             hint: "it is not of the store at '\(storage)': pass another --db to join that one", details: ["path": paths.database, "device": device.deviceID])
        }
        unlink(joinMarker(paths))
        device.storageEnvironment = environment
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
        guard format <= Device.storeFormat else {
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

    /// The names of the store's devices not gone for good, each with its device's id, read
    /// from `devices/` (one listing, one read per entry).
    static func liveDeviceNames(provider: StorageProvider, keys: Keyring) throws -> [String: String] {
        let listed = try provider.list(prefix: "devices/").map { String($0.key.dropFirst("devices/".count)) }
        let gone = Set(listed.filter { $0.hasSuffix(Device.goneSuffix) }.map { String($0.dropLast(Device.goneSuffix.count)) })
        var names: [String: String] = [:]
        for id in listed where Identifier.isCanonicalUUID(id) && !gone.contains(id) {
            guard let sealed = try provider.getObject(Device.registryEntryKey(id)) else { continue }
            let entry = try DeviceEntry.open(sealed, path: Device.registryEntryKey(id), keys: keys)
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

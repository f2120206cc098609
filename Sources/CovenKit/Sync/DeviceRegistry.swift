import Foundation

/// The device registry (`coven_device_registry`, whose rows ``SyncState`` writes): what this
/// device knows of the others from `devices/` in storage. ``refresh(provider:rereadUnvouched:)``
/// lists `devices/` once and learns the devices and removals not known here; every sync, join,
/// snapshot and member or circle change that must know the devices first calls it.
///
/// ```swift
/// let learned = try DeviceRegistry(device).refresh(provider: provider)
/// ```
struct DeviceRegistry {
    let device: Device
    private var database: Database { device.database }
    private var deviceID: String { device.deviceID }
    private var storeID: String { device.storeID }

    init(_ device: Device) {
        self.device = device
    }

    /// Lists `devices/` once and learns of the devices and removals not known here.
    ///
    /// - Returns: the devices learned of.
    /// - Throws: `.deviceGone` when this device was removed; `.integrity` for an entry that
    ///   fails authentication (a wrong store key, or tampering).
    @discardableResult
    func refresh(provider: StorageProvider, rereadUnvouched: Bool = false) throws -> [String] {
        let keys = device.keys
        // Devices with a key registered here need no second look; one without (an entry of a
        // release before signing keys) is read again.
        // In a store of members, an entry that names no member yet is read again too: its
        // device may have become a member's since.
        let members: Int64 = try rereadUnvouched || keys.storeGeneration() != nil ? 1 : 0
        let known = Set(try database.query("""
            SELECT device FROM coven_device_registry WHERE (public_key IS NOT NULL AND (member IS NOT NULL OR ?2 = 0)) OR device = ?1
            """, [deviceID, members]).compactMap { $0.string("device") })
        let gone = Set(try database.query("SELECT device FROM coven_device_registry WHERE gone = 1").compactMap { $0.string("device") })
        let alreadyRegistered = Set(try database.query("SELECT device FROM coven_device_registry").compactMap { $0.string("device") })
        var learned: [String] = []
        // Removal marks are judged once every entry is read: a mark's remover may be new too.
        var marks: [(key: String, device: String)] = []
        for info in try provider.list(prefix: "devices/") {
            let name = String(info.key.dropFirst("devices/".count))
            if name.hasSuffix(Device.goneSuffix) {
                let device = String(name.dropLast(Device.goneSuffix.count))
                if !gone.contains(device) { marks.append((info.key, device)) }
                continue
            }
            if let mark = name.range(of: ChangeDamage.damagedInfix) {
                // A report of a damaged change: this device's to publish again.
                if name[..<mark.lowerBound] == deviceID, let seq = Int64(name[mark.upperBound...]), seq > 0 {
                    try ChangeDamage(device: device).noteReport(seq: seq)
                }
                continue
            }
            guard !known.contains(name), Identifier.isCanonicalUUID(name) else { continue }
            guard let sealed = try provider.getObject(info.key) else { continue }
            // Anyone who writes to storage can put bytes under devices/ (an entry copied under
            // another name, junk): once this device reads other entries with its key, one that
            // does not authenticate for its own path names no device, and the sync goes on
            // without it (docs/security.md); with no other entry read, the key is the suspect.
            let readsOthers = known.count > 1
            let entry: DeviceEntry
            do {
                entry = try DeviceEntry.open(sealed, path: info.key, keys: keys)
            } catch var error as CovenError where error.code == .integrity {
                if readsOthers { continue }
                error.details["object"] = info.key
                error.hint = error.hint ?? "is this the store's key?"
                throw error
            }
            guard entry.device == name else {
                if readsOthers { continue }
                throw CovenError(.integrity, "device entry '\(info.key)' names device '\(entry.device)'", details: ["object": info.key])
            }
            try database.transaction {
                try SyncState(database: database).learnDevice(entry.device, name: entry.name, joinedAt: entry.joinedAt, publicKey: entry.publicKey.hex,
                                                              member: entry.member, memberSignature: entry.memberSignature)
            }
            if !alreadyRegistered.contains(name) { learned.append(name) }
        }
        try judge(marks, provider: provider)
        try StoreSync(device).refuseIfGone()
        return learned
    }

    /// Honours the removal marks `marks` (their keys under devices/ and the device each names)
    /// whose remover may remove that device (``RemovalAuthority``), and remembers why the others
    /// are not honoured (``refusedRemovals()``).
    ///
    /// - Throws: `.integrity` for a mark that fails authentication or names another device.
    private func judge(_ marks: [(key: String, device: String)], provider: StorageProvider) throws {
        let keys = device.keys
        var refused: [String: String] = [:]
        let authority = RemovalAuthority(keys: keys, database: database, store: storeID)
        for (key, device) in marks {
            guard let sealed = try provider.getObject(key) else { continue }
            let mark = try GoneMark.open(sealed, key: key, keys: keys)
            guard mark.device == device else {
                throw CovenError(.integrity, "removal mark '\(key)' names device '\(mark.device)'", details: ["object": key])
            }
            if let refusal = try authority.refusal(of: mark) {
                // Not honoured: the device stays; the mark is judged again at each sync (its
                // remover's entry or vouch may come later), and sync reports it.
                refused[device] = "removal mark '\(key)' by device \(mark.removedBy) is not honoured: \(refusal)"
                continue
            }
            try database.transaction {
                try SyncState(database: database).setGone(device, at: mark.goneAt)
                // The others apply of a gone device what some device's frontier says it
                // applied: this one's frontier must say what it applied of it.
                if try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [device]).intValue ?? 0 > 0 {
                    try SyncFlags(database: database).markFrontierDue()
                }
            }
        }
        if try refused != refusedRemovals() {
            try SyncFlags(database: database).setRefusedRemovals(refused.isEmpty ? nil : String(decoding: try JSONSerialization.data(withJSONObject: refused, options: [.sortedKeys]), as: UTF8.self))
        }
    }

    /// The removal marks the last look at `devices/` did not honour, by device (``SyncFlags``
    /// holds them as JSON `{device: why}`).
    func refusedRemovals() throws -> [String: String] {
        guard let text = try SyncFlags(database: database).refusedRemovals,
              let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] else { return [:] }
        return object
    }
}

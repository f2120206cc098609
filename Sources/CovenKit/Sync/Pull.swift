import Foundation

/// What a pull did.
public struct PullReport: Sendable, Equatable {
    /// Changes applied now, by device.
    public var applied: [String: [Int64]] = [:]
    /// Entries applied, skipped (already here or older), lost values kept, rows taken out.
    public var entries = 0
    /// Of the entries applied, the app's rows.
    public var rows = 0
    /// And coven's own file records, each counted once a change however many entries it has.
    public var fileRecords = 0
    public var skipped = 0
    public var lost = 0
    public var takenOut = 0
    /// Devices whose next change is missing although another device has applied it: a gap in
    /// storage, where that device's pull stops.
    public var gaps: [String: Int64] = [:]
    /// Devices whose next change waits for a change of another device not applied here yet.
    public var waiting: [String: Int64] = [:]
    /// Devices learned of now.
    public var newDevices: [String] = []

    public var changes: Int { applied.values.reduce(0) { $0 + $1.count } }
}

extension Device {
    /// Applies the other devices' published changes (DESIGN.md "Pull"): for every known device
    /// but this one, GET `changes/<d>/<applied + 1>` until it is absent, applying a change only
    /// once everything its frontier names is applied here. Of a device gone for good, only the
    /// changes some device's published frontier says it applied. A quiet pull is one listing of
    /// `devices/` and one request per live device.
    ///
    /// - Throws: `.deviceGone` when this device was removed; `.integrity` / `.decoding` for a
    ///   change that fails its checks (naming the object; nothing of it is applied);
    ///   `.updateRequired` for a change of a newer schema; `.storage`.
    public func pull(provider: StorageProvider, storeKey: FileKey, stop: Stop = Stop(), learned: [String]? = nil,
                     progress: ((SyncProgress) -> Void)? = nil) throws -> PullReport {
        var report = PullReport()
        // `learned`: the caller listed devices/ already (sync does, before its push).
        report.newDevices = try learned ?? refreshDevices(provider: provider, storeKey: storeKey)
        var applier = ChangeApplier(device: self)
        var uncache: Set<String> = []
        defer { dropCachedBytes(of: uncache) }
        var moved = true
        var finished: Set<String> = []
        // Where each device's changes ran out, and the highest seq of each that a change read
        // here says its writer applied: a change missing below that is a gap.
        var missingAt: [String: Int64] = [:]
        var claimed: [String: Int64] = [:]
        // Each device's key, screened once per pull.
        var keys: [String: DevicePublicKey] = [:]
        while moved {
            moved = false
            for row in try database.query("SELECT device, applied_seq, gone FROM coven_device_registry WHERE device <> ?1 ORDER BY device", [deviceID]) {
                guard let other = row.string("device"), !finished.contains(other) else { continue }
                var next = (row.int("applied_seq") ?? 0) + 1
                // A device gone for good: only the changes of it that some device says it
                // applied (its published frontier), so every device ends with the same rows;
                // what it published that nobody applied is dropped with it.
                let through = row.int("gone") == 1 ? try highestSeqKnown(of: other) ?? 0 : Int64.max
                guard next <= through else { continue }
                report.waiting[other] = nil
                while next <= through {
                    try stop.check("the sync")
                    let path = ChangeObject.path(device: other, seq: UInt64(next))
                    guard let sealed = try provider.getObject(path) else {
                        missingAt[other] = next
                        finished.insert(other)
                        break
                    }
                    let change: ChangeObject
                    do {
                        change = try ChangeObject.open(sealed, path: path, storeKey: storeKey, publicKey: try keys[other] ?? { let key = try publicKey(of: other); keys[other] = key; return key }(), storeID: storeID)
                    } catch var error as CovenError {
                        // Sync's errors name the object they are about.
                        error.details["object"] = path
                        if !error.message.contains(path) { error.message = "change '\(path)': " + error.message }
                        throw error
                    }
                    for (device, seq) in change.frontier { claimed[device] = max(claimed[device] ?? 0, Int64(seq)) }
                    if let missing = try unmetDependency(change.frontier.mapValues { Int64($0) }, writer: other) {
                        report.waiting[other] = missing.seq
                        break
                    }
                    let applied = try applier.apply(change, path: path)
                    report.applied[other, default: []].append(next)
                    report.entries += applied.applied
                    report.rows += applied.applied - applied.appliedFileEntries
                    report.fileRecords += applied.appliedFileRecords.count
                    report.skipped += applied.skipped
                    report.lost += applied.lost
                    report.takenOut += applied.takenOut
                    uncache.formUnion(applied.uncache)
                    progress?(.applied(device: other, seq: next, entries: change.entries.count))
                    moved = true
                    next += 1
                }
            }
        }
        for (other, seq) in missingAt {
            let known = max(claimed[other] ?? 0, try highestSeqKnown(of: other) ?? 0)
            if known >= seq { report.gaps[other] = seq }
        }
        return report
    }

    /// The registered public key of `device`, which signs its changes.
    ///
    /// - Throws: `.integrity` when the device has none registered (its entry predates signing
    ///   keys and it has not published one since).
    func publicKey(of device: String) throws -> DevicePublicKey {
        guard let hex = try database.scalar("SELECT public_key FROM coven_device_registry WHERE device = ?1", [device]).textValue else {
            throw CovenError(.integrity, "device \(device) has no registered public key, so its changes cannot be checked",
                             hint: "run 'coven sync' on that device with this coven, which registers its key", details: ["device": device])
        }
        if let known = screenedKeys[hex] { return known }
        let key = try DevicePublicKey(hex: hex)
        screenedKeys[hex] = key
        return key
    }

    /// The first device of `frontier` (but this one and the writer) whose changes up to the
    /// seq named are not all applied here.
    private func unmetDependency(_ frontier: [String: Int64], writer: String) throws -> (device: String, seq: Int64)? {
        for (other, seq) in frontier.sorted(by: { $0.key < $1.key }) where other != deviceID && other != writer {
            let applied = try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1 AND gone = 0", [other])
            // A device gone for good holds nothing back; one unknown here is learned of at the
            // next listing.
            if applied.isNull {
                if try database.scalar("SELECT gone FROM coven_device_registry WHERE device = ?1", [other]).intValue == 1 { continue }
                return (other, seq)
            }
            if (applied.intValue ?? 0) < seq { return (other, seq) }
        }
        return nil
    }

    /// The highest seq of `device` that some device says it applied.
    private func highestSeqKnown(of device: String) throws -> Int64? {
        var highest: Int64?
        for row in try database.query("SELECT frontier FROM coven_device_registry WHERE device <> ?1", [device]) {
            if let seq = Frontier.parse(row.string("frontier") ?? "{}")[device] { highest = max(highest ?? 0, seq) }
        }
        return highest
    }

    /// Drops the cached bytes of objects no record here still reads from storage.
    private func dropCachedBytes(of objects: Set<String>) {
        for object in objects.sorted() {
            let stillStored = (try? database.scalar("""
                SELECT count(*) FROM coven_files WHERE object = ?1 AND place = \(Coordinates.Place.stored.sql)
                """, [object]).intValue) ?? 0
            guard stillStored == 0, let row = try? cacheRow(object) else { continue }
            _ = try? removeCacheEntry(row)
        }
    }

    // MARK: The device registry

    /// Lists `devices/` once and learns of the devices and removals not known here.
    ///
    /// - Returns: the devices learned of.
    /// - Throws: `.deviceGone` when this device was removed; `.integrity` for an entry that
    ///   fails authentication (a wrong store key, or tampering).
    @discardableResult
    func refreshDevices(provider: StorageProvider, storeKey: FileKey) throws -> [String] {
        // Devices with a key registered here need no second look; one without (an entry of a
        // release before signing keys) is read again.
        let known = Set(try database.query("SELECT device FROM coven_device_registry WHERE public_key IS NOT NULL OR device = ?1", [deviceID]).compactMap { $0.string("device") })
        let gone = Set(try database.query("SELECT device FROM coven_device_registry WHERE gone = 1").compactMap { $0.string("device") })
        var learned: [String] = []
        for info in try provider.list(prefix: "devices/") {
            let name = String(info.key.dropFirst("devices/".count))
            if name.hasSuffix(Self.goneSuffix) {
                let device = String(name.dropLast(Self.goneSuffix.count))
                guard !gone.contains(device) else { continue }
                guard let sealed = try provider.getObject(info.key) else { continue }
                let mark = try GoneMark.open(sealed, key: info.key, storeKey: storeKey)
                guard mark.device == device else {
                    throw CovenError(.integrity, "removal mark '\(info.key)' names device '\(mark.device)'", details: ["object": info.key])
                }
                try database.transaction {
                    try SyncState(database: database).setGone(device, at: mark.goneAt)
                    // The others apply of a gone device what some device's frontier says it
                    // applied: this one's frontier must say what it applied of it.
                    if try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [device]).intValue ?? 0 > 0 {
                        try setSetting(Self.frontierDueSetting, "1")
                    }
                }
                continue
            }
            guard !known.contains(name), Identifier.isCanonicalUUID(name) else { continue }
            guard let sealed = try provider.getObject(info.key) else { continue }
            let entry: DeviceEntry
            do {
                entry = try DeviceEntry.open(sealed, path: info.key, storeKey: storeKey)
            } catch var error as CovenError where error.code == .integrity {
                error.details["object"] = info.key
                error.hint = error.hint ?? "is this the store's key?"
                throw error
            }
            guard entry.device == name else {
                throw CovenError(.integrity, "device entry '\(info.key)' names device '\(entry.device)'", details: ["object": info.key])
            }
            try database.transaction {
                try SyncState(database: database).learnDevice(entry.device, name: entry.name, joinedAt: entry.joinedAt, publicKey: entry.publicKey.hex)
            }
            learned.append(name)
        }
        try refuseIfGone()
        return learned
    }

    /// `devices/<id>.gone`: the mark of a device removed for good.
    static let goneSuffix = ".gone"
}

/// `devices/<id>.gone`, sealed under the store key bound to its path: the mark of a device
/// removed for good, by whom and when.
struct GoneMark {
    var device: String
    var goneAt: String
    var removedBy: String

    func seal(storeKey: FileKey) throws -> [UInt8] {
        let plaintext = try JSONSerialization.data(withJSONObject: [
            "coven_device_gone": 1, "device": device, "gone_at": goneAt, "removed_by": removedBy,
        ], options: [.sortedKeys])
        return try StoreSealer.seal([UInt8](plaintext), storeKey: storeKey, boundTo: Device.registryEntryKey(device) + Device.goneSuffix)
    }

    static func open(_ sealed: [UInt8], key: String, storeKey: FileKey) throws -> GoneMark {
        let plaintext: [UInt8]
        do {
            plaintext = try StoreSealer.open(sealed, storeKey: storeKey, boundTo: key)
        } catch var error as CovenError {
            error.details["object"] = key
            if error.code == .integrity { error.message = "removal mark '\(key)' fails authentication" }
            throw error
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(plaintext)) as? [String: Any], let device = object["device"] as? String,
              let goneAt = object["gone_at"] as? String else {
            throw CovenError(.decoding, "removal mark '\(key)' cannot be decoded", details: ["object": key])
        }
        return GoneMark(device: device, goneAt: goneAt, removedBy: object["removed_by"] as? String ?? "")
    }
}

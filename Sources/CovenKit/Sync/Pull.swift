import Foundation

/// What a pull did.
public struct PullReport: Sendable, Equatable {
    /// Changes applied now, by device.
    public var applied: [String: [Int64]] = [:]
    /// Entries applied, skipped (already here or older), lost values kept, rows taken out.
    public var entries = 0
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
    /// but this one and those gone for good, GET `changes/<d>/<applied + 1>` until it is absent,
    /// applying a change only once everything its frontier names is applied here. A quiet pull
    /// is one listing of `devices/` and one request per device.
    ///
    /// - Throws: `.deviceGone` when this device was removed; `.integrity` / `.decoding` for a
    ///   change that fails its checks (naming the object; nothing of it is applied);
    ///   `.updateRequired` for a change of a newer schema; `.storage`.
    public func pull(provider: StorageProvider, storeKey: FileKey, stop: Stop = Stop()) throws -> PullReport {
        var report = PullReport()
        report.newDevices = try refreshDevices(provider: provider, storeKey: storeKey)
        var applier = ChangeApplier(device: self)
        var uncache: Set<String> = []
        defer { dropCachedBytes(of: uncache) }
        var progress = true
        var finished: Set<String> = []
        // Where each device's changes ran out, and the highest seq of each that a change read
        // here says its writer applied: a change missing below that is a gap.
        var missingAt: [String: Int64] = [:]
        var claimed: [String: Int64] = [:]
        while progress {
            progress = false
            for row in try database.query("SELECT device, applied_seq FROM coven_device_registry WHERE device <> ?1 AND gone = 0 ORDER BY device", [deviceID]) {
                guard let other = row.string("device"), !finished.contains(other) else { continue }
                var next = (row.int("applied_seq") ?? 0) + 1
                report.waiting[other] = nil
                while true {
                    try stop.check("the sync")
                    let path = PublishedChange.path(device: other, seq: next)
                    guard let sealed = try provider.getObject(path) else {
                        missingAt[other] = next
                        finished.insert(other)
                        break
                    }
                    let change = try ChangeSealing.open(sealed, path: path, store: storeID, storeKey: storeKey)
                    for (device, seq) in change.frontier { claimed[device] = max(claimed[device] ?? 0, seq) }
                    if let missing = try unmetDependency(change.frontier, writer: other) {
                        report.waiting[other] = missing.seq
                        break
                    }
                    let applied = try applier.apply(change, path: path)
                    report.applied[other, default: []].append(next)
                    report.entries += applied.applied
                    report.skipped += applied.skipped
                    report.lost += applied.lost
                    report.takenOut += applied.takenOut
                    uncache.formUnion(applied.uncache)
                    progress = true
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
                SELECT count(*) FROM coven_files WHERE json_extract(coordinates, '$.object') = ?1 AND json_extract(coordinates, '$.at') = 'stored'
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
        let known = Set(try database.query("SELECT device FROM coven_device_registry").compactMap { $0.string("device") })
        let gone = Set(try database.query("SELECT device FROM coven_device_registry WHERE gone = 1").compactMap { $0.string("device") })
        var learned: [String] = []
        for info in try provider.list(prefix: "devices/") {
            let name = String(info.key.dropFirst("devices/".count))
            if name.hasSuffix(Self.goneSuffix) {
                let device = String(name.dropLast(Self.goneSuffix.count))
                guard !gone.contains(device) else { continue }
                guard let sealed = try provider.getObject(info.key) else { continue }
                let entry = try DeviceRegistryEntry.open(sealed, key: info.key, storeKey: storeKey)
                try database.transaction { try SyncState(database: database).setGone(device, at: entry.goneAt ?? Timestamp.iso8601(Date())) }
                continue
            }
            guard !known.contains(name), Identifier.isCanonicalUUID(name) else { continue }
            guard let sealed = try provider.getObject(info.key) else { continue }
            let entry = try DeviceRegistryEntry.open(sealed, key: info.key, storeKey: storeKey)
            guard entry.device == name else {
                throw CovenError(.integrity, "device entry '\(info.key)' names device '\(entry.device)'", details: ["object": info.key])
            }
            try database.transaction {
                try SyncState(database: database).learnDevice(entry.device, name: entry.name, joinedAt: entry.joinedAt, publicKey: entry.publicKey)
            }
            learned.append(name)
        }
        if try database.scalar("SELECT gone FROM coven_device_registry WHERE device = ?1", [deviceID]).intValue == 1 {
            throw CovenError(.deviceGone, "this device ('\(deviceName)', \(deviceID)) was removed from the store", hint: "make a new device with 'coven join'",
                             details: ["device": deviceID])
        }
        return learned
    }

    /// `devices/<id>.gone`: the mark of a device removed for good.
    static let goneSuffix = ".gone"
}

/// A device's entry in `devices/`, sealed under the store key: `devices/<id>` when it joins,
/// `devices/<id>.gone` when it is removed.
struct DeviceRegistryEntry {
    var device: String
    var name: String
    var joinedAt: String
    var publicKey: String?
    var goneAt: String?

    static func open(_ sealed: [UInt8], key: String, storeKey: FileKey) throws -> DeviceRegistryEntry {
        let plaintext: [UInt8]
        do {
            plaintext = try StoreSealer.open(sealed, storeKey: storeKey)
        } catch var error as CovenError {
            error.details["object"] = key
            if error.code == .integrity {
                error.message = "device entry '\(key)' fails authentication"
                error.hint = "is this the store's key?"
            }
            throw error
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(plaintext)) as? [String: Any], let device = object["device"] as? String else {
            throw CovenError(.decoding, "device entry '\(key)' cannot be decoded", details: ["object": key])
        }
        return DeviceRegistryEntry(device: device, name: object["name"] as? String ?? "", joinedAt: object["joined_at"] as? String ?? "",
                                   publicKey: object["public_key"] as? String, goneAt: object["gone_at"] as? String)
    }
}

import Foundation

/// Damage to published changes, and the way back (DESIGN.md "Sync", docs/coven-sync.md
/// "Damage"): a device whose pull meets a change that fails its checks leaves word where the
/// publisher looks at every sync, `devices/<publisher>.damaged.<seq>`; the publisher, which
/// alone writes its prefix and holds what it published, publishes that change again at its
/// next sync, and the others go on. Also the owner of this device's record of what stops its
/// pull (gaps and damage, for `coven status`).
struct ChangeDamage {
    let device: Device
    private var keys: Keyring { device.keys }
    private var database: Database { device.database }

    /// `devices/<device>.damaged.<seq>`: the name of a damage report.
    static func reportKey(device: String, seq: Int64) -> String { Device.registryEntryKey(device) + damagedInfix + String(seq) }
    static let damagedInfix = ".damaged."

    // MARK: The device that met damage

    /// Leaves word of damaged (or missing) change `seq` of `publisher` for it (once: a report
    /// already there stays as it is).
    func report(_ path: String, device publisher: String, seq: Int64, error: CovenError, provider: StorageProvider) throws {
        let key = Self.reportKey(device: publisher, seq: seq)
        let plaintext = try JSONSerialization.data(withJSONObject: [
            "coven_change_damage": 1, "device": publisher, "seq": seq, "object": path, "reported_by": device.deviceID,
            "reported_at": Timestamp.iso8601(Date()), "cause": error.message,
        ] as [String: Any], options: [.sortedKeys])
        _ = try provider.putIfAbsent(key, data: try keys.seal([UInt8](plaintext), boundTo: key))
    }

    /// Records what stops this device's pull now (nothing clears it).
    func remember(gaps: [String: Int64], damaged: [String: DamagedChange]) throws {
        var problems: [[String: Any]] = []
        for (other, seq) in gaps.sorted(by: { $0.key < $1.key }) {
            problems.append(["device": other, "seq": seq, "kind": "gap", "object": ChangeObject.path(device: other, seq: UInt64(seq))])
        }
        for (other, change) in damaged.sorted(by: { $0.key < $1.key }) {
            problems.append(["device": other, "seq": change.seq, "kind": "damaged", "object": change.object, "message": change.message])
        }
        let text = problems.isEmpty ? nil : String(decoding: try JSONSerialization.data(withJSONObject: problems, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
        let flags = SyncFlags(database: database)
        guard try flags.problems != text else { return }
        try database.transaction { try flags.setProblems(text) }
    }

    /// What stopped this device's pull at its last sync: one entry per device.
    func problems() throws -> [SyncProblem] {
        guard let text = try SyncFlags(database: database).problems,
              let list = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] else { return [] }
        return list.compactMap { item in
            guard let other = item["device"] as? String, let seq = (item["seq"] as? NSNumber)?.int64Value,
                  let kind = (item["kind"] as? String).flatMap(SyncProblem.Kind.init(rawValue:)) else { return nil }
            return SyncProblem(device: other, seq: seq, kind: kind, object: item["object"] as? String ?? "", message: item["message"] as? String)
        }
    }

    // MARK: The publisher

    /// Notes a report of damage to this device's change `seq` (seen in the listing of
    /// `devices/`), for the next push to publish it again.
    func noteReport(seq: Int64) throws {
        var due = try dueSeqs()
        guard !due.contains(seq) else { return }
        due.insert(seq)
        try database.transaction { try SyncFlags(database: database).setRepublish(due.sorted().map(String.init).joined(separator: ",")) }
    }

    private func dueSeqs() throws -> Set<Int64> {
        Set((try SyncFlags(database: database).republish ?? "").split(separator: ",").compactMap { Int64($0) })
    }

    /// Publishes again each change of this device reported damaged, built from what this device
    /// holds of it, and removes the reports. A change storage holds intact (the reporter's read
    /// failed, not the object) is left as it is.
    ///
    /// - Returns: the seqs published again, and those this device can no longer rebuild (its
    ///   record of them is gone: a database restored from before them).
    func republish(provider: StorageProvider) throws -> (republished: [Int64], unrecoverable: [Int64]) {
        let due = try dueSeqs()
        guard !due.isEmpty else { return ([], []) }
        // Without its own key this device cannot sign what it publishes again: said first.
        _ = try keys.signingKey()
        var republished: [Int64] = []
        var unrecoverable: [Int64] = []
        let sync = SyncState(database: database)
        for seq in due.sorted() {
            let path = ChangeObject.path(device: device.deviceID, seq: UInt64(seq))
            let intact = try provider.getObject(path).map { sealed in
                (try? keys.open(change: sealed, path: path, publisher: device.deviceID, storeID: device.storeID)) != nil
            } ?? false
            if !intact {
                guard let high = try database.scalar("SELECT max_stamp FROM coven_sync_log WHERE device = ?1 AND seq = ?2", [device.deviceID, seq]).textValue else {
                    unrecoverable.append(seq)
                    continue
                }
                let low = try database.scalar("SELECT max(max_stamp) FROM coven_sync_log WHERE device = ?1 AND seq < ?2", [device.deviceID, seq]).textValue ?? ""
                let schema = device.schemaVersion
                let change = ChangeObject(storeID: device.storeID, device: device.deviceID, seq: UInt64(seq),
                                          schema: .init(migrations: schema.count, digest: schema.digest),
                                          frontier: try sync.frontier(device: device.deviceID, seq: seq).mapValues { UInt64($0) },
                                          heldObjects: [],
                                          sections: try ChangeSections(audiences: RowAudiences(device: device), keys: keys).build(try entries(stampedAfter: low, upTo: high)))
                try provider.put(path, data: try keys.seal(change))
                republished.append(seq)
            }
            try provider.delete(Self.reportKey(device: device.deviceID, seq: seq))
        }
        // What cannot be rebuilt keeps its report in storage (seen again, and said again, at
        // every sync) until a person removes this device.
        try database.transaction { try SyncFlags(database: database).setRepublish(nil) }
        return (republished, unrecoverable)
    }

    /// What this device wrote with stamps in (`low`, `high`] and still holds as it wrote it: the
    /// rows (and file records) whose newest write is one of those, and the deletes. A row a
    /// later write changed again travels in that later change; of gated tables, only the rows
    /// peers hold (the rest never left this device), and a retract (stamped `high`) of each
    /// row peers were told to delete that was last written by then (which change told them is
    /// not kept: a retract again is harmless).
    private func entries(stampedAfter low: String, upTo high: String) throws -> [RowEntry] {
        let graph = try device.schemaGraph()
        let gated = Set(graph.gatedTables)
        let published = PublishedRows(database: database)
        var entries: [RowEntry] = []
        for table in device.manifest.tables.map(\.name) + ["coven_files"] {
            let names = try database.storedColumns(table)
            let rows = try database.query("""
                SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(table))
                WHERE _updated_at > ?1 AND _updated_at <= ?2 AND _updated_at LIKE '%-' || ?3 ORDER BY _updated_at, id
                """, [low, high, device.deviceID])
            for row in rows {
                guard let id = row["id"].textValue, let stamp = row["_updated_at"].textValue else { continue }
                if gated.contains(table), try published.state(table: table, id: id) != .held { continue }
                entries.append(RowEntry(kind: .upsert, table: table, id: id, stamp: stamp, columns: names, values: row.values))
            }
            if gated.contains(table), !high.isEmpty {
                for id in try published.retracted(table: table, writtenUpTo: high) {
                    entries.append(RowEntry(kind: .retract, table: table, id: id, stamp: high))
                }
            }
        }
        for row in try database.query("""
            SELECT tbl, id, stamp FROM coven_tombstones
            WHERE private = 0 AND stamp > ?1 AND stamp <= ?2 AND stamp LIKE '%-' || ?3 ORDER BY stamp, tbl, id
            """, [low, high, device.deviceID]) {
            guard let table = row.string("tbl"), let id = row.string("id"), let stamp = row.string("stamp") else { continue }
            entries.append(RowEntry(kind: .delete, table: table, id: id, stamp: stamp))
        }
        return entries
    }
}

/// What stopped this device's pull of another device's changes at its last sync.
public struct SyncProblem: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The change is missing from storage though a later one (or another device's frontier)
        /// says it was published.
        case gap
        /// The change fails its checks; its publisher was told.
        case damaged
    }
    public var device: String
    public var seq: Int64
    public var kind: Kind
    public var object: String
    public var message: String?
}

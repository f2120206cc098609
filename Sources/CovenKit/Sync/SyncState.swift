import Foundation

/// The owner of what sync keeps on this device: `coven_sync_log`,
/// `coven_lost_values` and the sync columns of `coven_device_registry`. Every method runs
/// inside the caller's transaction.
struct SyncState {
    let database: Database

    /// The rows deleted here or by the changes applied (Store/Tombstones.swift).
    var tombstones: Tombstones { Tombstones(database: database) }

    // MARK: The log of published and applied changes

    /// Records change `seq` of `device`, published here or applied from it.
    func log(device: String, seq: Int64, maxStamp: String, frontier: [String: Int64]) throws {
        try database.run("""
            INSERT INTO coven_sync_log (device, seq, max_stamp, frontier, applied_at) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (device, seq) DO NOTHING
            """, [device, seq, maxStamp, Frontier.json(frontier), Timestamp.iso8601(Date())])
    }

    /// The seq of `device`'s change that holds a write stamped `stamp`: the first of its
    /// changes whose newest stamp is at least `stamp` (a device's stamps only grow). Nil when
    /// no change of it that this device knows holds it (for this device: not published yet).
    func seq(device: String, holding stamp: String) throws -> Int64? {
        try database.scalar("SELECT min(seq) FROM coven_sync_log WHERE device = ?1 AND max_stamp >= ?2", [device, stamp]).intValue
    }

    /// The frontier change `seq` of `device` carried.
    func frontier(device: String, seq: Int64) throws -> [String: Int64] {
        guard let json = try database.scalar("SELECT frontier FROM coven_sync_log WHERE device = ?1 AND seq = ?2", [device, seq]).textValue else { return [:] }
        return Frontier.parse(json)
    }

    // MARK: Lost values

    enum LostReason: String {
        case concurrent, parentDeleted = "parent_deleted", fileDeleted = "file_deleted"
        /// An entry its writer was not allowed to write (``ChangeAuthorizer``): never applied.
        case notAuthorized = "not_authorized"
        /// A change of a row of an owner_only table by someone other than its owner.
        case notOwner = "not_owner"
    }

    /// Keeps the losing side of an edit (or a row taken out).
    func addLost(_ entry: RowEntry, device: String, winnerStamp: String?, why: LostReason) throws {
        try database.run("""
            INSERT INTO coven_lost_values (tbl, row_id, entry, stamp, device, winner_stamp, lost_at, why)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            """, [entry.table, entry.id, RowEntryCodec.encode([entry]), entry.stamp, device, winnerStamp, Timestamp.iso8601(Date()), why.rawValue])
    }

    /// Marks every take-out of `table`/`id` for a missing parent or file record restored (the
    /// row is back).
    func markTakenOutRestored(table: String, id: String) throws {
        try database.run("""
            UPDATE coven_lost_values SET restored_at = ?3 WHERE tbl = ?1 AND row_id = ?2 AND why IN ('parent_deleted', 'file_deleted') AND restored_at IS NULL
            """, [table, id, Timestamp.iso8601(Date())])
    }

    /// Marks a lost value restored.
    func markRestored(_ id: Int64) throws {
        try database.run("UPDATE coven_lost_values SET restored_at = ?2 WHERE id = ?1", [id, Timestamp.iso8601(Date())])
    }

    /// Forgets lost values: the ids given (nil for every one) lost before `before` (nil for
    /// any time), except a take-out for a missing parent not yet back (it comes back by itself
    /// when a later write keeps the parent, as on the devices where it never left). Returns the
    /// ids forgotten, in order.
    func dropLost(ids: [Int64]?, before: String?) throws -> [Int64] {
        var dropped: [Int64] = []
        let rows = try database.query("""
            SELECT id FROM coven_lost_values
            WHERE (?1 IS NULL OR lost_at < ?1) AND NOT (why = 'parent_deleted' AND restored_at IS NULL) ORDER BY id
            """, [before.map(SQLValue.text) ?? .null])
        let wanted = ids.map(Set.init)
        for row in rows {
            guard let id = row.int("id"), wanted?.contains(id) ?? true else { continue }
            try database.run("DELETE FROM coven_lost_values WHERE id = ?1", [id])
            dropped.append(id)
        }
        return dropped
    }

    // MARK: Devices

    /// Records a device of the store this device learned of (its registry entry).
    /// `member` and `memberSignature`: the member its entry names and that member's signature
    /// over its key, checked against a roster where it matters (``Keyring``); a device's member
    /// never changes once known.
    func learnDevice(_ device: String, name: String, joinedAt: String, publicKey: String?, member: String? = nil, memberSignature: [UInt8]? = nil) throws {
        try database.run("""
            INSERT INTO coven_device_registry (device, name, joined_at, public_key, member, member_signature) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (device) DO UPDATE SET name = excluded.name, public_key = coalesce(coven_device_registry.public_key, excluded.public_key),
                member = coalesce(coven_device_registry.member, excluded.member),
                member_signature = CASE WHEN coven_device_registry.member IS NULL THEN excluded.member_signature ELSE coven_device_registry.member_signature END
            """, [device, name, joinedAt, publicKey, member.map(SQLValue.text) ?? .null, memberSignature.map { SQLValue.text($0.hex) } ?? .null])
    }

    /// Records the new signature of `device`'s member over its key (its member's keys were
    /// replaced, `coven member rekey`).
    func setMemberSignature(_ device: String, member: String, signature: [UInt8]) throws {
        try database.run("UPDATE coven_device_registry SET member_signature = ?3 WHERE device = ?1 AND member = ?2", [device, member, signature.hex])
    }

    /// Records that change `seq` of `device` is applied here, with the frontier it carried.
    func setApplied(device: String, seq: Int64, frontier: [String: Int64], heldObjects: HeldObjects = []) throws {
        // Written as bytes, straight from the change's: a change may hold 100,000 of them.
        let statement = try database.prepare("UPDATE coven_device_registry SET applied_seq = ?2, frontier = ?3, held_objects = ?4 WHERE device = ?1")
        try statement.bind([device, seq, Frontier.json(frontier)])
        try statement.runToEnd(text: heldObjects.json(), at: 4)
    }

    /// The objects the latest change of each device not gone for good said its unpublished
    /// records name.
    func heldObjects() throws -> [String: Set<String>] {
        var held: [String: Set<String>] = [:]
        for row in try database.query("SELECT device, held_objects FROM coven_device_registry WHERE gone = 0 AND held_objects <> '[]'") {
            let objects = (try? JSONSerialization.jsonObject(with: Data((row.string("held_objects") ?? "[]").utf8))) as? [String] ?? []
            held[row.string("device") ?? ""] = Set(objects)
        }
        return held
    }

    /// Records that this device published change `seq`.
    func setPublished(device: String, seq: Int64, frontier: [String: Int64]) throws {
        try setApplied(device: device, seq: seq, frontier: frontier)
    }

    /// Marks a device gone for good.
    func setGone(_ device: String, at time: String) throws {
        try database.run("UPDATE coven_device_registry SET gone = 1, gone_at = coalesce(gone_at, ?2) WHERE device = ?1", [device, time])
    }
}

/// A device's frontier: for every other device, the highest seq it has applied with nothing
/// missing below.
enum Frontier {
    static func json(_ frontier: [String: Int64]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: frontier.mapValues { NSNumber(value: $0) }, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func parse(_ json: String) -> [String: Int64] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else { return [:] }
        return object.compactMapValues { ($0 as? NSNumber)?.int64Value }
    }
}

extension HybridClock {
    /// The device a stamp was made on (its last part: all after its fourth `-`), or nil for a
    /// stamp of another shape. Found by a scan of the bytes, not a split into five strings: a
    /// pull asks it of every entry it weighs (5% of a pull of 100,000 deletes split them).
    static func device(of stamp: String) -> String? {
        let utf8 = stamp.utf8
        var dashes = 0
        var index = utf8.startIndex
        while index != utf8.endIndex {
            if utf8[index] == UInt8(ascii: "-") {
                dashes += 1
                if dashes == 4 { return String(stamp[utf8.index(after: index)...]) }
            }
            index = utf8.index(after: index)
        }
        return nil
    }
}

extension SyncState {
    /// Copies what a device joining from a snapshot needs to go on syncing as this one would
    /// into `schema`: the store's tombstones of `tables` but the private ones (a late write
    /// older than a delete must still lose; a circle's go in its own part), the sync log (which
    /// says whether a row's writer had seen another write) and the device registry (every
    /// device's applied seq and last frontier).
    func copyForSnapshot(into schema: String, tables: [String]) throws {
        try Tombstones(database: database).copy(into: schema, tables: tables, audience: RowAudiences.store)
        try database.execute("""
            INSERT INTO \(schema).coven_sync_log (device, seq, max_stamp, frontier, applied_at)
            SELECT device, seq, max_stamp, frontier, applied_at FROM main.coven_sync_log;
            INSERT INTO \(schema).coven_device_registry (device, name, joined_at, gone, public_key, applied_seq, frontier, gone_at)
            SELECT device, name, joined_at, gone, public_key, applied_seq, frontier, gone_at FROM main.coven_device_registry;
            """)
    }
}

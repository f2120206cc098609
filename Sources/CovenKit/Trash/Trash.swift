import Foundation

/// A row in the trash: deleted on some device, its last image kept here (``Trash``).
public struct TrashedRow: Sendable, Equatable {
    /// A file the row named when it was deleted.
    public struct File: Sendable, Equatable {
        /// The file record's id.
        public var id: String
        /// Its size in bytes.
        public var size: Int64
    }

    /// The synced table the row was in.
    public var table: String
    /// The row's id.
    public var id: String
    /// The wall time of the delete (ISO 8601, UTC), and its hybrid-clock stamp.
    public var deletedAt: String
    public var stamp: String
    /// The device that deleted it, its name and member (nil on a store without members).
    public var device: String
    public var deviceName: String?
    public var member: String?
    /// The seq of the change that published the delete; nil while this device's own delete
    /// is not published yet.
    public var seq: Int64?
    /// The row whose delete took this one with it (a cascade of the same change), if any.
    public var parentTable: String?
    public var parentID: String?
    /// The row's stored columns, in order, and its last values.
    public var columns: [String]
    public var values: [SQLValue]
    /// The files it named when it was deleted.
    public var files: [File]

    /// `DEVICE:SEQ`, what `coven undelete --change` takes; nil until published.
    public var change: String? { seq.map { device + ":" + String($0) } }
}

/// What ``Trash/summary()`` counts: the trash `status` shows.
public struct TrashSummary: Sendable, Equatable {
    /// Rows in the window this device may see, the files they name, and those files' bytes.
    public var rows: Int64
    public var files: Int64
    public var bytes: Int64
    /// When the oldest row in the window was deleted.
    public var oldest: String?
    /// The store's retention window, in seconds.
    public var retention: Int64
}

/// A change that deleted many rows at once, as a pull applied it (``Trash/judgeMassDelete``).
public struct MassDelete: Sendable, Equatable {
    /// The device that published the change, its name and member, when known.
    public var device: String
    public var deviceName: String?
    public var member: String?
    /// The change's seq.
    public var seq: Int64
    /// Rows deleted, by table, in table order.
    public var tables: [(table: String, rows: Int)]
    /// When it was applied here (ISO 8601).
    public var appliedAt: String

    /// The command that undoes it.
    public var undo: String { "coven undelete --change \(device):\(seq)" }

    /// Equal when every field is (tuples are not Equatable by themselves).
    public static func == (a: MassDelete, b: MassDelete) -> Bool {
        a.device == b.device && a.seq == b.seq && a.tables.map(\.table) == b.tables.map(\.table) && a.tables.map(\.rows) == b.tables.map(\.rows)
            && a.appliedAt == b.appliedAt && a.member == b.member && a.deviceName == b.deviceName
    }
}

/// The one writer of `coven_trash` and `coven_trash_files`: the last image of every row of a
/// synced table deleted on any device, kept on each device from what it applied or wrote
/// itself, so a delete can be undone (``Undelete``) while its files' bytes are kept.
///
/// The failure story: a wrong `DELETE` in an app, a script with a bad WHERE, a device with a
/// bug, and every device applies the delete, and gc deletes the stored bytes once every device
/// has seen it. The rule: a device keeps, for every delete it applies (a pull) or writes (a
/// recorded write), the row's last image, who deleted it and in which change, the row whose
/// delete took it along (a cascade), and the files it named; gc keeps the bytes those files
/// name for the store's retention window (``holds(object:now:)``), and a row comes back as a
/// new write, stamped later, that every device applies as any other. Where it does not apply:
/// a retract (a gate keeping a row back) deletes nothing, and a row taken out for its parent
/// is a lost value that comes back with it by itself; and a store whose window is 0 keeps no
/// trash at all (``setRetention(_:)``: its deletes are final, as before the trash).
///
/// The image is a copy, never a reference to the change that wrote the row. The failure story:
/// the trash pointing at the upsert entry of the change that last wrote the row would lose the
/// row once gc deletes that change (it does, once a retained snapshot covers it), would need
/// storage to be reached to list or undelete offline, and a delete's own entry carries no image
/// at all (the values are the row as this device held it). The rule: each trashed row holds
/// its own image, in the compact binary form a change carries (``RowEntryCodec``, one upsert
/// entry) but without what the trash row holds beside it: its table, id and stamp are empty
/// (the row's `tbl`, `id` and its `_updated_at` value say them); rows trashed before schema 23
/// hold full entries, and a reader reads only the columns and values of either. Where it does
/// not apply: a snapshot copies the images as they are (``copyForSnapshot(into:)``).
///
/// The rows are appended in the order a change deletes them (a table with a rowid, schema 23):
/// a pull writes each trashed row's page once, and only the small unique index on (table, id)
/// takes the deletes in key order.
///
/// Every method that writes runs inside the caller's transaction.
///
/// ```swift
/// let trash = Trash(device)
/// try trash.forEach(table: "notes", since: nil) { row in print(row.table, row.id) }
/// ```
public struct Trash {
    let device: Device
    var database: Database { device.database }

    /// The trash of `device`.
    public init(_ device: Device) { self.device = device }



    /// Statements a pull runs once per row it deletes, prepared once per ``Trash``; and
    /// whether the store's window keeps anything, read once per change (``begin()``).
    private final class Prepared {
        var insert: Statement?
        var dropFiles: Statement?
        var fileSize: Statement?
        var keeps: Bool?
    }
    private let prepared = Prepared()

    // MARK: The retention window

    /// The store's window when none was set: 30 days, as the services people compare coven with.
    public static let defaultRetention: Int64 = 30 * 86_400

    /// The retention window, in seconds: the store's setting (``StoreSettings``).
    public func retention() throws -> Int64 {
        try StoreSettings(device).value(StoreSettings.trashRetention).flatMap { Int64($0) } ?? Self.defaultRetention
    }

    /// Whether the store's retention window was set (else it is the default).
    public func retentionIsSet() throws -> Bool { try StoreSettings(device).value(StoreSettings.trashRetention) != nil }

    /// Sets the store's retention window (`seconds`), an admin's setting published at the next
    /// sync. A window of 0 turns the trash off for the store: no device keeps a deleted row
    /// (its deletes are final, as before the trash), gc no longer waits to free bytes, and the
    /// rows already in the trash are past the window (the next gc drops them).
    ///
    /// - Throws: `.usage` for a negative window; `.notAdmin`.
    public func setRetention(_ seconds: Int64) throws {
        guard seconds >= 0 else { throw CovenError(.usage, "the retention window is not negative") }
        try StoreSettings(device).set(StoreSettings.trashRetention, String(seconds))
    }

    /// Whether the store's window keeps deleted rows (it is not 0), read once per ``Trash``
    /// or per ``begin()``.
    func keeps() throws -> Bool {
        if let known = prepared.keeps { return known }
        let keeps = try retention() > 0
        prepared.keeps = keeps
        return keeps
    }

    /// Starts recording the deletes of one change (a pull's): reads the store's window again
    /// (a change applied before may have set it) and says whether the trash holds any row (a
    /// row written back is forgotten from it only then).
    func begin() throws -> Bool {
        prepared.keeps = nil
        _ = try keeps()
        return try !isEmpty()
    }

    /// The delete time before which rows are past the window at `now`.
    func cutoff(now: Date = Date()) throws -> String {
        Timestamp.iso8601(now.addingTimeInterval(-Double(try retention())))
    }

    // MARK: Recording deletes

    /// The wall time a hybrid-clock stamp holds (its first 24 characters, ISO 8601).
    static func time(of stamp: String) -> String { String(stamp.prefix(24)) }

    /// Records the last image of row `id` of `table` (its stored columns `columns` and
    /// `values`), deleted by `writer`'s change `seq` (nil: this device's, unpublished) with
    /// stamp `stamp`, in `audience`; `parent` is the row whose delete in the same change took
    /// it along.
    func record(table: String, id: String, columns: [String], values: [SQLValue], stamp: String, writer: String, seq: Int64?,
                audience: String, parent: (table: String, id: String)?) throws {
        guard let spec = device.manifest.table(table), try keeps() else { return }
        var owner: String?
        if let ownerColumn = spec.ownerColumn, let index = columns.firstIndex(of: ownerColumn) { owner = values[index].textValue }
        let image = Self.image(columns: columns, values: values)
        var files: [(id: String, size: Int64, object: String?)] = []
        for column in spec.files {
            guard let index = columns.firstIndex(of: column.column), let file = values[index].textValue else { continue }
            let found = try prepared.fileSize ?? database.prepare("""
                SELECT size, object FROM coven_files WHERE id = ?1 UNION ALL SELECT size, object FROM coven_deleted_files WHERE id = ?1 LIMIT 1
                """)
            prepared.fileSize = found
            found.reset()
            try found.bind([file])
            let row = try found.next()
            files.append((file, row?[0].intValue ?? 0, row?[1].textValue))
            found.reset()
        }
        var json = files.isEmpty ? "[]" : "["
        for (index, file) in files.enumerated() {
            if index > 0 { json += "," }
            json += "{\"id\":" + RecordedChanges.json(ids: [file.id]).dropFirst().dropLast() + ",\"size\":" + String(file.size) + "}"
        }
        if !files.isEmpty { json += "]" }
        let insert = try prepared.insert ?? database.prepare("""
            INSERT INTO coven_trash (tbl, id, image, stamp, deleted_at, device, seq, audience, owner, parent_tbl, parent_id, files)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
            ON CONFLICT (tbl, id) DO UPDATE SET image = excluded.image, stamp = excluded.stamp, deleted_at = excluded.deleted_at,
                device = excluded.device, seq = excluded.seq, audience = excluded.audience, owner = excluded.owner,
                parent_tbl = excluded.parent_tbl, parent_id = excluded.parent_id, files = excluded.files
            """)
        prepared.insert = insert
        insert.reset()
        // One value at a time: no array of values made for each of a pull's 100,000 rows.
        try insert.bind(.text(table), at: 1)
        try insert.bind(.text(id), at: 2)
        try insert.bind(.blob(image), at: 3)
        try insert.bind(.text(stamp), at: 4)
        try insert.bind(.text(Self.time(of: stamp)), at: 5)
        try insert.bind(.text(writer), at: 6)
        try insert.bind(seq.map { SQLValue.integer($0) } ?? .null, at: 7)
        try insert.bind(.text(audience), at: 8)
        try insert.bind(owner.map { SQLValue.text($0) } ?? .null, at: 9)
        try insert.bind(parent.map { SQLValue.text($0.table) } ?? .null, at: 10)
        try insert.bind(parent.map { SQLValue.text($0.id) } ?? .null, at: 11)
        try insert.bind(.text(json), at: 12)
        try insert.runToEnd()
        // A table with no file column never has rows in coven_trash_files.
        guard !spec.files.isEmpty else { return }
        let drop = try prepared.dropFiles ?? database.prepare("DELETE FROM coven_trash_files WHERE tbl = ?1 AND id = ?2")
        prepared.dropFiles = drop
        drop.reset()
        try drop.bind([table, id])
        try drop.runToEnd()
        for file in files {
            try database.runCached("INSERT OR REPLACE INTO coven_trash_files (tbl, id, file, object, size) VALUES (?1, ?2, ?3, ?4, ?5)",
                                   [table, id, file.id, file.object.map { SQLValue.text($0) } ?? .null, file.size])
        }
    }

    /// A trashed row's image: its stored columns and values as one upsert entry whose table,
    /// id and stamp are empty (the trash row holds them beside it).
    static func image(columns: [String], values: [SQLValue]) -> [UInt8] {
        var image: [UInt8] = []
        image.reserveCapacity(64 + values.count * 16)
        RowEntryCodec.encode([RowEntry(kind: .upsert, table: "", id: "", stamp: "", columns: columns, values: values)], into: &image)
        return image
    }

    /// The row whose delete in the same change took row (`table`, `values`) along: a parent
    /// through a foreign key to its id that `isDeleted` says the change deletes too.
    static func parent(of table: String, columns: [String], values: [SQLValue], graph: SchemaGraph,
                       isDeleted: (String, String) -> Bool) -> (table: String, id: String)? {
        for edge in graph.parents[table] ?? [] where edge.parentColumn == "id" {
            guard let index = columns.firstIndex(of: edge.column), let id = values[index].textValue else { continue }
            if isDeleted(edge.parent, id) { return (edge.parent, id) }
        }
        return nil
    }

    /// Forgets row `id` of `table`: it is here again (a write or a pull brought it back).
    func forget(table: String, id: String) throws {
        try database.runCached("DELETE FROM coven_trash WHERE tbl = ?1 AND id = ?2", [table, id])
        try database.runCached("DELETE FROM coven_trash_files WHERE tbl = ?1 AND id = ?2", [table, id])
    }

    /// Whether the trash holds any row (a write or a pull forgets rows only then).
    func isEmpty() throws -> Bool {
        try database.scalar("SELECT NOT EXISTS (SELECT 1 FROM coven_trash)").intValue == 1
    }

    // MARK: Mass deletes

    /// The rows a change deletes past which a pull warns: this many in all, or a quarter of a
    /// table's rows (and at least ``quarterFloor`` of them, so deleting one of three rows is no
    /// mass delete).
    public static let massRows = 100
    public static let quarterFloor = 10

    /// Judges a change of `writer` (seq `seq`) that deleted `deleted` rows here, by table
    /// (called inside its applying transaction, after the deletes): a mass delete is recorded
    /// as the last one and returned.
    func judgeMassDelete(writer: String, seq: Int64, deleted: [String: Int]) throws -> MassDelete? {
        let total = deleted.values.reduce(0, +)
        // Without a trash (a window of 0) there is nothing to undo it with: no warning.
        guard total > 0, try keeps() else { return nil }
        var mass = total >= Self.massRows
        if !mass {
            for (table, count) in deleted where count >= Self.quarterFloor {
                let left = try database.scalar("SELECT count(*) FROM main.\(RowCapture.quote(table))").intValue ?? 0
                if Int64(count) * 4 >= left + Int64(count) { mass = true }
            }
        }
        guard mass else { return nil }
        let who = try database.queryOne("SELECT name, member FROM coven_device_registry WHERE device = ?1", [writer])
        let found = MassDelete(device: writer, deviceName: who?.string("name"), member: who?.string("member"), seq: seq,
                               tables: deleted.filter { $0.value > 0 }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                               appliedAt: Timestamp.iso8601(Date()))
        var json: [String: Any] = ["device": writer, "seq": seq, "applied_at": found.appliedAt,
                                   "tables": found.tables.map { ["table": $0.table, "rows": $0.rows] as [String: Any] }]
        if let name = found.deviceName { json["name"] = name }
        if let member = found.member { json["member"] = member }
        let text = String(decoding: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]), as: UTF8.self)
        try SyncFlags(database: device.database).setLastMassDelete(text)
        return found
    }

    /// The last mass delete a pull applied here, if any.
    public func lastMassDelete() throws -> MassDelete? {
        guard let text = try SyncFlags(database: device.database).lastMassDelete,
              let json = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              let writer = json["device"] as? String, let seq = (json["seq"] as? NSNumber)?.int64Value else { return nil }
        let tables = (json["tables"] as? [[String: Any]] ?? []).compactMap { item -> (table: String, rows: Int)? in
            guard let table = item["table"] as? String, let rows = (item["rows"] as? NSNumber)?.intValue else { return nil }
            return (table, rows)
        }
        return MassDelete(device: writer, deviceName: json["name"] as? String, member: json["member"] as? String, seq: seq, tables: tables,
                          appliedAt: json["applied_at"] as? String ?? "")
    }

    // MARK: Reading

    /// The seq of the change holding a trashed row's delete: its own, or for this device's
    /// delete the first of its published changes whose newest stamp reaches it.
    static let seqSQL = "coalesce(t.seq, (SELECT min(l.seq) FROM coven_sync_log l WHERE l.device = t.device AND l.max_stamp >= t.stamp))"

    /// The rows this device may see: of an audience its member writes in, and of an
    /// owner-only table only its own.
    func visibility() throws -> (sql: String, values: [SQLValue]) {
        let audiences = try Circles(device).writableAudiences().sorted()
        let me = try Members(device).memberID()
        return ("t.audience IN (SELECT value FROM json_each(?1)) AND (t.owner IS NULL OR t.owner = ?2)",
                [.text(RecordedChanges.json(ids: audiences)), me.map { SQLValue.text($0) } ?? .text("")])
    }

    /// Calls `body` with each row in the window (deleted after the cutoff, or after `since`
    /// when later) that this device may see, newest first, of `table` when given: read one at
    /// a time from a stepped query, never the whole trash in memory.
    public func forEach(table: String? = nil, since: Date? = nil, _ body: (TrashedRow) throws -> Void) throws {
        var floor = try cutoff()
        if let since { floor = max(floor, Timestamp.iso8601(since)) }
        let visible = try visibility()
        // The keys sorted first (small: the sorter never holds the images), then each row by
        // its key, as read.
        let keys = try database.prepare("""
            SELECT t.tbl, t.id FROM coven_trash t
            WHERE t.deleted_at >= ?3 AND (?4 IS NULL OR t.tbl = ?4) AND \(visible.sql)
            ORDER BY t.deleted_at DESC, t.tbl, t.id
            """)
        try keys.bind(visible.values + [.text(floor), table.map { SQLValue.text($0) } ?? .null])
        let row = try database.prepare("""
            SELECT t.tbl, t.id, t.image, t.stamp, t.deleted_at, t.device, r.name, r.member, \(Self.seqSQL), t.parent_tbl, t.parent_id, t.files
            FROM coven_trash t LEFT JOIN coven_device_registry r ON r.device = t.device WHERE t.tbl = ?1 AND t.id = ?2
            """)
        while let key = try keys.next() {
            row.reset()
            try row.bind([key[0], key[1]])
            guard let found = try row.next() else { continue }
            try body(try Self.trashed(found))
        }
    }

    /// A row of ``forEach(table:since:_:)``'s query as a ``TrashedRow``.
    static func trashed(_ row: Row) throws -> TrashedRow {
        let entry = try RowEntryCodec.decode(row[2].bytesValue ?? []).first
        var files: [TrashedRow.File] = []
        if let text = row[11].textValue, text != "[]",
           let list = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] {
            files = list.compactMap { item in
                guard let id = item["id"] as? String else { return nil }
                return TrashedRow.File(id: id, size: (item["size"] as? NSNumber)?.int64Value ?? 0)
            }
        }
        return TrashedRow(table: row[0].textValue ?? "", id: row[1].textValue ?? "", deletedAt: row[4].textValue ?? "", stamp: row[3].textValue ?? "",
                          device: row[5].textValue ?? "", deviceName: row[6].textValue, member: row[7].textValue, seq: row[8].intValue,
                          parentTable: row[9].textValue, parentID: row[10].textValue, columns: entry?.columns ?? [], values: entry?.values ?? [],
                          files: files)
    }

    /// Rows, files and bytes in the window that this device may see, and the oldest delete.
    public func summary() throws -> TrashSummary {
        let visible = try visibility()
        let floor = try cutoff()
        let rows = try database.queryOne("""
            SELECT count(*) AS n, min(t.deleted_at) AS oldest FROM coven_trash t WHERE t.deleted_at >= ?3 AND \(visible.sql)
            """, visible.values + [.text(floor)])
        let files = try database.queryOne("""
            SELECT count(DISTINCT f.file) AS n, coalesce(sum(f.size), 0) AS bytes FROM coven_trash_files f JOIN coven_trash t ON t.tbl = f.tbl AND t.id = f.id
            WHERE t.deleted_at >= ?3 AND \(visible.sql)
            """, visible.values + [.text(floor)])
        return TrashSummary(rows: rows?.int("n") ?? 0, files: files?.int("n") ?? 0, bytes: files?.int("bytes") ?? 0,
                            oldest: rows?.string("oldest"), retention: try retention())
    }

    // MARK: gc

    /// The date an ISO 8601 time of ours holds (``Timestamp/iso8601(_:)``, milliseconds).
    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// When the window keeping `object` ends (the newest delete in the window of a row naming
    /// it, plus the window), or nil when no row in the window names it: gc's proof decides
    /// whether an object may go, this decides when.
    func holds(object: String, now: Date = Date()) throws -> String? {
        let floor = try cutoff(now: now)
        guard let newest = try database.scalar("""
            SELECT max(t.deleted_at) FROM coven_trash_files f JOIN coven_trash t ON t.tbl = f.tbl AND t.id = f.id
            WHERE f.object = ?1 AND t.deleted_at >= ?2
            """, [object, floor]).textValue,
              let date = Self.date(newest) else { return nil }
        return Timestamp.iso8601(date.addingTimeInterval(Double(try retention())))
    }

    /// Drops the rows past the window that keep nothing: naming no file, or files whose bytes
    /// gc freed in an earlier pass (no image of them left). A row whose bytes the pass frees
    /// stays until the next, so `undelete` says `bytes_absent` rather than not knowing it.
    ///
    /// - Returns: the rows dropped.
    @discardableResult
    func expire(now: Date = Date()) throws -> Int {
        let floor = try cutoff(now: now)
        try database.run("""
            DELETE FROM coven_trash AS t WHERE t.deleted_at < ?1 AND NOT EXISTS (
                SELECT 1 FROM coven_trash_files f WHERE f.tbl = t.tbl AND f.id = t.id
                  AND (EXISTS (SELECT 1 FROM coven_files c WHERE c.id = f.file) OR EXISTS (SELECT 1 FROM coven_deleted_files d WHERE d.id = f.file)))
            """, [floor])
        let dropped = database.changes
        try database.run("DELETE FROM coven_trash_files AS f WHERE NOT EXISTS (SELECT 1 FROM coven_trash t WHERE t.tbl = f.tbl AND t.id = f.id)")
        return dropped
    }

    // MARK: Snapshots

    /// Copies the store's rows of the trash (the store audience's: a circle's stay with the
    /// devices that read them) into `schema` (a snapshot), with the changes that deleted them,
    /// so a device joining from it learns the trash as the devices that applied those changes
    /// hold it.
    func copyForSnapshot(into schema: String) throws {
        try database.run("""
            INSERT INTO \(schema).coven_trash (tbl, id, image, stamp, deleted_at, device, seq, audience, owner, parent_tbl, parent_id, files)
            SELECT t.tbl, t.id, t.image, t.stamp, t.deleted_at, t.device, \(Self.seqSQL), t.audience, t.owner, t.parent_tbl, t.parent_id, t.files
            FROM main.coven_trash t WHERE t.audience = ?1
            """, [RowAudiences.store])
        try database.run("""
            INSERT INTO \(schema).coven_trash_files (tbl, id, file, object, size)
            SELECT f.tbl, f.id, f.file, f.object, f.size FROM main.coven_trash_files f JOIN main.coven_trash t ON t.tbl = f.tbl AND t.id = f.id
            WHERE t.audience = ?1
            """, [RowAudiences.store])
    }

    /// Empties the trash of this device: every row (`before` nil) or those deleted before
    /// `before`, in one transaction; their bytes no longer wait for the window, and the next
    /// gc frees them. Rows this device may not see stay.
    ///
    /// - Returns: the rows emptied.
    @discardableResult
    public func empty(before: Date?) throws -> Int {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        return try database.transaction { try empty(inTransactionBefore: before) }
    }

    /// ``empty(before:)`` inside the caller's transaction, under its lock.
    func empty(inTransactionBefore before: Date?) throws -> Int {
        let visible = try visibility()
        try database.run("""
            DELETE FROM coven_trash AS t WHERE (?3 IS NULL OR t.deleted_at < ?3) AND \(visible.sql)
            """, visible.values + [before.map { SQLValue.text(Timestamp.iso8601($0)) } ?? .null])
        let emptied = database.changes
        try database.run("DELETE FROM coven_trash_files AS f WHERE NOT EXISTS (SELECT 1 FROM coven_trash t WHERE t.tbl = f.tbl AND t.id = f.id)")
        return emptied
    }
}

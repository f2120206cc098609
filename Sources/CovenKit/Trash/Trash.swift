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

/// The one writer of `coven_trash_pages` and `coven_trash_files`: the last image of every row
/// of a synced table deleted on any device, kept on each device from what it applied or wrote
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
/// at all (the values are the row as this device held it). The rule: each trashed row's image
/// is kept here, in pages of the rows one change deleted (``TrashPage``: compressed together,
/// written once each), and the row's tombstone, which every delete writes anyway, names its
/// page (`coven_tombstones.trash`, written through ``Tombstones``): a row is in the trash while
/// its tombstone names a page, and leaves it when the link goes (written back, emptied,
/// expired); a page no tombstone names is dropped by the next gc. So nothing of the trash is
/// written per row but the tombstone, and a row written back needs nothing but its link cut.
///
/// Every method that writes runs inside the caller's transaction; a change's or a write's
/// deletes are recorded between ``begin()`` and ``finish()``, which writes the pages still open.
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

    /// What a page being filled is for: the rows of one change, of one audience and owner.
    private struct PageKey: Hashable {
        var device: String
        var seq: Int64?
        var audience: String
        var owner: String?
    }

    /// A page being filled: its row, its entries so far, and the newest delete among them.
    private final class OpenPage {
        let page: Int64
        var count = 0
        var bytes: [UInt8] = []
        var stamp = ""
        init(page: Int64) { self.page = page }
    }

    /// Statements a pull runs once per row it deletes, prepared once per ``Trash``; whether the
    /// store's window keeps anything, read once per change (``begin()``); and the pages being
    /// filled.
    private final class Prepared {
        var dropFiles: Statement?
        var fileSize: Statement?
        var keeps: Bool?
        var open: [PageKey: OpenPage] = [:]
        /// The page of the last row recorded, tried first (a change's deletes are mostly of
        /// one audience).
        var last: (key: PageKey, page: OpenPage)?
        /// Seals full pages beside the recording (made on the first).
        var sealer: TrashPageSealer?
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

    /// Starts recording the deletes of one change (a pull's) or write: reads the store's window
    /// again (a change applied before may have set it), forgets pages a failed change left
    /// open, and says whether the trash holds any page (a row written back is unlinked from
    /// it only then).
    func begin() throws -> Bool {
        prepared.keeps = nil
        prepared.open = [:]
        prepared.last = nil
        prepared.sealer?.discard()
        _ = try keeps()
        return try !isEmpty()
    }

    /// Writes the pages still open and those sealed beside the recording: called once a
    /// change's or write's deletes are recorded, before its transaction commits.
    func finish() throws {
        for open in prepared.open.values {
            try write(TrashPageSealer.Sealed(page: open.page, count: open.count, stamp: open.stamp,
                                             bytes: try TrashPage.seal(count: open.count, bytes: open.bytes)))
        }
        prepared.open = [:]
        prepared.last = nil
        for sealed in try prepared.sealer?.finish() ?? [] { try write(sealed) }
    }

    /// The delete time before which rows are past the window at `now`.
    func cutoff(now: Date = Date()) throws -> String {
        Timestamp.iso8601(now.addingTimeInterval(-Double(try retention())))
    }

    // MARK: Recording deletes

    /// The wall time a hybrid-clock stamp holds (its first 24 characters, ISO 8601).
    static func time(of stamp: String) -> String { String(stamp.prefix(24)) }

    /// The same in SQL, of column `stamp`.
    static func timeSQL(_ stamp: String) -> String { "substr(\(stamp), 1, 24)" }

    /// Records the last image of row `id` of `table` (its stored columns `columns` and
    /// `values`), deleted by `writer`'s change `seq` (nil: this device's, unpublished) with
    /// stamp `stamp`, in `audience`; `parent` is the row whose delete in the same change took
    /// it along.
    ///
    /// - Returns: the page that holds it, for the row's tombstone to name
    ///   (``Tombstones/set(table:id:stamp:audience:retracted:trash:)``); nil when the store
    ///   keeps no trash or the table is not synced.
    func record(table: String, id: String, columns: [String], values: [SQLValue], stamp: String, writer: String, seq: Int64?,
                audience: String, parent: (table: String, id: String)?) throws -> Int64? {
        guard let spec = device.manifest.table(table), try keeps() else { return nil }
        var owner: String?
        if let ownerColumn = spec.ownerColumn, let index = columns.firstIndex(of: ownerColumn) { owner = values[index].textValue }
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
        let key = PageKey(device: writer, seq: seq, audience: audience, owner: owner)
        let open: OpenPage
        if let last = prepared.last, last.key == key {
            open = last.page
        } else if let known = prepared.open[key] {
            open = known
        } else {
            let page = try database.scalar("""
                INSERT INTO coven_trash_pages (device, seq, stamp, audience, owner) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING page
                """, [writer, seq.map { SQLValue.integer($0) } ?? .null, stamp, audience, owner.map { SQLValue.text($0) } ?? .null]).intValue
            guard let page else { throw CovenError(.internal, "the trash could not begin a page") }
            open = OpenPage(page: page)
            prepared.open[key] = open
        }
        prepared.last = (key, open)
        TrashPage.append(TrashPage.Entry(table: table, id: id, stamp: stamp, columns: columns, values: values, parentTable: parent?.table,
                                         parentID: parent?.id, files: files.map { ($0.id, $0.size) }),
                         to: &open.bytes)
        open.count += 1
        if stamp > open.stamp { open.stamp = stamp }
        if open.bytes.count >= TrashPage.limit {
            let sealer = prepared.sealer ?? TrashPageSealer()
            prepared.sealer = sealer
            for sealed in try sealer.sealed() { try write(sealed) }
            sealer.submit(page: open.page, count: open.count, stamp: open.stamp, bytes: open.bytes)
            prepared.open[key] = nil
            prepared.last = nil
        }
        // A table with no file column never has rows in coven_trash_files.
        guard !spec.files.isEmpty else { return open.page }
        let drop = try prepared.dropFiles ?? database.prepare("DELETE FROM coven_trash_files WHERE tbl = ?1 AND id = ?2")
        prepared.dropFiles = drop
        drop.reset()
        try drop.bind([table, id])
        try drop.runToEnd()
        for file in files {
            try database.runCached("INSERT OR REPLACE INTO coven_trash_files (tbl, id, file, object, size) VALUES (?1, ?2, ?3, ?4, ?5)",
                                   [table, id, file.id, file.object.map { SQLValue.text($0) } ?? .null, file.size])
        }
        return open.page
    }

    /// Writes a sealed page's entries, count and newest stamp into its row.
    private func write(_ sealed: TrashPageSealer.Sealed) throws {
        try database.run("UPDATE coven_trash_pages SET stamp = ?1, rows = ?2, entries = ?3 WHERE page = ?4",
                         [sealed.stamp, sealed.count, SQLValue.blob(sealed.bytes), sealed.page])
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

    /// Forgets row `id` of `table`: it is here again (a write or a pull brought it back). Its
    /// image stays in its page until gc drops the pages no tombstone names.
    func forget(table: String, id: String) throws {
        try Tombstones(database: database).unlinkTrash(table: table, id: id)
        try database.runCached("DELETE FROM coven_trash_files WHERE tbl = ?1 AND id = ?2", [table, id])
    }

    /// Whether the trash holds no page (a write or a pull unlinks rows only when it does).
    func isEmpty() throws -> Bool {
        try database.scalar("SELECT NOT EXISTS (SELECT 1 FROM coven_trash_pages)").intValue == 1
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

    /// The seq of the change whose deletes page `p` holds: its own, or for this device's
    /// deletes (one write, one stamp) the first of its published changes whose newest stamp
    /// reaches them.
    static let seqSQL = "coalesce(p.seq, (SELECT min(l.seq) FROM coven_sync_log l WHERE l.device = p.device AND l.max_stamp >= p.stamp))"

    /// The rows this device may see, over their page `p`: of an audience its member writes in,
    /// and of an owner-only table only its own.
    func visibility() throws -> (sql: String, values: [SQLValue]) {
        let audiences = try Circles(device).writableAudiences().sorted()
        let me = try Members(device).memberID()
        return ("p.audience IN (SELECT value FROM json_each(?1)) AND (p.owner IS NULL OR p.owner = ?2)",
                [.text(RecordedChanges.json(ids: audiences)), me.map { SQLValue.text($0) } ?? .text("")])
    }

    /// Calls `body` with each row in the window (deleted after the cutoff, or after `since`
    /// when later) that this device may see, newest first, of `table` when given; rows deleted
    /// at the same time by table, then page by page (the order a change deleted them), then by
    /// id: the keys sorted first (small: the sorter never holds an image), then each row from
    /// its page, the few pages decoded last kept, never the whole trash in memory. (By table
    /// and id alone, a change of 100,000 deletes decoded a page per row: 73 s.)
    public func forEach(table: String? = nil, since: Date? = nil, _ body: (TrashedRow) throws -> Void) throws {
        var floor = try cutoff()
        if let since { floor = max(floor, Timestamp.iso8601(since)) }
        let visible = try visibility()
        let keys = try database.prepare("""
            SELECT t.tbl, t.id, t.trash FROM coven_tombstones t JOIN coven_trash_pages p ON p.page = t.trash
            WHERE t.trash IS NOT NULL AND \(Self.timeSQL("t.stamp")) >= ?3 AND (?4 IS NULL OR t.tbl = ?4) AND \(visible.sql)
            ORDER BY \(Self.timeSQL("t.stamp")) DESC, t.tbl, t.trash, t.id
            """)
        try keys.bind(visible.values + [.text(floor), table.map { SQLValue.text($0) } ?? .null])
        let pages = try TrashPageCache(database: database)
        let origins = try Origins(database)
        while let key = try keys.next() {
            guard let tableName = key[0].textValue, let id = key[1].textValue, let page = key[2].intValue else { continue }
            guard let entry = try pages.entry(page: page, table: tableName, id: id), let origin = try origins.of(page) else {
                throw CovenError(.internal, "the trash's page \(page) does not hold row '\(id)' of '\(tableName)', which its tombstone names",
                                 details: ["table": tableName, "id": id, "page": String(page)])
            }
            try body(Self.trashed(entry, origin: origin))
        }
    }

    /// A trashed row as ``forEach(table:since:_:)`` gives it.
    static func trashed(_ entry: TrashPage.Entry, origin: PageOrigin) -> TrashedRow {
        TrashedRow(table: entry.table, id: entry.id, deletedAt: time(of: entry.stamp), stamp: entry.stamp, device: origin.device,
                   deviceName: origin.deviceName, member: origin.member, seq: origin.seq, parentTable: entry.parentTable, parentID: entry.parentID,
                   columns: entry.columns, values: entry.values, files: entry.files.map { TrashedRow.File(id: $0.id, size: $0.size) })
    }

    /// Rows, files and bytes in the window that this device may see, and the oldest delete.
    public func summary() throws -> TrashSummary {
        let visible = try visibility()
        let floor = try cutoff()
        let rows = try database.queryOne("""
            SELECT count(*) AS n, min(\(Self.timeSQL("t.stamp"))) AS oldest FROM coven_tombstones t JOIN coven_trash_pages p ON p.page = t.trash
            WHERE t.trash IS NOT NULL AND \(Self.timeSQL("t.stamp")) >= ?3 AND \(visible.sql)
            """, visible.values + [.text(floor)])
        let files = try database.queryOne("""
            SELECT count(DISTINCT f.file) AS n, coalesce(sum(f.size), 0) AS bytes FROM coven_trash_files f
            JOIN coven_tombstones t ON t.tbl = f.tbl AND t.id = f.id JOIN coven_trash_pages p ON p.page = t.trash
            WHERE t.trash IS NOT NULL AND \(Self.timeSQL("t.stamp")) >= ?3 AND \(visible.sql)
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
            SELECT max(\(Self.timeSQL("t.stamp"))) FROM coven_trash_files f JOIN coven_tombstones t ON t.tbl = f.tbl AND t.id = f.id
            WHERE f.object = ?1 AND t.trash IS NOT NULL AND \(Self.timeSQL("t.stamp")) >= ?2
            """, [object, floor]).textValue,
              let date = Self.date(newest) else { return nil }
        return Timestamp.iso8601(date.addingTimeInterval(Double(try retention())))
    }

    /// Drops the rows past the window that keep nothing: naming no file, or files whose bytes
    /// gc freed in an earlier pass (no image of them left). A row whose bytes the pass frees
    /// stays until the next, so `undelete` says `bytes_absent` rather than not knowing it.
    /// Then drops what no row in the trash needs (``prune()``).
    ///
    /// - Returns: the rows dropped.
    @discardableResult
    func expire(now: Date = Date()) throws -> Int {
        let floor = try cutoff(now: now)
        let dropped = try Tombstones(database: database).unlinkTrash(where: """
            \(Self.timeSQL("t.stamp")) < ?1 AND NOT EXISTS (
                SELECT 1 FROM coven_trash_files f WHERE f.tbl = t.tbl AND f.id = t.id
                  AND (EXISTS (SELECT 1 FROM coven_files c WHERE c.id = f.file) OR EXISTS (SELECT 1 FROM coven_deleted_files d WHERE d.id = f.file)))
            """, [.text(floor)])
        try prune()
        return dropped
    }

    /// Drops the files and pages no trashed row needs: those of rows written back, emptied or
    /// expired (their tombstones name no page), and pages whose every row left.
    func prune() throws {
        try database.run("""
            DELETE FROM coven_trash_files AS f WHERE NOT EXISTS (SELECT 1 FROM coven_tombstones t WHERE t.tbl = f.tbl AND t.id = f.id AND t.trash IS NOT NULL)
            """)
        try database.run("DELETE FROM coven_trash_pages WHERE page NOT IN (SELECT trash FROM coven_tombstones WHERE trash IS NOT NULL)")
    }

    // MARK: Snapshots

    /// Copies the store's rows of the trash (the store audience's: a circle's stay with the
    /// devices that read them) into `schema` (a snapshot), with the changes that deleted them,
    /// so a device joining from it learns the trash as the devices that applied those changes
    /// hold it. The snapshot's tombstones name the pages (``Tombstones/copy(into:tables:audience:)``);
    /// a page holding rows no copied tombstone names (written back since, or private to this
    /// device) is copied without them, so a snapshot holds no image but of a row in its trash.
    func copyForSnapshot(into schema: String) throws {
        let linked = try database.prepare("""
            SELECT t.trash, t.tbl, t.id FROM main.coven_tombstones t JOIN main.coven_trash_pages p ON p.page = t.trash
            WHERE t.trash IS NOT NULL AND t.private = 0 AND p.audience = ?1 ORDER BY t.trash
            """)
        try linked.bind([RowAudiences.store])
        let page = try database.prepare("""
            SELECT p.device, \(Self.seqSQL), p.stamp, p.audience, p.owner, p.rows, p.entries FROM main.coven_trash_pages p WHERE p.page = ?1
            """)
        var current: Int64?
        var keys: Set<String> = []
        func copy() throws {
            guard let number = current else { return }
            page.reset()
            try page.bind([number])
            defer { page.reset() }
            guard let row = try page.next() else { return }
            var entries = row[6].bytesValue ?? []
            var count = row[5].intValue ?? 0
            if count != Int64(keys.count) {
                let kept = try TrashPage.open(entries).filter { keys.contains($0.table + "\u{0}" + $0.id) }
                var bytes: [UInt8] = []
                for entry in kept { TrashPage.append(entry, to: &bytes) }
                entries = try TrashPage.seal(count: kept.count, bytes: bytes)
                count = Int64(kept.count)
            }
            try database.run("""
                INSERT INTO \(schema).coven_trash_pages (page, device, seq, stamp, audience, owner, rows, entries) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                """, [number, row[0], row[1], row[2], row[3], row[4], count, SQLValue.blob(entries)])
        }
        while let row = try linked.next() {
            guard let number = row[0].intValue else { continue }
            if number != current {
                try copy()
                current = number
                keys = []
            }
            keys.insert((row[1].textValue ?? "") + "\u{0}" + (row[2].textValue ?? ""))
        }
        try copy()
        try database.run("""
            INSERT INTO \(schema).coven_trash_files (tbl, id, file, object, size)
            SELECT f.tbl, f.id, f.file, f.object, f.size FROM main.coven_trash_files f
            JOIN main.coven_tombstones t ON t.tbl = f.tbl AND t.id = f.id JOIN main.coven_trash_pages p ON p.page = t.trash
            WHERE t.trash IS NOT NULL AND t.private = 0 AND p.audience = ?1
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
        let emptied = try Tombstones(database: database).unlinkTrash(where: """
            (?3 IS NULL OR \(Self.timeSQL("t.stamp")) < ?3) AND \(visible.sql)
            """, visible.values + [before.map { SQLValue.text(Timestamp.iso8601($0)) } ?? .null])
        try prune()
        return emptied
    }
}

import Foundation

/// What ``Undelete`` brought back.
public struct UndeleteReport: Sendable, Equatable {
    /// The rows written back, parents before the children deleted with them.
    public var rows: [(table: String, id: String)] = []
    /// The file records brought back with them.
    public var files: [String] = []
    /// The write's stamp.
    public var stamp: String = ""

    /// Two reports are equal when they brought back the same rows and files in one write.
    public static func == (a: UndeleteReport, b: UndeleteReport) -> Bool {
        a.rows.map(\.table) == b.rows.map(\.table) && a.rows.map(\.id) == b.rows.map(\.id) && a.files == b.files && a.stamp == b.stamp
    }
}

/// Brings rows back from the trash (``Trash``) as one new write of this device: the last
/// values, stamped later than the delete so the write wins on every device and every device
/// applies it as any other; the file records they named, from their images (each device brings
/// a record back from its own image when the row arrives, with the newest place it knows:
/// FileRecords' register); and the rows deleted with them (a cascade of the same change).
///
/// All or nothing: everything is checked before anything is written (a row this device may
/// not see or write, a file whose bytes are gone), and the write is one transaction, so a
/// kill at any moment leaves every row back or none.
public struct Undelete {
    let device: Device
    var database: Database { device.database }

    /// Undeletes on `device`.
    public init(_ device: Device) { self.device = device }

    /// Brings back rows `ids` of `table`, with the rows deleted with them.
    ///
    /// - Throws: `.usage` for a table that is not synced; `.notFound` for a row not in the
    ///   trash (or one this device may not see); `.notOwner`, `.notInCircle`; `.invalidState`
    ///   for a row whose parent is deleted and not coming back with it; `.bytesAbsent` naming
    ///   the file whose bytes are gone; `.storage`.
    public func rows(table: String, ids: [String]) throws -> UndeleteReport {
        guard device.manifest.table(table) != nil else {
            throw CovenError(.usage, "'\(table)' is not a synced table of this store", hint: "'coven trash' lists what can come back")
        }
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        var keys: [(String, String)] = []
        var seen: Set<String> = []
        for id in ids where seen.insert(id).inserted { keys.append((table, id)) }
        return try bringBack(try plan(roots: keys, strict: true))
    }

    /// Brings back every row change `seq` of `writer` deleted.
    ///
    /// - Throws: `.notFound` when the trash holds no row that change deleted; the errors of
    ///   ``rows(table:ids:)``.
    public func change(device writer: String, seq: Int64) throws -> UndeleteReport {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let pages = try database.query("""
            SELECT p.page, p.audience, p.owner FROM coven_trash_pages p WHERE p.device = ?1 AND \(Trash.seqSQL) = ?2 ORDER BY p.page
            """, [writer, seq])
        let readable = try TrashRows(device)
        var keys: [(stamp: String, table: String, id: String)] = []
        var seeable = false
        for page in pages {
            guard let number = page[0].intValue else { continue }
            let visible = readable.sees(audience: page[1].textValue ?? RowAudiences.store, owner: page[2].textValue)
            for entry in try readable.linked(page: number) {
                keys.append((entry.stamp, entry.table, entry.id))
                if visible { seeable = true }
            }
        }
        guard !keys.isEmpty, seeable else {
            throw CovenError(.notFound, "the trash holds no row that change \(writer):\(seq) deleted", hint: "'coven trash' lists what can come back",
                             details: ["change": "\(writer):\(seq)"])
        }
        // By the delete's stamp, then page by page as the change deleted them (the order the
        // pages are read in again: by table and id it read a page per row once a change's rows
        // outgrew the pages kept).
        keys = keys.enumerated().sorted { ($0.element.stamp, $0.offset) < ($1.element.stamp, $1.offset) }.map(\.element)
        return try bringBack(try plan(roots: keys.map { ($0.table, $0.id) }, strict: false, rows: readable))
    }

    // MARK: Plan

    /// A trashed row to write back.
    struct Planned {
        var table: String
        var id: String
        var entry: RowEntry
        var audience: String
        var owner: String?
        var files: [String]
    }

    /// The rows `roots` name and the rows deleted with them (children first found through
    /// their parent link), checked: each in the trash, seen and writable by this device. A
    /// root this device may not bring back is refused when `strict` (rows named one by one),
    /// left out otherwise (a change's rows), as every row deleted with a root is.
    func plan(roots: [(String, String)], strict: Bool, rows given: TrashRows? = nil) throws -> [Planned] {
        let what = { (key: (String, String)) in "row '\(key.1)' of '\(key.0)'" }
        let rows = try given ?? TrashRows(device)
        let files = try database.cached("SELECT file FROM coven_trash_files WHERE tbl = ?1 AND id = ?2 ORDER BY file")
        var planned: [Planned] = []
        var queue = roots
        var seen: Set<String> = []
        var index = 0
        while index < queue.count {
            let key = queue[index]
            index += 1
            guard seen.insert(key.0 + "\u{0}" + key.1).inserted else { continue }
            guard let found = try rows.row(table: key.0, id: key.1) else {
                if index <= roots.count {
                    throw CovenError(.notFound, "\(what(key)) is not in the trash", hint: "'coven trash' lists what can come back",
                                     details: ["table": key.0, "id": key.1])
                }
                continue
            }
            let audience = found.origin.audience
            let owner = found.origin.owner
            // A row this device may not see is as unknown here as one never deleted.
            guard rows.writable.contains(audience) else {
                if strict, index <= roots.count, audience != RowAudiences.store {
                    throw CovenError(.notInCircle, "\(what(key)) is in a circle this device's member is not in", details: ["table": key.0, "id": key.1, "audience": audience])
                }
                continue
            }
            if let owner, owner != rows.me {
                if strict, index <= roots.count {
                    throw CovenError(.notOwner, "\(what(key)) is of an owner-only table and belongs to another member", details: ["table": key.0, "id": key.1, "owner": owner])
                }
                continue
            }
            try files.bind([key.0, key.1])
            var named: [String] = []
            while let file = try files.next() { if let id = file[0].textValue { named.append(id) } }
            files.reset()
            let entry = RowEntry(kind: .upsert, table: key.0, id: key.1, stamp: found.entry.stamp, columns: found.entry.columns, values: found.entry.values)
            planned.append(Planned(table: key.0, id: key.1, entry: entry, audience: audience, owner: owner, files: named))
            for child in try rows.children(of: key.0, id: key.1, page: found.page) { queue.append(child) }
        }
        return planned
    }

    // MARK: Check and write

    /// Refuses a file whose bytes are gone: a record neither live nor kept as an image (gc
    /// freed its bytes), a stored object storage no longer holds (another device's gc, after
    /// its window or `trash empty`), a copy on this device only that is gone.
    ///
    /// - Throws: `.bytesAbsent`, naming the file and the row; `.storage`.
    func checkBytes(_ planned: [Planned]) throws {
        var provider: StorageProvider?
        var checked: Set<String> = []
        for row in planned {
            for file in row.files {
                let details = ["file": file, "table": row.table, "id": row.id]
                guard let record = try device.fileRecord(file) ?? device.fileRecords.image(file) else {
                    throw CovenError(.bytesAbsent, "row '\(row.id)' of '\(row.table)' names file '\(file)', whose bytes gc freed",
                                     hint: "the trash keeps bytes for the store's retention window ('coven trash retention')", details: details)
                }
                let object = record.coordinates.object
                guard checked.insert(object).inserted else { continue }
                switch record.coordinates.at {
                case .stored:
                    if provider == nil { provider = try device.connectStorage() }
                    guard try provider?.head(object) == nil else { continue }
                    throw CovenError(.bytesAbsent, "row '\(row.id)' of '\(row.table)' names file '\(file)', whose stored bytes are gone",
                                     hint: "the trash keeps bytes for the store's retention window ('coven trash retention')", details: details)
                case .device:
                    guard record.coordinates.device == device.deviceID else { continue }
                    let recorded = try database.scalar("SELECT count(*) FROM coven_local WHERE object = ?1", [object]).intValue ?? 0 > 0
                    guard !recorded || CheckedBytes(device).localSourceProblem(object) != nil else { continue }
                    throw CovenError(.bytesAbsent, "row '\(row.id)' of '\(row.table)' names file '\(file)', which was on this device only and whose bytes are gone",
                                     details: details)
                }
            }
        }
    }

    /// Refuses a row whose parent (through a foreign key to its id) is neither here nor
    /// coming back with it: the row would fail its key. Its parent comes back first, and the
    /// rows deleted with it come back with it.
    ///
    /// - Throws: `.invalidState`, naming the parent.
    func checkParents(_ planned: [Planned]) throws {
        let graph = try device.schemaGraph()
        let coming = Set(planned.map { $0.table + "\u{0}" + $0.id })
        for row in planned {
            for edge in graph.parents[row.table] ?? [] where edge.parentColumn == "id" {
                guard let parent = row.entry.value(edge.column)?.textValue, !coming.contains(edge.parent + "\u{0}" + parent) else { continue }
                let here = try database.scalar("SELECT count(*) FROM main.\(RowCapture.quote(edge.parent)) WHERE id = ?1", [parent]).intValue ?? 0 > 0
                guard !here else { continue }
                throw CovenError(.invalidState, "row '\(row.id)' of '\(row.table)' names row '\(parent)' of '\(edge.parent)', which is deleted",
                                 hint: "undelete that row: the rows deleted with it come back with it", details: ["table": row.table, "id": row.id, "parent": parent])
            }
        }
    }

    /// Writes `planned` back as one recorded write, in one transaction, and forgets them from
    /// the trash.
    func bringBack(_ planned: [Planned]) throws -> UndeleteReport {
        try checkBytes(planned)
        try checkParents(planned)
        var report = UndeleteReport()
        let trash = Trash(device)
        report.stamp = try database.transaction {
            try database.execute("PRAGMA defer_foreign_keys = ON")
            return try device.recordWrite { write in
                var columnsOf: [String: Set<String>] = [:]
                for row in planned {
                    // A row here again (written since) is not written over.
                    let here = try database.scalar("SELECT count(*) FROM main.\(RowCapture.quote(row.table)) WHERE id = ?1", [row.id]).intValue ?? 0 > 0
                    if here {
                        try trash.forget(table: row.table, id: row.id)
                        continue
                    }
                    for file in row.files where try device.fileRecord(file) == nil {
                        if try device.fileRecords.bringBack(file) { report.files.append(file) }
                    }
                    if columnsOf[row.table] == nil { columnsOf[row.table] = Set(try database.storedColumns(row.table)) }
                    let local = columnsOf[row.table] ?? []
                    let columns = row.entry.columns.filter { local.contains($0) }
                    let values = columns.map { column -> SQLValue in
                        column == "_updated_at" ? .text(write.stamp) : (row.entry.value(column) ?? .null)
                    }
                    try database.runCached(RowEntry.upsertSQL(table: row.table, columns: columns), values)
                    try trash.forget(table: row.table, id: row.id)
                    report.rows.append((row.table, row.id))
                }
                return write.stamp
            }
        }
        return report
    }
}

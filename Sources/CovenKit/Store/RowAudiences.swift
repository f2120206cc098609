import Foundation

/// Who a row is for: the one owner of a row's **audience** (the store, or a circle: its
/// `audience_column`, or its parent's through `audience_from`) and of the **kept** rule of gates
/// (whether a row may leave this device at all; ``SchemaGraph`` builds the predicate). The write
/// checks, the push's gate filter, the snapshot cleanup and `coven_kept()` all ask it, and it
/// answers in sets: one query per table, whatever the number of rows.
///
/// ```swift
/// let audiences = try RowAudiences(device: device)
/// let byRow = try audiences.audiences(table: "albums", ids: ids)   // [id: "store" or a circle id]
/// let kept = try audiences.kept(table: "todos", ids: ids)          // [id: true / false]
/// ```
struct RowAudiences {
    /// The audience of every row no column places elsewhere.
    static let store = "store"

    let graph: SchemaGraph
    let database: Database
    var manifest: Manifest { graph.manifest }

    init(graph: SchemaGraph, database: Database) {
        self.graph = graph
        self.database = database
    }

    /// The audiences of `device`'s synced tables (foreign keys read now).
    init(device: Device) throws {
        try self.init(graph: device.schemaGraph(), database: device.database)
    }

    // MARK: Audiences

    /// The audience of a row of `table` as SQL over `alias`: its audience column, its parent's
    /// (through `audience_from`, up to any depth), or `'store'`.
    func audienceExpression(table: String, alias: String) -> String {
        var next = 0
        func expression(_ name: String, _ a: String, depth: Int) -> String {
            guard depth < 32, let table = manifest.table(name) else { return "'store'" }
            if let column = table.audienceColumn {
                return "COALESCE(\(a).\(RowCapture.quote(column)), 'store')"
            }
            if let column = table.audienceFrom,
               let edge = graph.parents[name]?.first(where: { $0.column == column }) {
                next += 1
                let p = "coven_a\(next)"
                let inner = expression(edge.parent, p, depth: depth + 1)
                return "COALESCE((SELECT \(inner) FROM main.\(RowCapture.quote(edge.parent)) \(p) WHERE \(p).\(RowCapture.quote(edge.parentColumn)) = \(a).\(RowCapture.quote(column))), 'store')"
            }
            return "'store'"
        }
        return expression(table, alias, depth: 0)
    }

    /// Whether rows of `table` can be of an audience other than the store.
    func placesAudience(_ table: String) -> Bool {
        audienceExpression(table: table, alias: "a") != "'store'"
    }

    /// The audience of each row `ids` of `table` that is here (one query).
    func audiences(table: String, ids: some Collection<String>) throws -> [String: String] {
        guard !ids.isEmpty else { return [:] }
        var result: [String: String] = [:]
        let sql = "SELECT r.id AS id, \(audienceExpression(table: table, alias: "r")) AS audience FROM main.\(RowCapture.quote(table)) r WHERE r.id IN (SELECT value FROM json_each(?1))"
        for row in try database.query(sql, [RecordedChanges.json(ids: Array(ids))]) {
            if let id = row.string("id") { result[id] = row.string("audience") ?? Self.store }
        }
        return result
    }

    /// The audience of one row here (a file record's `audience`), or nil when it is not here.
    func audience(table: String, id: String) throws -> String? {
        if table == "coven_files" {
            return try database.scalar("SELECT audience FROM coven_files WHERE id = ?1", [id]).textValue
        }
        return try audiences(table: table, ids: [id])[id]
    }

    /// The audience of a row that is no longer here (taken out, or deleted since), by its
    /// image: its parent's through `audience_from`, the parent here or, deleted, where its
    /// tombstone says; nil when the image names no parent.
    func audienceOfGone(_ entry: RowEntry, depth: Int = 0) throws -> String? {
        guard depth < 32, let table = manifest.table(entry.table), let column = table.audienceFrom,
              let edge = graph.parents[entry.table]?.first(where: { $0.column == column }),
              let value = entry.value(column), !value.isNull else { return nil }
        let parent = try database.queryOne("SELECT id FROM main.\(RowCapture.quote(edge.parent)) WHERE \(RowCapture.quote(edge.parentColumn)) = ?1", [value])
        if let id = parent?.string("id") { return try audience(table: edge.parent, id: id) }
        guard edge.parentColumn == "id", let id = value.textValue else { return nil }
        return try Tombstones(database: database).audience(table: edge.parent, id: id)
    }

    /// The audience each row a write deleted was in, by table and id (rows of tables that
    /// place no audience are left out: the store's): its audience column's value before the
    /// write, a file record's `audience`, or, through `audience_from`, its parent's: the
    /// parent's own when the same write deleted it too, else the parent's now. A delete goes in
    /// that audience's section (``ChangeSections``) and its tombstone stays there.
    ///
    /// The changes must carry their old values (``RecordedWrite/recordedTables(_:)`` keeps the
    /// audience columns, the `audience_from` columns and a file record's audience).
    func audiencesOfDeleted(_ changes: RecordedChanges) throws -> [String: [String: String]] {
        var resolved: [String: [String: String]] = [:]
        var pending: [(table: String, id: String, parent: String, parentID: String)] = []
        var deleted: Set<String> = []
        try changes.forEachBatch(oldFiles: true) { batch in
            for change in batch where change.operation == .delete {
                if change.table == "coven_files" {
                    resolved[change.table, default: [:]][change.id] = change.oldFiles["audience"]?.textValue ?? Self.store
                    continue
                }
                guard placesAudience(change.table), let table = manifest.table(change.table) else { continue }
                deleted.insert(change.table + "\u{0}" + change.id)
                if let column = table.audienceColumn {
                    resolved[change.table, default: [:]][change.id] = change.oldFiles[column]?.textValue ?? Self.store
                } else if let column = table.audienceFrom, let edge = graph.parents[table.name]?.first(where: { $0.column == column }),
                          let parentID = change.oldFiles[column]?.textValue {
                    if edge.parentColumn == "id" {
                        pending.append((table.name, change.id, edge.parent, parentID))
                    } else {
                        // A parent named by another column than its id: as it is now.
                        let found = try database.scalar("SELECT \(audienceExpression(table: edge.parent, alias: "p")) FROM main.\(RowCapture.quote(edge.parent)) p WHERE p.\(RowCapture.quote(edge.parentColumn)) = ?1", [parentID]).textValue
                        resolved[table.name, default: [:]][change.id] = found ?? Self.store
                    }
                } else {
                    resolved[change.table, default: [:]][change.id] = Self.store
                }
            }
        }
        // Parents first: a row whose parent the write deleted waits for the parent's audience
        // (up to the depth the audience expression follows).
        for _ in 0..<32 where !pending.isEmpty {
            var waiting: [(table: String, id: String, parent: String, parentID: String)] = []
            var live: [String: [(table: String, id: String, parentID: String)]] = [:]
            for item in pending {
                if let audience = resolved[item.parent]?[item.parentID] {
                    resolved[item.table, default: [:]][item.id] = audience
                } else if deleted.contains(item.parent + "\u{0}" + item.parentID) {
                    waiting.append(item)
                } else {
                    live[item.parent, default: []].append((item.table, item.id, item.parentID))
                }
            }
            for (parent, items) in live {
                let found = try audiences(table: parent, ids: Set(items.map(\.parentID)))
                for item in items { resolved[item.table, default: [:]][item.id] = found[item.parentID] ?? Self.store }
            }
            if waiting.count == pending.count { break }
            pending = waiting
        }
        return resolved.mapValues { $0.filter { $0.value != Self.store } }.filter { !$0.value.isEmpty }
    }

    /// The audience an upsert of a change names for its row itself: its audience column's
    /// value (the store's when NULL), or a file record's `audience`. Nil for a row that takes
    /// its parent's (`audience_from`): where it belongs follows its parent as each device holds
    /// it, which a concurrent move changes, so no receiver judges it by that.
    func declaredAudience(of entry: RowEntry) -> String? {
        func value(_ column: String) -> SQLValue? {
            entry.columns.firstIndex(of: column).map { entry.values[$0] }
        }
        if entry.table == "coven_files" { return value("audience")?.textValue ?? Self.store }
        guard let table = manifest.table(entry.table) else { return Self.store }
        if let column = table.audienceColumn { return value(column)?.textValue ?? Self.store }
        if table.audienceFrom != nil { return nil }
        return Self.store
    }

    // MARK: The kept rule

    /// The tables whose rows can be kept back (`coven_files` last, if it can).
    var gatedTables: [String] { graph.gatedTables }

    /// The kept predicate of `table` as SQL over `alias` (``SchemaGraph/keptCondition(table:alias:)``).
    func keptCondition(table: String, alias: String) -> String {
        graph.keptCondition(table: table, alias: alias)
    }

    /// The tables the kept predicate of `table` reads (itself included).
    func dependencies(of table: String) -> Set<String> {
        graph.dependencies(of: table)
    }

    /// Whether each row `ids` of `table` that is here is kept now (one query).
    func kept(table: String, ids: some Collection<String>) throws -> [String: Bool] {
        guard !ids.isEmpty else { return [:] }
        let condition = keptCondition(table: table, alias: "coven_row")
        var result: [String: Bool] = [:]
        let sql = "SELECT coven_row.id AS id, (\(condition)) AS kept FROM main.\(RowCapture.quote(table)) coven_row WHERE coven_row.id IN (SELECT value FROM json_each(?1))"
        for row in try database.query(sql, [RecordedChanges.json(ids: Array(ids))]) {
            if let id = row.string("id") { result[id] = (row.int("kept") ?? 0) != 0 }
        }
        return result
    }

    /// Whether the row `id` of `table` is kept now; nil when there is no such row.
    func isKept(table: String, id: String) throws -> Bool? {
        try kept(table: table, ids: [id])[id]
    }

    /// `table` when it is a synced table of the manifest or `coven_files`.
    ///
    /// - Throws: `.notFound` otherwise.
    func checkKeptTable(_ table: String) throws {
        guard table == "coven_files" || manifest.table(table) != nil else {
            throw CovenError(.notFound, "'\(table)' is not a synced table", hint: "the manifest's tables and coven_files have a kept rule")
        }
    }
}

import Foundation

/// Rows moving between audiences (DESIGN.md "Rows and files across audiences"): a write that
/// changes a row's audience column moves the row and its `audience_from` subtree.
///
/// - Every row of the subtree is written again, so the change carries it whole in the new
///   audience's section: its devices receive the rows.
/// - A file a row of the subtree names gets a new record in the new audience, over the same
///   stored bytes and key (nothing is uploaded), and the row's file cell is rewritten to it;
///   the old record, named by nothing now, is deleted as any is.
/// - Each row is retracted in the old audience's section: its devices drop it, unless they
///   are in the new audience too (the change upserts it there, and the retract is passed
///   over).
///
/// Runs inside the write's transaction, after its SQL; the one owner of the write's temporary
/// table of moves (`temp.coven_write_moves`), which the recorded write reads at its commit to
/// emit the retracts.
struct AudienceMoves {
    let device: Device
    let graph: SchemaGraph
    var database: Database { device.database }
    var manifest: Manifest { device.manifest }

    init(device: Device, graph: SchemaGraph) {
        self.device = device
        self.graph = graph
    }

    /// A row moved, and the audience it left.
    struct Move: Equatable {
        var table: String
        var id: String
        var from: String
        var to: String
    }

    /// Moves every row whose audience column `changes` changed, with its subtree.
    ///
    /// - Parameters:
    ///   - writable: the audiences this member writes (the store and its circles): a row
    ///     leaving another is refused.
    ///   - stamp: the write's stamp.
    /// - Returns: the rows moved (roots and subtrees).
    /// - Throws: `.notInCircle` when a row leaves a circle this member is not in, or a row
    ///   another device retracted from this one is written again under its id.
    func apply(_ changes: RecordedChanges, writable: Set<String>, stamp: String) throws -> [Move] {
        try refuseRetracted(changes)
        let audiences = RowAudiences(graph: graph, database: database)
        var roots: [Move] = []
        try changes.forEachBatch(oldFiles: true) { batch in
            var byTable: [String: [RecordedChange]] = [:]
            for change in batch where change.operation == .update {
                guard let column = manifest.table(change.table)?.audienceColumn, change.oldFiles[column] != nil else { continue }
                byTable[change.table, default: []].append(change)
            }
            for (table, list) in byTable {
                guard let column = manifest.table(table)?.audienceColumn else { continue }
                let now = try audiences.audiences(table: table, ids: list.map(\.id))
                for change in list {
                    let from = change.oldFiles[column]?.textValue ?? RowAudiences.store
                    guard let to = now[change.id], to != from else { continue }
                    roots.append(Move(table: table, id: change.id, from: from, to: to))
                }
            }
        }
        guard !roots.isEmpty else { return [] }
        var moved: [Move] = []
        var seen: Set<String> = []
        for root in roots {
            guard writable.contains(root.from) else {
                throw CovenError(.notInCircle, "row '\(root.id)' of '\(root.table)' would leave circle '\(root.from)', which this device's member is not in",
                                 hint: "a member of the circle moves its rows", details: ["table": root.table, "id": root.id, "circle": root.from])
            }
            for (table, id) in try subtree(table: root.table, id: root.id) where seen.insert(table + "\u{0}" + id).inserted {
                moved.append(Move(table: table, id: id, from: root.from, to: root.to))
            }
        }
        try database.execute("CREATE TEMP TABLE IF NOT EXISTS coven_write_moves (tbl TEXT NOT NULL, id TEXT NOT NULL, old_audience TEXT NOT NULL, PRIMARY KEY (tbl, id))")
        let rootKeys = Set(roots.map { $0.table + "\u{0}" + $0.id })
        for move in moved {
            // The subtree's rows are written again (the root was), stamped with the write.
            if !rootKeys.contains(move.table + "\u{0}" + move.id) {
                try database.run("UPDATE main.\(RowCapture.quote(move.table)) SET _updated_at = ?1 WHERE id = ?2", [stamp, move.id])
            }
            try rewriteFiles(of: move, stamp: stamp)
            try database.run("INSERT OR REPLACE INTO temp.coven_write_moves (tbl, id, old_audience) VALUES (?1, ?2, ?3)", [move.table, move.id, move.from])
        }
        return moved
    }

    /// Refuses a write that inserts a row, of a table with an audience column, that another
    /// device retracted from this one: the row lives on where this device's member does not read
    /// it (moved into a circle it is not in, or kept back by its writer's gate), and writing its
    /// id again would take it out of there, a move only that circle's members make. Every
    /// receiver refuses such an entry too (``MemberAuthorizer``); this says so first, and
    /// records nothing.
    private func refuseRetracted(_ changes: RecordedChanges) throws {
        let tombstones = Tombstones(database: database)
        try changes.forEachBatch(oldFiles: false) { batch in
            for change in batch where change.operation == .insert && manifest.table(change.table)?.audienceColumn != nil {
                guard try tombstones.isRetracted(table: change.table, id: change.id) else { continue }
                throw CovenError(.notInCircle, "row '\(change.id)' of '\(change.table)' was retracted from this device: it lives on where this device's member does not read it (a circle it is not in)",
                                 hint: "a member of that circle changes the row; a new row takes a new id", details: ["table": change.table, "id": change.id])
            }
        }
    }

    /// The row and every row below it through `audience_from`, parents first.
    private func subtree(table: String, id: String) throws -> [(String, String)] {
        var result: [(String, String)] = [(table, id)]
        var queue: [(String, String, Int)] = [(table, id, 0)]
        while !queue.isEmpty {
            let (parent, parentID, depth) = queue.removeFirst()
            guard depth < 32 else { continue }
            for child in manifest.tables where child.audienceFrom != nil {
                guard let edge = graph.parents[child.name]?.first(where: { $0.column == child.audienceFrom && $0.parent == parent }) else { continue }
                let ids = try database.query("""
                    SELECT c.id AS id FROM main.\(RowCapture.quote(child.name)) c
                    WHERE c.\(RowCapture.quote(edge.column)) = (SELECT p.\(RowCapture.quote(edge.parentColumn)) FROM main.\(RowCapture.quote(parent)) p WHERE p.id = ?1)
                    ORDER BY c.id
                    """, [parentID]).compactMap { $0.string("id") }
                for childID in ids {
                    result.append((child.name, childID))
                    queue.append((child.name, childID, depth + 1))
                }
            }
        }
        return result
    }

    /// Gives each file `move`'s row names a record in the new audience over the same bytes and
    /// key, and points the row's cell at it.
    private func rewriteFiles(of move: Move, stamp: String) throws {
        guard let table = manifest.table(move.table), !table.files.isEmpty else { return }
        let columns = table.files.map(\.column)
        guard let row = try database.queryOne("SELECT \(columns.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(move.table)) WHERE id = ?1",
                                              [move.id]) else { return }
        for column in columns {
            guard let fileID = row[column].textValue, let record = try device.fileRecord(fileID), record.audience != move.to else { continue }
            let newID = Identifier.uuid7()
            try device.fileRecords.insert(id: newID, audience: move.to, namespace: record.namespace, size: record.size, hash: record.hash,
                                          coordinates: record.coordinates, stamp: stamp)
            try database.run("UPDATE main.\(RowCapture.quote(move.table)) SET \(RowCapture.quote(column)) = ?1, _updated_at = ?2 WHERE id = ?3",
                             [newID, stamp, move.id])
        }
    }

    /// The retracts a write's moves publish, one per row moved, stamped `stamp` (the write's,
    /// final); the audience each left is kept (`coven_audience_moves`) until the change that
    /// retracts it there is frozen (``leftAudience(of:)``). Empty when the write moved nothing.
    static func retracts(in database: Database, stamp: String) throws -> [RowEntry] {
        guard try database.scalar("SELECT count(*) FROM temp.sqlite_master WHERE name = 'coven_write_moves'").intValue == 1 else { return [] }
        let tombstones = Tombstones(database: database)
        let entries = try database.query("SELECT tbl, id, old_audience FROM temp.coven_write_moves ORDER BY rowid").compactMap { row -> RowEntry? in
            guard let table = row.string("tbl"), let id = row.string("id"), let from = row.string("old_audience") else { return nil }
            // Its tombstone in the audience it left (the row lives on in the other): a delete of
            // it there that crossed the move is heard (MemberAuthorizer).
            try tombstones.set(table: table, id: id, stamp: stamp, audience: from)
            return RowEntry(kind: .retract, table: table, id: id, stamp: stamp)
        }
        try database.run("""
            INSERT OR REPLACE INTO main.coven_audience_moves (tbl, id, stamp, old_audience) SELECT tbl, id, ?1, old_audience FROM temp.coven_write_moves
            """, [stamp])
        try database.execute("DROP TABLE temp.coven_write_moves")
        return entries
    }

    /// Records a retract ``CrossedMoves`` publishes: the row leaves `audience` at `stamp` (a
    /// winner's, written elsewhere or earlier). False when that retract is recorded already.
    static func recordCrossed(table: String, id: String, stamp: String, audience: String, in database: Database) throws -> Bool {
        try database.run("""
            INSERT INTO coven_audience_moves (tbl, id, stamp, old_audience, crossed) VALUES (?1, ?2, ?3, ?4, 1) ON CONFLICT DO NOTHING
            """, [table, id, stamp, audience])
        return database.changes > 0
    }

    /// Whether a retract is one ``CrossedMoves`` published: the losing image it ends was
    /// published in that audience by another device, so peers hold the row there whatever
    /// this device's gate says of it.
    static func isCrossed(_ entry: RowEntry, in database: Database) throws -> Bool {
        guard entry.kind == .retract else { return false }
        return try database.scalar("SELECT crossed FROM coven_audience_moves WHERE tbl = ?1 AND id = ?2 AND stamp = ?3",
                                   [entry.table, entry.id, entry.stamp]).intValue == 1
    }

    /// The audience a retract of a move takes the row out of; nil for any other retract.
    static func leftAudience(of entry: RowEntry, in database: Database) throws -> String? {
        guard entry.kind == .retract else { return nil }
        return try database.scalar("SELECT old_audience FROM coven_audience_moves WHERE tbl = ?1 AND id = ?2 AND stamp = ?3",
                                   [entry.table, entry.id, entry.stamp]).textValue
    }

    /// Forgets the moves whose retracts `entries` are, once their change is frozen (inside its
    /// transaction).
    static func forget(_ entries: [RowEntry], in database: Database) throws {
        for entry in entries where entry.kind == .retract {
            try database.run("DELETE FROM coven_audience_moves WHERE tbl = ?1 AND id = ?2 AND stamp = ?3", [entry.table, entry.id, entry.stamp])
        }
    }
}

import Foundation

/// Rows taken out because their parent was gone (a pull applied its delete: ``ChangeApplier``)
/// come back once every parent they name is here again, because a later write kept it (a
/// concurrent edit that won over the delete, applied by a pull, or this device's own write of
/// the same id): the newest taken-out image of each, unless a write of the row itself (a row
/// here, or a tombstone) came since. So do rows taken out for a file record this device did
/// not hold, once the record arrives (a change published again after damage holds a row whose
/// record's newest image travels in a later change). So a device holds such a row exactly when it holds its
/// parents, in whatever order the changes came, as on the devices where it never left. A row
/// that comes back may bring back its own children in turn.
///
/// Called inside the caller's transaction: the pull's (nothing it does is published), or a
/// recorded write's, which then publishes the rows that came back as its own.
struct TakenOutRows {
    let device: Device
    let graph: SchemaGraph
    var database: Database { device.database }

    /// Whether any row taken out for its parent waits to come back (a cheap look before
    /// reading the schema's foreign keys).
    static func waiting(in database: Database) throws -> Bool {
        try database.scalar("SELECT EXISTS (SELECT 1 FROM coven_lost_values WHERE why IN ('parent_deleted', 'file_deleted') AND restored_at IS NULL)").intValue == 1
    }

    /// Brings back what can come back; returns the rows that did.
    ///
    /// - Parameter stamp: a recorded write's stamp, which the rows that come back take (they are
    ///   published as its own); nil for a pull, where they keep their own.
    @discardableResult
    func restore(stamp: String? = nil) throws -> [(table: String, id: String)] {
        var restored: [(table: String, id: String)] = []
        var again = true
        while again {
            again = false
            var seen: Set<String> = []
            for lost in try database.query("""
                SELECT tbl, row_id, entry FROM coven_lost_values
                WHERE why IN ('parent_deleted', 'file_deleted') AND restored_at IS NULL ORDER BY stamp DESC, id DESC
                """) {
                guard let table = lost.string("tbl"), let id = lost.string("row_id"), seen.insert(table + "\u{0}" + id).inserted,
                      let entry = try RowEntryCodec.decode(lost.bytes("entry") ?? []).first, entry.kind == .upsert,
                      try canComeBack(entry) else { continue }
                if try bringBackFiles(entry) == false { continue }
                let statement = try database.cached(RowEntry.upsertSQL(table: table, columns: entry.columns))
                try statement.bind(stamp.map { stamp in zip(entry.columns, entry.values).map { $0.0 == "_updated_at" ? .text(stamp) : $0.1 } } ?? entry.values)
                try statement.runToEnd()
                try SyncState(database: database).markTakenOutRestored(table: table, id: id)
                restored.append((table, id))
                again = true
            }
        }
        return restored
    }

    /// Whether no write of the row as new as it is here (a row, or a tombstone), and every
    /// parent it names is here.
    private func canComeBack(_ entry: RowEntry) throws -> Bool {
        let quoted = RowCapture.quote(entry.table)
        // An older write of the row that arrived since (its parent here again) does not keep
        // the newer one out: it wins here as it did where it was never taken out.
        if let here = try database.scalar("SELECT _updated_at FROM main.\(quoted) WHERE id = ?1", [entry.id]).textValue, here >= entry.stamp { return false }
        if let tombstone = try Tombstones(database: database).stamp(table: entry.table, id: entry.id), tombstone >= entry.stamp { return false }
        for edge in (graph.parents[entry.table] ?? []) + (graph.selfEdges[entry.table] ?? []) {
            guard let value = entry.value(edge.column), !value.isNull else { continue }
            let found = try database.scalar("""
                SELECT count(*) FROM main.\(RowCapture.quote(edge.parent)) WHERE \(RowCapture.quote(edge.parentColumn)) = ?1
                """, [value])
            if (found.intValue ?? 0) == 0 { return false }
        }
        return true
    }

    /// Brings back the file records the row names that no row names here now (their images:
    /// FileRecords' register); false, bringing nothing back, when one is known here no more.
    private func bringBackFiles(_ entry: RowEntry) throws -> Bool {
        let records = device.fileRecords
        var missing: [String] = []
        for column in device.manifest.table(entry.table)?.files ?? [] {
            guard let file = entry.value(column.column)?.textValue, try device.fileRecord(file) == nil else { continue }
            guard try records.image(file) != nil else { return false }
            missing.append(file)
        }
        for file in missing { _ = try records.bringBack(file) }
        return true
    }
}

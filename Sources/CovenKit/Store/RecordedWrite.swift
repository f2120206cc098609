import Foundation

/// One change of one row by a recorded write, its firings folded together: an insert then an
/// update is an insert, an insert then a delete is nothing.
struct RecordedChange {
    enum Operation { case insert, update, delete }
    var table: String
    var id: String
    var operation: Operation
    /// The file columns' values before the write (updates and deletes).
    var oldFiles: [String: SQLValue]
}

/// The one way a write is recorded for publishing (DESIGN.md "What a write records"): app
/// writes, an upload's switch to stored, moves and make-device-only all go through it.
///
/// It takes the write's hybrid-clock stamp, captures every row the write changes in the synced
/// tables and `coven_files` (cascades and triggers included, generated columns no obstacle:
/// ``RowCapture``), and at the end appends to the outbox, in the write's own transaction, a
/// **row image** of every inserted or updated row (every stored column, typed) and a
/// **tombstone** of every deleted row, all with the write's stamp.
///
/// Use ``Device/recordWrite(_:)``: it opens one inside the caller's transaction, ends the capture
/// on every path and commits the record when the body returns.
final class RecordedWrite {
    let device: Device
    /// The write's stamp: what `coven_stamp()` returns and every changed row's `_updated_at`.
    let stamp: String
    /// Objects whose upload this write's publication waits for (bound references).
    var waitsFor: Set<String> = []

    private let capture: RowCapture
    private let fileColumns: [String: [String]]

    /// The tables a write records: the manifest's synced tables and `coven_files`.
    static func recordedTables(_ manifest: Manifest) -> [(name: String, fileColumns: [String])] {
        manifest.tables.map { ($0.name, $0.files.map(\.column)) } + [("coven_files", [])]
    }

    fileprivate init(device: Device) throws {
        precondition(device.database.inTransaction, "internal error: a recorded write runs inside a transaction")
        self.device = device
        stamp = try HybridClock.next(device: device)
        capture = try RowCapture.of(device.database)
        let tables = Self.recordedTables(device.manifest)
        fileColumns = Dictionary(tables.map { ($0.name, $0.fileColumns) }, uniquingKeysWith: { first, _ in first })
        try capture.prepare(tables: tables)
        capture.active = true
    }

    fileprivate func end() { capture.active = false }

    /// The rows changed so far, one change per row, in the order the write first touched them.
    func changes() throws -> [RecordedChange] {
        struct Folded { var existedBefore: Bool; var oldFiles: [String: SQLValue]; var existsAfter: Bool }
        var order: [(String, String)] = []
        var folded: [String: [String: Folded]] = [:]
        for event in try capture.events(fileColumns: fileColumns) {
            if var known = folded[event.table]?[event.id] {
                known.existsAfter = event.operation != .delete
                folded[event.table]![event.id] = known
            } else {
                order.append((event.table, event.id))
                folded[event.table, default: [:]][event.id] = Folded(
                    existedBefore: event.operation != .insert, oldFiles: event.oldFiles, existsAfter: event.operation != .delete)
            }
        }
        var changes: [RecordedChange] = []
        for (table, id) in order {
            guard let row = folded[table]?[id] else { continue }
            switch (row.existedBefore, row.existsAfter) {
            case (false, true): changes.append(RecordedChange(table: table, id: id, operation: .insert, oldFiles: [:]))
            case (true, true): changes.append(RecordedChange(table: table, id: id, operation: .update, oldFiles: row.oldFiles))
            case (true, false): changes.append(RecordedChange(table: table, id: id, operation: .delete, oldFiles: row.oldFiles))
            case (false, false): continue
            }
        }
        return changes
    }

    /// Appends the write's row images and tombstones to the outbox, in pieces of about
    /// ``Outbox/pieceBytes`` so no write is held whole in memory twice.
    ///
    /// - Returns: the number of entries recorded.
    @discardableResult
    fileprivate func commit() throws -> Int {
        capture.active = false
        let changes = try changes()
        guard !changes.isEmpty else { return 0 }
        let database = device.database
        var columnsOf: [String: [String]] = [:]
        func columns(_ table: String) throws -> [String] {
            if let known = columnsOf[table] { return known }
            // Generated columns (hidden 2 and 3) are never published: each device computes them.
            let names = try database.query("SELECT name FROM pragma_table_xinfo(?1) WHERE hidden = 0 ORDER BY cid", [table]).compactMap { $0.string("name") }
            columnsOf[table] = names
            return names
        }
        let outbox = Outbox(database: database)
        let sync = SyncState(database: database)
        var piece = Outbox.Piece()
        var recorded = 0
        // Row images are read table by table, a batch of ids at a time, then emitted in the
        // write's order.
        var index = 0
        while index < changes.count {
            let batch = changes[index..<min(changes.count, index + 500)]
            index += batch.count
            var images: [String: [String: [SQLValue]]] = [:]
            var idsByTable: [String: [String]] = [:]
            for change in batch where change.operation != .delete { idsByTable[change.table, default: []].append(change.id) }
            for (table, ids) in idsByTable {
                let names = try columns(table)
                let list = names.map(RowCapture.quote).joined(separator: ", ")
                let json = String(decoding: try JSONSerialization.data(withJSONObject: ids), as: UTF8.self)
                let statement = try database.prepare("SELECT \(list) FROM main.\(RowCapture.quote(table)) WHERE id IN (SELECT value FROM json_each(?1))")
                try statement.bind([json])
                while let row = try statement.next() {
                    guard let id = row["id"].textValue else { continue }
                    images[table, default: [:]][id] = row.values
                }
            }
            for change in batch {
                let entry: RowEntry
                if change.operation != .delete, let values = images[change.table]?[change.id] {
                    entry = RowEntry(kind: .upsert, table: change.table, id: change.id, stamp: stamp, columns: try columns(change.table), values: values)
                } else {
                    entry = RowEntry(kind: .delete, table: change.table, id: change.id, stamp: stamp)
                    try sync.setTombstone(table: change.table, id: change.id, stamp: stamp)
                }
                piece.add(entry)
                recorded += 1
                if piece.bytes.count >= Outbox.pieceBytes {
                    try outbox.append(piece, stamp: stamp, waitsFor: waitsFor)
                    piece = Outbox.Piece()
                }
            }
        }
        if piece.count > 0 { try outbox.append(piece, stamp: stamp, waitsFor: waitsFor) }
        return recorded
    }
}

extension Device {
    /// Runs `body` as one recorded write inside the caller's transaction: the changes it makes
    /// to synced tables and `coven_files` are captured and appended to the outbox as row images
    /// and tombstones, with the write's stamp, when it returns. Nothing is recorded when it
    /// throws (the caller's transaction rolls back).
    func recordWrite<T>(_ body: (RecordedWrite) throws -> T) throws -> T {
        let write = try RecordedWrite(device: self)
        defer { write.end() }
        let result = try body(write)
        try write.commit()
        return result
    }
}

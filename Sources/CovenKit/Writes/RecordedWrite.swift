import Foundation

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
    /// A write that changes a row stamped after it (by a device whose clock runs ahead) is
    /// stamped again, after that row, when it commits (``HybridClock/after(_:device:)``).
    private(set) var stamp: String
    /// Objects whose upload this write's publication waits for (bound references).
    var waitsFor: Set<String> = []

    private let capture: RowCapture
    private let fileColumns: [String: [String]]
    /// The stored columns of each table whose images the write read (``columns(_:)``).
    private var columnsOf: [String: [String]] = [:]

    /// The tables a write records: the manifest's synced tables and `coven_files`, each with
    /// the columns whose old values the capture keeps: its file columns, the owner column of
    /// an owner-only table, the audience column or the `audience_from` column, and a file
    /// record's audience (``RecordedChange/oldFiles`` holds them).
    static func recordedTables(_ manifest: Manifest) -> [(name: String, fileColumns: [String])] {
        var tables: [(name: String, fileColumns: [String])] = manifest.tables.map { table in
            var columns: [String] = table.files.map(\.column)
            columns += [table.ownerColumn, table.audienceColumn, table.audienceFrom].compactMap { $0 }
            return (table.name, columns)
        }
        tables.append(("coven_files", ["audience"]))
        // The store's settings travel as rows (Sync/StoreSettings.swift).
        tables.append((StoreSettings.table, []))
        return tables
    }

    fileprivate init(device: Device) throws {
        precondition(device.database.inTransaction, "internal error: a recorded write runs inside a transaction")
        self.device = device
        stamp = try HybridClock.next(device: device)
        capture = try RowCapture.of(device.database)
        capture.ownStamp = stamp
        let tables = Self.recordedTables(device.manifest)
        fileColumns = Dictionary(tables.map { ($0.name, $0.fileColumns) }, uniquingKeysWith: { first, _ in first })
        try capture.prepare(tables: tables)
        capture.active = true
    }

    fileprivate func end() { capture.active = false }

    /// The rows changed so far, one change per row, in the order the write first touched them.
    /// They stay readable until the next call or the commit.
    func changes() throws -> RecordedChanges {
        try capture.fold()
        return RecordedChanges(capture: capture, fileColumns: fileColumns, generation: capture.generation)
    }

    /// Causality: when a row the write updated or deleted was stamped after the write's stamp,
    /// or a row it inserted was deleted after it (a device whose clock runs ahead wrote them,
    /// and the receive rule did not follow it that far), the write is stamped again after the
    /// newest of those, so it beats what it was made after, on every device.
    private func stampAfterWhatItChanged() throws {
        let database = device.database
        let tombstone = try database.scalar("""
            SELECT max(t.stamp) FROM temp.coven_capture_rows r JOIN main.coven_tombstones t ON t.tbl = r.tbl AND t.id = r.id
            """).textValue
        let floor = max(capture.newestOldStamp ?? "", tombstone ?? "")
        guard floor >= stamp else { return }
        let fresh = try HybridClock.after(floor, device: device)
        for table in Set(try database.query("SELECT DISTINCT tbl FROM temp.coven_capture_rows").compactMap { $0.string("tbl") }) {
            try database.run("""
                UPDATE main.\(RowCapture.quote(table)) SET _updated_at = ?1
                WHERE _updated_at = ?2 AND id IN (SELECT id FROM temp.coven_capture_rows WHERE tbl = ?3)
                """, [fresh, stamp, table])
        }
        stamp = fresh
        capture.ownStamp = fresh
    }

    /// Appends the write's row images and tombstones to the outbox, in pieces of about
    /// ``Outbox/pieceBytes`` so no write is held whole in memory twice.
    ///
    /// - Returns: the number of entries recorded.
    @discardableResult
    fileprivate func commit() throws -> Int {
        capture.active = false
        let changes = try changes()
        let database = device.database
        try stampAfterWhatItChanged()
        let outbox = Outbox(database: database)
        let tombstones = Tombstones(database: database)
        var piece = Outbox.Piece()
        var recorded = 0
        // The audience each deleted row was in: its tombstone keeps it, and the push sends the
        // delete in that audience's section.
        let rowAudiences = try RowAudiences(device: device)
        let placing = device.manifest.tables.contains { rowAudiences.placesAudience($0.name) }
        let deletedAudiences = try placing && changes.hasDeletes() ? rowAudiences.audiencesOfDeleted(changes) : [:]
        // The rows it deletes go to the trash with their last images (Trash), each with the
        // row whose delete took it along; rows it writes are in the trash no more.
        let trash = Trash(device)
        let deletes = try changes.hasDeletes()
        let trashHolds = try trash.begin()
        let graph = deletes ? try device.schemaGraph() : nil
        // Rows the write moved to another audience leave the old one first (AudienceMoves).
        for retract in try AudienceMoves.retracts(in: database, stamp: stamp) {
            piece.add(retract)
            recorded += 1
        }
        // Everything in the write's order, each row right after the file records it names that
        // the write puts and has not recorded yet (a put function's record is captured after
        // its row's statement), and the records the write deletes last. A write too big for one
        // change is published in several, cut only between a row and the next: a device
        // applying them one by one finds a row's records in the row's change, or it would take
        // the row out until they came; and finds each record's rows beside it, or it would end
        // the record at the change's end (a tombstone and a gc candidate) and bring it back with
        // the row (records all first made that 100,000 times for a library imported at once).
        let isRecordDelete: (RecordedChange) -> Bool = { $0.table == "coven_files" && $0.operation == .delete }
        for pass in [false, true] {
            // Row images are read table by table, a batch of ids at a time, then emitted in the
            // write's order.
            try changes.forEachBatch(oldFiles: false) { all in
                let batch = all.filter { isRecordDelete($0) == pass }
                guard !batch.isEmpty else { return }
                var images = try self.images(of: batch)
                let named = pass ? [:] : try recordsAhead(of: batch, images: &images)
                // Records going out ahead of their turn: marked in the capture, so the batches
                // read after this one leave them out, and skipped in this one. (The put
                // functions' records come after every row of a write --each: a set of them
                // held 14 MiB at 100,000.)
                var ahead: Set<String> = []
                for records in named.values { for record in records { ahead.insert(record.id) } }
                try capture.markSent(Array(ahead))
                var sent: Set<String> = []
                for change in batch {
                    if change.table == "coven_files", ahead.contains(change.id) { continue }
                    for record in named[change.pos] ?? [] where sent.insert(record.id).inserted {
                        piece.add(try entry(record, images: images, trashHolds: trashHolds, trash: trash))
                        recorded += 1
                    }
                    let entry: RowEntry
                    if change.operation != .delete, images[change.table]?[change.id] != nil {
                        entry = try self.entry(change, images: images, trashHolds: trashHolds, trash: trash)
                    } else {
                        entry = RowEntry(kind: .delete, table: change.table, id: change.id, stamp: stamp)
                        let audience = deletedAudiences[change.table]?[change.id] ?? RowAudiences.store
                        let page = try graph.flatMap { try trashDeleted(change, audience: audience, graph: $0, trash: trash) }
                        try tombstones.set(table: change.table, id: change.id, stamp: stamp, audience: audience, trash: page)
                    }
                    piece.add(entry)
                    recorded += 1
                    if piece.bytes.count >= Outbox.pieceBytes {
                        try outbox.append(piece, stamp: stamp, waitsFor: waitsFor)
                        piece = Outbox.Piece()
                    }
                }
            }
        }
        if piece.count > 0 { try outbox.append(piece, stamp: stamp, waitsFor: waitsFor) }
        try trash.finish()
        return recorded
    }

    /// The upsert entry of `change`, whose image is in `images`; a row written is in the trash
    /// no more.
    private func entry(_ change: RecordedChange, images: [String: [String: [SQLValue]]], trashHolds: Bool, trash: Trash) throws -> RowEntry {
        if trashHolds, change.operation == .insert { try trash.forget(table: change.table, id: change.id) }
        return RowEntry(kind: .upsert, table: change.table, id: change.id, stamp: stamp, columns: try columns(change.table),
                        values: images[change.table]?[change.id] ?? [])
    }

    /// The file records each row of `batch` names that the write puts and first touched after
    /// the row (by the row's position), to be recorded ahead of it; their images are added to
    /// `images`.
    private func recordsAhead(of batch: [RecordedChange], images: inout [String: [String: [SQLValue]]]) throws -> [Int64: [RecordedChange]] {
        var files: [String: [Int64]] = [:]
        for change in batch where change.table != "coven_files" && change.operation != .delete {
            guard let spec = device.manifest.table(change.table), !spec.files.isEmpty, let values = images[change.table]?[change.id] else { continue }
            let names = try columns(change.table)
            for column in spec.files {
                guard let index = names.firstIndex(of: column.column), index < values.count, let file = values[index].textValue else { continue }
                files[file, default: []].append(change.pos)
            }
        }
        guard !files.isEmpty, let first = batch.first?.pos else { return [:] }
        var ahead: [(row: Int64, record: RecordedChange)] = []
        var missing: [RecordedChange] = []
        for record in try capture.recordsPut(Array(files.keys), after: first) {
            // Ahead of the first row naming it that comes before it.
            guard let row = files[record.id]?.filter({ $0 < record.pos }).min() else { continue }
            let change = RecordedChange(table: "coven_files", id: record.id, operation: record.inserted ? .insert : .update, oldFiles: [:], pos: record.pos)
            ahead.append((row, change))
            if images["coven_files"]?[record.id] == nil { missing.append(change) }
        }
        for (table, rows) in try self.images(of: missing) {
            for (id, values) in rows { images[table, default: [:]][id] = values }
        }
        // A record with no image (neither live nor kept) goes at its own turn, as a delete.
        var named: [Int64: [RecordedChange]] = [:]
        for (row, record) in ahead.sorted(by: { $0.record.pos < $1.record.pos }) where images["coven_files"]?[record.id] != nil {
            named[row, default: []].append(record)
        }
        return named
    }

    /// The stored columns of `table` (generated columns, hidden 2 and 3, are never published:
    /// each device computes them), read once per write.
    private func columns(_ table: String) throws -> [String] {
        if let known = columnsOf[table] { return known }
        let names = try device.database.storedColumns(table)
        columnsOf[table] = names
        return names
    }

    /// The row images of the rows `batch` inserts or updates, by table and id: read table by
    /// table, a batch of ids at a time. A file record no row names is written as its image
    /// (FileRecords' register).
    private func images(of batch: [RecordedChange]) throws -> [String: [String: [SQLValue]]] {
        var images: [String: [String: [SQLValue]]] = [:]
        var idsByTable: [String: [String]] = [:]
        for change in batch where change.operation != .delete { idsByTable[change.table, default: []].append(change.id) }
        for (table, ids) in idsByTable {
            let list = try columns(table).map(RowCapture.quote).joined(separator: ", ")
            let sources = table == "coven_files" ? ["coven_files", "coven_deleted_files"] : [table]
            for source in sources {
                let statement = try device.database.prepare("SELECT \(list) FROM main.\(RowCapture.quote(source)) WHERE id IN (SELECT value FROM json_each(?1))")
                try statement.bind([RecordedChanges.json(ids: ids)])
                while let row = try statement.next() {
                    guard let id = row["id"].textValue, images[table]?[id] == nil else { continue }
                    images[table, default: [:]][id] = row.values
                }
            }
        }
        return images
    }

    /// Puts the last image of a row the write deleted in the trash, with the row whose delete
    /// took it along; returns the page holding it, for its tombstone. Whether the write deleted
    /// the parent too is asked of the folded changes, not of a set of every row deleted (26 MiB
    /// at 100,000).
    private func trashDeleted(_ change: RecordedChange, audience: String, graph: SchemaGraph, trash: Trash) throws -> Int64? {
        guard let image = try capture.image(table: change.table, id: change.id) else { return nil }
        var failure: Error?
        let parent = Trash.parent(of: change.table, columns: image.columns, values: image.values, graph: graph) {
            do { return try capture.deletes(table: $0, id: $1) } catch { failure = error; return false }
        }
        if let failure { throw failure }
        return try trash.record(table: change.table, id: change.id, columns: image.columns, values: image.values, stamp: stamp,
                                writer: device.deviceID, seq: nil, audience: audience, parent: parent)
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
        // Rows a pull took out for a parent (or a file record) this write keeps come back with
        // it, whatever the write is (the app's SQL, a lost value restored), and are published
        // as this write's (Sync/TakenOutRows.swift).
        if try TakenOutRows.waiting(in: database) {
            try TakenOutRows(device: self, graph: try schemaGraph()).restore(stamp: write.stamp)
        }
        try write.commit()
        return result
    }
}

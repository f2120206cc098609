import CSQLite
import Foundation

/// What applying one change did.
struct ApplyReport {
    var applied = 0
    /// Of those, entries of coven's own file records, and the records they are.
    var appliedFileEntries = 0
    var appliedFileRecords: Set<String> = []
    var skipped = 0
    var lost = 0
    /// Entries the authorizer refused: kept as lost values, never applied.
    var refused = 0
    var takenOut = 0
    /// Rows taken out earlier that came back with their parent.
    var restored = 0
    /// Objects whose cached bytes go after the commit (a record deleted, or made device-only
    /// elsewhere).
    var uncache: Set<String> = []
    /// How far the change's writer stamps ahead of this device's wall clock, when past
    /// ``HybridClock/maximumAhead`` (milliseconds).
    var clockAhead: Int64?
    /// Rows of synced tables the change deleted here, by table.
    var deletedRows: [String: Int] = [:]
    /// The change deleted many rows at once (``Trash/judgeMassDelete(writer:seq:deleted:)``).
    var massDelete: MassDelete?
}

/// Applies another device's change (DESIGN.md "Pull"): in one transaction with foreign keys
/// deferred, each entry by last writer wins against `max(local _updated_at, local tombstone)`,
/// with upserts (never REPLACE, so no cascade fires for an update), lost values for the losing
/// side of a concurrent edit, take-outs for rows left without their parent or file, and the
/// clock moved past the newest stamp applied. Nothing it does is recorded for publishing.
struct ChangeApplier {
    let device: Device
    var database: Database { device.database }
    var sync: SyncState { SyncState(database: database) }
    private var columnsOf: [String: [String]] = [:]
    /// Statement texts built once per table (and per column list), not once per entry.
    private var selectSQL: [String: String] = [:]
    private var upsertSQL: [String: [[String]: String]] = [:]
    /// The statements of the last table and shape applied, held (reset before each use): a
    /// change's rows mostly share one, and looking each up again by its SQL cost a pull of
    /// 100,000 rows a hash of three statements' text a row.
    private var lastUpsert: (table: String, columns: [String], statement: Statement)?
    private var lastSelect: (table: String, statement: Statement)?
    /// The tables whose rows can be kept back (``SchemaGraph``), whose applied rows are
    /// recorded as held by peers.
    private var gated: Set<String> = []
    /// The judge of images that crossed a row's move (``CrossedMoves``), made again with the
    /// gated tables of each change applied.
    private var crossed: CrossedMoves

    /// The synced tables' foreign keys, and the rows the change being applied deletes (with
    /// the stamps of those deletes).
    private var graph: SchemaGraph?
    private var deletedByChange: [RowKey: String] = [:]
    private struct RowKey: Hashable {
        var table: String
        var id: String
    }

    /// The file records' owner for this applier: it keeps the copies to remove after a commit.
    private let records: FileRecords
    /// The file records whose liveness the change being applied may have changed (written,
    /// deleted, or named by a row taken out), with what would end each (``settleFiles(report:)``).
    private var unsettled: [String: FileRecords.End] = [:]
    /// What ends a record that the change being applied leaves unnamed, when the change holds
    /// no delete of it: the change itself.
    private var changeEnd: FileRecords.End = ("", nil, "")
    /// Whether the change's signer may write each entry.
    private var authorizer: any ChangeAuthorizer
    /// The trash, which keeps the last image of every row a change deletes here; whether it
    /// held rows when the change began (a row written back is forgotten from it only then).
    private let trash: Trash
    private var trashHolds = false

    init(device: Device, authorizer: any ChangeAuthorizer = AcceptEveryEntry()) {
        self.device = device
        self.authorizer = authorizer
        records = FileRecords(device: device)
        crossed = CrossedMoves(device: device, gated: [])
        trash = Trash(device)
    }

    /// How a change is applied.
    enum Source {
        /// Pulled: its seq and frontier are recorded, its circles' sections remembered.
        case pulled
        /// Sections of a change applied before, opened now with a key learned since
        /// (``CircleSections/backfill(device:provider:keys:authorizer:stop:)``): its seq and
        /// frontier are not recorded again.
        case backfill
        /// The rows of a snapshot's part (``SnapshotParts``) given as a change of the device
        /// that made it: applied as a backfill, and no section of it is remembered (the part's
        /// reader marks those it covers).
        case snapshotPart
    }

    @discardableResult
    mutating func apply(_ change: ChangeObject, path: String, as source: Source = .pulled) throws -> ApplyReport {
        var report = ApplyReport()
        let local = device.schemaVersion
        if change.schema.migrations > local.count {
            throw CovenError(.updateRequired, "change '\(path)' was written under \(change.schema.migrations.counted("migration")); this device has \(local.count)",
                             hint: "run 'coven migrate --manifest FILE' with the store's newer manifest", details: ["object": path, "device": change.device])
        }
        let graph = try device.schemaGraph()
        self.graph = graph
        gated = Set(graph.gatedTables)
        crossed = CrossedMoves(device: device, gated: gated)
        deletedByChange = Dictionary(change.entries.filter { $0.kind != .upsert }.map { (RowKey(table: $0.table, id: $0.id), $0.stamp) },
                                     uniquingKeysWith: { max($0, $1) })
        unsettled = [:]
        changeEnd = (change.device, Int64(change.seq), change.entries.map(\.stamp).max() ?? "")
        try database.execute("BEGIN IMMEDIATE")
        do {
            try database.execute("PRAGMA defer_foreign_keys = ON")
            trashHolds = try trash.begin()
            var touched = try applyEntries(of: change, path: path, report: &report)
            try trash.finish()
            if source == .pulled {
                report.massDelete = try trash.judgeMassDelete(writer: change.device, seq: Int64(change.seq), deleted: report.deletedRows)
            }
            let restored = try TakenOutRows(device: device, graph: graph).restore()
            report.restored += restored.count
            for row in restored { touched[row.table, default: []].insert(row.id) }
            try takeOutRowsNamingMissingFiles(touched: touched, report: &report)
            // A row another device wrote can make rows here kept that peers never held (the
            // notes of an album kept back here, shared again by a newer write from elsewhere):
            // the next push sends them (GateFilter).
            if gated.contains(where: { !graph.dependencies(of: $0).isDisjoint(with: touched.keys) }) {
                try SyncFlags(database: device.database).markGateDue()
            }
            try settleFiles(report: &report)
            try record(change, as: source, report: &report)
            try SyncFlags(database: device.database).notePull(at: Timestamp.iso8601(Date()))
            try commitTakingOutOrphans(report: &report)
        } catch {
            if database.inTransaction { try? database.execute("ROLLBACK") }
            records.removals.removeAll()
            throw error
        }
        for copy in records.removals { copy.remove() }
        records.removals.removeAll()
        return report
    }

    /// Applies the entries of `change` this device reads, section by section; the rows they
    /// changed here, by table.
    private mutating func applyEntries(of change: ChangeObject, path: String, report: inout ApplyReport) throws -> [String: Set<String>] {
        var touched: [String: Set<String>] = [:]
        // A row moved between two audiences this device reads is upserted in one section
        // and retracted in the other by the same write: it stays. (An older image of it in
        // the change does not keep it.)
        var upserted: [RowKey: String] = [:]
        if change.sections.contains(where: { $0.entries.contains { $0.kind == .retract } }) {
            for section in change.sections {
                for entry in section.entries where entry.kind == .upsert {
                    let key = RowKey(table: entry.table, id: entry.id)
                    if entry.stamp > upserted[key] ?? "" { upserted[key] = entry.stamp }
                }
            }
        }
        for section in change.sections {
            for entry in section.entries {
                if entry.kind == .retract, let newest = upserted[RowKey(table: entry.table, id: entry.id)], newest >= entry.stamp {
                    // The row moved out of this audience: its tombstone there says it was
                    // here (a delete of it that crossed the move is heard: MemberAuthorizer).
                    try sync.tombstones.set(table: entry.table, id: entry.id, stamp: entry.stamp, audience: section.audience)
                    report.skipped += 1
                    continue
                }
                // A retract of a row this device holds as written at or after its stamp
                // changes nothing here, whoever sent it (a retract of a crossed move,
                // CrossedMoves, reaches every reader of the audience it names, some of whom
                // hold the row in the circle it moved to).
                let stampHere = entry.kind == .retract ? try rowStamp(entry) : nil
                if let stampHere, stampHere >= entry.stamp {
                    report.skipped += 1
                    continue
                }
                if case .refused(let why) = try authorizer.authorize(entry, section: section, change: change) {
                    // A retract holds no value to keep: one its sender made not having seen
                    // the write that put the row where this device holds it (a gate's
                    // retract crossing a move into a circle it is not in) passes.
                    if let stampHere, try !senderHadSeen(stampHere, change: change) {
                        report.skipped += 1
                        continue
                    }
                    try sync.addLost(entry, device: change.device, winnerStamp: nil, why: why)
                    report.refused += 1
                    continue
                }
                // The store's settings are an admin's (StoreSettings).
                if entry.table == StoreSettings.table, try !StoreSettings(device).mayWrite(device: change.device, generation: change.generation) {
                    try sync.addLost(entry, device: change.device, winnerStamp: nil, why: .notAuthorized)
                    report.refused += 1
                    continue
                }
                if entry.table == "coven_files" { try unsettle(entry, change: change) }
                if try applyEntry(entry, audience: section.audience, change: change, path: path, report: &report) {
                    touched[entry.table, default: []].insert(entry.id)
                }
            }
        }
        return touched
    }

    /// Records `change` applied (pulled: its seq and frontier; its circles' sections) and moves
    /// the clock past it.
    private func record(_ change: ChangeObject, as source: Source, report: inout ApplyReport) throws {
        let frontier = change.frontier.mapValues { Int64($0) }
        if source != .snapshotPart { try CircleSections(database: database).remember(change) }
        if source == .pulled {
            try sync.log(device: change.device, seq: Int64(change.seq), maxStamp: change.entries.map(\.stamp).max() ?? "", frontier: frontier)
            try sync.setApplied(device: change.device, seq: Int64(change.seq), frontier: frontier, heldObjects: change.heldObjects)
        }
        // The receive rule of the hybrid clock: later stamps here sort after what arrived,
        // but a device whose clock runs far ahead does not drag this one along (an edit of
        // one of its rows is still stamped after it: HybridClock.after).
        if let newest = change.entries.map(\.stamp).max(), HybridClock.device(of: newest) == change.device {
            let (kept, ahead) = HybridClock.receive(newest)
            try HybridClock.advance(to: kept, device: device)
            report.clockAhead = ahead
            try HybridClock.setAhead(of: change.device, ahead, in: device.database)
        }
    }

    // MARK: One entry

    /// The stored columns of a local table (generated ones are never published).
    private mutating func columns(_ table: String) throws -> [String] {
        if let known = columnsOf[table] { return known }
        let names = try database.storedColumns(table)
        columnsOf[table] = names
        return names
    }

    /// Applies one entry; true when it changed a row here. What last writer wins decides is
    /// ``EntryDecision``'s; this carries it out.
    private mutating func applyEntry(_ entry: RowEntry, audience: String, change: ChangeObject, path: String, report: inout ApplyReport) throws -> Bool {
        let names = try check(entry, path: path)
        let isFile = entry.table == "coven_files"
        let localRow = isFile && entry.kind != .upsert ? nil : try row(entry.table, id: entry.id, names: names)
        let localStamp = localRow?["_updated_at"].textValue
        let decision = EntryDecision.decide(
            kind: entry.kind, isFileRecord: isFile, stamp: entry.stamp, local: localStamp,
            tombstone: isFile ? nil : try sync.tombstones.stamp(table: entry.table, id: entry.id),
            image: isFile && entry.kind == .upsert && localStamp == nil ? try records.register(entry.id)?.stamp : nil)
        switch decision {
        case .settleFileRecord:
            try sync.tombstones.set(table: entry.table, id: entry.id, stamp: entry.stamp, audience: audience)
            // gc on the writer waits until this device publishes a frontier over the delete
            // (also when the record was gone here already: two devices deleting it at once each
            // wait for the other).
            try SyncFlags(database: device.database).markFrontierDue()
            try notePeersHold(entry, audience: audience, report: &report)
            return true
        case .skip:
            report.skipped += 1
            return false
        case .lose(let current):
            try lose(entry, audience: audience, change: change, current: current, localRow: localRow, report: &report)
            return false
        case .win, .crossedImage:
            if let localRow, let localStamp {
                try win(entry, audience: audience, change: change, over: localRow, stamped: localStamp, names: names, report: &report)
            }
        }
        switch (entry.kind, isFile) {
        case (.upsert, true):
            if let object = try records.applyRemote(entry, by: change.device, seq: Int64(change.seq)) { report.uncache.insert(object) }
        case (.upsert, false):
            try upsert(entry, wasHere: localRow != nil)
        case (.delete, true), (.retract, true):
            preconditionFailure("internal error: a file record's delete is settled, never applied as such")
        case (.delete, false), (.retract, false):
            try delete(entry, audience: audience, change: change, localRow: localRow, names: names, report: &report)
        }
        try notePeersHold(entry, audience: audience, report: &report)
        return true
    }

    /// Writes a winning row image (an upsert, never REPLACE: no cascade fires for an update),
    /// with the statement of the last table and shape applied when it is the same.
    private mutating func upsert(_ entry: RowEntry, wasHere: Bool) throws {
        let statement: Statement
        if let last = lastUpsert, last.table == entry.table, last.columns == entry.columns {
            statement = last.statement
            statement.reset()
            statement.clearBindings()
        } else {
            let sql = upsertSQL[entry.table]?[entry.columns] ?? RowEntry.upsertSQL(table: entry.table, columns: entry.columns)
            upsertSQL[entry.table, default: [:]][entry.columns] = sql
            statement = try database.cached(sql)
            lastUpsert = (entry.table, entry.columns, statement)
        }
        try statement.bind(values: entry.values)
        try statement.runToEnd()
        if trashHolds, !wasHere { try trash.forget(table: entry.table, id: entry.id) }
    }

    /// Deletes (or retracts) a row for a winning entry: its last image to the trash (a delete
    /// of a row here), its children taken out, the row gone, and its tombstone kept, naming
    /// the trash page that holds the image.
    private mutating func delete(_ entry: RowEntry, audience: String, change: ChangeObject, localRow: Row?, names: [String],
                                 report: inout ApplyReport) throws {
        var page: Int64?
        if entry.kind == .delete, let localRow, let graph {
            // The row's last image goes to the trash, with the row whose delete in this
            // change took it along (a cascade on its writer).
            let deleted = deletedByChange
            let parent = Trash.parent(of: entry.table, columns: names, values: localRow.values, graph: graph) {
                deleted[RowKey(table: $0, id: $1)] != nil
            }
            page = try trash.record(table: entry.table, id: entry.id, columns: names, values: localRow.values, stamp: entry.stamp,
                             writer: change.device, seq: Int64(change.seq), audience: audience, parent: parent)
            report.deletedRows[entry.table, default: 0] += 1
        }
        try takeOutChildren(of: entry.table, id: entry.id, report: &report)
        try database.run("DELETE FROM main.\(RowCapture.quote(entry.table)) WHERE id = ?1", [entry.id])
        try sync.tombstones.set(table: entry.table, id: entry.id, stamp: entry.stamp, audience: audience, retracted: entry.kind == .retract,
                                trash: page)
    }

    /// The stored columns of `entry`'s table, once the entry is one this device may apply: a
    /// synced table's (or a file record), a canonical id where the table takes UUIDs, columns
    /// this device has, and the id its values hold.
    ///
    /// - Throws: `.decoding`, `.invalidId`, naming the object.
    private mutating func check(_ entry: RowEntry, path: String) throws -> [String] {
        let synced = device.manifest.table(entry.table)
        guard synced != nil || entry.table == "coven_files" || entry.table == StoreSettings.table else {
            throw CovenError(.decoding, "change '\(path)' names table '\(entry.table)', which is not synced here", details: ["object": path, "table": entry.table])
        }
        if synced?.identity == .uuid, !Identifier.isCanonicalUUID(entry.id) {
            throw CovenError(.invalidId, "change '\(path)' writes id '\(entry.id)' in table '\(entry.table)', which takes canonical lowercase UUIDv4 or v7 ids",
                             details: ["object": path, "table": entry.table, "id": entry.id])
        }
        let names = try columns(entry.table)
        guard entry.kind == .upsert else { return names }
        for column in entry.columns where !names.contains(column) {
            throw CovenError(.decoding, "change '\(path)' names column '\(column)' of table '\(entry.table)', which this device does not have",
                             details: ["object": path, "table": entry.table, "column": column])
        }
        guard entry.value("id") == .text(entry.id) else {
            throw CovenError(.decoding, "change '\(path)' holds a row of '\(entry.table)' whose id is not '\(entry.id)'", details: ["object": path, "table": entry.table])
        }
        return names
    }

    /// Row `id` of `table` here, its stored columns `names`.
    private mutating func row(_ table: String, id: String, names: [String]) throws -> Row? {
        let statement: Statement
        if let last = lastSelect, last.table == table {
            statement = last.statement
            statement.reset()
            statement.clearBindings()
        } else {
            let select = selectSQL[table] ?? "SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(table)) WHERE id = ?1"
            selectSQL[table] = select
            statement = try database.cached(select)
            lastSelect = (table, statement)
        }
        try statement.bind(values: [.text(id)])
        defer { statement.reset() }
        return try statement.next()
    }

    /// `entry` loses to the newer write `current` here: its readers are told when a move
    /// crossed it, and its value is kept as a lost value when the winner's writer had not seen it.
    private mutating func lose(_ entry: RowEntry, audience: String, change: ChangeObject, current: String, localRow: Row?, report: inout ApplyReport) throws {
        let localStamp = localRow?["_updated_at"].textValue
        // An image of one audience that lost to the row in another: its readers there are
        // told (a move crossed it).
        if entry.kind == .upsert, let column = device.manifest.table(entry.table)?.audienceColumn {
            let winner = localStamp == current ? localRow?[column].textValue : try sync.tombstones.audience(table: entry.table, id: entry.id)
            try crossed.imageLost(entry, audience: audience, winnerStamp: current, winnerAudience: winner ?? RowAudiences.store)
        }
        if entry.kind == .upsert, let localStamp, localStamp == current,
           try !hadSeen(winnerStamp: localStamp, loser: (change.device, Int64(change.seq))) {
            try sync.addLost(entry, device: change.device, winnerStamp: localStamp, why: .concurrent)
            report.lost += 1
        }
        report.skipped += 1
    }

    /// `entry` wins over `localRow` (stamped `localStamp`): the value here is kept if the
    /// winner's writer had not seen it (a retract is no edit: nothing of it is lost), the file
    /// records it named and the winner drops are settled, and a crossed move is judged.
    private mutating func win(_ entry: RowEntry, audience: String, change: ChangeObject, over localRow: Row, stamped localStamp: String,
                              names: [String], report: inout ApplyReport) throws {
        if entry.kind != .retract, let writer = HybridClock.device(of: localStamp), writer != change.device {
            let writerSeq = try sync.seq(device: writer, holding: localStamp)
            if !(writerSeq.map { Int64(change.frontier[writer] ?? 0) >= $0 } ?? false) {
                try sync.addLost(RowEntry(kind: .upsert, table: entry.table, id: entry.id, stamp: localStamp, columns: names, values: localRow.values),
                                 device: writer, winnerStamp: entry.stamp, why: .concurrent)
                report.lost += 1
            }
        }
        // A file record the row named here that the incoming write drops stays only while
        // another row names it (its writer may never have held it: a concurrent write's).
        for column in device.manifest.table(entry.table)?.files ?? [] {
            guard let old = localRow[column.column].textValue, entry.kind != .upsert || entry.value(column.column)?.textValue != old else { continue }
            if unsettled[old] == nil { unsettled[old] = changeEnd }
        }
        if entry.kind == .upsert, let column = device.manifest.table(entry.table)?.audienceColumn {
            try crossed.imageWon(entry, audience: audience, change: change, localAudience: localRow[column].textValue ?? RowAudiences.store, localStamp: localStamp)
        }
    }

    /// Counts an applied entry, and notes for this device's own gate filter what peers hold: a
    /// row applied from another device is on its peers already.
    private func notePeersHold(_ entry: RowEntry, audience: String, report: inout ApplyReport) throws {
        if gated.contains(entry.table) {
            let published = PublishedRows(database: database)
            if entry.kind == .upsert {
                // A file record this device retracted stays so when a write of it that crossed
                // the retract arrives while only rows kept back here name it: peers drop it
                // with those rows, and its bytes stay held back for this device (heldObjects).
                let keptBack = try entry.table == "coven_files" && published.state(table: entry.table, id: entry.id) == .retracted
                    && RowAudiences(graph: graph ?? device.schemaGraph(), database: database).isKept(table: entry.table, id: entry.id) == false
                if !keptBack { try published.markHeld(table: entry.table, id: entry.id, audience: audience) }
            } else {
                try published.forget(table: entry.table, id: entry.id)
            }
        }
        report.applied += 1
        if entry.table == "coven_files" {
            report.appliedFileEntries += 1
            report.appliedFileRecords.insert(entry.id)
        }
    }

    /// Whether the sender of `change` had applied the write stamped `stamp` (a row here).
    private func senderHadSeen(_ stamp: String, change: ChangeObject) throws -> Bool {
        guard let writer = HybridClock.device(of: stamp) else { return true }
        if writer == change.device { return true }
        guard let seq = try sync.seq(device: writer, holding: stamp) else { return false }
        return Int64(change.frontier[writer] ?? 0) >= seq
    }

    /// The stamp of the row `entry` names, if it is here (in an app table: nil for a file
    /// record).
    private func rowStamp(_ entry: RowEntry) throws -> String? {
        guard device.manifest.table(entry.table) != nil else { return nil }
        return try database.scalar("SELECT _updated_at FROM main.\(RowCapture.quote(entry.table)) WHERE id = ?1", [entry.id]).textValue
    }

    /// Whether the writer of the value stamped `winnerStamp` had seen change `loser`.
    private func hadSeen(winnerStamp: String, loser: (device: String, seq: Int64)) throws -> Bool {
        guard let writer = HybridClock.device(of: winnerStamp) else { return true }
        if writer == loser.device { return true }
        // The winner's own change (published here, or applied from its writer) carried the
        // frontier its writer had; a value of this device not yet published saw nothing new.
        guard let seq = try sync.seq(device: writer, holding: winnerStamp) else { return false }
        return (try sync.frontier(device: writer, seq: seq)[loser.device] ?? 0) >= loser.seq
    }

    // MARK: Take-outs

    /// Rows this change wrote (or brought back) naming a file record that no row names here
    /// (docs/coven-sync.md, "File records"): the record comes back from its image. Only when no
    /// image is kept (gc freed its bytes, or the record never was here) is the row taken out:
    /// deleted here with its children, kept as an unrestorable lost value.
    private mutating func takeOutRowsNamingMissingFiles(touched: [String: Set<String>], report: inout ApplyReport) throws {
        for table in device.manifest.tables where !table.files.isEmpty {
            guard let touchedIDs = touched[table.name], !touchedIDs.isEmpty else { continue }
            let ids = RecordedChanges.json(ids: touchedIDs.sorted())
            let missing = table.files.map { column -> String in
                let c = RowCapture.quote(column.column)
                return "(\(c) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM coven_files f WHERE f.id = \(c)))"
            }.joined(separator: " OR ")
            let names = try columns(table.name)
            let quoted = RowCapture.quote(table.name)
            let rows = try database.query("SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(quoted) WHERE id IN (SELECT value FROM json_each(?1)) AND (\(missing))", [ids])
            for row in rows {
                guard let id = row["id"].textValue,
                      try database.scalar("SELECT count(*) FROM main.\(quoted) WHERE id = ?1", [id]).intValue ?? 0 > 0 else { continue }
                var back = true
                for column in table.files {
                    guard let file = row[column.column].textValue, try device.fileRecord(file) == nil else { continue }
                    if try !records.bringBack(file) { back = false }
                }
                if back { continue }
                try takeOutChildren(of: table.name, id: id, report: &report)
                try takeOut(table: table.name, row: row, names: names, why: .fileDeleted, report: &report)
            }
        }
    }

    // MARK: File records

    /// Notes a file record entry of the change being applied: its record's liveness is settled
    /// once the change's rows are (``settleFiles(report:)``). A delete ends it, if no row names
    /// it then, as of the delete; a write of it while this device holds its tombstone, as of
    /// that tombstone's delete.
    private mutating func unsettle(_ entry: RowEntry, change: ChangeObject) throws {
        if entry.kind != .upsert {
            if entry.stamp > unsettled[entry.id]?.stamp ?? "" { unsettled[entry.id] = (change.device, Int64(change.seq), entry.stamp) }
        } else if unsettled[entry.id] == nil {
            if let tombstone = try sync.tombstones.stamp(table: "coven_files", id: entry.id), let writer = HybridClock.device(of: tombstone) {
                unsettled[entry.id] = (writer, try sync.seq(device: writer, holding: tombstone), tombstone)
            } else {
                unsettled[entry.id] = changeEnd
            }
        }
    }

    /// Ends every record of ``unsettled`` that no row names now (FileRecords' register keeps
    /// its image; a row that names it later brings it back).
    private mutating func settleFiles(report: inout ApplyReport) throws {
        let pending = unsettled
        unsettled = [:]
        for id in try records.unnamed(pending.keys.sorted()) {
            if let end = pending[id], let object = try records.endIfUnnamed(id, ended: end) { report.uncache.insert(object) }
        }
    }

    /// Before a row goes, the rows here naming it that this change does not delete itself
    /// (written concurrently, unknown to the deleter) are taken out: kept as lost values (their
    /// parent deleted) and deleted, their own children first. So no foreign-key action (a
    /// cascade) removes or changes them unrecorded, and a later write that brings the parent
    /// back brings them back (``TakenOutRows``).
    private mutating func takeOutChildren(of table: String, id: String, report: inout ApplyReport, depth: Int = 0) throws {
        guard let graph, depth < 64 else { return }
        for edge in (graph.children[table] ?? []) + (graph.selfEdges[table] ?? []) {
            let parent = RowCapture.quote(table)
            let key = edge.parentColumn == "id"
                ? SQLValue.text(id)
                : try database.scalar("SELECT \(RowCapture.quote(edge.parentColumn)) FROM main.\(parent) WHERE id = ?1", [id])
            guard !key.isNull else { continue }
            let names = try columns(edge.child)
            let rows = try database.query("""
                SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(edge.child)) WHERE \(RowCapture.quote(edge.column)) = ?1
                """, [key])
            for row in rows {
                guard let child = row["id"].textValue, !(edge.child == table && child == id) else { continue }
                // A row the change deletes too, and whose delete wins here, is no take-out.
                if let stamp = deletedByChange[RowKey(table: edge.child, id: child)], stamp > (row["_updated_at"].textValue ?? "") { continue }
                try takeOutChildren(of: edge.child, id: child, report: &report, depth: depth + 1)
                try takeOut(table: edge.child, row: row, names: names, why: .parentDeleted, report: &report)
            }
        }
    }

    /// Commits; when a row is left without its parent (a foreign key fails at commit), takes it
    /// out and commits again.
    private mutating func commitTakingOutOrphans(report: inout ApplyReport) throws {
        for _ in 0..<64 {
            do {
                try database.execute("COMMIT")
                return
            } catch let error as CovenError where error.sqlitePrimaryCode == SQLITE_CONSTRAINT && database.inTransaction {
                let violations = try database.query("PRAGMA foreign_key_check")
                guard !violations.isEmpty else { throw error }
                for violation in violations {
                    guard let table = violation["table"].textValue, device.manifest.table(table) != nil, let rowid = violation["rowid"].intValue else { throw error }
                    let names = try columns(table)
                    guard let row = try database.queryOne("SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(table)) WHERE rowid = ?1", [rowid]) else { continue }
                    try takeOut(table: table, row: row, names: names, why: .parentDeleted, report: &report)
                }
                try settleFiles(report: &report)
            }
        }
        throw CovenError(.internal, "rows taken out of a change kept failing their foreign keys")
    }

    private mutating func takeOut(table: String, row: Row, names: [String], why: SyncState.LostReason, report: inout ApplyReport) throws {
        guard let id = row["id"].textValue else { return }
        // The records it names stay only while another row names them.
        for column in device.manifest.table(table)?.files ?? [] {
            if let file = row[column.column].textValue, unsettled[file] == nil { unsettled[file] = changeEnd }
        }
        let stamp = row["_updated_at"].textValue ?? ""
        try sync.addLost(RowEntry(kind: .upsert, table: table, id: id, stamp: stamp, columns: names, values: row.values),
                         device: HybridClock.device(of: stamp) ?? "", winnerStamp: nil, why: why)
        // What peers hold of it is left as it was: they take it out too, and bring it back
        // with its parent as this device does (TakenOutRows). A row restored here is not
        // sent again by the gate as if peers had never held it.
        try database.run("DELETE FROM main.\(RowCapture.quote(table)) WHERE id = ?1", [id])
        report.takenOut += 1
    }
}

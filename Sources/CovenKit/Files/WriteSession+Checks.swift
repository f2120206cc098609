import CSQLite
import Foundation

extension WriteSession {
    // After the SQL: the write's files, its rows' stamps and checks, and what it released.

    /// Applies the write's puts (``puts``) to coven's tables, each table in one statement over
    /// them all, in the order the write made them: a new file record for every put, this
    /// device's bytes and the upload of every staged file, and the staged files forgotten.
    func applyIntents() throws {
        if let gone = try puts.firstStagedGone() {
            throw CovenError(.internal, "staged file '\(gone)' went away during the write that puts it", details: ["staged": gone])
        }
        try device.fileRecords.insertPuts(puts, stamp: stamp)
        try device.fileRecords.recordLocalBytesOfPuts(puts)
        if try puts.queuesUploads() {
            if moveID == nil { moveID = Identifier.uuid7() }
            try device.uploadQueue.enqueuePuts(puts, move: moveID)
        }
        try device.stagedFiles.removePut(puts)
    }

    /// Stamps every synced row the SQL inserted or updated with the write's clock value, a batch
    /// of changes at a time. A row the SQL stamped already (`coven_stamp()`) is left as it is:
    /// not written twice, nor captured twice (a tenth of a `write --each` of 10,000 rows).
    func stampRows(_ changes: RecordedChanges) throws {
        try changes.forEachBatch(oldFiles: false) { batch in
            var byTable: [String: [String]] = [:]
            for change in batch where change.operation != .delete && change.table != "coven_files" {
                byTable[change.table, default: []].append(change.id)
            }
            for (table, ids) in byTable {
                try database.run("UPDATE \(RowCapture.quote(table)) SET _updated_at = ?1 WHERE id IN (SELECT value FROM json_each(?2)) AND _updated_at IS NOT ?1", [stamp, RecordedChanges.json(ids: ids)])
            }
        }
    }

    /// Checks ids and every file reference the SQL set, per spec/files.md, a batch of changes
    /// at a time; the files rows name now and the ones they stopped naming go in ``puts``.
    func validate(_ changes: RecordedChanges) throws {
        let graph = try device.schemaGraph()
        let rowAudiences = RowAudiences(graph: graph, database: database)
        // The audiences this member writes: the store, and the circles it is in.
        let placing = Set(manifest.tables.map(\.name).filter { rowAudiences.placesAudience($0) })
        let writable = placing.isEmpty ? [] : try Circles(device).writableAudiences()
        try changes.forEachBatch(oldFiles: true) { batch in
            // The file columns of the batch's rows the write left, and their audiences, read
            // once per table.
            var now: [String: [String: Row]] = [:]
            var audienceOf: [String: [String: String]] = [:]
            var idsByTable: [String: [String]] = [:]
            for change in batch where change.operation != .delete {
                guard let table = manifest.table(change.table), !table.files.isEmpty else { continue }
                idsByTable[table.name, default: []].append(change.id)
            }
            // Every row the write left goes to an audience this member is in.
            var placed: [String: [String]] = [:]
            for change in batch where change.operation != .delete && placing.contains(change.table) {
                placed[change.table, default: []].append(change.id)
            }
            for (name, ids) in placed {
                let found = try rowAudiences.audiences(table: name, ids: ids)
                audienceOf[name] = found
                for (id, audience) in found.sorted(by: { $0.key < $1.key }) where !writable.contains(audience) {
                    throw CovenError(.notInCircle, "row '\(id)' of '\(name)' would be in circle '\(audience)', which this device's member is not in",
                                     hint: "'coven circles' lists this member's circles: write 'store' or one of their ids",
                                     details: ["table": name, "id": id, "circle": audience])
                }
            }
            for (name, ids) in idsByTable {
                guard let table = manifest.table(name) else { continue }
                let columns = (["id"] + table.files.map(\.column)).map(RowCapture.quote).joined(separator: ", ")
                for row in try database.query("SELECT \(columns) FROM \(RowCapture.quote(name)) WHERE id IN (SELECT value FROM json_each(?1))", [RecordedChanges.json(ids: ids)]) {
                    if let id = row["id"].textValue { now[name, default: [:]][id] = row }
                }
            }
            for change in batch {
                try validate(change, now: now, audienceOf: audienceOf, graph: graph)
            }
        }
        // Every file put in this write must be named by a row it wrote.
        if let unnamed = try puts.firstUnnamed() {
            throw CovenError(.fileUnreferenced, "file '\(unnamed)' is put but no row references it", hint: "put its id in a file column in the same write", details: ["file": unnamed])
        }
    }

    /// Checks one change of ``validate(_:)``: its id, its place under a remote root and the
    /// file references it set or dropped, recorded in ``puts``.
    ///
    /// - Parameters:
    ///   - now: the file columns of the changed rows the write left, by table and id.
    ///   - audienceOf: their audiences (``RowAudiences``), by table and id.
    private func validate(_ change: RecordedChange, now: [String: [String: Row]], audienceOf: [String: [String: String]], graph: SchemaGraph) throws {
        guard let table = manifest.table(change.table) else { return }
        let rowID = change.id
        if change.operation != .delete, let root = graph.remoteRoot(of: table.name) {
            try refuseDeviceOnly(under: root, table: table, row: now[table.name]?[rowID], rowID: rowID)
        }
        if change.operation == .insert, table.identity == .uuid, !Identifier.isCanonicalUUID(rowID) {
            throw CovenError(.invalidId, "table '\(table.name)' takes canonical lowercase UUIDv4 or v7 ids, not '\(rowID)'", hint: "use coven_uuid7()", details: ["table": table.name, "id": rowID])
        }
        for column in table.files {
            let old = change.oldFiles[column.column]
            switch change.operation {
            case .delete:
                if let id = old?.textValue { try puts.released(id) }
            case .insert, .update:
                let value = now[table.name]?[rowID]?[column.column] ?? .null
                if change.operation == .update {
                    guard value != old else { continue } // unchanged
                    if let oldID = old?.textValue, value.textValue != oldID {
                        // A row moved to another audience names a new record over the same
                        // bytes (AudienceMoves): the file is the same.
                        if column.writeOnce, try !sameBytes(oldID, value.textValue) {
                            throw CovenError(.fileWriteOnce, "column '\(table.name).\(column.column)' is write-once and already names file '\(oldID)'", details: ["table": table.name, "column": column.column, "id": rowID, "file": oldID])
                        }
                        try puts.released(oldID)
                    }
                }
                guard !value.isNull else { continue }
                guard case .text(let fileID) = value else {
                    throw CovenError(.fileUnknown, "column '\(table.name).\(column.column)' must hold a file id as text", details: ["table": table.name, "column": column.column, "id": rowID])
                }
                try puts.named(fileID)
                let audience = audienceOf[table.name]?[rowID] ?? RowAudiences.store
                try checkReference(fileID, table: table, column: column, rowID: rowID, audience: audience)
            }
        }
    }

    /// Whether records `a` and `b` are over the same stored bytes.
    private func sameBytes(_ a: String, _ b: String?) throws -> Bool {
        guard let b, let first = try device.fileRecord(a), let second = try device.fileRecord(b) else { return false }
        return first.coordinates.object == second.coordinates.object && first.coordinates.key == second.coordinates.key
    }

    /// A row under a remote root names only files that are in the cloud or going there
    /// (spec/local-data.md "Remote roots"): a device-only file in it (put now, or named by a row
    /// moved under the root) is refused.
    ///
    /// - Throws: `.remoteRoot`, naming the root table.
    func refuseDeviceOnly(under root: String, table: Manifest.SyncedTable, row: Row?, rowID: String) throws {
        guard let row else { return }
        for column in table.files {
            guard let fileID = row[column.column].textValue, let record = try device.fileRecord(fileID), record.coordinates.at == .device else { continue }
            if try intent(for: fileID)?.queuesUpload == true { continue }
            // Already on its way to the cloud (an upload or a move queued).
            if try !device.uploadQueue.isUploaded(record.coordinates.object) { continue }
            throw CovenError(.remoteRoot, "'\(table.name).\(column.column)' of row '\(rowID)' names file '\(fileID)', which is on one device only, but '\(table.name)' is under remote root '\(root)'",
                             hint: "files of a remote root's rows are in the cloud: stage it with --place cloud, or move it to the cloud first",
                             details: ["table": table.name, "column": column.column, "id": rowID, "file": fileID, "remote_root": root])
        }
    }

    /// Checks one file reference a row of `audience` sets: the file is known and in the row's
    /// audience (a file this write put takes the audience of the first row naming it), and a
    /// bound column's file is app bytes within the column's limit, stored or on its way.
    func checkReference(_ fileID: String, table: Manifest.SyncedTable, column: Manifest.FileColumn, rowID: String, audience: String) throws {
        let where_ = ["table": table.name, "column": column.column, "id": rowID, "file": fileID]
        guard let record = try device.fileRecord(fileID) else {
            throw CovenError(.fileUnknown, "'\(table.name).\(column.column)' names no file '\(fileID)'", details: where_)
        }
        // A new file takes the audience of the first row naming it.
        let firstAudience = try puts.nameAudience(fileID, audience)
        if let firstAudience {
            if firstAudience != audience {
                throw CovenError(.fileUnknown, "file '\(fileID)' is named by rows of two audiences", details: where_)
            }
            if record.audience != audience {
                try device.fileRecords.setAudience(fileID, audience)
            }
        } else if record.audience != audience {
            throw CovenError(.fileUnknown, "file '\(fileID)' is not in the audience of row '\(rowID)'", details: where_)
        }
        guard column.bound else { return }
        let kind = manifest.namespace(record.namespace)?.kind ?? .app
        guard kind == .app else {
            throw CovenError(.namespaceKind, "bound column '\(table.name).\(column.column)' takes app files only, not the person's original '\(fileID)'", details: where_)
        }
        guard record.size <= column.boundLimit else {
            throw CovenError(.boundFileTooLarge, "file '\(fileID)' is \(record.size.counted("byte")), over the \(column.boundLimit)-byte limit of bound column '\(table.name).\(column.column)'", details: where_)
        }
        if record.coordinates.at == .stored { return }
        let object = record.coordinates.object
        if firstAudience != nil, try intent(for: fileID)?.queuesUpload == true {
            // Staged by this write for the cloud: its upload is bound, outside any move.
            try device.uploadQueue.bind(object)
            waitsFor.insert(object)
            return
        }
        if try device.uploadQueue.isBoundUpload(object) {
            waitsFor.insert(object)
            return
        }
        throw CovenError(.deviceOnly, "bound column '\(table.name).\(column.column)' names file '\(fileID)', which is on one device only", hint: "stage it for the cloud in the same write", details: where_)
    }

    // MARK: - A file goes with its last reference

    /// Ends the records no row names any more: the files some row stopped naming (``puts``), a
    /// page at a time, in id order. Their bytes here and their uploads stay until gc deletes
    /// the object (``FileRecords/endIfUnnamed(_:ended:)``): a concurrent write elsewhere may
    /// still bring a record back.
    func releaseUnreferenced() throws {
        var after = ""
        while true {
            let candidates = try puts.releasedNotNamed(after: after, limit: PutIntents.pageSize)
            guard let last = candidates.last else { return }
            after = last
            try release(candidates)
            if candidates.count < PutIntents.pageSize { return }
        }
    }

    /// Ends the records of `candidates` no row names.
    private func release(_ candidates: [String]) throws {
        try device.fileRecords.release(candidates, stamp: stamp)
    }
}

import CSQLite
import Foundation

/// What one write made.
public struct WriteResult: Sendable {
    /// The ids of the file records the write made, in the order its SQL made them.
    public var files: [String]
    /// Staged or prepared id → the file id it became.
    public var staged: [String: String]
    /// The move the write's cloud files form, if it staged any for the cloud.
    public var move: String?
    /// Rows the app's SQL returned (a final SELECT or RETURNING), as printed by `--json`.
    public var rows: [Row]
}

/// A file put in rows by the write's SQL, applied to coven's tables after the SQL has run.
/// A write keeps them in a temporary table (``PutIntents``), not in memory.
struct PutIntent {
    enum Source {
        /// A staged file or prepared original, by its staged id: its row is read again when
        /// the intent is applied.
        case staged(String)
        /// A new record over an existing file's bytes and key (`coven_existing_file`).
        case existing(FileRecord)
    }

    var fileID: String
    var source: Source
    var namespace: String
    var kind: FileKind
    var place: Place
    var size: Int64
    var object: String
    var key: String
}

extension Device {
    /// Runs one transaction of app SQL with coven's write functions, validates every file
    /// reference, records the write for publishing and commits — or changes nothing.
    ///
    /// The SQL may call `coven_put_staged(staged)`, `coven_put_user_file([namespace,] prepared
    /// [, place])`, `coven_existing_file(file)`, `coven_stamp()` and `coven_uuid7()`. Every
    /// synced row it inserts or updates is stamped with the write's hybrid-clock time.
    ///
    /// - Throws: `.fileUnknown`, `.fileUnreferenced`, `.fileWriteOnce`, `.boundFileTooLarge`,
    ///   `.namespaceKind`, `.undeclaredNamespace`, `.deviceOnly`, `.notThisDevice`,
    ///   `.userFileMissing`, `.userFileChanged`, `.invalidId`, `.notFound` (a staged id that
    ///   names nothing), `.sql`; `.busy` when `wait` is false and another process holds the
    ///   device lock.
    @discardableResult
    public func write(sql: String, parameters: [String: SQLValue] = [:], wait: Bool = true) throws -> WriteResult {
        let lock = try self.lock(wait: wait)
        defer { _ = lock }
        let session = WriteSession(device: self)
        return try session.run { execute in try execute(sql, parameters) }
    }

    /// Runs a script read a piece at a time as one write (`coven write -`): each statement runs
    /// as soon as it is read whole, so no script is held in memory whatever its length. The
    /// whole script is one transaction, checked and recorded as ``write(sql:parameters:wait:)``
    /// does.
    ///
    /// - Parameter read: fills the buffer with the script's next bytes, returning the count (0
    ///   at the end).
    /// - Throws: what ``write(sql:parameters:wait:)`` throws; `.usage` for a script holding a
    ///   NUL byte or no statement.
    @discardableResult
    public func writeScript(read: (UnsafeMutableRawBufferPointer) throws -> Int, parameters: [String: SQLValue] = [:], wait: Bool = true) throws -> WriteResult {
        let lock = try self.lock(wait: wait)
        defer { _ = lock }
        let session = WriteSession(device: self)
        return try session.run { execute in
            var pending: [UInt8] = []
            var offset = 0
            var ran = false
            var block = [UInt8](repeating: 0, count: 65536)
            func runPending(force: Bool) throws {
                // Run once the text read so far ends a statement (at a line's end).
                pending.append(0)
                defer { pending.removeLast() }
                let complete = pending.withUnsafeBufferPointer { buffer in
                    buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { sqlite3_complete($0) != 0 }
                }
                guard complete || force else { return }
                let text = String(decoding: pending.dropLast(), as: UTF8.self)
                if !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                    try execute(text, parameters)
                    ran = true
                }
                pending.removeAll(keepingCapacity: true)
                pending.append(0)
            }
            while true {
                let got = try block.withUnsafeMutableBytes { try read($0) }
                if got == 0 { break }
                for byte in block[0..<got] {
                    if byte == 0 {
                        throw CovenError(.usage, "the SQL on stdin holds a NUL byte (at byte \(offset))", hint: "SQL is text: pass the bytes with --param or as a blob literal")
                    }
                    offset += 1
                    pending.append(byte)
                    if byte == UInt8(ascii: "\n") { try runPending(force: false) }
                }
            }
            try runPending(force: true)
            guard ran else { throw CovenError(.usage, "the SQL is empty") }
        }
    }

    /// Calls `body` with the id of each file the last write on this device's connection put
    /// and the staged id it came from (nil for `coven_existing_file`), in the order its SQL
    /// made them, read a page at a time: the files of a write made with `listsFiles: false`
    /// (``writeEach(sql:wait:listsFiles:next:)``), until the next write. Nothing after a write
    /// that failed or listed its files in its result.
    ///
    /// - Throws: `.sql`.
    public func forEachFilePut(_ body: (_ file: String, _ staged: String?) throws -> Void) throws {
        guard try database.queryOne("SELECT 1 FROM temp.sqlite_master WHERE name = 'coven_write_puts'") != nil else { return }
        try PutIntents(database: database).forEachFile(body)
    }

    /// Runs `sql` once per set of parameters `next` gives (`coven write --each`), all in one
    /// write: one transaction, checked and recorded as ``write(sql:parameters:wait:)`` does,
    /// the parameter sets read one at a time (never all in memory). A set that fails refuses
    /// the whole write; its error names the set's line.
    ///
    /// The write holds nothing per set in memory (the files it puts and the references it
    /// checks are in temporary tables, ``PutIntents``) but what the SQL returns (``WriteResult/rows``)
    /// and, unless `listsFiles` is false, the ids of the files it put.
    ///
    /// - Parameters:
    ///   - listsFiles: whether the result lists the files put (``WriteResult/files``,
    ///     ``WriteResult/staged``); when false they are left empty, for
    ///     ``forEachFilePut(_:)`` to read a page at a time.
    ///   - next: the next set of named parameters and the line it came from, nil at the end
    ///     (it may throw for a line it cannot read, naming it).
    /// - Throws: what ``write(sql:parameters:wait:)`` throws, the message led by the line
    ///   (`line 12: …`) for what a set's run threw.
    @discardableResult
    public func writeEach(sql: String, wait: Bool = true, listsFiles: Bool = true,
                          next: () throws -> (line: Int, parameters: [String: SQLValue])?) throws -> WriteResult {
        let lock = try self.lock(wait: wait)
        defer { _ = lock }
        let session = WriteSession(device: self)
        return try session.run(listsFiles: listsFiles) { execute in
            while let (line, parameters) = try next() {
                do {
                    try execute(sql, parameters)
                } catch let error as CovenError {
                    var details = error.details
                    details["line"] = String(line)
                    // A parameter the statement names and the line lacks: the line is what to fix.
                    let hint = error.code == .usage && error.message.hasPrefix("no value for parameter")
                        ? "give every line the key, or a default with --param NAME=VALUE" : error.hint
                    throw CovenError(error.code, "line \(line): \(error.message)", hint: hint, cause: error.cause, details: details, sqliteCode: error.sqliteCode)
                }
            }
        }
    }
}

/// One write in progress. Lives for one call of ``Device/write(sql:parameters:)``.
final class WriteSession {
    let device: Device
    var database: Database { device.database }
    var manifest: Manifest { device.manifest }
    /// The files the write puts and the references it sets and drops.
    var puts: PutIntents { PutIntents(database: database) }
    /// Lets coven's SQL functions write ``puts`` while the app's SQL runs.
    let permit = Permit()

    /// The intent that put file `fileID` in this write, if one did.
    func intent(for fileID: String) throws -> PutIntent? { try puts.intent(for: fileID) }
    var stamp = ""
    var moveID: String?
    /// Bound references: objects whose upload this write's publication waits for.
    var waitsFor: Set<String> = []
    /// Moves and cancels the SQL asked for (Moves/Moves.swift).
    var moveIntents = MoveIntents()

    init(device: Device) {
        self.device = device
    }

    /// Runs the write: `statements` calls the function it is given with each piece of SQL and
    /// its parameters, in order, inside the write's one transaction.
    ///
    /// - Parameter listsFiles: whether the result lists the files put; when false, they are
    ///   left in ``puts`` for ``Device/forEachFilePut(_:)``.
    func run(listsFiles: Bool = true, _ statements: (_ execute: (String, [String: SQLValue]) throws -> Void) throws -> Void) throws -> WriteResult {
        // A write that fails leaves no puts listed (the rollback would bring back the last
        // write's); one that lists its files in the result leaves none either.
        let result: WriteResult
        do {
            result = try transaction(listsFiles: listsFiles, statements)
        } catch {
            try? puts.clear()
            throw error
        }
        if listsFiles { try? puts.clear() }
        device.removeReleasedCopies()
        return result
    }

    /// The transaction of ``run(listsFiles:_:)``.
    private func transaction(listsFiles: Bool, _ statements: (_ execute: (String, [String: SQLValue]) throws -> Void) throws -> Void) throws -> WriteResult {
        var rows: [Row] = []
        return try database.transaction {
            try device.recordWrite { recorded in
                stamp = recorded.stamp
                try puts.begin()
                try installFunctions()
                database.setAuthorizer(WriteSession.appPolicy(permit))
                do {
                    // A statement run again and again (write --each) is prepared once, the
                    // second time it comes.
                    var last: String?
                    var prepared: OpaquePointer?
                    defer { sqlite3_finalize(prepared) }
                    try statements { sql, parameters in
                        if let prepared, sql == last {
                            try database.runPrepared(prepared, parameters: parameters) { rows.append($0) }
                            return
                        }
                        if sql == last, prepared == nil, let single = try database.prepareSingle(sql) {
                            prepared = single
                            try database.runPrepared(single, parameters: parameters) { rows.append($0) }
                            return
                        }
                        sqlite3_finalize(prepared)
                        prepared = nil
                        last = sql
                        try database.executeScript(sql, parameters: parameters) { rows.append($0) }
                    }
                } catch {
                    database.setAuthorizer(nil)
                    try? SQLFunctions.install(on: device)
                    if let error = error as? CovenError, error.sqlitePrimaryCode == SQLITE_AUTH {
                        // The authorizer's refusal: say what the write may not do.
                        throw CovenError(.sql, "a write changes only the app's rows: not coven's tables, the schema, pragmas or the transaction",
                                         hint: "change the schema with a migration ('coven migrate')", cause: error.message, details: error.details)
                    }
                    throw error
                }
                database.setAuthorizer(nil)
                try SQLFunctions.install(on: device)
                var appChanges = try recorded.changes()
                try applyIntents()
                try stampRows(appChanges)
                try OwnedRows(device: device).enforce(appChanges)
                // Rows whose audience changed move with their subtree (written again, new file
                // records over the same bytes): the write's changes are read again.
                let graph = try device.schemaGraph()
                if manifest.tables.contains(where: { $0.audienceColumn != nil }),
                   try !AudienceMoves(device: device, graph: graph).apply(appChanges, writable: try Circles(device).writableAudiences(), stamp: recorded.stamp).isEmpty {
                    appChanges = try recorded.changes()
                    try OwnedRows(device: device).enforce(appChanges)
                }
                try validate(appChanges)
                try releaseUnreferenced()
                try applyMoveIntents()
                if let moveID, try device.uploadQueue.count(move: moveID) > 0 {
                    try device.moveRecords.begin(moveID)
                }
                recorded.waitsFor = waitsFor
                var files: [String] = []
                var staged: [String: String] = [:]
                if listsFiles {
                    try puts.forEachFile { file, stagedID in
                        files.append(file)
                        if let stagedID { staged[stagedID] = file }
                    }
                }
                let usedMove = try moveID.flatMap { id in
                    try device.moveRecords.state(id) != nil ? id : nil
                }
                return WriteResult(files: files, staged: staged, move: usedMove, rows: rows)
            }
        }
    }

    // MARK: - The app's SQL

    /// App SQL reads anything but changes only app tables: no coven table, no schema change
    /// (that is what migrations are for), no transaction control, no ATTACH.
    ///
    /// Statements prepared while `permit` is open (inside coven's SQL functions, ``Permit``)
    /// are coven's own and may write its temporary tables.
    static func appPolicy(_ permit: Permit) -> AuthorizerPolicy {{ action, first, second in
        if permit.isOpen { return true }
        func isCoven(_ name: String?) -> Bool {
            guard let name = name?.lowercased() else { return false }
            return name.hasPrefix("coven_") || name.hasPrefix("sqlite_")
        }
        switch action {
        case SQLITE_INSERT, SQLITE_UPDATE, SQLITE_DELETE:
            return !isCoven(first)
        case SQLITE_CREATE_INDEX, SQLITE_CREATE_TABLE, SQLITE_CREATE_TRIGGER, SQLITE_CREATE_VIEW,
             SQLITE_DROP_INDEX, SQLITE_DROP_TABLE, SQLITE_DROP_TRIGGER, SQLITE_DROP_VIEW,
             SQLITE_ALTER_TABLE, SQLITE_CREATE_VTABLE, SQLITE_DROP_VTABLE,
             SQLITE_TRANSACTION, SQLITE_SAVEPOINT, SQLITE_ATTACH, SQLITE_DETACH:
            return false
        case SQLITE_PRAGMA:
            // Reading a pragma is fine (no argument), and so are the pragmas whose argument
            // names what to read (table_info(t)); setting one (foreign_keys = OFF,
            // writable_schema = ON, journal_mode = …) is not.
            guard let argument = second else { return true }
            _ = argument
            return Database.readingPragmas.contains(first?.lowercased() ?? "")
        default:
            return true
        }
    }}

    /// Lets the statements coven's SQL functions prepare while the app's SQL runs (to record
    /// a put in ``puts``) past the write's authorizer: open only for the function's own work.
    /// @unchecked: a write runs on one thread.
    final class Permit: @unchecked Sendable {
        private(set) var isOpen = false

        /// Runs `body` with the permit open.
        func open<T>(_ body: () throws -> T) rethrows -> T {
            let was = isOpen
            isOpen = true
            defer { isOpen = was }
            return try body()
        }
    }

    // MARK: - Write functions

    func installFunctions() throws {
        try database.createFunction("coven_stamp", arguments: 0, deterministic: false) { [unowned self] _ in
            .text(self.stamp)
        }
        try database.createFunction("coven_put_staged", arguments: 1, deterministic: false) { [unowned self] args in
            guard let id = args[0].textValue else { throw CovenError(.usage, "coven_put_staged() takes a staged id") }
            return .text(try self.permit.open { try self.putStaged(id, expectedKind: .app, namespace: nil, place: nil) })
        }
        try database.createFunction("coven_put_user_file", arguments: -1, deterministic: false) { [unowned self] args in
            let texts = args.map(\.textValue)
            let (namespace, prepared, place): (String?, String?, String?)
            switch texts.count {
            case 1: (namespace, prepared, place) = (nil, texts[0], nil)
            case 2: (namespace, prepared, place) = (texts[0], texts[1], nil)
            case 3: (namespace, prepared, place) = (texts[0], texts[1], texts[2])
            default: throw CovenError(.usage, "coven_put_user_file() takes ([namespace,] prepared [, place])")
            }
            guard let prepared else { throw CovenError(.usage, "coven_put_user_file() needs a prepared id") }
            var parsedPlace: Place?
            if let place {
                guard let value = Place(rawValue: place) else {
                    throw CovenError(.usage, "place must be 'cloud' or 'device-only', not '\(place)'")
                }
                parsedPlace = value
            }
            return .text(try self.permit.open { try self.putStaged(prepared, expectedKind: .user, namespace: namespace, place: parsedPlace) })
        }
        try database.createFunction("coven_existing_file", arguments: 1, deterministic: false) { [unowned self] args in
            guard let id = args[0].textValue else { throw CovenError(.usage, "coven_existing_file() takes a file id") }
            return .text(try self.permit.open { try self.putExisting(id) })
        }
        try installMoveFunctions()
    }

    /// Puts a staged app file or a prepared original: checks it, allocates the file's id,
    /// storage name and key, and records the intent applied after the SQL.
    func putStaged(_ id: String, expectedKind: FileKind, namespace requested: String?, place requestedPlace: Place?) throws -> String {
        guard try !puts.contains(staged: id) else {
            throw CovenError(.notFound, "staged file '\(id)' is already put in this write", details: ["staged": id])
        }
        guard let row = try device.stagedFiles.row(id) else {
            throw CovenError(.notFound, "no staged file '\(id)'", hint: "stage it with 'coven stage' first; a staged file is put by one write only", details: ["staged": id])
        }
        let kind = FileKind(rawValue: row.string("kind") ?? "") ?? .app
        var namespace = row.string("namespace") ?? ""
        if let requested {
            _ = try device.manifest.namespace(requested, kind: expectedKind)
            namespace = requested
        }
        guard kind == expectedKind else {
            throw CovenError(.namespaceKind, kind == .user
                ? "'\(id)' is a person's original: put it with coven_put_user_file()"
                : "'\(id)' holds app bytes: put it with coven_put_staged()", details: ["staged": id])
        }
        _ = try device.manifest.namespace(namespace, kind: kind)
        if kind == .user, let path = row.bytes("path") {
            let identity = OriginalIdentity(size: row.int("size") ?? 0, modifiedSeconds: row.int("modified_seconds") ?? 0,
                                            modifiedNanos: row.int("modified_nanos") ?? 0, changeStamp: row.string("change_stamp") ?? "")
            try Staging(device).checkOriginal(path: path, recorded: identity, contentHash: row.bytes("content_hash") ?? [])
        }
        let place = requestedPlace ?? Place(rawValue: row.string("place") ?? "") ?? .cloud
        let fileID = Identifier.uuid7()
        try puts.add(PutIntent(
            fileID: fileID, source: .staged(id), namespace: namespace, kind: kind, place: place,
            size: row.int("size") ?? 0, object: "files/\(device.deviceID)/\(Identifier.objectName())",
            key: SecureRandom.bytes(32).hex))
        return fileID
    }

    /// A new record over an existing file's bytes and key: nothing is uploaded again.
    func putExisting(_ id: String) throws -> String {
        let record: FileRecord
        if let existing = try device.fileRecord(id) {
            record = existing
        } else if let pending = try intent(for: id) {
            // A file put earlier in this same write.
            let coordinates = Coordinates(at: .device, device: device.deviceID, object: pending.object, key: pending.key)
            record = try FileRecord(row: Row(columns: ["id", "audience", "namespace", "size", "hash", "coordinates"],
                                             values: [.text(id), .text("store"), .text(pending.namespace), .integer(pending.size), .null, .text(coordinates.json)]))
        } else {
            throw CovenError(.fileUnknown, "no file '\(id)' to stage anew", details: ["file": id])
        }
        if record.coordinates.at == .device, record.coordinates.device != device.deviceID {
            throw CovenError(.notThisDevice, "file '\(id)' is on another device only", details: ["file": id, "device": record.coordinates.device ?? ""])
        }
        let kind = manifest.namespace(record.namespace)?.kind ?? .app
        let fileID = Identifier.uuid7()
        try puts.add(PutIntent(
            fileID: fileID, source: .existing(record), namespace: record.namespace, kind: kind,
            place: record.coordinates.at == .stored ? .cloud : .deviceOnly, size: record.size,
            object: record.coordinates.object, key: record.coordinates.key))
        return fileID
    }

    // MARK: - After the SQL

    /// Makes the records, local bytes and uploads of the files the SQL put.
    func applyIntents() throws {
        try puts.forEachPage { page in try page.forEach(apply) }
    }

    /// Applies one put of ``applyIntents()``.
    private func apply(_ intent: PutIntent) throws {
        switch intent.source {
        case .existing(let record):
            try device.fileRecords.insert(id: intent.fileID, audience: record.audience, namespace: record.namespace, size: record.size,
                                          hash: record.hash, coordinates: record.coordinates, stamp: stamp)
        case .staged(let id):
            guard let row = try device.stagedFiles.row(id) else {
                throw CovenError(.internal, "staged file '\(id)' went away during the write that puts it", details: ["staged": id])
            }
            let coordinates = Coordinates(at: .device, device: device.deviceID, object: intent.object, key: intent.key)
            try device.fileRecords.insert(id: intent.fileID, audience: "store", namespace: intent.namespace, size: intent.size,
                                          hash: nil, coordinates: coordinates, stamp: stamp)
            try device.fileRecords.recordLocal(LocalBytes(
                object: intent.object, kind: intent.kind, path: row.bytes("path"), copy: row.string("copy"), size: intent.size,
                modifiedSeconds: row.int("modified_seconds"), modifiedNanos: row.int("modified_nanos"), changeStamp: row.string("change_stamp"),
                contentHash: row.bytes("content_hash") ?? [], chunkHashes: row.bytes("chunk_hashes") ?? []))
            try device.stagedFiles.remove(row.string("id") ?? "")
            if intent.place == .cloud {
                if moveID == nil { moveID = Identifier.uuid7() }
                try device.uploadQueue.enqueue(intent.object, move: moveID, bytesTotal: ObjectLayout.encryptedSize(plaintextSize: intent.size))
            }
        }
    }

    /// Stamps every synced row the SQL inserted or updated with the write's clock value, a batch
    /// of changes at a time.
    func stampRows(_ changes: RecordedChanges) throws {
        try changes.forEachBatch(oldFiles: false) { batch in
            var byTable: [String: [String]] = [:]
            for change in batch where change.operation != .delete && change.table != "coven_files" {
                byTable[change.table, default: []].append(change.id)
            }
            for (table, ids) in byTable {
                try database.run("UPDATE \(RowCapture.quote(table)) SET _updated_at = ?1 WHERE id IN (SELECT value FROM json_each(?2))", [stamp, RecordedChanges.json(ids: ids)])
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
                try checkReference(fileID, table: table, column: column, rowID: rowID, audience: audience, put: try intent(for: fileID))
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
            if let intent = try intent(for: fileID), case .staged = intent.source, intent.place == .cloud { continue }
            // Already on its way to the cloud (an upload or a move queued).
            if try !device.isUploaded(record.coordinates.object) { continue }
            throw CovenError(.remoteRoot, "'\(table.name).\(column.column)' of row '\(rowID)' names file '\(fileID)', which is on one device only, but '\(table.name)' is under remote root '\(root)'",
                             hint: "files of a remote root's rows are in the cloud: stage it with --place cloud, or move it to the cloud first",
                             details: ["table": table.name, "column": column.column, "id": rowID, "file": fileID, "remote_root": root])
        }
    }

    ///
    /// - Parameter put: the intent that put the file in this write, if one did.
    func checkReference(_ fileID: String, table: Manifest.SyncedTable, column: Manifest.FileColumn, rowID: String, audience: String, put: PutIntent?) throws {
        let where_ = ["table": table.name, "column": column.column, "id": rowID, "file": fileID]
        guard let record = try device.fileRecord(fileID) else {
            throw CovenError(.fileUnknown, "'\(table.name).\(column.column)' names no file '\(fileID)'", details: where_)
        }
        if put != nil {
            // A new file takes the audience of the first row naming it.
            if try puts.nameAudience(fileID, audience) != audience {
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
        if let put, case .staged = put.source, put.place == .cloud {
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

extension Device {
    /// Drops this device's record of an object's local bytes (``FileRecords/forgetLocalBytes(object:)``).
    func forgetLocalBytes(object: String) throws {
        try fileRecords.forgetLocalBytes(object: object)
    }
}

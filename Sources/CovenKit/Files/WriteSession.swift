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
    /// Where the new record's bytes are: a staged file's new object on this device, or the
    /// existing record's.
    var coordinates: Coordinates


    /// Whether the write queues the file's upload: staged for the cloud.
    var queuesUpload: Bool {
        if case .staged = source { return place == .cloud }
        return false
    }
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
        let cache = try PageCache(database: database)
        defer { cache.restore() }
        do {
            result = try transaction(listsFiles: listsFiles, statements)
        } catch {
            try? puts.clear()
            throw error
        }
        if listsFiles { try? puts.clear() }
        CopySweep(device).removeReleased()
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
        // A staged id put twice is refused by the table (its staged column is unique).
        try puts.add(PutIntent(
            fileID: fileID, source: .staged(id), namespace: namespace, kind: kind, place: place, size: row.int("size") ?? 0,
            coordinates: Coordinates(at: .device, device: device.deviceID, object: "files/\(device.deviceID)/\(Identifier.objectName())",
                                     key: SecureRandom.bytes(32).hex)))
        return fileID
    }

    /// A new record over an existing file's bytes and key: nothing is uploaded again.
    func putExisting(_ id: String) throws -> String {
        let record: FileRecord
        if let existing = try device.fileRecord(id) {
            record = existing
        } else if let pending = try intent(for: id) {
            // A file put earlier in this same write.
            record = try FileRecord(row: Row(columns: ["id", "audience", "namespace", "size", "hash", "coordinates"],
                                             values: [.text(id), .text("store"), .text(pending.namespace), .integer(pending.size), .null, .text(pending.coordinates.json)]))
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
            place: record.coordinates.at == .stored ? .cloud : .deviceOnly, size: record.size, coordinates: record.coordinates))
        return fileID
    }
}

extension Device {
    /// Drops this device's record of an object's local bytes (``FileRecords/forgetLocalBytes(object:)``).
    func forgetLocalBytes(object: String) throws {
        try fileRecords.forgetLocalBytes(object: object)
    }
}

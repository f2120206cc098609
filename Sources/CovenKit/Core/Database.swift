import CSQLite
import Foundation

/// One SQLite connection. Not Sendable: a connection is confined to the task that opened it.
///
/// Related SQLite documentation: <https://sqlite.org/c3ref/open.html>
public final class Database {
    /// The raw handle, for the few engine parts that call SQLite directly (sessions, functions).
    let handle: OpaquePointer
    /// The path of the database file.
    public let path: String
    /// Typed errors thrown by this connection's SQL functions.
    let functionErrors = FunctionErrorSlot()
    /// The retained authorizer, if one is installed.
    var authorizerBox: UnsafeMutableRawPointer?
    /// The capture triggers of recorded writes on this connection, once installed.
    var rowCapture: RowCapture?
    /// Taken around each ``transaction(_:)`` when set: connections of one process that write
    /// at once (fetch-kept's workers) queue for it here rather than in SQLite's busy handler,
    /// which sleeps 1 ms and more however soon the lock is free again.
    var writeGate: NSLock?
    /// Statements kept prepared for hot loops (``cached(_:)``).
    private var statementCache: [String: Statement] = [:]
    /// How many statements this connection has prepared (``Statement``s and
    /// ``prepareSingle(_:)``; not the scripts of ``execute(_:)``): a loop preparing one per item
    /// shows here.
    var statementsPrepared = 0

    /// Opens (or creates, when `create`) the database at `path`.
    ///
    /// - Throws: ``CovenError`` `.noDevice` when the file is missing and `create` is false,
    ///   `.sql` for any other failure.
    public init(path: String, create: Bool = false, readOnly: Bool = false) throws {
        var db: OpaquePointer?
        var flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create { flags |= SQLITE_OPEN_CREATE }
        flags |= SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &db, flags, nil)
        guard code == SQLITE_OK, let db else {
            // sqlite3_open_v2 may return a handle even on failure; it must still be closed.
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close_v2(db) }
            if code == SQLITE_CANTOPEN && !create {
                throw CovenError(.noDevice, "no coven device at '\(path)'", hint: "run 'coven init' or pass --db", cause: message, sqliteCode: code)
            }
            throw CovenError(.sql, "cannot open database '\(path)'", cause: message, sqliteCode: code)
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 30_000)
    }

    /// Where SQLite makes its temporary files (statement journals that spill, sorts, temporary
    /// tables), which hold the device's plaintext rows: the device's own temporary folder (its
    /// folder when that is missing), rather than SQLite's default, /var/tmp without `TMPDIR`.
    /// SQLite's setting is the process's: the device opened last names it (a folder SQLite
    /// cannot use there is passed over for its usual ones).
    static func keepTemporaryFiles(in paths: DevicePaths) {
        var info = stat()
        let folder = stat(paths.temporary, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR ? paths.temporary : paths.folder
        temporaryFolderLock.lock()
        defer { temporaryFolderLock.unlock() }
        guard temporaryFolder != folder else { return }
        let bytes = Array(folder.utf8CString)
        guard let copy = sqlite3_malloc(Int32(bytes.count))?.assumingMemoryBound(to: CChar.self) else { return }
        bytes.withUnsafeBufferPointer { copy.update(from: $0.baseAddress!, count: bytes.count) }
        coven_sqlite_set_temp_directory(copy)
        temporaryFolder = folder
    }

    private static let temporaryFolderLock = NSLock()
    nonisolated(unsafe) private static var temporaryFolder: String?

    deinit {
        sqlite3_close_v2(handle)
        if let authorizerBox { Unmanaged<AuthorizerBox>.fromOpaque(authorizerBox).release() }
    }

    /// Whether the connection cannot write: opened read-only, or its file or folder is
    /// write-protected (SQLite then opens it read-only without saying so).
    ///
    /// Related SQLite documentation: <https://sqlite.org/c3ref/db_readonly.html>
    public var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    /// The message of the connection's last error.
    var lastMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// Throws a ``CovenError`` for a failed SQLite call.
    func check(_ code: Int32, _ sql: String? = nil) throws {
        guard code == SQLITE_OK || code == SQLITE_DONE || code == SQLITE_ROW else {
            throw sqliteError(code, sql)
        }
    }

    func sqliteError(_ code: Int32, _ sql: String?, message: String? = nil) -> CovenError {
        let message = message ?? lastMessage
        // The extended code when SQLite has one for this failure (sqlite3_exec returns the
        // primary one).
        let extended = (code & 0xff) == (sqlite3_extended_errcode(handle) & 0xff) ? sqlite3_extended_errcode(handle) : code
        let primary = code & 0xff
        if primary == SQLITE_FULL {
            return CovenError(.noRoom, "the disk holding '\(path)' is full", cause: message, sqliteCode: extended)
        }
        if primary == SQLITE_BUSY || primary == SQLITE_LOCKED {
            return CovenError(.busy, "the device database is busy", cause: message, sqliteCode: extended)
        }
        if primary == SQLITE_READONLY && sql != nil {
            return CovenError(.sql, "attempt to write through a read-only query", cause: message, sqliteCode: extended)
        }
        var details: [String: String] = [:]
        if let sql { details["sql"] = String(sql.prefix(200)) }
        return CovenError(.sql, message, details: details, sqliteCode: extended)
    }

    /// Prepares one statement.
    public func prepare(_ sql: String) throws -> Statement {
        try Statement(database: self, sql: sql)
    }

    /// A prepared statement kept for this connection, reset and with its bindings cleared: for
    /// a statement run once per item of a long loop (applying a change). Step it to its end
    /// (or reset it) before asking for it again.
    func cached(_ sql: String) throws -> Statement {
        if let statement = statementCache[sql] {
            statement.reset()
            statement.clearBindings()
            return statement
        }
        let statement = try Statement(database: self, sql: sql, retaining: false)
        if statementCache.count >= Self.statementsKept { statementCache.removeAll() }
        statementCache[sql] = statement
        return statement
    }

    /// Runs one statement as ``run(_:_:)`` does, kept prepared (``cached(_:)``): for a statement
    /// run once per file of a write of many.
    func runCached(_ sql: String, _ parameters: [SQLBindable] = []) throws {
        let statement = try cached(sql)
        try statement.bind(parameters)
        try statement.runToEnd()
    }

    /// Runs one statement as ``runCached(_:_:)`` does, with `blob` bound at parameter `index`
    /// where it is instead of copied (whatever `parameters` hold there is replaced): a staged
    /// file's chunk hashes, 2 MiB at 4 GiB, were copied by the binding and again into the row,
    /// the peak of a 4 GiB stage. The binding is cleared before the bytes' scope ends.
    func runCached(_ sql: String, _ parameters: [SQLBindable], inPlace blob: [UInt8], at index: Int32) throws {
        let statement = try cached(sql)
        try statement.bind(parameters)
        try blob.withUnsafeBytes { bytes in
            defer {
                statement.reset()
                statement.clearBindings()
            }
            try statement.bindInPlace(bytes, at: index)
            try statement.runToEnd()
        }
    }

    /// Runs a query as ``queryOne(_:_:)`` does, kept prepared (``cached(_:)``), and resets it.
    func queryOneCached(_ sql: String, _ parameters: [SQLBindable] = []) throws -> Row? {
        let statement = try cached(sql)
        defer { statement.reset() }
        try statement.bind(parameters)
        return try statement.next()
    }

    /// Runs SQL that may hold several statements and returns nothing.
    public func execute(_ sql: String) throws {
        var error: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &error)
        if code != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? lastMessage
            sqlite3_free(error)
            throw sqliteError(code, String(sql.prefix(200)), message: message)
        }
    }

    /// Statements kept prepared per connection, and the longest SQL kept (a script's long
    /// INSERT of 10,000 rows is prepared, run and let go).
    static let statementsKept = 256
    static let longestSQLKept = 2048

    /// A statement for one call of ``run(_:_:)``, ``query(_:_:)`` or ``queryOne(_:_:)``: kept prepared
    /// (``cached(_:)``) for short SQL, so that a statement run once per file of a batch of
    /// 10,000 is parsed once (preparing was a third of make-device-only's time).
    private func statementForOneCall(_ sql: String) throws -> Statement {
        sql.utf8.count <= Self.longestSQLKept ? try cached(sql) : try prepare(sql)
    }

    /// Runs one statement with parameters and returns nothing.
    public func run(_ sql: String, _ parameters: [SQLBindable] = []) throws {
        let statement = try statementForOneCall(sql)
        defer { statement.reset() }
        try statement.bind(parameters)
        try statement.runToEnd()
    }

    /// Runs a query and returns every row.
    public func query(_ sql: String, _ parameters: [SQLBindable] = []) throws -> [Row] {
        let statement = try statementForOneCall(sql)
        defer { statement.reset() }
        try statement.bind(parameters)
        var rows: [Row] = []
        while let row = try statement.next() { rows.append(row) }
        return rows
    }

    /// Runs a query and returns its first row, if any.
    public func queryOne(_ sql: String, _ parameters: [SQLBindable] = []) throws -> Row? {
        let statement = try statementForOneCall(sql)
        // Reset at once: a statement left on its first row would keep its read open.
        defer { statement.reset() }
        try statement.bind(parameters)
        return try statement.next()
    }

    /// Runs a query and returns the first column of its first row.
    public func scalar(_ sql: String, _ parameters: [SQLBindable] = []) throws -> SQLValue {
        try queryOne(sql, parameters)?[0] ?? .null
    }

    /// The rows the last INSERT, UPDATE or DELETE changed.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// The stored columns of `table` in `schema`, in order: the columns a row image carries
    /// (generated ones, `hidden` 2 and 3 in `pragma_table_xinfo`, are computed by each device
    /// and never published).
    func storedColumns(_ table: String, schema: String = "main") throws -> [String] {
        try query("SELECT name FROM pragma_table_xinfo(?1, ?2) WHERE hidden = 0 ORDER BY cid", [table, schema]).compactMap { $0.string("name") }
    }

    /// Whether a transaction is open.
    public var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` in an IMMEDIATE transaction: committed when it returns, rolled back when it throws.
    ///
    /// Every state change of coven goes through here, so a crash leaves either all of it or none.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if let writeGate {
            writeGate.lock()
            defer { writeGate.unlock() }
            return try gatedTransaction(body)
        }
        return try gatedTransaction(body)
    }

    /// Runs `body` with commits that do not wait for the disk (`synchronous = NORMAL`), then
    /// makes them wait again (FULL; an error if it cannot). A crash of the process never loses
    /// such a commit, a power cut may, and the next durable commit makes it durable too (WAL
    /// keeps commits in order). Only for bookkeeping whose loss repeats a step and changes
    /// nothing a user sees: an upload's claim, a confirmed part's row, a lease. Every other
    /// state change commits durably.
    @discardableResult
    func withCommitsLosableToPowerCut<T>(_ body: () throws -> T) throws -> T {
        try execute("PRAGMA synchronous = NORMAL")
        let result: T
        do {
            result = try body()
        } catch {
            try? execute("PRAGMA synchronous = FULL")
            throw error
        }
        try execute("PRAGMA synchronous = FULL")
        return result
    }

    /// One ``transaction(_:)`` whose commit may be lost to a power cut
    /// (``withCommitsLosableToPowerCut(_:)``).
    @discardableResult
    func transactionLosableToPowerCut<T>(_ body: () throws -> T) throws -> T {
        try withCommitsLosableToPowerCut { try transaction(body) }
    }

    private func gatedTransaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if inTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body` inside a savepoint, released when it returns, rolled back when it throws.
    @discardableResult
    public func savepoint<T>(_ name: String = "coven", _ body: () throws -> T) throws -> T {
        try execute("SAVEPOINT \(name)")
        do {
            let result = try body()
            try execute("RELEASE \(name)")
            return result
        } catch {
            try? execute("ROLLBACK TO \(name)")
            try? execute("RELEASE \(name)")
            throw error
        }
    }

    /// Whether a table or view of that name exists in the main schema.
    public func hasTable(_ name: String) throws -> Bool {
        try scalar("SELECT count(*) FROM sqlite_schema WHERE name = ?1 AND type IN ('table','view')", [name]).intValue ?? 0 > 0
    }
}

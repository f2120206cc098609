import CSQLite
import Foundation

// MARK: - Values

/// A value SQLite stores: NULL, INTEGER, REAL, TEXT or BLOB.
public enum SQLValue: Sendable, Equatable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    /// The value as text, or nil for NULL; integers and reals are formatted.
    public var textValue: String? {
        switch self {
        case .null: return nil
        case .integer(let v): return String(v)
        case .real(let v): return String(v)
        case .text(let v): return v
        case .blob(let v): return String(decoding: v, as: UTF8.self)
        }
    }

    /// The value as an integer, or nil when it is not one.
    public var intValue: Int64? {
        switch self {
        case .integer(let v): return v
        case .real(let v): return Int64(v)
        case .text(let v): return Int64(v)
        default: return nil
        }
    }

    /// The value's bytes, for BLOB and TEXT.
    public var bytesValue: [UInt8]? {
        switch self {
        case .blob(let v): return v
        case .text(let v): return Array(v.utf8)
        default: return nil
        }
    }

    /// Whether this is NULL.
    public var isNull: Bool { if case .null = self { return true } else { return false } }
}

extension SQLValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// Something that binds as one SQL parameter.
public protocol SQLBindable {
    /// The value to bind.
    var sqlValue: SQLValue { get }
}

extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension Int32: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .real(self) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Array: SQLBindable where Element == UInt8 { public var sqlValue: SQLValue { .blob(self) } }
extension Data: SQLBindable { public var sqlValue: SQLValue { .blob([UInt8](self)) } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue {
        switch self {
        case .none: return .null
        case .some(let v): return v.sqlValue
        }
    }
}

// MARK: - Row

/// One result row: values by position, with names.
public struct Row: Sendable {
    /// The column names, in order.
    public let columns: [String]
    /// The values, in column order.
    public let values: [SQLValue]

    /// The value at a position.
    public subscript(_ index: Int) -> SQLValue { values[index] }

    /// The value of a named column, or NULL when there is none.
    public subscript(_ name: String) -> SQLValue {
        guard let index = columns.firstIndex(of: name) else { return .null }
        return values[index]
    }

    /// A column as text; nil for NULL.
    public func string(_ name: String) -> String? { self[name].textValue }
    /// A column as an integer; nil for NULL.
    public func int(_ name: String) -> Int64? { self[name].intValue }
    /// A column as bytes; nil for NULL.
    public func bytes(_ name: String) -> [UInt8]? { self[name].bytesValue }
}

// MARK: - Database

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
    fileprivate(set) var statementsPrepared = 0

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

    /// A statement for one call of ``run(_:_:)`` or ``queryOne(_:_:)``: kept prepared
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
        let statement = try prepare(sql)
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

// MARK: - Statement

/// One prepared statement, finalized when released.
///
/// Related SQLite documentation: <https://sqlite.org/c3ref/stmt.html>
public final class Statement {
    let handle: OpaquePointer
    /// The connection. A statement keeps it open, except one in the connection's own cache
    /// (``Database/cached(_:)``), which must not: the two would keep each other alive.
    unowned let database: Database
    private let retained: Database?
    /// The statement's SQL.
    public let sql: String

    init(database: Database, sql: String, retaining: Bool = true) throws {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v2(database.handle, sql, -1, &statement, nil)
        guard code == SQLITE_OK, let statement else {
            throw database.sqliteError(code == SQLITE_OK ? SQLITE_MISUSE : code, sql)
        }
        self.handle = statement
        self.database = database
        database.statementsPrepared += 1
        self.retained = retaining ? database : nil
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Whether the statement only reads.
    public var isReadOnly: Bool { sqlite3_stmt_readonly(handle) != 0 }

    /// The number of result columns.
    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    /// The result column names.
    public var columnNames: [String] {
        (0..<columnCount).map { String(cString: sqlite3_column_name(handle, Int32($0))) }
    }

    /// Binds positional parameters, from ?1.
    public func bind(_ values: [SQLBindable]) throws {
        for (index, value) in values.enumerated() {
            try bind(value.sqlValue, at: Int32(index + 1))
        }
    }

    /// Binds a named parameter (`:name`, `@name` or `$name`); unknown names are ignored.
    public func bind(_ value: SQLValue, named name: String) throws {
        for prefix in [":", "@", "$"] {
            let index = sqlite3_bind_parameter_index(handle, prefix + name)
            if index > 0 { try bind(value, at: index) }
        }
    }

    /// The number of parameters the statement takes.
    public var parameterCount: Int { Int(sqlite3_bind_parameter_count(handle)) }

    /// Binds one value at a 1-based position.
    public func bind(_ value: SQLValue, at index: Int32) throws {
        let code: Int32
        switch value {
        case .null: code = sqlite3_bind_null(handle, index)
        case .integer(let v): code = sqlite3_bind_int64(handle, index, v)
        case .real(let v): code = sqlite3_bind_double(handle, index, v)
        case .text(let v): code = sqlite3_bind_text(handle, index, v, -1, coven_sqlite_transient())
        case .blob(let v):
            code = v.withUnsafeBytes { raw in
                sqlite3_bind_blob64(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), sqlite3_uint64(raw.count), coven_sqlite_transient())
            }
        }
        try database.check(code, sql)
    }

    /// Resets the statement so it can run again, keeping its bindings.
    public func reset() {
        sqlite3_reset(handle)
    }

    /// Clears all bindings to NULL.
    public func clearBindings() {
        sqlite3_clear_bindings(handle)
    }

    /// Steps to the next row; nil when done.
    public func next() throws -> Row? {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW:
            return Row(columns: columnNames, values: (0..<Int32(columnCount)).map { column($0) })
        case SQLITE_DONE:
            return nil
        default:
            throw database.sqliteError(code, sql)
        }
    }

    /// Steps until done, discarding rows.
    public func runToEnd() throws {
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            if code != SQLITE_ROW { throw database.sqliteError(code, sql) }
        }
    }

    /// Steps to the next row, leaving its columns in SQLite (``withText(_:_:)`` reads one in
    /// place): false when done.
    func step() throws -> Bool {
        let code = sqlite3_step(handle)
        if code == SQLITE_ROW { return true }
        if code == SQLITE_DONE { return false }
        throw database.sqliteError(code, sql)
    }

    /// Calls `body` with the UTF-8 of column `index` of the current row as SQLite holds it
    /// (valid during the call only): no String made of it.
    func withText<T>(_ index: Int32, _ body: (UnsafeBufferPointer<UInt8>) throws -> T) rethrows -> T {
        let count = Int(sqlite3_column_bytes(handle, index))
        guard count > 0, let pointer = sqlite3_column_text(handle, index) else { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeBufferPointer(start: pointer, count: count))
    }

    /// Steps until done with `text` (UTF-8) bound as TEXT at `index`, SQLite reading it where
    /// it is rather than copying it first (a list of 100,000 names); the binding is cleared after.
    func runToEnd(text: [UInt8], at index: Int32) throws {
        try text.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self)
            try database.check(sqlite3_bind_text64(handle, index, base, sqlite3_uint64(buffer.count), nil, UInt8(SQLITE_UTF8)), sql)
            defer {
                sqlite3_reset(handle)
                sqlite3_bind_null(handle, index)
            }
            try runToEnd()
        }
    }

    /// The value of a column of the current row.
    func column(_ index: Int32) -> SQLValue {
        switch sqlite3_column_type(handle, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, index))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(handle, index))
            guard let pointer = sqlite3_column_text(handle, index) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, index))
            guard count > 0, let pointer = sqlite3_column_blob(handle, index) else { return .blob([]) }
            return .blob([UInt8](UnsafeRawBufferPointer(start: pointer, count: count)))
        default: return .null
        }
    }
}

// MARK: - Values passed to and from SQL functions

extension SQLValue {
    /// Reads an `sqlite3_value` (a function argument or a changeset value).
    init(raw value: OpaquePointer?) {
        guard let value else { self = .null; return }
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: self = .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: self = .real(sqlite3_value_double(value))
        case SQLITE_TEXT:
            let count = Int(sqlite3_value_bytes(value))
            if let pointer = sqlite3_value_text(value) {
                self = .text(String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self))
            } else {
                self = .text("")
            }
        case SQLITE_BLOB:
            let count = Int(sqlite3_value_bytes(value))
            if count > 0, let pointer = sqlite3_value_blob(value) {
                self = .blob([UInt8](UnsafeRawBufferPointer(start: pointer, count: count)))
            } else {
                self = .blob([])
            }
        default: self = .null
        }
    }

    /// Sets this value as the result of an SQL function.
    func setResult(_ context: OpaquePointer?) {
        switch self {
        case .null: sqlite3_result_null(context)
        case .integer(let v): sqlite3_result_int64(context, v)
        case .real(let v): sqlite3_result_double(context, v)
        case .text(let v): sqlite3_result_text(context, v, -1, coven_sqlite_transient())
        case .blob(let v):
            v.withUnsafeBytes { raw in
                sqlite3_result_blob64(context, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), sqlite3_uint64(raw.count), coven_sqlite_transient())
            }
        }
    }
}

// MARK: - SQL functions

/// The Swift body of an SQL function: arguments in, one value out.
public typealias SQLFunctionBody = ([SQLValue]) throws -> SQLValue

/// Boxes a function body so SQLite can hold it as user data.
final class SQLFunctionBox {
    let body: SQLFunctionBody
    let errors: FunctionErrorSlot
    init(_ body: @escaping SQLFunctionBody, errors: FunctionErrorSlot) {
        self.body = body
        self.errors = errors
    }
}

extension Database {
    /// Registers an SQL function on this connection.
    ///
    /// A body that throws a ``CovenError`` makes the statement fail; the error is kept in
    /// ``functionError`` so the caller can rethrow it with its code instead of SQLite's text.
    ///
    /// - Parameters:
    ///   - name: the function's SQL name.
    ///   - arguments: the argument count, or -1 for any.
    ///   - deterministic: whether equal arguments always give an equal result.
    public func createFunction(_ name: String, arguments: Int32, deterministic: Bool, _ body: @escaping SQLFunctionBody) throws {
        let box = Unmanaged.passRetained(SQLFunctionBox(body, errors: functionErrors))
        var flags = SQLITE_UTF8
        if deterministic { flags |= SQLITE_DETERMINISTIC }
        let code = sqlite3_create_function_v2(
            handle, name, arguments, flags, box.toOpaque(),
            { context, count, values in
                guard let user = sqlite3_user_data(context) else { return }
                let box = Unmanaged<SQLFunctionBox>.fromOpaque(user).takeUnretainedValue()
                var arguments: [SQLValue] = []
                arguments.reserveCapacity(Int(count))
                for index in 0..<Int(count) {
                    arguments.append(SQLValue(raw: values?[index]))
                }
                do {
                    try box.body(arguments).setResult(context)
                } catch let error as CovenError {
                    box.errors.set(error)
                    sqlite3_result_error(context, "\(error.code.rawValue): \(error.message)", -1)
                } catch {
                    sqlite3_result_error(context, String(describing: error), -1)
                }
            },
            nil, nil,
            { user in
                guard let user else { return }
                Unmanaged<SQLFunctionBox>.fromOpaque(user).release()
            })
        try check(code)
    }

    /// The last ``CovenError`` an SQL function threw on this connection, taken (cleared) by the read.
    public func takeFunctionError() -> CovenError? { functionErrors.take() }
}

/// Holds the typed error an SQL function threw, so it survives SQLite's text-only error path.
/// Connection-confined, like the connection that owns it.
final class FunctionErrorSlot {
    private var last: CovenError?

    func set(_ error: CovenError) { last = error }

    func take() -> CovenError? {
        defer { last = nil }
        return last
    }
}

// MARK: - Scripts and the authorizer

extension Database {
    /// Runs every statement of `sql` in turn, binding named parameters (`:name`, `@name`,
    /// `$name`) and `?NNN` from `parameters`, and handing each result row to `row`.
    ///
    /// - Throws: `.sql` with SQLite's message; `.usage` when a parameter the SQL names has no
    ///   value.
    public func executeScript(_ sql: String, parameters: [String: SQLValue], row: (Row) throws -> Void) throws {
        try runScript(sql, parameters: parameters, vet: nil, row: row)
    }

    /// Runs `sql` as ``executeScript(_:parameters:row:)`` does, with `vet` called on each
    /// statement once it is prepared and before it runs: a statement it refuses never runs.
    func runScript(_ sql: String, parameters: [String: SQLValue], vet: ((OpaquePointer) throws -> Void)?, row: (Row) throws -> Void) throws {
        var bytes = Array(sql.utf8)
        bytes.append(0)
        try bytes.withUnsafeBufferPointer { buffer in
            try buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { start in
                var cursor: UnsafePointer<CChar>? = UnsafePointer(start)
                while let current = cursor, current.pointee != 0 {
                    var statement: OpaquePointer?
                    var tail: UnsafePointer<CChar>?
                    let code = sqlite3_prepare_v2(handle, current, -1, &statement, &tail)
                    if let error = takeFunctionError() { sqlite3_finalize(statement); throw error }
                    guard code == SQLITE_OK else { throw sqliteError(code, String(cString: current)) }
                    cursor = tail
                    guard let statement else { continue } // whitespace or a comment
                    defer { sqlite3_finalize(statement) }
                    try vet?(statement)
                    try runPrepared(statement, parameters: parameters, row: row)
                }
            }
        }
    }

    /// A script of exactly one statement, prepared once to be run many times
    /// (``runPrepared(_:parameters:row:)``, `coven write --each`); nil when the script holds
    /// several statements (or none), which must run through ``executeScript(_:parameters:row:)``.
    /// The caller finalizes it (`sqlite3_finalize`).
    func prepareSingle(_ sql: String) throws -> OpaquePointer? {
        var bytes = Array(sql.utf8)
        bytes.append(0)
        return try bytes.withUnsafeBufferPointer { buffer in
            try buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { start -> OpaquePointer? in
                var statement: OpaquePointer?
                var tail: UnsafePointer<CChar>?
                let code = sqlite3_prepare_v3(handle, start, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, &tail)
                if let error = takeFunctionError() { sqlite3_finalize(statement); throw error }
                guard code == SQLITE_OK else { throw sqliteError(code, sql) }
                guard let statement else { return nil }
                statementsPrepared += 1
                // Only whitespace and semicolons may follow (a comment makes it a script).
                var rest = tail
                while let current = rest, current.pointee != 0 {
                    let byte = UInt8(bitPattern: current.pointee)
                    guard byte == 0x20 || byte == 0x0A || byte == 0x09 || byte == 0x0D || byte == UInt8(ascii: ";") else {
                        sqlite3_finalize(statement)
                        return nil
                    }
                    rest = current + 1
                }
                return statement
            }
        }
    }

    /// Binds `parameters` by name to a prepared statement and steps it to its end, passing each
    /// row to `row`; the statement is reset and its bindings cleared first, so it runs again.
    func runPrepared(_ statement: OpaquePointer, parameters: [String: SQLValue], row: (Row) throws -> Void) throws {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        defer { sqlite3_reset(statement) }
        // The statement's text, for an error only.
        func text() -> String { String(cString: sqlite3_sql(statement)) }
        for index in 1...max(1, Int(sqlite3_bind_parameter_count(statement))) where sqlite3_bind_parameter_count(statement) > 0 {
            guard let rawName = sqlite3_bind_parameter_name(statement, Int32(index)) else {
                throw CovenError(.usage, "the SQL uses a nameless parameter '?'", hint: "name parameters (:name) and pass --param name=value")
            }
            let name = String(String(cString: rawName).dropFirst())
            guard let value = parameters[name] else {
                throw CovenError(.usage, "no value for parameter '\(String(cString: rawName))'", hint: "pass --param \(name)=VALUE")
            }
            let bound = Statement.bindRaw(statement, value, at: Int32(index))
            guard bound == SQLITE_OK else { throw sqliteError(bound, text()) }
        }
        let columns = Int(sqlite3_column_count(statement))
        let names = (0..<columns).map { String(cString: sqlite3_column_name(statement, Int32($0))) }
        while true {
            let step = sqlite3_step(statement)
            if let error = takeFunctionError() { throw error }
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw sqliteError(step, text()) }
            var values: [SQLValue] = []
            values.reserveCapacity(columns)
            for column in 0..<Int32(columns) {
                values.append(SQLValue(raw: sqlite3_column_value(statement, column)))
            }
            try row(Row(columns: names, values: values))
        }
    }

    /// Installs an authorizer that refuses what `policy` refuses; nil removes it.
    ///
    /// Related SQLite documentation: <https://sqlite.org/c3ref/set_authorizer.html>
    public func setAuthorizer(_ policy: AuthorizerPolicy?) {
        if let old = authorizerBox {
            Unmanaged<AuthorizerBox>.fromOpaque(old).release()
            authorizerBox = nil
        }
        guard let policy else {
            sqlite3_set_authorizer(handle, nil, nil)
            return
        }
        let box = Unmanaged.passRetained(AuthorizerBox(policy)).toOpaque()
        authorizerBox = box
        sqlite3_set_authorizer(handle, { user, action, first, second, _, trigger in
            guard let user else { return SQLITE_OK }
            let box = Unmanaged<AuthorizerBox>.fromOpaque(user).takeUnretainedValue()
            // What coven's own capture triggers do (Store/RowCapture.swift) is coven's, not the
            // SQL's: recording a write is always allowed.
            if let trigger, RowCapture.isCaptureTrigger(String(cString: trigger)) { return SQLITE_OK }
            let a = first.map { String(cString: $0) }
            let b = second.map { String(cString: $0) }
            return box.policy(action, a, b) ? SQLITE_OK : SQLITE_DENY
        }, box)
    }
}

/// Decides, per action code and its two arguments (usually a table and a column), whether SQL
/// may do it.
public typealias AuthorizerPolicy = @Sendable (Int32, String?, String?) -> Bool

final class AuthorizerBox {
    let policy: AuthorizerPolicy
    init(_ policy: @escaping AuthorizerPolicy) { self.policy = policy }
}

extension Statement {
    static func bindRaw(_ statement: OpaquePointer, _ value: SQLValue, at index: Int32) -> Int32 {
        switch value {
        case .null: return sqlite3_bind_null(statement, index)
        case .integer(let v): return sqlite3_bind_int64(statement, index, v)
        case .real(let v): return sqlite3_bind_double(statement, index, v)
        case .text(let v): return sqlite3_bind_text(statement, index, v, -1, coven_sqlite_transient())
        case .blob(let v):
            return v.withUnsafeBytes { raw in
                sqlite3_bind_blob64(statement, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), sqlite3_uint64(raw.count), coven_sqlite_transient())
            }
        }
    }
}

import CSQLite
import Foundation

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

    /// The column names of the rows ``next()`` read last, shared by every row it reads while
    /// they stay the same.
    private var rowColumns: [String] = []

    /// The result column names, made once for the rows of a statement run many times: checked
    /// against SQLite's on each row (a statement SQLite prepared again after a change of the
    /// schema may name other columns: `SELECT *` after a migration), never trusted blindly.
    private func currentColumnNames() -> [String] {
        let count = Int(sqlite3_column_count(handle))
        if rowColumns.count == count {
            var same = true
            for index in 0..<count {
                guard let name = sqlite3_column_name(handle, Int32(index)), rowColumns[index].withCString({ strcmp($0, name) == 0 }) else {
                    same = false
                    break
                }
            }
            if same { return rowColumns }
        }
        rowColumns = columnNames
        return rowColumns
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

    /// Binds `bytes` at a 1-based position where they are, not copied (SQLite's static
    /// binding). They must stay as they are until the statement has run and its bindings are
    /// cleared: ``Database/runCached(_:_:inPlace:at:)`` does both within the bytes' scope.
    func bindInPlace(_ bytes: UnsafeRawBufferPointer, at index: Int32) throws {
        let code = sqlite3_bind_blob64(handle, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), sqlite3_uint64(bytes.count), nil)
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
            let columns = currentColumnNames()
            return Row(columns: columns, values: (0..<Int32(columns.count)).map { column($0) })
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

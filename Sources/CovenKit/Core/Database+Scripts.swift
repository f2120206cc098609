import CSQLite
import Foundation

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

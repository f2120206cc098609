import CSQLite
import Foundation

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

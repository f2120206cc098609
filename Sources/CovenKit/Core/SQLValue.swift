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

import Foundation

/// One recorded change of one row of a synced table (or of `coven_files`): what a write records
/// in the outbox and what a change object carries (DESIGN.md "What a write records").
///
/// An upsert carries the whole row (every stored column but generated ones, by name, typed) with
/// the write's stamp; a delete is a tombstone (table, id, stamp); a retract tells peers to delete
/// a row this device keeps (it left the shared set).
public struct RowEntry: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case upsert = 1
        case delete = 2
        case retract = 3
    }

    public var kind: Kind
    public var table: String
    public var id: String
    /// The hybrid-clock stamp of the write (the row's `_updated_at` for an upsert).
    public var stamp: String
    /// Column names, for an upsert; empty otherwise.
    public var columns: [String]
    /// Values in the order of `columns`.
    public var values: [SQLValue]

    public init(kind: Kind, table: String, id: String, stamp: String, columns: [String] = [], values: [SQLValue] = []) {
        precondition(columns.count == values.count, "internal error: a row entry has a value per column")
        self.kind = kind
        self.table = table
        self.id = id
        self.stamp = stamp
        self.columns = columns
        self.values = values
    }

    /// The value of `column`, if the entry carries it.
    public func value(_ column: String) -> SQLValue? {
        columns.firstIndex(of: column).map { values[$0] }
    }
}

extension RowEntry {
    /// The statement that writes a row image into `table`: `INSERT … ON CONFLICT (id) DO
    /// UPDATE`, never REPLACE (a REPLACE deletes first, which fires ON DELETE CASCADE). Columns
    /// the image lacks keep their values; bind the image's values in `columns` order.
    static func upsertSQL(table: String, columns: [String]) -> String {
        let quoted = columns.map(RowCapture.quote)
        let placeholders = quoted.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
        let updates = quoted.filter { $0 != "\"id\"" }.map { "\($0) = excluded.\($0)" }.joined(separator: ", ")
        return "INSERT INTO main.\(RowCapture.quote(table)) (\(quoted.joined(separator: ", "))) VALUES (\(placeholders))"
            + (updates.isEmpty ? " ON CONFLICT (id) DO NOTHING" : " ON CONFLICT (id) DO UPDATE SET \(updates)")
    }
}

/// The binary form of a list of row entries, shared by the outbox and change objects.
///
/// ```
/// entries  := varint(count) entry*
/// entry    := kind:u8 string(table) string(id) string(stamp) [varint(n) (string(column) value)^n, upserts only]
/// value    := 0x00                               NULL
///           | 0x01 zigzag-varint                 INTEGER
///           | 0x02 8 bytes, IEEE 754 big-endian  REAL
///           | 0x03 string                        TEXT (UTF-8)
///           | 0x04 varint(length) bytes          BLOB
/// string   := varint(length) UTF-8 bytes
/// ```
///
/// Varints are unsigned LEB128. Repeated table and column names cost little once compressed.
public enum RowEntryCodec {
    /// Appends `entries` to `output`.
    public static func encode(_ entries: [RowEntry], into output: inout [UInt8]) {
        writeVarint(UInt64(entries.count), into: &output)
        for entry in entries { encode(entry, into: &output) }
    }

    /// The encoded bytes of `entries`.
    public static func encode(_ entries: [RowEntry]) -> [UInt8] {
        var output: [UInt8] = []
        encode(entries, into: &output)
        return output
    }

    /// Appends one entry (without the leading count).
    public static func encode(_ entry: RowEntry, into output: inout [UInt8]) {
        output.append(entry.kind.rawValue)
        writeString(entry.table, into: &output)
        writeString(entry.id, into: &output)
        writeString(entry.stamp, into: &output)
        guard entry.kind == .upsert else { return }
        writeVarint(UInt64(entry.columns.count), into: &output)
        for (column, value) in zip(entry.columns, entry.values) {
            writeString(column, into: &output)
            writeValue(value, into: &output)
        }
    }

    /// Decodes a list of entries encoded by ``encode(_:into:)``.
    ///
    /// - Throws: `.decoding` when the bytes are truncated, have trailing bytes, or hold an
    ///   unknown kind or value tag.
    public static func decode(_ bytes: [UInt8]) throws -> [RowEntry] {
        var reader = ByteReader(bytes)
        let entries = try decode(from: &reader)
        guard reader.isAtEnd else { throw ByteReader.failure("trailing bytes after the row entries") }
        return entries
    }

    /// Decodes a count-prefixed list of entries from `reader`.
    public static func decode(from reader: inout ByteReader) throws -> [RowEntry] {
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw ByteReader.failure("row entry count past the end") }
        var entries: [RowEntry] = []
        entries.reserveCapacity(Int(count))
        for _ in 0..<count { entries.append(try decodeEntry(from: &reader)) }
        return entries
    }

    static func decodeEntry(from reader: inout ByteReader) throws -> RowEntry {
        guard let kind = RowEntry.Kind(rawValue: try reader.byte()) else { throw ByteReader.failure("unknown row entry kind") }
        let table = try reader.string()
        let id = try reader.string()
        let stamp = try reader.string()
        var columns: [String] = []
        var values: [SQLValue] = []
        if kind == .upsert {
            let count = try reader.varint()
            guard count <= UInt64(reader.remaining) else { throw ByteReader.failure("column count past the end") }
            columns.reserveCapacity(Int(count))
            values.reserveCapacity(Int(count))
            for _ in 0..<count {
                columns.append(try reader.string())
                values.append(try reader.value())
            }
        }
        return RowEntry(kind: kind, table: table, id: id, stamp: stamp, columns: columns, values: values)
    }

    // MARK: Primitives

    public static func writeVarint(_ value: UInt64, into output: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            output.append(UInt8(value & 0x7f) | 0x80)
            value >>= 7
        }
        output.append(UInt8(value))
    }

    public static func writeString(_ value: String, into output: inout [UInt8]) {
        var value = value
        value.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), into: &output)
            output.append(contentsOf: utf8)
        }
    }

    public static func writeValue(_ value: SQLValue, into output: inout [UInt8]) {
        switch value {
        case .null:
            output.append(0)
        case .integer(let v):
            output.append(1)
            writeVarint(UInt64(bitPattern: (v << 1) ^ (v >> 63)), into: &output)
        case .real(let v):
            output.append(2)
            let bits = v.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) { output.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        case .text(let v):
            output.append(3)
            writeString(v, into: &output)
        case .blob(let v):
            output.append(4)
            writeVarint(UInt64(v.count), into: &output)
            output.append(contentsOf: v)
        }
    }
}

/// Reads the primitives of ``RowEntryCodec`` from a byte array, failing with `.decoding`.
public struct ByteReader {
    let bytes: [UInt8]
    public private(set) var offset = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var remaining: Int { bytes.count - offset }
    public var isAtEnd: Bool { offset == bytes.count }

    static func failure(_ reason: String) -> CovenError {
        CovenError(.decoding, "cannot decode recorded rows", cause: reason)
    }

    public mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw ByteReader.failure("truncated") }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func take(_ count: Int) throws -> ArraySlice<UInt8> {
        guard count >= 0, count <= remaining else { throw ByteReader.failure("truncated") }
        defer { offset += count }
        return bytes[offset..<(offset + count)]
    }

    public mutating func varint() throws -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try self.byte()
            guard shift < 64, !(shift == 63 && byte > 1) else { throw ByteReader.failure("varint too long") }
            value |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
    }

    public mutating func string() throws -> String {
        let length = try varint()
        guard length <= UInt64(remaining) else { throw ByteReader.failure("truncated") }
        guard let text = Self.text(try take(Int(length))) else { throw ByteReader.failure("text is not UTF-8") }
        return text
    }

    /// `bytes` as text, nil when they are not UTF-8. ASCII (ids, stamps, names, most values)
    /// is checked here a byte at a time and decoded by the standard library's fast path (for
    /// ASCII, decoding and validating give the same String); anything else is validated as
    /// before. `String(validating:)` of a slice took a generic path, its metadata looked up at
    /// each call: 15% of a push of 100,000 rows.
    static func text(_ bytes: ArraySlice<UInt8>) -> String? {
        bytes.withUnsafeBufferPointer { buffer in
            if buffer.allSatisfy({ $0 < 0x80 }) { return String(decoding: buffer, as: UTF8.self) }
            return String(validating: buffer, as: UTF8.self)
        }
    }

    public mutating func value() throws -> SQLValue {
        switch try byte() {
        case 0: return .null
        case 1:
            let raw = try varint()
            return .integer(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
        case 2:
            var bits: UInt64 = 0
            for byte in try take(8) { bits = bits << 8 | UInt64(byte) }
            return .real(Double(bitPattern: bits))
        case 3: return .text(try string())
        case 4:
            let length = try varint()
            guard length <= UInt64(remaining) else { throw ByteReader.failure("truncated") }
            return .blob(Array(try take(Int(length))))
        default:
            throw ByteReader.failure("unknown value tag")
        }
    }
}

import CSQLite
import Foundation

/// One SQLite session: records the changes made to attached tables as a changeset, which is how
/// a write is recorded for publishing (spec/local-data.md; SQLite's session extension).
///
/// Related SQLite documentation: <https://sqlite.org/sessionintro.html>
final class Session {
    private let handle: OpaquePointer
    private let database: Database

    /// Starts recording changes to `tables` of the main schema.
    init(database: Database, tables: [String]) throws {
        var session: OpaquePointer?
        let code = sqlite3session_create(database.handle, "main", &session)
        guard code == SQLITE_OK, let session else { throw database.sqliteError(code, nil) }
        self.handle = session
        self.database = database
        for table in tables {
            let attach = sqlite3session_attach(session, table)
            guard attach == SQLITE_OK else { throw database.sqliteError(attach, nil) }
        }
    }

    deinit { sqlite3session_delete(handle) }

    /// The changeset of everything recorded so far.
    func changeset() throws -> [UInt8] {
        var size: Int32 = 0
        var buffer: UnsafeMutableRawPointer?
        let code = sqlite3session_changeset(handle, &size, &buffer)
        defer { sqlite3_free(buffer) }
        guard code == SQLITE_OK else { throw database.sqliteError(code, nil) }
        guard let buffer, size > 0 else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: buffer, count: Int(size)))
    }
}

/// One change of a changeset: the table, the operation, and the old and new values by column.
/// For an UPDATE, columns that did not change (other than the primary key) are nil in `new`.
struct Change {
    enum Operation { case insert, update, delete }
    var table: String
    var operation: Operation
    var old: [SQLValue?]
    var new: [SQLValue?]
}

enum Changeset {
    /// Decodes a changeset into its changes.
    static func changes(_ changeset: [UInt8], database: Database) throws -> [Change] {
        guard !changeset.isEmpty else { return [] }
        var changes: [Change] = []
        var bytes = changeset
        try bytes.withUnsafeMutableBytes { raw in
            var iterator: OpaquePointer?
            let start = sqlite3changeset_start(&iterator, Int32(raw.count), raw.baseAddress)
            guard start == SQLITE_OK, let iterator else { throw database.sqliteError(start, nil) }
            defer { sqlite3changeset_finalize(iterator) }
            while true {
                let step = sqlite3changeset_next(iterator)
                if step == SQLITE_DONE { break }
                guard step == SQLITE_ROW else { throw database.sqliteError(step, nil) }
                var name: UnsafePointer<CChar>?
                var columns: Int32 = 0
                var op: Int32 = 0
                var indirect: Int32 = 0
                sqlite3changeset_op(iterator, &name, &columns, &op, &indirect)
                let operation: Change.Operation = op == SQLITE_INSERT ? .insert : (op == SQLITE_DELETE ? .delete : .update)
                var old: [SQLValue?] = Array(repeating: nil, count: Int(columns))
                var new: [SQLValue?] = Array(repeating: nil, count: Int(columns))
                for index in 0..<columns {
                    if operation != .insert {
                        var value: OpaquePointer?
                        if sqlite3changeset_old(iterator, index, &value) == SQLITE_OK, let value {
                            old[Int(index)] = SQLValue(raw: value)
                        }
                    }
                    if operation != .delete {
                        var value: OpaquePointer?
                        if sqlite3changeset_new(iterator, index, &value) == SQLITE_OK, let value {
                            new[Int(index)] = SQLValue(raw: value)
                        }
                    }
                }
                changes.append(Change(table: name.map { String(cString: $0) } ?? "", operation: operation, old: old, new: new))
            }
        }
        return changes
    }
}

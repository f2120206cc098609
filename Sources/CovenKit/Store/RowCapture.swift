import CSQLite
import Foundation

/// Which rows of the synced tables (and `coven_files`) a write changed, cascades included,
/// captured by temporary triggers of this connection while a ``RecordedWrite`` is open.
///
/// SQLite's session extension would tell the same, but 3.40's refuses any table with a
/// generated column (`SQLITE_SCHEMA`, surfacing as "not an error"), and its UPDATE records carry
/// only changed columns. The triggers record the table, the id (old and new, for an update of
/// the primary key), the operation and the old values of the file columns; the row images are
/// read from the tables once the write is done.
///
/// The triggers are `TEMP` (this connection only, nothing in the device's schema) and fire only
/// while ``active`` is set, through the `coven_capturing()` function, so writes that are not
/// recorded (applying another device's changes) cost one function call per row and record
/// nothing.
final class RowCapture {
    /// The capture triggers' names start with this; the authorizer lets them write
    /// (Core/Database.swift).
    static let triggerPrefix = "coven_capture_"

    static func isCaptureTrigger(_ name: String) -> Bool { name.hasPrefix(triggerPrefix) }

    /// One trigger firing.
    struct Event {
        enum Operation: String { case insert = "i", update = "u", delete = "d" }
        var table: String
        var id: String
        var operation: Operation
        /// The old values of the table's file columns, by column, for an update or delete.
        var oldFiles: [String: SQLValue]
    }

    /// Unowned: the connection holds its capture (``Database/rowCapture``).
    private unowned let database: Database
    /// Set while a recorded write runs.
    var active = false

    private init(database: Database) {
        self.database = database
    }

    /// The capture of `database`, made on first use.
    static func of(_ database: Database) throws -> RowCapture {
        if let capture = database.rowCapture { return capture }
        let capture = RowCapture(database: database)
        try database.createFunction("coven_capturing", arguments: 0, deterministic: false) { [unowned capture] _ in
            .integer(capture.active ? 1 : 0)
        }
        database.rowCapture = capture
        return capture
    }

    /// Makes sure the capture table and every table of `tables` (name → file columns) has its
    /// triggers, and clears what an earlier write captured.
    ///
    /// They are looked up in the temp schema each time rather than remembered: a write that
    /// rolls back takes the triggers it made with it, and a migration that drops a table drops
    /// its triggers. A trigger's name holds a digest of the file columns it records, so one of
    /// a table whose file columns changed is replaced.
    func prepare(tables: [(name: String, fileColumns: [String])]) throws {
        try database.execute("""
            CREATE TEMP TABLE IF NOT EXISTS coven_capture (
                seq INTEGER PRIMARY KEY,
                tbl TEXT NOT NULL,
                id ANY,
                old_id ANY,
                op TEXT NOT NULL,
                old_files TEXT
            )
            """)
        var present = Set(try database.query("SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND name LIKE 'coven\\_capture\\_%' ESCAPE '\\'").compactMap { $0.string("name") })
        for table in tables {
            let name = Self.triggerName(table: table.name, fileColumns: table.fileColumns)
            if present.remove(name + "_i") != nil, present.remove(name + "_u") != nil, present.remove(name + "_d") != nil { continue }
            try install(name: name, table: table.name, fileColumns: table.fileColumns)
        }
        for stale in present { try database.execute("DROP TRIGGER IF EXISTS temp.\(Self.quote(stale))") }
        try database.execute("DELETE FROM temp.coven_capture")
    }

    static func triggerName(table: String, fileColumns: [String]) -> String {
        let readable = table.unicodeScalars.prefix(40).map { CharacterSet.alphanumerics.contains($0) && $0.isASCII ? String($0) : "_" }.joined()
        let digest = SHA256.digest(Array(([table] + fileColumns).joined(separator: "\u{0}").utf8)).hex.prefix(12)
        return triggerPrefix + readable + "_" + digest
    }

    private func install(name: String, table: String, fileColumns: [String]) throws {
        let quoted = Self.quote(table)
        let literal = "'" + table.replacingOccurrences(of: "'", with: "''") + "'"
        // [typeof, value] per file column: a file id is text; anything else is reported by the
        // write's checks, and a BLOB cannot go in JSON as itself.
        func files(_ row: String) -> String {
            guard !fileColumns.isEmpty else { return "NULL" }
            return "json_array(" + fileColumns.map { column in
                let c = "\(row).\(Self.quote(column))"
                return "typeof(\(c)), CASE typeof(\(c)) WHEN 'text' THEN \(c) WHEN 'integer' THEN \(c) WHEN 'real' THEN \(c) ELSE NULL END"
            }.joined(separator: ", ") + ")"
        }
        try database.execute("""
            DROP TRIGGER IF EXISTS temp.\(name)_i;
            DROP TRIGGER IF EXISTS temp.\(name)_u;
            DROP TRIGGER IF EXISTS temp.\(name)_d;
            CREATE TEMP TRIGGER \(name)_i AFTER INSERT ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files) VALUES (\(literal), NEW.id, NULL, 'i', NULL);
            END;
            CREATE TEMP TRIGGER \(name)_u AFTER UPDATE ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files) VALUES (\(literal), NEW.id, OLD.id, 'u', \(files("OLD")));
            END;
            CREATE TEMP TRIGGER \(name)_d AFTER DELETE ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files) VALUES (\(literal), OLD.id, NULL, 'd', \(files("OLD")));
            END;
            """)
    }

    /// What was captured since ``prepare(tables:)``, in firing order. An update of a row's
    /// primary key comes out as a delete of the old id and an insert of the new one.
    func events(fileColumns: [String: [String]]) throws -> [Event] {
        var events: [Event] = []
        let statement = try database.prepare("SELECT tbl, id, old_id, op, old_files FROM temp.coven_capture ORDER BY seq")
        while let row = try statement.next() {
            let table = row.string("tbl") ?? ""
            let id = row["id"].textValue ?? ""
            let operation = Event.Operation(rawValue: row.string("op") ?? "") ?? .update
            var old: [String: SQLValue] = [:]
            if let json = row.string("old_files"), let pairs = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [Any] {
                let columns = fileColumns[table] ?? []
                for (index, column) in columns.enumerated() where index * 2 + 1 < pairs.count {
                    let type = pairs[index * 2] as? String
                    let value = pairs[index * 2 + 1]
                    switch type {
                    case "text": old[column] = .text(value as? String ?? "")
                    case "integer": old[column] = .integer((value as? NSNumber)?.int64Value ?? 0)
                    case "real": old[column] = .real((value as? NSNumber)?.doubleValue ?? 0)
                    case "blob": old[column] = .blob([])
                    default: old[column] = .null
                    }
                }
            }
            if operation == .update, let oldID = row["old_id"].textValue, oldID != id {
                events.append(Event(table: table, id: oldID, operation: .delete, oldFiles: old))
                events.append(Event(table: table, id: id, operation: .insert, oldFiles: [:]))
            } else {
                events.append(Event(table: table, id: id, operation: operation, oldFiles: old))
            }
        }
        return events
    }

    static func quote(_ identifier: String) -> String {
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

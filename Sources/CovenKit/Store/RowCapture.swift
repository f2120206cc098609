import CSQLite
import Foundation

/// Which rows of the synced tables (and `coven_files`) a write changed, cascades included,
/// captured by temporary triggers of this connection while a ``RecordedWrite`` is open.
///
/// SQLite's session extension would tell the same, but 3.40's refuses any table with a
/// generated column (`SQLITE_SCHEMA`, surfacing as "not an error"), and its UPDATE records carry
/// only changed columns. The triggers record the table, the id (old and new, for an update of
/// the primary key), the operation and the old values of the file columns; the row images are
/// read from the tables once the write is done. The firings are folded into one change per row in
/// SQL (``fold()``) and read back a page at a time, so a write of any size is never held in
/// memory.
///
/// The triggers are `TEMP` (this connection only, nothing in the device's schema) and fire only
/// while ``active`` is set, through the `coven_capturing()` function, so writes that are not
/// recorded (applying another device's changes) cost one function call per row and record
/// nothing.
final class RowCapture {
    /// The capture triggers' names start with this; the authorizer lets them write
    /// (Core/Database.swift).
    static let triggerPrefix = "coven_capture_"

    /// Whether `name` is one of the capture's triggers.
    static func isCaptureTrigger(_ name: String) -> Bool { name.hasPrefix(triggerPrefix) }

    /// Unowned: the connection holds its capture (``Database/rowCapture``).
    private unowned let database: Database
    /// Set while a recorded write runs.
    var active = false
    /// Counts the folds (``fold()``) and clears (``prepare(tables:)``) of the capture: a
    /// ``RecordedChanges`` reads the fold it was made from only.
    private(set) var generation = 0
    /// The newest `_updated_at` a row the write updated or deleted had before it (the write's
    /// own stamp, ``ownStamp``, aside): a write must be stamped after it (causality).
    private(set) var newestOldStamp: String?
    /// The stamp of the write being captured, which the rows it stamps carry.
    var ownStamp: String?

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
        // The last image of a deleted row, for the trash (Trash/Trash.swift): its table, its
        // stored columns joined by U+0001, then their values, encoded as one row entry.
        try database.createFunction("coven_row_image", arguments: -1, deterministic: true) { arguments in
            guard arguments.count >= 2, let table = arguments[0].textValue, let names = arguments[1].textValue else { return .null }
            let columns = names.split(separator: "\u{1}", omittingEmptySubsequences: false).map(String.init)
            let values = Array(arguments.dropFirst(2))
            guard columns.count == values.count else { return .null }
            let id = zip(columns, values).first { $0.0 == "id" }?.1.textValue ?? ""
            let stamp = zip(columns, values).first { $0.0 == "_updated_at" }?.1.textValue ?? ""
            return .blob(RowEntryCodec.encode([RowEntry(kind: .upsert, table: table, id: id, stamp: stamp, columns: columns, values: values)]))
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
        try createTables()
        var present = Set(try database.query("SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND name LIKE 'coven\\_capture\\_%' ESCAPE '\\'").compactMap { $0.string("name") })
        for table in tables {
            // A synced table's delete keeps the row's last image (the trash), so its triggers
            // name its stored columns too: a migration that adds one replaces them.
            let stored = table.name == "coven_files" ? [] : try database.storedColumns(table.name)
            let name = Self.triggerName(table: table.name, fileColumns: table.fileColumns + (stored.isEmpty ? [] : ["\u{1}"] + stored))
            if present.remove(name + "_i") != nil, present.remove(name + "_u") != nil, present.remove(name + "_d") != nil,
               present.remove(name + "_r") != nil { continue }
            try install(name: name, table: table.name, fileColumns: table.fileColumns, imageColumns: stored)
        }
        for stale in present { try database.execute("DROP TRIGGER IF EXISTS temp.\(Self.quote(stale))") }
        try database.execute("DELETE FROM temp.coven_capture; DELETE FROM temp.coven_capture_rows; DELETE FROM temp.coven_capture_images")
        newestOldStamp = nil
        generation += 1
    }

    /// Makes the capture's temporary tables unless there: the firings not folded yet
    /// (`coven_capture`) and the rows they changed (`coven_capture_rows`, ``fold()``).
    ///
    /// A firing's `seq` is never reused (AUTOINCREMENT), though folded firings are deleted: a
    /// row's `pos`, which comes from it, orders the rows across folds.
    private func createTables() throws {
        try database.execute("""
            CREATE TEMP TABLE IF NOT EXISTS coven_capture (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                tbl TEXT NOT NULL,
                id ANY,
                old_id ANY,
                op TEXT NOT NULL,
                old_files TEXT,
                old_stamp ANY
            );
            -- A write of the image of a file record no row names (an upload's switch to
            -- stored finishing after the row went) is a write of the record: FileRecords'
            -- register, published as the record's image (RecordedWrite).
            CREATE TEMP TRIGGER IF NOT EXISTS coven_image_capture_u AFTER UPDATE ON main.coven_deleted_files WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files, old_stamp)
                VALUES ('coven_files', NEW.id, OLD.id, 'u', json_array('text', OLD.audience), OLD._updated_at);
            END;
            -- The last image of each row a write deletes (``image(table:id:)``), for the trash.
            CREATE TEMP TABLE IF NOT EXISTS coven_capture_images (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                tbl TEXT NOT NULL,
                id ANY,
                image BLOB
            );
            CREATE INDEX IF NOT EXISTS temp.coven_capture_images_row ON coven_capture_images (tbl, id);
            CREATE TEMP TABLE IF NOT EXISTS coven_capture_rows (
                pos INTEGER PRIMARY KEY,
                tbl TEXT NOT NULL,
                id TEXT NOT NULL,
                first_op TEXT NOT NULL,
                old_files TEXT,
                last_op TEXT NOT NULL,
                sent INTEGER NOT NULL DEFAULT 0,
                UNIQUE (tbl, id)
            );
            """)
    }

    /// The name (less its `_i`, `_u`, `_d`) of the triggers of `table` recording `fileColumns`.
    static func triggerName(table: String, fileColumns: [String]) -> String {
        let readable = table.unicodeScalars.prefix(40).map { CharacterSet.alphanumerics.contains($0) && $0.isASCII ? String($0) : "_" }.joined()
        let digest = SHA256.digest(Array(([table] + fileColumns).joined(separator: "\u{0}").utf8)).hex.prefix(12)
        return triggerPrefix + readable + "_" + digest
    }

    /// Replaces the insert, update and delete triggers called `name` of `table`, and the
    /// trigger of an insert over a row that is there (`_r`).
    ///
    /// An `INSERT OR REPLACE` (`REPLACE INTO`) over a row deletes it without firing delete
    /// triggers (SQLite fires them only with recursive triggers on), so the insert alone would
    /// say the row is new: its old owner and audience unseen, another member's owner-only row
    /// or a circle's row taken over by a write that checks new rows only. The `_r` trigger,
    /// before every insert, records the row of that id as it is (op `r`); ``fold()`` takes it
    /// as the row's first firing (it existed before the write) and never as its last (an insert
    /// ignored, `OR IGNORE` or `DO NOTHING`, or an upsert's update, decides that). It does not
    /// see a row REPLACE deletes for another unique column than the id.
    private func install(name: String, table: String, fileColumns: [String], imageColumns: [String]) throws {
        let quoted = Self.quote(table)
        let literal = "'" + table.replacingOccurrences(of: "'", with: "''") + "'"
        let image: String
        if imageColumns.isEmpty {
            image = ""
        } else {
            let list = imageColumns.map { "OLD." + Self.quote($0) }.joined(separator: ", ")
            image = "INSERT INTO coven_capture_images (tbl, id, image) VALUES (\(literal), OLD.id, coven_row_image(\(literal), \(Self.nulJoined(imageColumns)), \(list)));"
        }
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
            DROP TRIGGER IF EXISTS temp.\(name)_r;
            CREATE TEMP TRIGGER \(name)_r BEFORE INSERT ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files, old_stamp)
                SELECT \(literal), o.id, NULL, 'r', \(files("o")), o._updated_at FROM main.\(quoted) AS o WHERE o.id = NEW.id;
            END;
            CREATE TEMP TRIGGER \(name)_i AFTER INSERT ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files) VALUES (\(literal), NEW.id, NULL, 'i', NULL);
            END;
            CREATE TEMP TRIGGER \(name)_u AFTER UPDATE ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files, old_stamp) VALUES (\(literal), NEW.id, OLD.id, 'u', \(files("OLD")), OLD._updated_at);
            END;
            CREATE TEMP TRIGGER \(name)_d AFTER DELETE ON main.\(quoted) WHEN coven_capturing() BEGIN
                INSERT INTO coven_capture (tbl, id, old_id, op, old_files, old_stamp) VALUES (\(literal), OLD.id, NULL, 'd', \(files("OLD")), OLD._updated_at);
                \(image)
            END;
            """)
    }

    /// Folds the firings captured since the last fold (or ``prepare(tables:)``) into the rows
    /// they changed, one per (table, id), in `temp.coven_capture_rows`, and deletes them; read
    /// the rows with ``foldedChanges(after:limit:fileColumns:)``.
    ///
    /// The firings are folded in SQL, so no write is held in memory whatever its size. An
    /// update of a row's primary key counts as a delete of the old id then an insert of the new
    /// one. A row's first firing says whether it existed before the write (anything but an
    /// insert) and gives its old file columns; its last says whether it exists after (anything
    /// but a delete). A row's `pos` is its first firing's place in the write (twice the firing's
    /// `seq`, plus one for the insert half of an id change), so the rows read in the order the
    /// write first touched them.
    ///
    /// Ids are compared as text, as the tables' ids are.
    func fold() throws {
        generation += 1
        try createTables()
        if let newest = try database.scalar("SELECT max(CAST(old_stamp AS TEXT)) FROM temp.coven_capture WHERE CAST(old_stamp AS TEXT) IS NOT ?1",
                                            [ownStamp.map { SQLValue.text($0) } ?? .null]).textValue,
           newest > (newestOldStamp ?? "") {
            newestOldStamp = newest
        }
        try database.execute("""
            INSERT INTO temp.coven_capture_rows (pos, tbl, id, first_op, old_files, last_op)
            SELECT f.seq * 2 + half.n, f.tbl,
                   CASE WHEN half.n = 0 AND f.moved THEN f.old_id ELSE f.id END,
                   CASE WHEN half.n = 1 THEN 'i' WHEN f.moved THEN 'd' ELSE f.op END,
                   CASE WHEN half.n = 1 THEN NULL ELSE f.old_files END,
                   CASE WHEN half.n = 1 THEN 'i' WHEN f.moved THEN 'd' ELSE f.op END
            FROM (SELECT seq, tbl, coalesce(CAST(id AS TEXT), '') AS id, CAST(old_id AS TEXT) AS old_id, op, old_files,
                         op = 'u' AND old_id IS NOT NULL AND CAST(old_id AS TEXT) IS NOT coalesce(CAST(id AS TEXT), '') AS moved
                  FROM temp.coven_capture) AS f
            CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1) AS half ON half.n = 0 OR f.moved
            WHERE true
            ORDER BY f.seq, half.n
            ON CONFLICT (tbl, id) DO UPDATE SET last_op = CASE excluded.last_op WHEN 'r' THEN last_op ELSE excluded.last_op END;
            DELETE FROM temp.coven_capture;
            """)
    }

    /// Whether the folded changes delete a row the write did not insert.
    func hasDeletes() throws -> Bool {
        try database.scalar("SELECT EXISTS (SELECT 1 FROM temp.coven_capture_rows WHERE last_op = 'd' AND first_op <> 'i')").intValue == 1
    }

    /// Whether the folded changes delete row `id` of `table` (a row the write did not insert):
    /// a ``RecordedChange`` of operation `.delete` of ``foldedChanges(after:limit:fileColumns:)``.
    func deletes(table: String, id: String) throws -> Bool {
        let statement = try database.cached("""
            SELECT 1 FROM temp.coven_capture_rows WHERE tbl = ?1 AND id = ?2 AND last_op = 'd' AND first_op <> 'i'
            """)
        try statement.bind([table, id])
        defer { statement.reset() }
        return try statement.next() != nil
    }

    /// Up to `limit` changes of the folded rows (``fold()``) after position `pos`, in the order
    /// the write first touched the rows, each with its position to read on from. A row the
    /// write inserted and deleted is no change.
    ///
    /// - Parameter fileColumns: the file columns by table, whose old values the changes carry;
    ///   nil reads no old values (``RecordedChange/oldFiles`` empty).
    func foldedChanges(after pos: Int64, limit: Int, fileColumns: [String: [String]]?) throws -> [(pos: Int64, change: RecordedChange)] {
        var changes: [(pos: Int64, change: RecordedChange)] = []
        let statement = try database.cached("""
            SELECT pos, tbl, id, first_op, last_op, old_files FROM temp.coven_capture_rows
            WHERE pos > ?1 AND NOT (first_op = 'i' AND last_op = 'd') AND last_op <> 'r' AND sent = 0
            ORDER BY pos LIMIT ?2
            """)
        try statement.bind([pos, limit])
        while let row = try statement.next() {
            let table = row[1].textValue ?? ""
            var change = RecordedChange(table: table, id: row[2].textValue ?? "", operation: .insert, oldFiles: [:], pos: row[0].intValue ?? 0)
            if row[3].textValue != "i" {
                change.operation = row[4].textValue == "d" ? .delete : .update
                if let fileColumns { change.oldFiles = try Self.files(json: row[5].textValue, columns: fileColumns[table] ?? []) }
            }
            changes.append((row[0].intValue ?? 0, change))
        }
        return changes
    }

    /// The file records among `ids` that the write put or changed (not deleted, not put and
    /// deleted again), first touched after position `pos` and not recorded yet: a row at `pos`
    /// naming them is recorded before them unless they go out ahead of it (RecordedWrite,
    /// which marks them: ``markSent(_:)``).
    func recordsPut(_ ids: [String], after pos: Int64) throws -> [(id: String, pos: Int64, inserted: Bool)] {
        guard !ids.isEmpty else { return [] }
        let statement = try database.cached("""
            SELECT id, pos, first_op FROM temp.coven_capture_rows
            WHERE tbl = 'coven_files' AND id IN (SELECT value FROM json_each(?1)) AND pos > ?2
              AND NOT (first_op = 'i' AND last_op = 'd') AND last_op NOT IN ('r', 'd') AND sent = 0
            """)
        try statement.bind([RecordedChanges.json(ids: ids), pos])
        var found: [(id: String, pos: Int64, inserted: Bool)] = []
        while let row = try statement.next() {
            if let id = row[0].textValue { found.append((id, row[1].intValue ?? 0, row[2].textValue == "i")) }
        }
        return found
    }

    /// Marks file records `ids` recorded ahead of their turn (RecordedWrite): the folded
    /// changes read after it leave them out.
    func markSent(_ ids: [String]) throws {
        guard !ids.isEmpty else { return }
        try database.run("UPDATE temp.coven_capture_rows SET sent = 1 WHERE tbl = 'coven_files' AND id IN (SELECT value FROM json_each(?1))",
                         [RecordedChanges.json(ids: ids)])
    }

    /// The file columns' values a trigger recorded as `[typeof, value, …]` (``install(name:table:fileColumns:)``),
    /// by column.
    private static func files(json: String?, columns: [String]) throws -> [String: SQLValue] {
        var old: [String: SQLValue] = [:]
        guard let json, let pairs = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [Any] else { return old }
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
        return old
    }

    /// `names` joined by U+0001 as an SQL literal (no column name holds it).
    static func nulJoined(_ names: [String]) -> String {
        "'" + names.joined(separator: "\u{1}").replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// The last image the write being captured took of row `id` of `table` when it deleted it
    /// (the newest, when it deleted it twice), decoded; nil when none.
    func image(table: String, id: String) throws -> RowEntry? {
        let statement = try database.cached("SELECT image FROM temp.coven_capture_images WHERE tbl = ?1 AND id = ?2 ORDER BY seq DESC LIMIT 1")
        try statement.bind([table, id])
        defer { statement.reset() }
        guard let bytes = try statement.next()?[0].bytesValue else { return nil }
        return try RowEntryCodec.decode(bytes).first
    }

    /// `identifier` as an SQL identifier, quoted.
    static func quote(_ identifier: String) -> String {
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

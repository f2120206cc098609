import Foundation

/// The owner of `coven_published`: which rows of gated tables (and which file records) this
/// device's peers hold, as far as this device knows. The push's ``GateFilter`` and ``ChangeApplier``
/// keep it; every method runs inside the caller's transaction.
///
/// A row is **held** once this device published it whole or applied it from another device; a
/// retract marks it **retracted** (peers deleted it and keep a tombstone, so a re-share stamps it
/// afresh); a delete, published or applied, forgets it. Rows of tables that are never kept back
/// (under no gated root, or under a remote root) are not tracked.
struct PublishedRows {
    let database: Database

    enum State: Equatable {
        /// Peers hold the row.
        case held
        /// Peers were told to delete it.
        case retracted
    }

    /// What peers know of `table`/`id`; nil for a row never published.
    func state(table: String, id: String) throws -> State? {
        let statement = try database.cached("SELECT retracted FROM coven_published WHERE tbl = ?1 AND id = ?2")
        try statement.bind([table, id])
        defer { statement.reset() }
        guard let row = try statement.next() else { return nil }
        return row[0].intValue == 1 ? .retracted : .held
    }

    /// Peers hold the row now (published whole, or applied from another device), in
    /// `audience` (where a retract of it goes: ``ChangeSections``).
    func markHeld(table: String, id: String, audience: String) throws {
        try run("DELETE FROM coven_private_rows WHERE tbl = ?1 AND id = ?2", table, id)
        let statement = try database.cached("""
            INSERT INTO coven_published (tbl, id, retracted, audience) VALUES (?1, ?2, 0, ?3)
            ON CONFLICT (tbl, id) DO UPDATE SET retracted = 0, audience = excluded.audience
            """)
        try statement.bind([table, id, audience])
        try statement.runToEnd()
    }

    /// Marks every row of every gated table (and every file record, when they can be kept
    /// back) held, in its audience now: a device built from a snapshot, whose rows were all
    /// published.
    func markEveryRowHeld(_ audiences: RowAudiences) throws {
        for table in audiences.gatedTables {
            let quoted = RowCapture.quote(table)
            let audience = table == "coven_files" ? "\(quoted).audience" : audiences.audienceExpression(table: table, alias: quoted)
            try database.run("""
                INSERT INTO coven_published (tbl, id, retracted, audience) SELECT ?1, \(quoted).id, 0, \(audience) FROM main.\(quoted) WHERE true
                ON CONFLICT (tbl, id) DO UPDATE SET retracted = 0, audience = excluded.audience
                """, [table])
        }
    }

    /// The audience peers hold (or last held) the row in; nil when not known.
    func heldAudience(table: String, id: String) throws -> String? {
        let statement = try database.cached("SELECT audience FROM coven_published WHERE tbl = ?1 AND id = ?2")
        try statement.bind([table, id])
        defer { statement.reset() }
        return try statement.next()?[0].textValue
    }

    /// Peers were told to delete the row; this device keeps it.
    func markRetracted(table: String, id: String) throws {
        try run("""
            INSERT INTO coven_published (tbl, id, retracted) VALUES (?1, ?2, 1)
            ON CONFLICT (tbl, id) DO UPDATE SET retracted = 1
            """, table, id)
    }

    /// The row is deleted everywhere (a delete published or applied).
    func forget(table: String, id: String) throws {
        try run("DELETE FROM coven_published WHERE tbl = ?1 AND id = ?2", table, id)
        try run("DELETE FROM coven_private_rows WHERE tbl = ?1 AND id = ?2", table, id)
    }

    /// A row of this device's, never published, that its gate kept back when written in
    /// `audience` (`coven_private_rows`): should a pull make it kept, it goes there only.
    func markPrivate(table: String, id: String, audience: String) throws {
        let statement = try database.cached("INSERT OR REPLACE INTO coven_private_rows (tbl, id, audience) VALUES (?1, ?2, ?3)")
        try statement.bind([table, id, audience])
        try statement.runToEnd()
    }

    private func run(_ sql: String, _ table: String, _ id: String) throws {
        let statement = try database.cached(sql)
        try statement.bind([table, id])
        try statement.runToEnd()
    }

    /// Ids of `table` that are kept now and peers do not hold: to send whole. With `writtenBy`,
    /// only rows that peers were told to delete (retracted) from the audience the row is in now
    /// (`audience`: SQL over `coven_row`), and rows that device last wrote: with `ownAnywhere`
    /// false, only those its gate kept back in the audience they are in now or in the store
    /// (every circle's members read the store: a row goes to fewer readers, never more). A row
    /// kept back in a circle, under a parent in another audience now, is never among them.
    func keptNotHeld(table: String, kept: String, writtenBy device: String? = nil, ownAnywhere: Bool = true, audience: String = "'store'") throws -> [String] {
        try database.query("""
            SELECT coven_row.id AS id FROM main.\(RowCapture.quote(table)) coven_row
            WHERE (\(kept)) AND NOT EXISTS (SELECT 1 FROM coven_published p WHERE p.tbl = ?1 AND p.id = coven_row.id AND p.retracted = 0)
            AND NOT EXISTS (SELECT 1 FROM coven_private_rows v WHERE v.tbl = ?1 AND v.id = coven_row.id AND v.audience NOT IN ('store', \(audience)))
            \(device == nil ? "" : "AND ((coven_row._updated_at LIKE '%-' || ?2\(ownAnywhere ? "" : " AND EXISTS (SELECT 1 FROM coven_private_rows v WHERE v.tbl = ?1 AND v.id = coven_row.id AND v.audience IN ('store', \(audience)))")) OR EXISTS (SELECT 1 FROM coven_published p WHERE p.tbl = ?1 AND p.id = coven_row.id AND COALESCE(p.audience, 'store') = \(audience)))")
            ORDER BY coven_row.id
            """, device.map { [table, $0] } ?? [table]).compactMap { $0["id"].textValue }
    }

    /// Ids of `table` whose peers were told to delete them (retracted), of rows last written at
    /// or before `stamp`.
    func retracted(table: String, writtenUpTo stamp: String) throws -> [String] {
        try database.query("""
            SELECT coven_row.id AS id FROM main.\(RowCapture.quote(table)) coven_row
            JOIN coven_published p ON p.tbl = ?1 AND p.id = coven_row.id AND p.retracted = 1
            WHERE coven_row._updated_at <= ?2
            ORDER BY coven_row.id
            """, [table, stamp]).compactMap { $0["id"].textValue }
    }

    /// Ids of `table` that peers hold and are not kept now: to retract.
    func heldNotKept(table: String, kept: String) throws -> [String] {
        try database.query("""
            SELECT coven_row.id AS id FROM main.\(RowCapture.quote(table)) coven_row
            JOIN coven_published p ON p.tbl = ?1 AND p.id = coven_row.id AND p.retracted = 0
            WHERE NOT (\(kept))
            ORDER BY coven_row.id
            """, [table]).compactMap { $0["id"].textValue }
    }
}

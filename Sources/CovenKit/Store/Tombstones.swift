import Foundation

/// The one owner of `coven_tombstones`: which rows were deleted (or retracted), when, and in which
/// audience. A delete's stamp is what a late write of the same row must beat (last writer wins
/// across a delete), so a tombstone only moves forward: ``set(table:id:stamp:audience:retracted:)``
/// keeps the newest stamp whatever order deletes arrive in. Every method runs inside the
/// caller's transaction.
///
/// ```swift
/// let tombstones = Tombstones(database: device.database)
/// try tombstones.set(table: "notes", id: id, stamp: stamp)
/// try tombstones.stamp(table: "notes", id: id)   // the delete a write must beat
/// ```
struct Tombstones {
    let database: Database


    /// Records that `table`/`id`, a row of `audience`, was deleted at `stamp` (keeping the
    /// newest, its audience, and whether it was a retract).
    ///
    /// - Parameter retracted: the row was retracted, not deleted: it lives on where this device
    ///   does not read it (moved into a circle its member is not in, or kept back by its
    ///   writer's gate), so a write here of its id is not this device's to make
    ///   (``isRetracted(table:id:)``).
    /// - Parameter trash: the trash page holding the row's last image, when this delete put it
    ///   in the trash (``Trash/record(table:id:columns:values:stamp:writer:seq:audience:parent:)``);
    ///   nil keeps the page an earlier delete of the row named (a second delete of a row no
    ///   longer here has no image of its own).
    func set(table: String, id: String, stamp: String, audience: String = RowAudiences.store, retracted: Bool = false, trash: Int64? = nil) throws {
        let statement = try database.cached("""
            INSERT INTO coven_tombstones (tbl, id, stamp, audience, retracted, trash) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (tbl, id) DO UPDATE SET stamp = max(stamp, excluded.stamp), private = 0,
              audience = CASE WHEN excluded.stamp >= stamp THEN excluded.audience ELSE audience END,
              retracted = CASE WHEN excluded.stamp >= stamp THEN excluded.retracted ELSE retracted END,
              trash = coalesce(excluded.trash, trash)
            """)
        statement.reset()
        try statement.bind(.text(table), at: 1)
        try statement.bind(.text(id), at: 2)
        try statement.bind(.text(stamp), at: 3)
        try statement.bind(.text(audience), at: 4)
        try statement.bind(.integer(retracted ? 1 : 0), at: 5)
        try statement.bind(trash.map { SQLValue.integer($0) } ?? .null, at: 6)
        try statement.runToEnd()
    }

    // MARK: The trash's links

    /// Unlinks row `id` of `table` from the trash: it is here again, or was emptied from it.
    func unlinkTrash(table: String, id: String) throws {
        let statement = try database.cached("UPDATE coven_tombstones SET trash = NULL WHERE tbl = ?1 AND id = ?2 AND trash IS NOT NULL")
        try statement.bind([table, id])
        try statement.runToEnd()
    }

    /// Unlinks from the trash the rows `condition` picks: an SQL expression over the tombstone
    /// `t` (its `tbl`, `id`, `stamp`, `trash`) and its trash page `p` (``Trash``'s), with
    /// `values` bound from `?1`. Returns how many.
    func unlinkTrash(where condition: String, _ values: [SQLValue]) throws -> Int {
        try database.run("""
            UPDATE coven_tombstones AS t SET trash = NULL WHERE t.trash IS NOT NULL
              AND EXISTS (SELECT 1 FROM coven_trash_pages p WHERE p.page = t.trash AND (\(condition)))
            """, values)
        return database.changes
    }

    // ``set(table:id:stamp:audience:retracted:)``'s `retracted` column is schema step
    // 19's (Store/Schema.swift).

    /// Whether the newest tombstone of `table`/`id` is a retract another device sent: the row
    /// lives on out of this device's reach.
    func isRetracted(table: String, id: String) throws -> Bool {
        try database.scalar("SELECT retracted FROM coven_tombstones WHERE tbl = ?1 AND id = ?2", [table, id]).intValue == 1
    }

    /// The audience the row was in when it was deleted, if it was.
    func audience(table: String, id: String) throws -> String? {
        let statement = try database.cached("SELECT audience FROM coven_tombstones WHERE tbl = ?1 AND id = ?2")
        try statement.bind([table, id])
        defer { statement.reset() }
        return try statement.next()?[0].textValue
    }

    /// Marks the tombstone of a row peers never held, whose delete the push did not send: it
    /// stays on this device, out of snapshots too (its id is as private as the row was).
    func markPrivate(table: String, id: String) throws {
        let statement = try database.cached("UPDATE coven_tombstones SET private = 1 WHERE tbl = ?1 AND id = ?2")
        try statement.bind([table, id])
        try statement.runToEnd()
    }

    /// The stamp of the row's deletion, if it was deleted.
    func stamp(table: String, id: String) throws -> String? {
        let statement = try database.cached("SELECT stamp FROM coven_tombstones WHERE tbl = ?1 AND id = ?2")
        try statement.bind([table, id])
        defer { statement.reset() }
        return try statement.next()?[0].textValue
    }

    // MARK: Snapshots

    /// Copies the tombstones of `tables` of rows of `audience` (but private ones) into `schema`,
    /// with their links to the trash (whose pages of the store's rows the snapshot copies:
    /// ``Trash/copyForSnapshot(into:)``).
    func copy(into schema: String, tables: [String], audience: String) throws {
        let names = String(decoding: try JSONSerialization.data(withJSONObject: tables), as: UTF8.self)
        try database.run("""
            INSERT INTO \(schema).coven_tombstones (tbl, id, stamp, audience, trash)
            SELECT tbl, id, stamp, audience, trash FROM main.coven_tombstones
            WHERE tbl IN (SELECT value FROM json_each(?1)) AND private = 0 AND audience = ?2
            """, [names, audience])
    }

    /// Adds the tombstones of `audience`'s rows from the attached snapshot part `schema` (a
    /// device joining from a snapshot learns a circle's deletes with its rows).
    func adopt(from schema: String, audience: String) throws {
        try database.run("""
            INSERT INTO main.coven_tombstones (tbl, id, stamp, audience)
            SELECT tbl, id, stamp, audience FROM \(schema).coven_tombstones WHERE audience = ?1
            """, [audience])
    }
}

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
    func set(table: String, id: String, stamp: String, audience: String = RowAudiences.store, retracted: Bool = false) throws {
        let statement = try database.cached("""
            INSERT INTO coven_tombstones (tbl, id, stamp, audience, retracted) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (tbl, id) DO UPDATE SET stamp = max(stamp, excluded.stamp), private = 0,
              audience = CASE WHEN excluded.stamp >= stamp THEN excluded.audience ELSE audience END,
              retracted = CASE WHEN excluded.stamp >= stamp THEN excluded.retracted ELSE retracted END
            """)
        try statement.bind([table, id, stamp, audience, retracted ? 1 : 0])
        try statement.runToEnd()
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

    /// Copies the tombstones of `tables` of rows of `audience` (but private ones) into `schema`.
    func copy(into schema: String, tables: [String], audience: String) throws {
        let names = String(decoding: try JSONSerialization.data(withJSONObject: tables), as: UTF8.self)
        try database.run("""
            INSERT INTO \(schema).coven_tombstones (tbl, id, stamp, audience)
            SELECT tbl, id, stamp, audience FROM main.coven_tombstones
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

import Foundation

/// Rows of owner-only tables (`"owner_only": true` in the manifest; DESIGN.md "Rows and files
/// across audiences"): a row belongs to the member whose device wrote it first. coven fills its
/// owner column with that member's id and never lets it change; only the owner's devices change
/// or delete the row, an admin's included (`not_owner`). A write checks its own rows here; every
/// device checks the entries it applies again (``MemberAuthorizer``).
struct OwnedRows {
    let device: Device

    /// The owner column of `table` when it is owner-only.
    static func ownerColumn(_ table: String, in manifest: Manifest) -> String? {
        manifest.table(table)?.ownerColumn
    }

    /// Checks and fills the owner column of every row of an owner-only table a write changed,
    /// a batch of changes at a time: an inserted row without an owner gets this device's member;
    /// a row of another member is not changed or deleted; an owner column is never changed.
    ///
    /// - Throws: `.notOwner` naming the table, row and owner; `.invalidState` when this device
    ///   belongs to no member (a store without members has no owners to keep).
    func enforce(_ changes: RecordedChanges) throws {
        let manifest = device.manifest
        guard manifest.tables.contains(where: { $0.ownerColumn != nil }) else { return }
        let database = device.database
        var member: String?
        func me(_ table: String) throws -> String {
            if let member { return member }
            guard let id = try Members(device).memberID() else {
                throw CovenError(.invalidState, "table '\(table)' is owner-only, and this device belongs to no member of the store",
                                 hint: "make the store one of members with 'coven member init NAME'", details: ["table": table])
            }
            member = id
            return id
        }
        try changes.forEachBatch(oldFiles: true) { batch in
            var idsByTable: [String: [String]] = [:]
            for change in batch where change.operation != .delete {
                if manifest.table(change.table)?.ownerColumn != nil { idsByTable[change.table, default: []].append(change.id) }
            }
            // The owner column as the write left it, read once per table.
            var now: [String: [String: SQLValue]] = [:]
            for (table, ids) in idsByTable {
                guard let column = manifest.table(table)?.ownerColumn else { continue }
                for row in try database.query("SELECT id, \(RowCapture.quote(column)) AS owner FROM \(RowCapture.quote(table)) WHERE id IN (SELECT value FROM json_each(?1))",
                                              [RecordedChanges.json(ids: ids)]) {
                    if let id = row["id"].textValue { now[table, default: [:]][id] = row["owner"] }
                }
            }
            var fill: [String: [String]] = [:]
            for change in batch {
                guard let column = manifest.table(change.table)?.ownerColumn else { continue }
                let mine = try me(change.table)
                let details = ["table": change.table, "id": change.id]
                let before = change.operation == .insert ? try Self.deletedOwner(table: change.table, id: change.id, database: database)
                    : change.oldFiles[column]?.textValue
                if let before, before != mine {
                    throw CovenError(.notOwner, "row '\(change.id)' of owner-only table '\(change.table)' is member \(before)'s: only that member's devices change or delete it",
                                     hint: "ask its owner", details: details.merging(["owner": before]) { first, _ in first })
                }
                guard change.operation != .delete else { continue }
                switch now[change.table]?[change.id] ?? .null {
                case .null:
                    fill[change.table, default: []].append(change.id)
                case .text(let owner) where owner == mine:
                    break
                default:
                    throw CovenError(.notOwner, "column '\(change.table).\(column)' is coven's: it holds the id of the member who wrote the row, and never changes",
                                     hint: "leave '\(column)' out of the write; coven fills it", details: details)
                }
            }
            for (table, ids) in fill {
                guard let column = manifest.table(table)?.ownerColumn else { continue }
                try database.run("UPDATE \(RowCapture.quote(table)) SET \(RowCapture.quote(column)) = ?1 WHERE id IN (SELECT value FROM json_each(?2))",
                                 [try me(table), RecordedChanges.json(ids: ids)])
            }
        }
    }

    /// The member a deleted row of an owner-only table was the row of, as this device knows
    /// it: the member of the device whose delete its tombstone holds. nil: no tombstone here, a
    /// retract's (its stamp may be another device's), or a device no member vouched for.
    ///
    /// The failure story: alice deletes her journal row J; bob writes J again under its id. A
    /// device that had applied the delete took bob's row (no row here, so no owner to keep), one
    /// that had not yet refused it (`not_owner`, alice's row still here): the devices disagreed
    /// for good, and bob wrote under an id alice's history names. The rule: only the owner's
    /// devices delete an owner-only row (here and on every receiver), so the deleter's member is
    /// the owner, and the id stays that member's: another member's write of it is `not_owner`
    /// on the writer's device and on every receiver holding the tombstone. It does not apply
    /// where the tombstone is gone (a device joined from a snapshot that did not carry it).
    static func deletedOwner(table: String, id: String, database: Database) throws -> String? {
        guard let tombstone = try database.queryOne("SELECT stamp, retracted FROM coven_tombstones WHERE tbl = ?1 AND id = ?2", [table, id]),
              tombstone.int("retracted") != 1, let stamp = tombstone.string("stamp"), let deleter = HybridClock.device(of: stamp) else { return nil }
        return try database.scalar("SELECT member FROM coven_device_registry WHERE device = ?1", [deleter]).textValue
    }

    /// A row of an owner-only table naming `file` whose owner is another member than this
    /// device's (make-device-only changes every row naming the file: `not_owner`), if any.
    func otherOwner(naming file: String) throws -> (table: String, row: String, owner: String)? {
        let tables = device.manifest.tables.filter { $0.ownerColumn != nil && !$0.files.isEmpty }
        guard !tables.isEmpty, let mine = try Members(device).memberID() else { return nil }
        for table in tables {
            guard let owner = table.ownerColumn else { continue }
            for column in table.files {
                if let row = try device.database.queryOne("""
                    SELECT id, \(RowCapture.quote(owner)) AS owner FROM main.\(RowCapture.quote(table.name))
                    WHERE \(RowCapture.quote(column.column)) = ?1 AND \(RowCapture.quote(owner)) IS NOT ?2 LIMIT 1
                    """, [file, mine]) {
                    return (table.name, row["id"].textValue ?? "", row["owner"].textValue ?? "")
                }
            }
        }
        return nil
    }
}

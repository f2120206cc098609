import Foundation

/// The push's gate filter (DESIGN.md "Gates", spec/local-data.md "Flipping the gate"): what of a
/// batch of outbox writes may leave this device, run when the batch is frozen into a change.
///
/// The outbox records every write whole; the filter judges each entry of a gated table (and each
/// file record) by the **kept** rule (``RowAudiences``) evaluated now, a table at a time, against what peers
/// hold (``PublishedRows``):
///
/// - an upsert of a row kept now and held by peers goes as it is;
/// - a row kept now that peers do not hold goes **whole** (its current image; stamped afresh when
///   peers were told to delete it, so their tombstone does not beat it);
/// - a row peers hold that is not kept now goes as a **retract** (peers delete it, this device
///   keeps it);
/// - any other upsert (a private row) does not go, nor does a delete of a row peers never held.
///
/// Then, for every gated table whose predicate reads a table the batch wrote, the rows whose
/// standing changed without a write of their own (the todos of a list that was shared, the
/// workspace a shared list keeps alive, the file records of a private album) are found by the
/// predicate and sent whole or retracted in the same change. Rows that a later write still in
/// the outbox changes (held by a bound upload) are left to that write.
struct GateFilter {
    struct RowKey: Hashable {
        var table: String
        var id: String
    }

    let device: Device
    let audiences: RowAudiences
    private var published: PublishedRows { PublishedRows(database: device.database) }
    private var database: Database { device.database }
    private var kept: [String: String] = [:]
    private var columnsOf: [String: [String]] = [:]
    private var freshStamp: String?
    private var decided: Set<RowKey> = []

    init(device: Device) throws {
        self.device = device
        audiences = try RowAudiences(device: device)
        for table in audiences.gatedTables { kept[table] = audiences.keptCondition(table: table, alias: "coven_row") }
    }

    /// Whether any table can hold rows back (otherwise the filter passes everything).
    var isActive: Bool { !kept.isEmpty }

    /// What of `entries` (in commit order) leaves this device, plus the rows whose standing
    /// changed; `deferred` are rows a later, unfrozen write changes. With `pulled` (a pull
    /// wrote rows a kept rule reads), every gated table's rows kept now that peers do not hold
    /// go whole too: a newer write from elsewhere that shares an album kept back here makes
    /// its notes, never published, kept (rows this device wrote).
    mutating func filter(_ entries: [RowEntry], deferred: Set<RowKey>, pulled: Bool = false) throws -> [RowEntry] {
        guard isActive else { return entries }
        var output: [RowEntry] = []
        var touched: Set<String> = []
        let standing = try standingNow(of: entries)
        for entry in entries {
            touched.insert(entry.table)
            guard kept[entry.table] != nil else {
                output.append(entry)
                continue
            }
            try decide(entry, standing: standing, deferred: deferred, into: &output)
        }
        try sweepGatedTables(touched: touched, pulled: pulled, deferred: deferred, into: &output)
        return output
    }

    /// Whether each upserted row of a gated table is kept now, and where it goes
    /// (ChangeSections' rule, for a table that places rows elsewhere than the store), asked a
    /// table at a time. A row absent was deleted since: its delete follows.
    private func standingNow(of entries: [RowEntry]) throws -> (kept: [RowKey: Bool], placed: [RowKey: String]) {
        var upserted: [String: Set<String>] = [:]
        for entry in entries where entry.kind == .upsert && kept[entry.table] != nil { upserted[entry.table, default: []].insert(entry.id) }
        var keptNow: [RowKey: Bool] = [:]
        var placedNow: [RowKey: String] = [:]
        for (table, ids) in upserted {
            for (id, isKept) in try audiences.kept(table: table, ids: ids) { keptNow[RowKey(table: table, id: id)] = isKept }
            guard audiences.placesAudience(table) else { continue }
            for (id, audience) in try audiences.audiences(table: table, ids: ids) { placedNow[RowKey(table: table, id: id)] = audience }
        }
        return (keptNow, placedNow)
    }

    /// What one entry of a gated table becomes: itself, the row whole, its retract, or nothing.
    private mutating func decide(_ entry: RowEntry, standing: (kept: [RowKey: Bool], placed: [RowKey: String]), deferred: Set<RowKey>,
                                 into output: inout [RowEntry]) throws {
        // A move's retract where another device's image of the row lost to it: peers hold
        // that image, whatever this device's gate says of the row (CrossedMoves).
        if try AudienceMoves.isCrossed(entry, in: database) {
            output.append(entry)
            return
        }
        let key = RowKey(table: entry.table, id: entry.id)
        let state = try published.state(table: entry.table, id: entry.id)
        // A move's retract of a row this change already retracts by its gate: peers drop it
        // once (and where they hold it, which the change keeps).
        if entry.kind == .retract, decided.contains(key), state == .retracted { return }
        if entry.kind != .upsert {
            if state == .held {
                output.append(entry)
            } else if state == nil {
                // Peers never held the row: its delete, and its id, stay here.
                try Tombstones(database: database).markPrivate(table: entry.table, id: entry.id)
            }
            try published.forget(table: entry.table, id: entry.id)
            decided.remove(key)
            return
        }
        guard !decided.contains(key) else { return }
        // A row deleted since: its delete follows.
        guard let isKept = standing.kept[key] else { return }
        switch (isKept, state) {
        case (true, .held):
            // Peers hold it where this image goes (a move takes it elsewhere).
            if let audience = audiences.declaredAudience(of: entry) ?? standing.placed[key], audience != (try published.heldAudience(table: entry.table, id: entry.id)) {
                try published.markHeld(table: entry.table, id: entry.id, audience: audience)
            }
            output.append(entry)
        case (true, _):
            guard !deferred.contains(key) else { return }
            output.append(try whole(key, restamp: state == .retracted))
        case (false, .held):
            output.append(try retract(key))
        case (false, nil):
            // Kept back as written, never published: where it was, should a pull make it
            // kept (a row of a table whose rows are all the store's goes there anyway).
            if audiences.placesAudience(entry.table) {
                try published.markPrivate(table: entry.table, id: entry.id,
                                          audience: audiences.declaredAudience(of: entry) ?? standing.placed[key] ?? RowAudiences.store)
            }
        case (false, _):
            return
        }
    }

    /// The gated tables this change wrote (or all of them after a pull): their rows kept now
    /// that peers do not hold go whole, and rows peers hold that are no longer kept are
    /// retracted.
    private mutating func sweepGatedTables(touched: Set<String>, pulled: Bool, deferred: Set<RowKey>, into output: inout [RowEntry]) throws {
        for table in audiences.gatedTables {
            let written = !audiences.dependencies(of: table).isDisjoint(with: touched)
            guard written || pulled, let condition = kept[table] else { continue }
            // After a pull alone, only rows this device retracted (peers deleted them), and its
            // own rows never published, kept back in the store or the audience they are in now
            // (never to more readers than when written): another's
            // were published by their writer, in the audience it wrote them in (a row taken out
            // here and brought back under a parent moved since, or retracted from a circle and
            // under a parent in the store now, does not go where its writer never put it; nor
            // does a track kept back in a circle, under an album a crossing write moved back to
            // the store).
            let audience = table == "coven_files" ? "coven_row.audience" : audiences.audienceExpression(table: table, alias: "coven_row")
            for id in try published.keptNotHeld(table: table, kept: condition, writtenBy: written ? nil : device.deviceID,
                                                ownAnywhere: !audiences.placesAudience(table), audience: audience) {
                let key = RowKey(table: table, id: id)
                guard !decided.contains(key), !deferred.contains(key) else { continue }
                output.append(try whole(key, restamp: try published.state(table: table, id: id) == .retracted))
            }
            // A row a pull made not kept was the puller's peers' write: they hold it as it is.
            guard written else { continue }
            for id in try published.heldNotKept(table: table, kept: condition) {
                let key = RowKey(table: table, id: id)
                guard !decided.contains(key) else { continue }
                output.append(try retract(key))
            }
        }
    }

    // MARK: - Rows

    /// One stamp for every re-emit and retract of this change: newer than anything here.
    private mutating func stamp() throws -> String {
        if let freshStamp { return freshStamp }
        let stamp = try HybridClock.next(device: device)
        freshStamp = stamp
        return stamp
    }

    private mutating func columns(_ table: String) throws -> [String] {
        if let known = columnsOf[table] { return known }
        let names = try database.storedColumns(table)
        columnsOf[table] = names
        return names
    }

    /// The row's current image, to send whole; peers hold it from now on.
    private mutating func whole(_ key: RowKey, restamp: Bool) throws -> RowEntry {
        if restamp {
            let fresh = try stamp()
            if key.table == "coven_files" {
                try device.fileRecords.restamp(key.id, stamp: fresh)
            } else {
                try database.run("UPDATE main.\(RowCapture.quote(key.table)) SET _updated_at = ?2 WHERE id = ?1", [key.id, fresh])
            }
        }
        let names = try columns(key.table)
        guard let row = try database.queryOne("SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(key.table)) WHERE id = ?1", [key.id]) else {
            preconditionFailure("internal error: a kept row is read in the push's transaction")
        }
        try published.markHeld(table: key.table, id: key.id, audience: try audienceNow(key))
        decided.insert(key)
        return RowEntry(kind: .upsert, table: key.table, id: key.id, stamp: row["_updated_at"].textValue ?? "", columns: names, values: row.values)
    }

    /// A retract of a row peers hold: they delete it, this device keeps it. Its stamp is
    /// newer than anything here, and stays here as the row's tombstone (of the row's audience):
    /// a peer's edit made before it saw the retract loses to it here too, as on every peer that
    /// deleted the row, and is kept as a lost value.
    private mutating func retract(_ key: RowKey) throws -> RowEntry {
        try published.markRetracted(table: key.table, id: key.id)
        decided.insert(key)
        let stamp = try stamp()
        // Where peers hold it: the retract goes there (ChangeSections), and its tombstone.
        let audience = try published.heldAudience(table: key.table, id: key.id) ?? audienceNow(key)
        try Tombstones(database: database).set(table: key.table, id: key.id, stamp: stamp, audience: audience)
        return RowEntry(kind: .retract, table: key.table, id: key.id, stamp: stamp)
    }

    /// The audience of a row here now.
    private func audienceNow(_ key: RowKey) throws -> String {
        try audiences.audience(table: key.table, id: key.id) ?? RowAudiences.store
    }
}

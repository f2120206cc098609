import Foundation

/// Lays out the entries of a change being published in **sections, one per audience**
/// (DESIGN.md "Change objects v2"): each entry goes to the section of the audience that reads
/// its row, as ``RowAudiences`` says (asked a table at a time), sealed under the key the
/// ``Keyring`` holds for it. Commit order is kept within each section; the store's section
/// comes first.
///
/// The audience of an upsert is the one its image names (its audience column; a file record's
/// `audience`), else its row's now (through `audience_from`); a retract of a move goes to the
/// audience the row left, a gate's retract to the audience peers hold it in; a
/// delete or a retract goes with the row's audience in the same change when it has one there,
/// else where the row was when deleted (its tombstone's audience).
struct ChangeSections {
    let audiences: RowAudiences
    let keys: Keyring

    func build(_ entries: [RowEntry]) throws -> [ChangeSection] {
        // Whether each table places an audience, asked once a table (a change holds 40,000
        // entries of one table, and the store's rows need neither their ids gathered nor a
        // query).
        var placing: [String: Bool] = [:]
        func places(_ table: String) -> Bool {
            if let known = placing[table] { return known }
            let answer = audiences.placesAudience(table)
            placing[table] = answer
            return answer
        }
        var idsByTable: [String: Set<String>] = [:]
        for entry in entries where entry.kind != .delete && entry.table != "coven_files" && places(entry.table) {
            idsByTable[entry.table, default: []].insert(entry.id)
        }
        var audienceOf: [String: [String: String]] = [:]
        for (table, ids) in idsByTable {
            audienceOf[table] = try audiences.audiences(table: table, ids: ids)
        }
        // The audience an upsert went to, for a later delete or retract of its row in the
        // change: kept only when the change holds one.
        let keepsLast = entries.contains { $0.kind != .upsert }
        var order: [String] = [RowAudiences.store]
        // Each section's entries as their places in `entries`: one section holding them all
        // (the common change) takes the array as it is, copying no entry.
        var placed: [String: [Int]] = [:]
        var lastAudience: [String: String] = [:]
        for index in entries.indices {
            let audience = try audience(of: entries[index], audienceOf: audienceOf, lastAudience: &lastAudience, keepsLast: keepsLast, places: places)
            // A circle's section is sealed under its newest key held here (Keyring.seal); a row
            // of a circle this device holds no key of never gets this far (not_in_circle).
            if placed[audience] == nil, audience != RowAudiences.store { order.append(audience) }
            placed[audience, default: []].append(index)
        }
        if order.count == 1, placed[RowAudiences.store]?.count == entries.count, !entries.isEmpty {
            return [ChangeSection(audience: RowAudiences.store, entries: entries)]
        }
        return order.compactMap { audience in
            placed[audience].map { ChangeSection(audience: audience, entries: $0.map { entries[$0] }) }
        }
    }

    /// The audience whose section `entry` goes to (the rules of the type's comment).
    private func audience(of entry: RowEntry, audienceOf: [String: [String: String]], lastAudience: inout [String: String],
                          keepsLast: Bool, places: (String) -> Bool) throws -> String {
        if entry.kind == .retract, let left = try AudienceMoves.leftAudience(of: entry, in: audiences.database) {
            // A row moved out of an audience is retracted there.
            return left
        } else if entry.kind == .retract, let held = try PublishedRows(database: audiences.database).heldAudience(table: entry.table, id: entry.id)
                    ?? audienceOf[entry.table]?[entry.id]
                    ?? (entry.table == "coven_files" ? audiences.audience(table: entry.table, id: entry.id) : nil) {
            // A row a gate keeps back now (unshared): retracted where peers hold it (a
            // move of it since, unpublished, does not count), else where it is.
            return held
        } else if entry.kind == .upsert {
            // An image that names its audience (its audience column, a file record's) goes
            // there, as it was when written: a row written in one audience and moved in a
            // later write of the same change is two images in two sections. One that takes
            // its parent's goes where its parent is now, or was when deleted (a row taken out
            // here since it was written, its write still waiting for a bound upload).
            let audience = try audiences.declaredAudience(of: entry) ?? audienceOf[entry.table]?[entry.id]
                ?? (places(entry.table) ? audiences.audienceOfGone(entry) : nil) ?? RowAudiences.store
            if keepsLast { lastAudience[entry.table + "\u{0}" + entry.id] = audience }
            return audience
        } else if let last = lastAudience[entry.table + "\u{0}" + entry.id] {
            return last
        } else {
            // A row deleted with no image in this change: where it was when deleted (its
            // tombstone says), so its id reaches no one outside that audience.
            return try Tombstones(database: audiences.database).audience(table: entry.table, id: entry.id) ?? RowAudiences.store
        }
    }
}

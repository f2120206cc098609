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
        var idsByTable: [String: Set<String>] = [:]
        for entry in entries where entry.kind != .delete && entry.table != "coven_files" {
            idsByTable[entry.table, default: []].insert(entry.id)
        }
        var audienceOf: [String: [String: String]] = [:]
        for (table, ids) in idsByTable where audiences.placesAudience(table) {
            audienceOf[table] = try audiences.audiences(table: table, ids: ids)
        }
        var order: [String] = [RowAudiences.store]
        var byAudience: [String: [RowEntry]] = [:]
        var lastAudience: [String: String] = [:]
        for entry in entries {
            let key = entry.table + "\u{0}" + entry.id
            let audience: String
            if entry.kind == .retract, let left = try AudienceMoves.leftAudience(of: entry, in: audiences.database) {
                // A row moved out of an audience is retracted there.
                audience = left
            } else if entry.kind == .retract, let held = try PublishedRows(database: audiences.database).heldAudience(table: entry.table, id: entry.id)
                        ?? audienceOf[entry.table]?[entry.id]
                        ?? (entry.table == "coven_files" ? audiences.audience(table: entry.table, id: entry.id) : nil) {
                // A row a gate keeps back now (unshared): retracted where peers hold it (a
                // move of it since, unpublished, does not count), else where it is.
                audience = held
            } else if entry.kind == .upsert {
                // An image that names its audience (its audience column, a file record's) goes
                // there, as it was when written: a row written in one audience and moved in a
                // later write of the same change is two images in two sections. One that takes
                // its parent's goes where its parent is now, or was when deleted (a row taken out
                // here since it was written, its write still waiting for a bound upload).
                audience = try audiences.declaredAudience(of: entry) ?? audienceOf[entry.table]?[entry.id]
                    ?? (audiences.placesAudience(entry.table) ? audiences.audienceOfGone(entry) : nil) ?? RowAudiences.store
                lastAudience[key] = audience
            } else if let last = lastAudience[key] {
                audience = last
            } else {
                // A row deleted with no image in this change: where it was when deleted (its
                // tombstone says), so its id reaches no one outside that audience.
                audience = try SyncState(database: audiences.database).tombstoneAudience(table: entry.table, id: entry.id) ?? RowAudiences.store
            }
            // A circle's section is sealed under its newest key held here (Keyring.seal); a row
            // of a circle this device holds no key of never gets this far (not_in_circle).
            let section = audience
            if byAudience[section] == nil, section != RowAudiences.store { order.append(section) }
            byAudience[section, default: []].append(entry)
        }
        return order.compactMap { audience in byAudience[audience].map { ChangeSection(audience: audience, entries: $0) } }
    }
}

import Foundation

/// What the applier may do with one entry of a change (DESIGN.md "Apply and authorization").
enum Authorization: Equatable {
    /// Apply it by last writer wins.
    case accepted
    /// Never apply it: it is kept as an unrestorable lost value saying why.
    case refused(SyncState.LostReason)
}

/// Judges every entry of a change before it is applied: whether the change's signer may write
/// that row there. No device trusts another's local checks, so every receiver asks.
///
/// The applier calls ``authorize(_:section:change:)`` for every entry of every section it
/// opened, in order; a refused entry changes nothing and becomes a lost value.
protocol ChangeAuthorizer {
    mutating func authorize(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Authorization
}

/// Every entry of a change signed by a device of the store is accepted: a store where every
/// device holds the one store key (before members), where whoever holds it may write anything.
struct AcceptEveryEntry: ChangeAuthorizer {
    func authorize(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Authorization { .accepted }
}

/// In a store of members (DESIGN.md "Apply and authorization"): an entry is applied only when
/// the change's signer belongs to a member on the roster of the store generation the change was
/// sealed under, its device entry vouched for by that member's key. A change of a removed
/// member's device sealed under a later generation, or of a device no member vouched for, is
/// refused entry by entry (`not_authorized`). Before members (no generation learned), every
/// entry is accepted, as ``AcceptEveryEntry`` does.
struct MemberAuthorizer: ChangeAuthorizer {
    let keys: Keyring
    let database: Database
    let store: String
    /// The tables whose rows have owners (owner-only), by name: their owner column.
    let ownerColumns: [String: String]
    /// Where each upserted row belongs (circles): its audience must be its section's.
    let audiences: RowAudiences?
    /// The verdict for each device at each generation, found once.
    private var verdicts: [String: Bool] = [:]
    /// Whether each device's member is on a circle's roster at a generation, found once.
    private var sectionVerdicts: [String: Bool] = [:]
    /// The member each signing device belongs to, read once (entries of owner-only tables).
    private var signers: [String: String?] = [:]

    init(keys: Keyring, database: Database, store: String, manifest: Manifest? = nil, audiences: RowAudiences? = nil) {
        self.keys = keys
        self.database = database
        self.store = store
        self.audiences = audiences
        ownerColumns = Dictionary((manifest?.tables ?? []).compactMap { table in table.ownerColumn.map { (table.name, $0) } },
                                  uniquingKeysWith: { first, _ in first })
    }

    mutating func authorize(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Authorization {
        let key = "\(change.device) \(change.generation)"
        let verdict: Bool
        if let known = verdicts[key] {
            verdict = known
        } else {
            verdict = try mayWrite(device: change.device, generation: change.generation)
            verdicts[key] = verdict
        }
        guard verdict else { return .refused(.notAuthorized) }
        if try !isInAudience(entry, section: section, change: change) { return .refused(.notAuthorized) }
        if let column = ownerColumns[entry.table], try !isOwners(entry, column: column, device: change.device) { return .refused(.notOwner) }
        return .accepted
    }

    /// Whether `entry` belongs in `section` and its signer may write there (circles): a
    /// circle's section is written only by a device of a member on that generation's roster of
    /// the circle, and an upsert that names its row's audience (its audience column, or a file
    /// record's) names its section's, the store's included. A change that puts a circle's row
    /// where the store reads it, or writes a circle its member is not in, is refused. A row that
    /// takes its parent's audience is not judged by it: a concurrent move of the parent would
    /// make devices judge it apart (it follows its parent wherever that is). Before members
    /// there are no circles.
    private mutating func isInAudience(_ entry: RowEntry, section: ChangeSection, change: ChangeObject) throws -> Bool {
        let device = change.device
        guard try keys.storeGeneration() != nil else { return true }
        if section.audience != RowAudiences.store {
            guard let generation = section.generation, try isOnRoster(device, audience: section.audience, generation: generation) else { return false }
        }
        guard let audiences else { return true }
        guard entry.kind == .upsert else { return try mayEnd(entry, section: section, change: change, audiences: audiences) }
        guard let placed = audiences.declaredAudience(of: entry) else { return true }
        guard placed == section.audience else { return false }
        return try mayTakeOut(entry, section: section, change: change, audiences: audiences)
    }

    /// Whether an upsert in `section` may take its row out of the circle it is in here (its own
    /// column, or a file record's, places it there).
    ///
    /// The failure story: carol, a store member outside circle C, knew album AL's id from
    /// before alice moved it into C. She wrote AL again in the store (her device had dropped
    /// it at the move's retract, so nothing stopped her), and every member of C applied her
    /// newer image by last writer wins: AL left C for the store, its title in C gone. The rule:
    /// a row is taken out of a circle only by a member of that circle (on its newest roster
    /// learned here), as ``mayEnd(_:section:change:audiences:)`` ends it. It does not apply to
    /// a write that crossed the move: the writer had applied neither the write that left the
    /// row as it is here nor the move out of the section's audience (the row's tombstone there,
    /// when this device still holds it), so it wrote the row where it last saw it, and last
    /// writer wins decides as for any concurrent edit.
    private mutating func mayTakeOut(_ entry: RowEntry, section: ChangeSection, change: ChangeObject, audiences: RowAudiences) throws -> Bool {
        guard let here = try rowInACircleOtherThan(section, for: entry, writer: change.device, audiences: audiences) else { return true }
        let sync = SyncState(database: database)
        guard let stamp = here.string("_updated_at"), try !hasApplied(change, stamp: stamp) else { return false }
        if try sync.tombstones.audience(table: entry.table, id: entry.id) == section.audience, let moved = try sync.tombstones.stamp(table: entry.table, id: entry.id) {
            return try !hasApplied(change, stamp: moved)
        }
        return true
    }

    /// The row `entry` names as this device holds it (its audience and stamp), when its own
    /// column places it (or a file record) in a circle other than `section`'s that `writer`'s
    /// member is not on the newest roster of (learned here); nil otherwise.
    private mutating func rowInACircleOtherThan(_ section: ChangeSection, for entry: RowEntry, writer: String, audiences: RowAudiences) throws -> Row? {
        guard let column = entry.table == "coven_files" ? "audience" : audiences.manifest.table(entry.table)?.audienceColumn,
              let here = try database.queryOne("SELECT \(RowCapture.quote(column)) AS audience, _updated_at FROM main.\(RowCapture.quote(entry.table)) WHERE id = ?1",
                                               [entry.id])
        else { return nil }
        let audience = here.string("audience") ?? RowAudiences.store
        guard audience != section.audience, audience != RowAudiences.store else { return nil }
        if let newest = try database.scalar("SELECT max(generation) FROM coven_audience_rosters WHERE audience = ?1", [audience]).intValue,
           try isOnRoster(writer, audience: audience, generation: UInt64(newest)) {
            return nil
        }
        return here
    }

    /// Whether `change`'s writer had applied the write stamped `stamp` (its own, or in a change
    /// its frontier covers); false when no change this device knows holds it.
    private func hasApplied(_ change: ChangeObject, stamp: String) throws -> Bool {
        guard let writer = HybridClock.device(of: stamp) else { return true }
        guard writer != change.device else { return true }
        guard let seq = try SyncState(database: database).seq(device: writer, holding: stamp) else { return false }
        return Int64(change.frontier[writer] ?? 0) >= seq
    }

    /// Whether a delete or retract in `section` may end its row as this device holds it: a row
    /// its own column places (or a file record) in another circle than the section's is ended
    /// from there only by a device of a member of that circle (its newest roster learned
    /// here), or by a delete that crossed the move taking the row out of the section's audience
    /// (the row's tombstone there says it was in it, and the deleter had not applied the write
    /// of the row's image here: last writer wins decides, as on a device that applied the
    /// delete first). A store member outside a circle cannot delete the circle's rows by naming
    /// them in the store's section. A row not here, or of the section's audience or the
    /// store's, is anyone's who may write the section.
    private mutating func mayEnd(_ entry: RowEntry, section: ChangeSection, change: ChangeObject, audiences: RowAudiences) throws -> Bool {
        guard let here = try rowInACircleOtherThan(section, for: entry, writer: change.device, audiences: audiences) else { return true }
        // A delete that crossed the row's move out of the section's audience.
        let sync = SyncState(database: database)
        guard try sync.tombstones.audience(table: entry.table, id: entry.id) == section.audience,
              let stamp = here.string("_updated_at"), let writer = HybridClock.device(of: stamp) else { return false }
        guard writer != change.device, let seq = try sync.seq(device: writer, holding: stamp) else { return writer != change.device }
        return Int64(change.frontier[writer] ?? 0) < seq
    }

    /// Whether the member that vouched for `device` is on `audience`'s roster at `generation`,
    /// found once.
    private mutating func isOnRoster(_ device: String, audience: String, generation: UInt64) throws -> Bool {
        let key = "\(device) \(audience) \(generation)"
        if let known = sectionVerdicts[key] { return known }
        let signer = try signerMember(device)
        let verdict = try signer != nil && keys.roster(audience: audience, generation: generation).contains { $0.id == signer }
        sectionVerdicts[key] = verdict
        return verdict
    }

    /// The member that vouched for `device`, read once.
    private mutating func signerMember(_ device: String) throws -> String? {
        if signers[device] == nil {
            signers[device] = .some(try database.scalar("SELECT member FROM coven_device_registry WHERE device = ?1", [device]).textValue)
        }
        return signers[device] ?? nil
    }

    /// Whether `entry`, of an owner-only table whose owner column is `column`, comes from a
    /// device of the row's owner: the member that vouched for `device` is the owner the row has
    /// here (if it is here), and, for an upsert, the owner the entry gives it. Before members
    /// (no generation learned) rows have no owners to keep.
    private mutating func isOwners(_ entry: RowEntry, column: String, device: String) throws -> Bool {
        guard entry.kind != .retract, try keys.storeGeneration() != nil else { return true }
        guard let signer = try signerMember(device) else { return false }
        if let current = try database.queryOne("SELECT \(RowCapture.quote(column)) AS owner FROM \(RowCapture.quote(entry.table)) WHERE id = ?1", [entry.id]) {
            if let owner = current["owner"].textValue, owner != signer { return false }
        } else if entry.kind == .upsert, let owner = try OwnedRows.deletedOwner(table: entry.table, id: entry.id, database: database), owner != signer {
            // A deleted row's id stays its owner's (OwnedRows.deletedOwner says why).
            return false
        }
        guard entry.kind == .upsert else { return true }
        guard let index = entry.columns.firstIndex(of: column) else { return false }
        return entry.values[index].textValue == signer
    }

    private func mayWrite(device: String, generation: UInt64) throws -> Bool {
        guard try keys.storeGeneration() != nil else { return true }
        guard let row = try database.queryOne("SELECT member, member_signature, gone FROM coven_device_registry WHERE device = ?1", [device]) else { return false }
        guard row.string("member") != nil, row.string("member_signature") != nil else {
            // A device no member vouched for: only the past of a device gone for good before
            // the store had members (what some frontier says was applied) is taken.
            return generation == 1 && row.int("gone") == 1
        }
        // On the roster of that generation, vouched for by the member's key there or a later
        // one of the same member (its keys replaced since: its devices carry the new key's word).
        return try RemovalAuthority(keys: keys, database: database, store: store)
            .vouchedMember(device, roster: keys.roster(audience: RowAudiences.store, generation: generation), orLater: generation) != nil
    }
}

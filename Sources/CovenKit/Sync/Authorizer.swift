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

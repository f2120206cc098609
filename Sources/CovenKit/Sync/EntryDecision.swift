import Foundation

/// What last writer wins decides for one entry of a change against what this device holds,
/// before anything is written: a pure function of the entry and the stamps read here, so the
/// rule lives in one place and a test asks it directly (``ChangeApplier`` carries it out).
///
/// The failure it prevents: two devices edit or delete the same row while apart, and each
/// applies the other's change. If either kept its own write because it arrived first, or took
/// the other's because it arrived last, the devices would hold different rows for good.
///
/// The rule: an entry wins when its stamp is later than everything this device knows of the
/// row (the row's `_updated_at`, the stamp of its delete, and for a file record the image its
/// register keeps); an older entry loses and is kept as a lost value; the same stamp is the
/// same write, already here. Stamps are hybrid-clock texts that end with the device id, so no
/// two writes share one and every device orders them alike.
///
/// Where it does not apply:
/// - A file record's delete or retract decides nothing: a record is a register of its place
///   that every write of it updates, and its delete only says to look whether a row still
///   names it (``FileRecords``, settled after the change).
/// - A row moved between audiences is retracted in one section and written in the other by
///   one write, and the retract leaves a tombstone of that same stamp. The image still lands
///   (``crossedImage``): here with the retract just passed over, or on a device that applied
///   the retract (not reading the new audience then) and opens the image later (its member
///   added to the circle).
enum EntryDecision: Equatable {
    /// A file record's delete or retract: its tombstone is kept and the record settled later.
    case settleFileRecord
    /// The same write is here already.
    case skip
    /// Older than `current`, what is here: the entry is kept as a lost value.
    case lose(current: String)
    /// Newer than what is here: it replaces the local row when there is one (whose values are
    /// kept as a lost value when the writer had not seen them), then it is written.
    case win
    /// The image of a row's move that carries the stamp of the move's own retract: written.
    case crossedImage

    /// What an entry of `kind` on `table`, stamped `stamp`, does against the row's local stamp,
    /// its tombstone's and (a file record with no row here) its register's image's.
    static func decide(kind: RowEntry.Kind, isFileRecord: Bool, stamp: String,
                       local: String?, tombstone: String?, image: String?) -> EntryDecision {
        if isFileRecord, kind != .upsert { return .settleFileRecord }
        let current = max(local ?? "", tombstone ?? "", image ?? "")
        if stamp == current {
            return kind == .upsert && local != stamp && tombstone == stamp ? .crossedImage : .skip
        }
        return stamp < current ? .lose(current: current) : .win
    }
}

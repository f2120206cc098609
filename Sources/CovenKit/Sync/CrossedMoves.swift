import Foundation

/// Moves that crossed a write in the audience the row left (DESIGN.md "Rows and files across
/// audiences", "A move that crosses a write"): the applier's one judge of them.
///
/// A row moved from audience A into circle B is retracted in A by its move. A device that had
/// not seen the move may write the row in A after that retract; and a member of B, not having
/// seen that write, may write the row in B later still. B's members converge on B's image by
/// last writer wins, but a device that reads A only never hears of B's write: it would keep A's
/// image for good. So a device holding the winner in B, that applies or beats an image of A,
/// publishes a **retract of the row in A at the winner's stamp**: A's readers delete the row, as
/// they would have had the winner's write been a move; B's readers pass over it (same stamp, or
/// older than theirs).
///
/// Only rows that carry their audience in a column of their own are judged: a row that takes its
/// parent's leaves A with its parent (the retract takes out its children there). Nothing is
/// published when the winner is in the store (every reader of A reads it), when this device's
/// member may not write A now, or when A's readers already hold a retract of the row newer than
/// the losing image (the move's own). The id retracted reached A before: the losing image named
/// it there, or a row peers hold there.
struct CrossedMoves {
    let device: Device
    var database: Database { device.database }
    private let gated: Set<String>
    private var writable: Set<String>?

    init(device: Device, gated: Set<String>) {
        self.device = device
        self.gated = gated
    }

    /// An image of `audience` lost to what this device holds (`winner`, stamped `stamp`: the
    /// row here in `winnerAudience`, or its tombstone of that audience).
    mutating func imageLost(_ entry: RowEntry, audience: String, winnerStamp stamp: String, winnerAudience: String) throws {
        guard winnerAudience != audience, winnerAudience != RowAudiences.store else { return }
        let sync = SyncState(database: database)
        // The move's retract in A already beat this image on A's devices.
        if let tombstone = try sync.tombstones.stamp(table: entry.table, id: entry.id), tombstone > entry.stamp,
           try sync.tombstones.audience(table: entry.table, id: entry.id) == audience {
            return
        }
        try retract(entry.table, id: entry.id, in: audience, stamp: stamp, rowStays: stamp != (try sync.tombstones.stamp(table: entry.table, id: entry.id)))
    }

    /// An image of `audience`, stamped `entry.stamp`, won over the row here in `localAudience`
    /// (stamped `localStamp`): A's readers hear of it unless `change` retracts the row there
    /// itself (a move) at least as late as the row here was written.
    mutating func imageWon(_ entry: RowEntry, audience: String, change: ChangeObject, localAudience: String, localStamp: String) throws {
        guard localAudience != audience, audience != RowAudiences.store else { return }
        let retracted = change.sections.contains { section in
            section.audience == localAudience && section.entries.contains { $0.kind == .retract && $0.table == entry.table && $0.id == entry.id && $0.stamp >= localStamp }
        }
        guard !retracted else { return }
        // A row of this device's own that peers never held (kept back by its gate): its id
        // stays here.
        if HybridClock.device(of: localStamp) == device.deviceID, gated.contains(entry.table),
           try PublishedRows(database: database).state(table: entry.table, id: entry.id) != .held {
            return
        }
        try retract(entry.table, id: entry.id, in: localAudience, stamp: entry.stamp, rowStays: true)
    }

    /// Records the retract in the outbox (placed in `audience` by ``AudienceMoves``), once, and
    /// the row's tombstone there when the row itself stays here.
    private mutating func retract(_ table: String, id: String, in audience: String, stamp: String, rowStays: Bool) throws {
        if writable == nil { writable = try Circles(device).writableAudiences() }
        guard writable?.contains(audience) == true else { return }
        guard try AudienceMoves.recordCrossed(table: table, id: id, stamp: stamp, audience: audience, in: database) else { return }
        if rowStays { try Tombstones(database: database).set(table: table, id: id, stamp: stamp, audience: audience) }
        try Outbox(database: database).append([RowEntry(kind: .retract, table: table, id: id, stamp: stamp)], stamp: stamp)
    }
}

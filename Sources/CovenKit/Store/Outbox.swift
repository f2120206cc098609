import Foundation

/// The owner of `coven_outbox`: this device's recorded writes not yet published, in commit
/// order. ``RecordedWrite`` appends; publishing takes them oldest first.
///
/// Each row holds a piece of one write: its stamp, its entries in ``RowEntryCodec``'s form, how
/// many, and the objects whose upload its publication waits for (bound references). A write of
/// many rows is several pieces with the same stamp, in order.
struct Outbox {
    let database: Database

    /// About how many encoded bytes one piece holds before the next begins.
    static let pieceBytes = 1 << 20

    /// Entries being gathered for one piece.
    struct Piece {
        var count = 0
        var bytes: [UInt8] = []

        mutating func add(_ entry: RowEntry) {
            RowEntryCodec.encode(entry, into: &bytes)
            count += 1
        }

        /// The piece in ``RowEntryCodec``'s form: the count, then the entries.
        var encoded: [UInt8] {
            var output: [UInt8] = []
            output.reserveCapacity(bytes.count + 10)
            RowEntryCodec.writeVarint(UInt64(count), into: &output)
            output.append(contentsOf: bytes)
            return output
        }
    }

    /// Appends one piece of a write (inside the write's transaction).
    func append(_ piece: Piece, stamp: String, waitsFor: Set<String>) throws {
        let waits = String(decoding: try JSONSerialization.data(withJSONObject: waitsFor.sorted(), options: [.withoutEscapingSlashes]), as: UTF8.self)
        try database.run(
            "INSERT INTO coven_outbox (hlc, entries, rows, waits_for, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            [stamp, piece.encoded, piece.count, waits, Timestamp.iso8601(Date())])
    }

    /// Appends `entries` as pieces of one write with `stamp` (a write coven makes of rows it
    /// reads, such as the re-emit of a migration).
    func append(_ entries: [RowEntry], stamp: String) throws {
        var piece = Piece()
        for entry in entries {
            piece.add(entry)
            if piece.bytes.count >= Self.pieceBytes {
                try append(piece, stamp: stamp, waitsFor: [])
                piece = Piece()
            }
        }
        if piece.count > 0 { try append(piece, stamp: stamp, waitsFor: []) }
    }

    /// Removes the writes stamped with one of `stamps` (JSON array): writes storage already
    /// holds in this device's changes, found when a database restored from a backup catches up.
    ///
    /// - Returns: how many pieces went.
    @discardableResult
    func remove(stamped stamps: String) throws -> Int {
        try database.run("DELETE FROM coven_outbox WHERE hlc IN (SELECT value FROM json_each(?1))", [stamps])
        return Int(database.changes)
    }

    /// How many writes (pieces) wait to be published.
    func count() throws -> Int64 {
        try database.scalar("SELECT count(*) FROM coven_outbox").intValue ?? 0
    }

    /// The entries of the outbox row `seq`.
    func entries(seq: Int64) throws -> [RowEntry] {
        guard let bytes = try database.scalar("SELECT entries FROM coven_outbox WHERE seq = ?1", [seq]).bytesValue else { return [] }
        return try RowEntryCodec.decode(bytes)
    }
}

extension Outbox {
    /// A recorded write waiting in the outbox.
    struct Pending {
        var seq: Int64
        var entries: [UInt8]
        var rows: Int64
        var waitsFor: [String]
    }

    /// The oldest writes, in order, up to about `bytes` of entries (at least one).
    func oldest(bytes limit: Int) throws -> [Pending] {
        var pending: [Pending] = []
        var total = 0
        let statement = try database.prepare("SELECT seq, entries, rows, waits_for FROM coven_outbox ORDER BY seq")
        while let row = try statement.next() {
            let entries = row.bytes("entries") ?? []
            if !pending.isEmpty && total + entries.count > limit { break }
            let waits = (try? JSONSerialization.jsonObject(with: Data((row.string("waits_for") ?? "[]").utf8)) as? [String]) ?? []
            pending.append(Pending(seq: row.int("seq") ?? 0, entries: entries, rows: row.int("rows") ?? 0, waitsFor: waits))
            total += entries.count
        }
        return pending
    }

    /// The seqs of the writes after `seq`, in order.
    func seqs(after seq: Int64) throws -> [Int64] {
        try database.query("SELECT seq FROM coven_outbox WHERE seq > ?1 ORDER BY seq", [seq]).compactMap { $0.int("seq") }
    }

    /// Removes the writes `seqs` (published).
    func remove(_ seqs: [Int64]) throws {
        guard let last = seqs.max() else { return }
        try database.run("DELETE FROM coven_outbox WHERE seq <= ?1 AND seq >= ?2", [last, seqs.min() ?? last])
    }

    /// Writes waiting (pieces of one write count once), and of those how many wait for a bound
    /// upload (theirs or an earlier write's).
    func waiting(isStored: (String) throws -> Bool) throws -> (writes: Int64, held: Int64) {
        var writes: Set<String> = []
        var held: Set<String> = []
        var holding = false
        let statement = try database.prepare("SELECT hlc, waits_for FROM coven_outbox ORDER BY seq")
        while let row = try statement.next() {
            let stamp = row.string("hlc") ?? ""
            writes.insert(stamp)
            if !holding {
                let waits = (try? JSONSerialization.jsonObject(with: Data((row.string("waits_for") ?? "[]").utf8))) as? [String] ?? []
                holding = try waits.contains { try !isStored($0) }
            }
            if holding { held.insert(stamp) }
        }
        return (Int64(writes.count), Int64(held.count))
    }
}

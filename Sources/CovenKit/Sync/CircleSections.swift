import Foundation

/// The circles' sections of every change this device published or applied (DESIGN.md "Apply
/// and authorization"), opened or not: the one owner of `coven_change_sections`.
///
/// - A section this device could not open (a circle its member is not in) may hold file
///   records naming stored bytes that a record here names too: gc leaves bytes alone while
///   any is unread (``Collector``).
/// - A key learned later (a member added to a circle: each generation holds the previous
///   one's key, history for newcomers) opens them: ``backfill(provider:keys:authorizer:)``
///   fetches those changes again and applies the sections it now reads.
/// - A change holding any circle's section stays in storage (gc of changes passes it over):
///   a member added later, or a device joining from a snapshot (which holds the store's rows
///   only, and this table), reads the circle's history there.
struct CircleSections {
    let database: Database

    /// Remembers the circles' sections of an applied `change`, inside the caller's transaction
    /// (the applier's): those it opened, and those it could not.
    func remember(_ change: ChangeObject) throws {
        for section in change.sections where section.audience != RowAudiences.store {
            try record(device: change.device, seq: Int64(change.seq), audience: section.audience, generation: section.generation ?? 0, opened: true)
        }
        for section in change.unreadSections {
            try record(device: change.device, seq: Int64(change.seq), audience: section.audience, generation: section.generation, opened: false)
        }
    }

    /// Remembers the circles' sections of a change this device publishes as `seq`.
    func rememberOwn(device: String, seq: Int64, sections: [ChangeSection], keys: Keyring) throws {
        for section in sections where section.audience != RowAudiences.store {
            try record(device: device, seq: seq, audience: section.audience, generation: try keys.newestGeneration(audience: section.audience) ?? 0, opened: true)
        }
    }

    private func record(device: String, seq: Int64, audience: String, generation: UInt64, opened: Bool) throws {
        try database.run("""
            INSERT INTO coven_change_sections (device, seq, audience, generation, opened) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (device, seq, audience) DO UPDATE SET opened = max(opened, excluded.opened)
            """, [device, seq, audience, Int64(generation), opened ? 1 : 0])
    }

    /// How many sections this device could not open, and of how many circles.
    func unread() throws -> (sections: Int64, circles: Int64) {
        let row = try database.queryOne("SELECT count(*) AS n, count(DISTINCT audience) AS c FROM coven_change_sections WHERE opened = 0")
        return (row?.int("n") ?? 0, row?.int("c") ?? 0)
    }

    /// The circles whose sections each of `device`'s changes from `first` through `last`
    /// holds, by seq (changes holding none are left out).
    func circleSections(of device: String, from first: Int64, through last: Int64) throws -> [Int64: Set<String>] {
        var result: [Int64: Set<String>] = [:]
        for row in try database.query("SELECT seq, audience FROM coven_change_sections WHERE device = ?1 AND seq BETWEEN ?2 AND ?3", [device, first, last]) {
            if let seq = row.int("seq"), let audience = row.string("audience") { result[seq, default: []].insert(audience) }
        }
        return result
    }

    /// Marks opened the sections of `audience` in the changes `coverage` covers (each device's
    /// changes through its seq there): a snapshot's part of that circle read here holds them.
    /// Returns how many were marked.
    func markOpened(audience: String, through coverage: [String: Int64]) throws -> Int {
        var marked = 0
        for (device, seq) in coverage.sorted(by: { $0.key < $1.key }) {
            try database.run("UPDATE coven_change_sections SET opened = 1 WHERE audience = ?1 AND device = ?2 AND seq <= ?3 AND opened = 0", [audience, device, seq])
            marked += Int(try database.scalar("SELECT changes()").intValue ?? 0)
        }
        return marked
    }

    /// Copies every circle's section of the changes a snapshot covers into the snapshot's
    /// database (attached as `schema`), as not opened: a device that joins from it opens
    /// what its keys open, from storage.
    func copyForSnapshot(into schema: String) throws {
        try database.execute("""
            INSERT INTO \(schema).coven_change_sections (device, seq, audience, generation, opened)
            SELECT device, seq, audience, generation, 0 FROM main.coven_change_sections
            """)
    }

    /// What a backfill did.
    struct Backfill: Equatable {
        /// Changes fetched again, and sections applied from them.
        var changes = 0
        var sections = 0
        /// Changes storage no longer holds, or that fail their checks now: by path, why.
        var unavailable: [String: String] = [:]
    }

    /// Applies the sections this device could not open before and opens now (a key learned
    /// since), change by change in order of device and seq: each change is fetched again,
    /// opened, and only those sections applied (last writer wins, as any entry), without
    /// moving the applied seqs; then marked opened.
    func backfill(device: Device, provider: StorageProvider, authorizer: any ChangeAuthorizer, stop: Stop) throws -> Backfill {
        let keys = device.keys
        var result = Backfill()
        var pending: [(device: String, seq: Int64, audiences: Set<String>)] = []
        for row in try database.query("SELECT device, seq, audience, generation FROM coven_change_sections WHERE opened = 0 ORDER BY device, seq") {
            guard let publisher = row.string("device"), let seq = row.int("seq"), let audience = row.string("audience"),
                  try keys.key(audience: audience, generation: UInt64(row.int("generation") ?? 0)) != nil else { continue }
            if let last = pending.last, last.device == publisher, last.seq == seq {
                pending[pending.count - 1].audiences.insert(audience)
            } else {
                pending.append((publisher, seq, [audience]))
            }
        }
        guard !pending.isEmpty else { return result }
        var applier = ChangeApplier(device: device, authorizer: authorizer)
        for item in pending {
            try stop.check("the sync")
            let path = ChangeObject.path(device: item.device, seq: UInt64(item.seq))
            guard let bytes = try provider.getObject(path) else {
                result.unavailable[path] = "missing from storage"
                continue
            }
            var change: ChangeObject
            do {
                change = try keys.open(change: bytes, path: path, publisher: item.device, storeID: device.storeID)
            } catch let error as CovenError where [.integrity, .decoding, .keyUnavailable].contains(error.code) {
                result.unavailable[path] = error.message
                continue
            }
            change.sections = change.sections.filter { item.audiences.contains($0.audience) }
            change.unreadSections = []
            try applier.apply(change, path: path, as: .backfill)
            result.changes += 1
            result.sections += change.sections.count
        }
        return result
    }
}

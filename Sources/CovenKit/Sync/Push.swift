import Foundation

/// What a push did.
public struct PushReport: Sendable, Equatable {
    /// Changes published now, by seq.
    public var published: [Int64] = []
    /// Row entries they held.
    public var entries: Int = 0
    /// Of those, the app's rows.
    public var rows: Int = 0
    /// And coven's own file records, each counted once a change however many entries it has.
    public var fileRecords: Int = 0
    /// Writes left in the outbox because a bound upload holds them (or an earlier write).
    public var held: Int64 = 0
    /// This device's own changes that storage held past what its database said it published
    /// (a database restored from a backup), applied here before anything new was published.
    public var caughtUp: [Int64] = []
    /// Changes of this device reported damaged by another device, published again now.
    public var republished: [Int64] = []
    /// Changes of this device reported damaged that it can no longer rebuild.
    public var unrecoverable: [Int64] = []
}

extension StoreSync {
    /// The most entry bytes one change holds before the next begins: 4 MiB, or
    /// `COVEN_SYNC_CHANGE_BYTES` (tests make small changes with it).
    static var changeBytes: Int {
        ProcessInfo.processInfo.environment["COVEN_SYNC_CHANGE_BYTES"].flatMap(Int.init).map { max(1, $0) } ?? 4 << 20
    }

    /// Publishes this device's recorded writes (DESIGN.md "Push"): oldest first, stopping
    /// before the first write a bound upload still holds; each batch is frozen with its seq in
    /// one transaction (so a crash sends the same bytes again), then written put-if-absent.
    ///
    /// - Throws: `.deviceConflict` when another object is at the next seq (a second copy of this
    ///   device published), publishing nothing more; `.storage` when storage fails (what was
    ///   published stays published, the rest stays frozen or in the outbox).
    ///
    /// With `checkHistory` (the first push of a sync), before anything new is frozen, storage is
    /// asked whether it holds changes of this device past what this database published (a
    /// restored backup: ``OwnHistory``), and changes reported damaged are published again
    /// (``ChangeDamage``).
    public func push(stop: Stop = Stop(), checkHistory: Bool = true, progress: ((SyncProgress) -> Void)? = nil) throws -> PushReport {
        let provider = try storage()
        var report = PushReport()
        _ = try keys.signingKey()  // a missing or damaged signing key stops the push first
        var checked = !checkHistory
        // The file records of each change frozen now; a change frozen by an earlier run is
        // opened to count them.
        var fileEntries: [Int64: (entries: Int, records: Int)] = [:]
        while true {
            try stop.check("the sync")
            if let frozen = try database.queryOne("SELECT * FROM coven_push ORDER BY seq LIMIT 1") {
                try send(frozen, provider: provider)
                let seq = frozen.int("seq") ?? 0
                report.published.append(seq)
                let entries = Int(frozen.int("entries") ?? 0)
                report.entries += entries
                var counted = fileEntries[seq]
                if counted == nil, let bytes = frozen.bytes("object"),
                   let change = try? keys.open(change: bytes, path: ChangeObject.path(device: deviceID, seq: UInt64(seq)), publisher: deviceID) {
                    counted = Self.fileRecordCount(change.entries)
                }
                report.rows += entries - (counted?.entries ?? 0)
                report.fileRecords += counted?.records ?? 0
                progress?(.published(seq: frozen.int("seq") ?? 0, entries: Int(frozen.int("entries") ?? 0)))
                continue
            }
            if !checked {
                checked = true
                report.caughtUp = try OwnHistory(device: device).catchUp(provider: provider) {
                    _ = try pull(stop: stop)
                }
                (report.republished, report.unrecoverable) = try ChangeDamage(device: device).republish(provider: provider)
            }
            guard try freezeNextChange(fileEntries: &fileEntries) else { break }
        }
        report.held = try Outbox(database: database).waiting(isStored: { try device.uploadQueue.isUploaded($0) }).held
        return report
    }

    /// Freezes the next batch of outbox writes as change `seq`: false when nothing is ready.
    private func freezeNextChange(fileEntries: inout [Int64: (entries: Int, records: Int)]) throws -> Bool {
        try database.transaction {
            let outbox = Outbox(database: database)
            var batch: [Outbox.Pending] = []
            var held = false
            for pending in try outbox.oldest(bytes: Self.changeBytes) {
                // A bound upload holds its write and every later one, in order.
                if try pending.waitsFor.contains(where: { try !device.uploadQueue.isUploaded($0) }) {
                    held = true
                    break
                }
                batch.append(pending)
            }
            // Nothing to publish, but a pull applied a delete or a switch of a file record that
            // gc elsewhere waits for this device to have seen: an empty change carries the
            // frontier (an empty change applied does not ask for one back).
            let frontierDue = try SyncFlags(database: database).frontierDue
            // A pull changed what a gate keeps: rows kept now that peers never held go whole.
            let gateDue = try SyncFlags(database: database).gateDue
            guard !batch.isEmpty || frontierDue || gateDue else { return false }
            var recorded: [RowEntry] = []
            for pending in batch { recorded.append(contentsOf: try RowEntryCodec.decode(pending.entries)) }
            // The gate: private rows stay, rows that became kept go whole, rows that stopped
            // being kept are retracted (Sync/GateFilter.swift).
            var gate = try GateFilter(device: device)
            var deferred: Set<GateFilter.RowKey> = []
            if held, gate.isActive {
                for seq in try outbox.seqs(after: batch.last?.seq ?? 0) {
                    for entry in try outbox.entries(seq: seq) { deferred.insert(.init(table: entry.table, id: entry.id)) }
                }
            }
            let entries = try gate.filter(recorded, deferred: deferred, pulled: gateDue)
            if gateDue { try SyncFlags(database: database).clearGateDue() }
            guard !entries.isEmpty || frontierDue else {
                // Nothing of the batch may leave: it is done with, and no change is made.
                try outbox.remove(batch.map(\.seq))
                return true
            }
            let published = try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [deviceID]).intValue ?? 0
            let seq = published + 1
            let schema = schemaVersion
            let frontier = try ownFrontier()
            let lastStamp = entries.map(\.stamp).max()
            let change = ChangeObject(storeID: storeID, device: deviceID, seq: UInt64(seq),
                                      schema: .init(migrations: schema.count, digest: schema.digest),
                                      frontier: frontier.mapValues { UInt64($0) },
                                      heldObjects: try heldObjects(publishedUpTo: lastStamp, gated: gate.audiences.gatedTables.contains("coven_files")),
                                      sections: try ChangeSections(audiences: gate.audiences, keys: keys).build(entries))
            try SyncFlags(database: database).clearFrontierDue()
            let sealed = try keys.seal(change)
            try database.run("""
                INSERT INTO coven_push (seq, object, max_stamp, frontier, entries, frozen_at, writes, notes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                """, [seq, sealed, entries.map(\.stamp).max() ?? "", Frontier.json(frontier), entries.count, Timestamp.iso8601(Date()),
                      entries.isEmpty ? 0 : batch.count, try OwnNotes(device: device).seal(entries: entries, seq: seq)])
            try CircleSections(database: database).rememberOwn(device: deviceID, seq: seq, sections: change.sections, keys: keys)
            try AudienceMoves.forget(entries, in: database)
            try outbox.remove(batch.map(\.seq))
            fileEntries[seq] = Self.fileRecordCount(entries)
            return true
        }
    }

    /// The entries of coven's file records among `entries`, and how many records they are (a
    /// record written twice in one change counts once).
    static func fileRecordCount(_ entries: [RowEntry]) -> (entries: Int, records: Int) {
        let files = entries.filter { $0.table == "coven_files" }
        return (files.count, Set(files.map(\.id)).count)
    }

    /// The stored objects that records of this device name but that no published change of it
    /// holds yet (their newest image, stamped here, is newer than what this change publishes):
    /// a gc elsewhere keeps them (DESIGN.md "Deleting stored bytes").
    ///
    /// With gates, also the objects of stored records peers do not hold (records only private
    /// rows name, kept back by the gate). Also those of stored records that rows of this
    /// device not published yet name (held by a bound upload): a record deleted elsewhere that
    /// such a row brought back here comes back everywhere when the row arrives.
    func heldObjects(publishedUpTo stamp: String?, gated: Bool) throws -> HeldObjects {
        let floor = try stamp ?? database.scalar("SELECT max(max_stamp) FROM coven_sync_log WHERE device = ?1", [deviceID]).textValue ?? ""
        // A record kept back may be on another device still, its bytes uploaded by it later
        // (the name is known now): they are held back too.
        let privateRecords = gated ? """
             OR NOT EXISTS (SELECT 1 FROM coven_published p WHERE p.tbl = 'coven_files' AND p.id = f.id AND p.retracted = 0)
            """ : ""
        let privateRecordsElsewhere = gated ? """
             OR (place = \(Coordinates.Place.device.sql) AND f.device <> ?2 AND NOT EXISTS (SELECT 1 FROM coven_published p WHERE p.tbl = 'coven_files' AND p.id = f.id AND p.retracted = 0))
            """ : ""
        // A record another device wrote, named by a row of this device not published yet (a
        // write held by a bound upload): it may have been deleted elsewhere and brought back
        // here by that row, which wins when it arrives.
        let namedByHeldRows = manifest.tables.flatMap { table in
            table.files.map { column in
                " OR f.id IN (SELECT \(RowCapture.quote(column.column)) FROM main.\(RowCapture.quote(table.name)) WHERE _updated_at > ?1 AND _updated_at LIKE '%-' || ?2)"
            }
        }.joined()
        // Stepped, each name copied from SQLite into the change's bytes (no String, no row): a
        // library's first push names 100,000 of them in every change.
        let statement = try database.prepare("""
            SELECT DISTINCT object FROM coven_files f
            WHERE (place = \(Coordinates.Place.stored.sql) AND ((_updated_at > ?1 AND _updated_at LIKE '%-' || ?2)\(privateRecords)\(namedByHeldRows))\(privateRecordsElsewhere))
            AND object IS NOT NULL ORDER BY object
            """)
        try statement.bind([floor, deviceID])
        var objects = HeldObjects()
        while try statement.step() {
            statement.withText(0) { objects.append(utf8: $0) }
        }
        return objects
    }

    /// For every other device, the highest seq applied here with nothing missing below.
    func ownFrontier() throws -> [String: Int64] {
        var frontier: [String: Int64] = [:]
        for row in try database.query("SELECT device, applied_seq FROM coven_device_registry WHERE device <> ?1 AND applied_seq > 0", [deviceID]) {
            if let device = row.string("device"), let seq = row.int("applied_seq") { frontier[device] = seq }
        }
        return frontier
    }

    /// Writes a frozen change put-if-absent and records it published.
    private func send(_ frozen: Row, provider: StorageProvider) throws {
        let seq = frozen.int("seq") ?? 0
        let bytes = frozen.bytes("object") ?? []
        let path = ChangeObject.path(device: deviceID, seq: UInt64(seq))
        // Its notes go first, so a change in storage has them (OwnNotes); never over those of
        // a change another copy of this device published at this seq.
        if let notes = frozen.bytes("notes"), try provider.head(path) == nil {
            try provider.put(OwnNotes.path(device: deviceID, seq: seq), data: notes)
        }
        if try !provider.putIfAbsent(path, data: bytes) {
            // Our own earlier send, interrupted before it was recorded, or another copy of
            // this device.
            guard try provider.getObject(path) == bytes else {
                throw CovenError(.deviceConflict, "another copy of this device published change \(seq) at '\(path)'",
                                 hint: "this database was copied or restored from a backup: make a new device with 'coven join' and retire this one",
                                 details: ["object": path, "device": deviceID])
            }
        }
        let frontier = Frontier.parse(frozen.string("frontier") ?? "{}")
        try database.transaction {
            let sync = SyncState(database: database)
            try sync.log(device: deviceID, seq: seq, maxStamp: frozen.string("max_stamp") ?? "", frontier: frontier)
            try sync.setPublished(device: deviceID, seq: seq, frontier: frontier)
            try database.run("DELETE FROM coven_push WHERE seq = ?1", [seq])
            try SyncFlags(database: database).notePush(at: Timestamp.iso8601(Date()))
        }
    }
}

extension StorageProvider {
    /// The whole object at `key`, or nil when storage confirms nothing is there.
    func getObject(_ key: String) throws -> [UInt8]? {
        var bytes: [UInt8] = []
        do {
            try get(key, range: nil) { bytes.append(contentsOf: $0) }
        } catch let error as CovenError where error.code == .missing {
            return nil
        }
        return bytes
    }
}

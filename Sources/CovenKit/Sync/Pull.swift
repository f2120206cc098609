import Foundation

/// What a pull did.
public struct PullReport: Sendable, Equatable {
    /// Changes applied now, by device.
    public var applied: [String: [Int64]] = [:]
    /// Entries applied, skipped (already here or older), lost values kept, rows taken out.
    public var entries = 0
    /// Of the entries applied, the app's rows.
    public var rows = 0
    /// And coven's own file records, each counted once a change however many entries it has.
    public var fileRecords = 0
    public var skipped = 0
    public var lost = 0
    /// Entries whose writer was not allowed to write them: kept as lost values (`not_authorized`,
    /// `not_owner`), never applied.
    public var refused = 0
    public var takenOut = 0
    /// Devices whose next change is missing although another device has applied it: a gap in
    /// storage, where that device's pull stops.
    public var gaps: [String: Int64] = [:]
    /// Devices whose next change is in storage but fails its checks (damaged): their pull
    /// stops there, and the damage is reported to the publisher (``ChangeDamage``).
    public var damaged: [String: DamagedChange] = [:]
    /// Changes of devices gone for good that storage lost or damaged: gone past, lost for good.
    public var lostForGood: [LostChange] = []
    /// Devices whose last change applied now was stamped further ahead of this device's wall
    /// clock than ``HybridClock/maximumAhead`` (milliseconds): their stamps did not move this
    /// device's clock past that bound.
    public var clockAhead: [String: Int64] = [:]
    /// Devices whose next change waits for a change of another device not applied here yet.
    public var waiting: [String: Int64] = [:]
    /// Devices learned of now.
    public var newDevices: [String] = []
    /// Devices whose next change is sealed under a generation of the store's key this device
    /// does not hold: their stream waits there (the key may come with the next sync).
    public var keyUnavailable: [String: Int64] = [:]
    /// Removal marks not honoured, by the device they name: why (a mark by a device whose member
    /// may not remove it; RemovalAuthority).
    public var refusedRemovals: [String: String] = [:]
    /// Circles' sections of changes applied before that this device opened now (a key
    /// learned since: a member added to a circle reads its history), and the changes that
    /// held them.
    public var reopenedSections = 0
    /// Snapshots' parts of circles read for that (``SnapshotParts``): the sections they cover
    /// are counted above and not fetched again.
    public var reopenedParts = 0
    /// Changes holding such sections that storage no longer holds or that fail their checks:
    /// by path, why.
    public var reopenUnavailable: [String: String] = [:]

    /// Changes that deleted many rows at once (Trash/Trash.swift): `sync` warns of each, even
    /// under -q, with the command that undoes it.
    public var massDeletes: [MassDelete] = []

    public var changes: Int { applied.values.reduce(0) { $0 + $1.count } }

    /// Counts change `seq` of `device`, applied as `applied` says.
    mutating func add(_ applied: ApplyReport, of device: String, seq: Int64) {
        self.applied[device, default: []].append(seq)
        entries += applied.applied
        rows += applied.applied - applied.appliedFileEntries
        fileRecords += applied.appliedFileRecords.count
        skipped += applied.skipped
        lost += applied.lost
        refused += applied.refused
        takenOut += applied.takenOut
        clockAhead[device] = applied.clockAhead
        if let mass = applied.massDelete { massDeletes.append(mass) }
    }
}

/// A change in storage that fails its checks.
public struct DamagedChange: Sendable, Equatable {
    public var seq: Int64
    /// Its storage path.
    public var object: String
    /// What its check said.
    public var message: String
}

/// A change of a device gone for good that nobody can publish again.
public struct LostChange: Sendable, Equatable {
    public enum Why: String, Sendable { case missing, damaged }
    public var device: String
    public var seq: Int64
    public var object: String
    public var why: Why
}

extension StoreSync {
    /// Applies the other devices' published changes (DESIGN.md "Pull"): for every known device
    /// but this one, lists `changes/<d>/` after the applied seq and GETs what follows in order,
    /// applying a change only once everything its frontier names is applied here. Of a device
    /// gone for good, only the changes some device's published frontier says it applied. A
    /// quiet pull is one listing of `devices/` and one listing per live device.
    ///
    /// A change absent below one storage holds (or one another device applied) is a **gap**;
    /// one that fails its checks is **damaged** and reported to its publisher, which publishes
    /// it again (``ChangeDamage``): either stops that device's stream here, named in the
    /// report, and the others go on. Of a device gone for good, such a change is gone past and
    /// named as lost for good.
    ///
    /// - Throws: `.deviceGone` when this device was removed; `.updateRequired` for a change of
    ///   a newer schema; `.decoding` / `.invalidId` for a well-signed change this device must
    ///   not apply (naming the object; nothing of it is applied); `.storage`.
    public func pull(stop: Stop = Stop(), learned: [String]? = nil, progress: ((SyncProgress) -> Void)? = nil) throws -> PullReport {
        let provider = try storage()
        var run = PullRun(applier: ChangeApplier(device: device, authorizer: MemberAuthorizer(keys: keys, database: database, store: storeID, manifest: manifest,
                                                                                                audiences: try RowAudiences(device: device))))
        // `learned`: the caller listed devices/ already (sync does, before its push).
        run.report.newDevices = try learned ?? DeviceRegistry(device).refresh(provider: provider)
        run.report.refusedRemovals = try DeviceRegistry(device).refusedRemovals()
        defer { dropCachedBytes(of: run.uncache) }
        let context = PullContext(provider: provider, keys: keys, stop: stop, circles: Circles(device), progress: progress, storeID: storeID)
        while run.moved {
            run.moved = false
            for row in try database.query("SELECT device, applied_seq, gone FROM coven_device_registry WHERE device <> ?1 ORDER BY device", [deviceID]) {
                guard let other = row.string("device"), !run.finished.contains(other) else { continue }
                try pullStream(of: other, after: row.int("applied_seq") ?? 0, gone: row.int("gone") == 1, run: &run, context: context)
            }
        }
        var report = run.report
        // What every device's frontier says of each other device, read once (not once per
        // device whose changes ran out: a quiet sync of many devices).
        let knownSeqs = run.missingAt.isEmpty ? [:] : try highestSeqsKnown()
        for (other, seq) in run.missingAt where report.gaps[other] == nil {
            let known = max(run.claimed[other] ?? 0, knownSeqs[other] ?? 0)
            if known >= seq { report.gaps[other] = seq }
        }
        // A gap is reported to its publisher as damage is: it publishes the change again.
        for (other, seq) in report.gaps {
            let path = ChangeObject.path(device: other, seq: UInt64(seq))
            try ChangeDamage(device: device).report(path, device: other, seq: seq, error: CovenError(.missing, "change '\(path)' is missing from storage"),
                                                  provider: provider)
        }
        try ChangeDamage(device: device).remember(gaps: report.gaps, damaged: report.damaged)
        // Streams waiting for a key: this device is behind by what it cannot read, and gc
        // holds back what those changes might name (``Collector``); status shows them.
        try SyncFlags(database: database).setKeyUnavailable(report.keyUnavailable.isEmpty ? nil : Frontier.json(report.keyUnavailable))
        return report
    }

    /// What a pull keeps while it goes over the devices' streams, as often as one moves.
    private struct PullRun {
        var applier: ChangeApplier
        var report = PullReport()
        /// Objects whose cached bytes go at the end.
        var uncache: Set<String> = []
        var circlesRefreshed = false
        var moved = true
        /// Devices whose stream stopped for this pull.
        var finished: Set<String> = []
        /// Where each device's changes ran out, and the highest seq of each that a change read
        /// here says its writer applied: a change missing below that is a gap.
        var missingAt: [String: Int64] = [:]
        var claimed: [String: Int64] = [:]
        /// Devices gone for good that a change waits for, looked at again once in this pull with
        /// what the waiting change says its writer applied of them.
        var rewoken: Set<String> = []
    }

    /// What every stream of one pull reads with.
    private struct PullContext {
        let provider: StorageProvider
        let keys: Keyring
        let stop: Stop
        let circles: Circles
        let progress: ((SyncProgress) -> Void)?
        let storeID: String
        var reader: ChangeStream.Reader { ChangeStream.Reader(provider: provider, keys: keys, storeID: storeID, stop: stop) }
    }

    /// Applies the changes of `other` after seq `applied` that can be applied now, in order,
    /// until its stream (``ChangeStream``) stops (a gap, damage, a missing key, a change waiting
    /// for another device's) or ends.
    private func pullStream(of other: String, after applied: Int64, gone: Bool, run: inout PullRun, context: PullContext) throws {
        // A device gone for good: only the changes of it that some device says it applied (its
        // published frontier, or a change read now), so every device ends with the same rows;
        // what it published that nobody applied is dropped with it.
        let through = gone ? max(try highestSeqKnown(of: other) ?? 0, run.claimed[other] ?? 0) : Int64.max
        guard applied + 1 <= through else { return }
        run.report.waiting[other] = nil
        var stream = ChangeStream(device: other, after: applied, through: through, gone: gone, reader: context.reader)
        while true {
            let next = try stream.next(lost: { seq, why in try skipLostChange(of: other, seq: seq, why: why, report: &run.report) })
            switch next {
            case .change(let change, let path, let seq):
                guard try apply(change, path: path, of: other, seq: seq, run: &run, context: context) else { return }
                stream.advance()
                continue
            case .end:
                return
            case .missing(let seq):
                run.missingAt[other] = seq
            case .gap(let seq):
                run.report.gaps[other] = seq
            case .keyUnavailable(let seq):
                run.report.keyUnavailable[other] = seq
            case .damaged(let seq, let path, let error):
                run.report.damaged[other] = DamagedChange(seq: seq, object: path, message: error.message)
                try ChangeDamage(device: device).report(path, device: other, seq: seq, error: error, provider: context.provider)
            }
            run.finished.insert(other)
            return
        }
    }

    /// Applies change `seq` of `other` once its sections can be read and every change its
    /// writer had applied is applied here; false when its stream stops or waits there.
    private func apply(_ opened: ChangeObject, path: String, of other: String, seq: Int64, run: inout PullRun, context: PullContext) throws -> Bool {
        // Sections this device holds no key of: a circle's it is in, of a generation not read
        // yet, waits for it (the chains are read again once a pull); any other is gone past
        // and remembered.
        guard let change = try withCircleKeys(opened, path: path, publisher: other, circles: context.circles,
                                              refreshed: &run.circlesRefreshed, provider: context.provider) else {
            run.report.keyUnavailable[other] = seq
            run.finished.insert(other)
            return false
        }
        for (device, claimed) in change.frontier { run.claimed[device] = max(run.claimed[device] ?? 0, Int64(claimed)) }
        if let missing = try unmetDependency(change.frontier.mapValues { Int64($0) }, writer: other) {
            run.report.waiting[other] = missing.seq
            if missing.gone, run.rewoken.insert(missing.device).inserted { run.moved = true }
            return false
        }
        let applied = try run.applier.apply(change, path: path)
        run.report.add(applied, of: other, seq: seq)
        // Kept for the end only where this device caches the bytes: a pull of a library
        // names 100,000 objects it never cached.
        if !applied.uncache.isEmpty, try database.scalar("SELECT EXISTS (SELECT 1 FROM coven_cache)").intValue == 1 {
            for object in applied.uncache where try Cache(device).cacheRow(object) != nil { run.uncache.insert(object) }
        }
        context.progress?(.applied(device: other, seq: seq, entries: change.entries.count))
        run.moved = true
        return true
    }

    /// `change` to apply, its unread sections all of circles this device's member is not in
    /// (gone past, and remembered by the applier); nil when one may be opened by a key not read
    /// yet (a generation storage does not show yet, or a circle it holds no chain of): the
    /// stream waits, as status shows, never skipped. The chains are read again once a pull,
    /// and a key learned then opens the change, read again.
    private func withCircleKeys(_ change: ChangeObject, path: String, publisher: String, circles: Circles,
                                refreshed: inout Bool, provider: StorageProvider) throws -> ChangeObject? {
        func waits(_ change: ChangeObject) throws -> Bool {
            try change.unreadSections.contains { try circles.mayOpenLater($0) }
        }
        guard try waits(change) else { return change }
        guard !refreshed else { return nil }
        // A circle made, or a generation published, since the sync began.
        try circles.refresh(provider: provider)
        refreshed = true
        guard try change.unreadSections.contains(where: { try keys.key(audience: $0.audience, generation: $0.generation) != nil }) else {
            return try waits(change) ? nil : change
        }
        let reader = ChangeStream.Reader(provider: provider, keys: keys, storeID: storeID, stop: Stop())
        guard case .opened(let again) = try ChangeStream.read(path, publisher: publisher, reader: reader), try !waits(again) else { return nil }
        return again
    }

    /// For each device whose next change is sealed under a key generation this device does not
    /// hold, that change's seq, as the last pull found (``SyncFlags/keyUnavailable``).
    func keyUnavailable() throws -> [String: Int64] {
        Frontier.parse(try SyncFlags(database: database).keyUnavailable ?? "{}")
    }

    /// Goes past a change of a device gone for good that storage lost or damaged: nobody can
    /// publish it again. Named in the report; what it held is lost for good here.
    private func skipLostChange(of device: String, seq: Int64, why: LostChange.Why, report: inout PullReport) throws {
        try database.transaction {
            let sync = SyncState(database: database)
            let frontier = Frontier.parse(try database.scalar("SELECT frontier FROM coven_device_registry WHERE device = ?1", [device]).textValue ?? "{}")
            try sync.log(device: device, seq: seq, maxStamp: "", frontier: frontier)
            try sync.setApplied(device: device, seq: seq, frontier: frontier)
        }
        report.lostForGood.append(LostChange(device: device, seq: seq, object: ChangeObject.path(device: device, seq: UInt64(seq)), why: why))
    }

    /// The first device of `frontier` (but the writer) whose changes up to the seq named are not
    /// all applied here (of this device: published, as its database knows; one put back from a
    /// backup catches up its own first: ``OwnHistory``), and whether it is gone for good.
    ///
    /// A device gone for good holds a change back too: what its writer applied of it is applied
    /// everywhere (a pull takes of a gone device what some device's frontier names, this one's
    /// included), and first, so a live device's edit of a row the gone device wrote never
    /// arrives before that row (it would be taken out, naming a file record not held yet).
    private func unmetDependency(_ frontier: [String: Int64], writer: String) throws -> (device: String, seq: Int64, gone: Bool)? {
        for (other, seq) in frontier.sorted(by: { $0.key < $1.key }) where other != writer {
            // One unknown here is learned of at the next listing.
            guard let row = try database.queryOne("SELECT applied_seq, gone FROM coven_device_registry WHERE device = ?1", [other]) else {
                return (other, seq, false)
            }
            if row.int("applied_seq") ?? 0 < seq { return (other, seq, row.int("gone") == 1) }
        }
        return nil
    }

    /// The published changes of `device` (gone for good, or about to be) that no device is
    /// known to have applied: those above what this device applied of it and what every
    /// other device's published frontier says. Every device drops them with it (a pull applies
    /// of a gone device only what some frontier names). One listing of `changes/<device>/`.
    func droppedChanges(of device: String, provider: StorageProvider) throws -> [String] {
        let applied = try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [device]).intValue ?? 0
        let through = max(applied, try highestSeqKnown(of: device) ?? 0)
        return try provider.list(prefix: "changes/\(device)/").compactMap { info in
            guard let (owner, seq) = ChangeObject.parsePath(info.key), owner == device, Int64(seq) > through else { return nil }
            return info.key
        }.sorted()
    }

    /// The highest seq of `device` that some device says it applied.
    /// For every device, the highest seq of it that some other device says it applied.
    private func highestSeqsKnown() throws -> [String: Int64] {
        var highest: [String: Int64] = [:]
        for row in try database.query("SELECT device, frontier FROM coven_device_registry") {
            let owner = row.string("device") ?? ""
            for (device, seq) in Frontier.parse(row.string("frontier") ?? "{}") where device != owner {
                highest[device] = max(highest[device] ?? 0, seq)
            }
        }
        return highest
    }

    private func highestSeqKnown(of device: String) throws -> Int64? {
        var highest: Int64?
        for row in try database.query("SELECT frontier FROM coven_device_registry WHERE device <> ?1", [device]) {
            if let seq = Frontier.parse(row.string("frontier") ?? "{}")[device] { highest = max(highest ?? 0, seq) }
        }
        return highest
    }

    /// Drops the cached bytes of objects no record here still reads from storage.
    private func dropCachedBytes(of objects: Set<String>) {
        for object in objects.sorted() {
            let stillStored = (try? database.scalar("""
                SELECT count(*) FROM coven_files WHERE object = ?1 AND place = \(Coordinates.Place.stored.sql)
                """, [object]).intValue) ?? 0
            guard stillStored == 0, let row = try? Cache(device).cacheRow(object) else { continue }
            _ = try? Cache(device).removeCacheEntry(row)
        }
    }
}

import Foundation

/// One gc pass: what names objects, read once, and the deletes.
struct Collector {
    let device: Device
    let provider: StorageProvider
    var keys: Keyring { device.keys }
    let dryRun: Bool
    /// Told of each delete once confirmed.
    let confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)?
    var database: Database { device.database }
    var me: String { device.deviceID }

    /// Devices not gone for good, but this one: their published frontier and held objects.
    private(set) var others: [(id: String, frontier: [String: Int64])] = []
    private(set) var applied: [String: Int64] = [:]
    private(set) var gone: [String] = []
    private(set) var held: [String: Set<String>] = [:]
    private(set) var lostFiles: Set<String> = []
    private(set) var lostObjects: Set<String> = []
    /// Sections of applied changes this device could not open, and of how many circles.
    private(set) var unread: (sections: Int64, circles: Int64) = (0, 0)
    private(set) var snapshots: [SnapshotInfo] = []
    /// Every circle's part in storage, and the snapshot it is of.
    private(set) var partKeys: [(key: String, snapshot: String)] = []
    /// The newest two snapshots this device can read the coverage of, and those it cannot.
    private(set) var retained: [SnapshotInfo] = []
    /// The object lists of retained snapshots, read when a candidate needs one.
    let snapshotObjects: SnapshotObjects
    /// Why the trash keeps an object, one text for every object its window keeps until the same
    /// time (a mass delete's 100,000 objects share one).
    let trashDetail = TrashDetail()

    init(device: Device, provider: StorageProvider, dryRun: Bool,
         confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) {
        self.device = device
        self.provider = provider
        self.snapshotObjects = SnapshotObjects(provider: provider, keys: device.keys)
        self.dryRun = dryRun
        self.confirmed = confirmed
    }

    // MARK: What names objects

    mutating func prepare() throws {
        for row in try database.query("SELECT device, applied_seq, frontier, gone FROM coven_device_registry") {
            let id = row.string("device") ?? ""
            applied[id] = row.int("applied_seq") ?? 0
            if row.int("gone") == 1 { gone.append(id); continue }
            if id != me { others.append((id, Frontier.parse(row.string("frontier") ?? "{}"))) }
        }
        held = try SyncState(database: database).heldObjects()
        held[me] = nil
        unread = try CircleSections(database: database).unread()
        // Lost values that can still be restored name records by id (and a lost record image
        // names its object).
        for row in try database.query("SELECT entry FROM coven_lost_values WHERE restored_at IS NULL AND why = 'concurrent'") {
            for entry in try RowEntryCodec.decode(row.bytes("entry") ?? []) {
                if entry.table == "coven_files" {
                    if let json = entry.value("coordinates")?.textValue, let coordinates = try? Coordinates(json: json) { lostObjects.insert(coordinates.object) }
                    continue
                }
                for column in device.manifest.table(entry.table)?.files ?? [] {
                    if let id = entry.value(column.column)?.textValue {
                        lostFiles.insert(id)
                        if let object = try device.fileRecord(id)?.coordinates.object { lostObjects.insert(object) }
                    }
                }
            }
        }
        try readSnapshots()
    }

    /// Lists `snapshots/` once and reads each one's manifest (one ranged GET: its seq and
    /// frontier say what it covers). Retained are the newest two, in the order a join picks
    /// them (coverage, then age); one whose manifest cannot be read for a network failure is
    /// retained too and may name anything; one that fails authentication can be used by no
    /// join and names nothing (it is left alone).
    private mutating func readSnapshots() throws {
        var readable: [(info: SnapshotInfo, rank: (Int64, String))] = []
        var unknown: [SnapshotInfo] = []
        let listing = try provider.list(prefix: "snapshots/")
        var partsOf: [String: [String: ObjectInfo]] = [:]
        for info in listing {
            guard let part = SnapshotParts.parse(info.key) else { continue }
            partsOf[part.snapshot, default: [:]][part.audience] = info
            partKeys.append((info.key, part.snapshot))
        }
        for info in listing {
            guard let (owner, seq) = Snapshot.parse(info.key) else { continue }
            do {
                let manifest = try DeviceSetup.peekManifest(provider: provider, info: info, keys: keys)
                var coverage = manifest.frontier
                coverage[owner] = max(coverage[owner] ?? 0, seq)
                let snapshot = SnapshotInfo(key: info.key, size: info.size, device: owner, seq: seq, coverage: coverage, newestStamp: manifest.createdAt,
                                            parts: manifest.parts, partObjects: partsOf[info.key] ?? [:])
                snapshots.append(snapshot)
                readable.append((snapshot, (manifest.coverage, manifest.createdAt)))
            } catch let error as CovenError where error.code == .integrity || error.code == .decoding {
                continue
            } catch let error as CovenError where error.code == .missing {
                continue  // deleted meanwhile
            } catch let error as CovenError where error.storageFailure != nil {
                let snapshot = SnapshotInfo(key: info.key, size: info.size, device: owner, seq: seq, coverage: nil, newestStamp: "")
                snapshots.append(snapshot)
                unknown.append(snapshot)
            }
        }
        readable.sort { ($0.rank.0, $0.rank.1, $0.info.key) > ($1.rank.0, $1.rank.1, $1.info.key) }
        retained = readable.prefix(2).map(\.info) + unknown
    }

    /// Whether `object`, which no record names, stays, named in the report: held back by the
    /// proof (`hold`, from ``holdBack(object:files:writer:seq:)``), or, the proof letting it go,
    /// by the trash's window, which says when.
    func keeps(_ object: String, hold: (GCReport.KeepReason, [String], String?)?, trash: Trash, into report: inout GCReport) throws -> Bool {
        if let (reason, devices, detail) = hold {
            report.kept.append(.init(key: object, kind: .file, reason: reason, devices: devices, detail: detail))
            return true
        }
        if let until = try trash.holds(object: object) {
            report.kept.append(.init(key: object, kind: .file, reason: .trash, detail: trashDetail.text(until: until)))
            return true
        }
        return false
    }

    /// Why the bytes of `object` must stay, judged for a write of `writer`'s change `seq` (0:
    /// no write of any device is known to have ended a record naming it): nil when nothing
    /// holds them.
    func holdBack(object: String, files: [String], writer: String, seq: Int64) throws -> (GCReport.KeepReason, [String], String?)? {
        if try device.uploadQueue.contains(object) { return (.uploadQueued, [], nil) }
        if lostObjects.contains(object) || files.contains(where: lostFiles.contains) { return (.lostValue, [], nil) }
        let holders = held.filter { $0.value.contains(object) }.map(\.key).sorted()
        if !holders.isEmpty { return (.heldByDevice, holders, nil) }
        // A record of a circle this device is not in may name the same bytes (a move, or
        // coven_existing_file): nothing here can tell.
        if unread.sections > 0 {
            return (.unreadSections, [], "this device applied \(unread.sections.counted("section")) of \(unread.circles.counted("circle")) it cannot read, whose file records may name it")
        }
        // Every other device not gone for good has published a frontier that includes the write.
        var behind = others.filter { $0.id != writer && ($0.frontier[writer] ?? 0) < seq }.map(\.id)
        if writer != me, (applied[writer] ?? 0) < seq { behind.append(me) }
        if !behind.isEmpty {
            return (.deviceBehind, behind.sorted(), "their published frontier does not include change \(seq) of \(writer)")
        }
        // A retained snapshot made before the write may name it: its object list says. (With
        // no write, every retained snapshot is asked.)
        for snapshot in retained where seq == 0 || (snapshot.coverage?[writer] ?? 0) < seq {
            guard snapshot.coverage != nil else { return (.snapshot, [], snapshot.key) }
            do {
                if try snapshotObjects.of(snapshot).contains(object) {
                    return (.snapshot, [], snapshot.key)
                }
            } catch let error as CovenError {
                // Unread, it may name anything.
                return (.snapshot, [], snapshot.key + ": its object list could not be read: " + error.message)
            }
        }
        return nil
    }

    // MARK: Files

    /// Whether a record here names `object` as stored, or as on another device only (that
    /// device may move it back to the cloud, uploading it again under the same name). This
    /// device's own device-only records are no reference: its moves and uploads are in its
    /// queue. Nor is another device's record whose newest image here is a switch to
    /// device-only that made the object a candidate (its bytes are that device's copy now: a
    /// move back uploads them again), nor one of a device gone for good (its bytes went with
    /// it): the switch is judged as a delete, by every device that applied it.
    private func isNamed(_ object: String) throws -> Bool {
        try database.scalar("""
            SELECT count(*) FROM coven_files f WHERE f.object = ?1
              AND (f.place = \(Coordinates.Place.stored.sql) OR (f.place = \(Coordinates.Place.device.sql) AND f.device <> ?2
                AND NOT EXISTS (SELECT 1 FROM coven_device_registry r WHERE r.device = f.device AND r.gone = 1)
                AND NOT EXISTS (SELECT 1 FROM coven_gc_candidates c, json_each(c.files) j
                                WHERE c.object = f.object AND j.value = f.id AND c.stamp >= f._updated_at)))
            """, [object, me]).intValue ?? 0 > 0
    }

    /// Every candidate here, each object judged by every delete of a record that named it:
    /// this device's (once published) and those of other devices applied here, live or gone
    /// for good. Each such delete must be held by nothing (``holdBack``): while any device
    /// has not applied one, it may still name the object through that record, whoever
    /// deleted the others. An object a record names again keeps its bytes, and its settled
    /// deletes are dropped (ending that record makes a new one); one named by nothing whose
    /// every delete is settled goes. Other devices may delete it too: deleting twice is
    /// harmless.
    mutating func collectFiles(into report: inout GCReport) throws {
        let candidates = device.candidates
        let trash = Trash(device)
        let sync = SyncState(database: database)
        let published = applied[me] ?? 0
        let hasUnpublished = try database.scalar("SELECT count(*) FROM coven_push").intValue ?? 0 > 0
        // A page of objects at a time, each page's deletes sent before the next is read.
        var after: String?
        while true {
            let page = try candidates.byObject(after: after, limit: Self.candidatePage)
            guard let last = page.last?.object else { break }
            after = last
            var deletable: [String] = []
            for (object, rows) in page {
                let named = try isNamed(object)
                var hold: (GCReport.KeepReason, [String], String?)?
                for row in rows {
                    var seq = row.seq
                    if seq == nil, row.device == me {
                        if let found = try sync.seq(device: me, holding: row.stamp) {
                            seq = found
                        } else if try database.scalar("SELECT count(*) FROM coven_outbox WHERE hlc <= ?1", [row.stamp]).intValue ?? 0 == 0, !hasUnpublished {
                            // Its write recorded no row (a cancel), or every row of it was published
                            // in a change whose stamps are older: everything published so far covers it.
                            seq = published
                        }
                        if let seq, !dryRun { try candidates.setSeq(object: object, seq: seq) }
                    }
                    guard let seq else {
                        hold = hold ?? (.unpublished, [], nil)
                        continue
                    }
                    if let held = try holdBack(object: object, files: row.files, writer: row.device, seq: seq) {
                        if hold == nil || hold?.0 == .unpublished { hold = held }
                        continue
                    }
                    if named {
                        // Settled while a record names it again: whoever ends that record makes it a
                        // candidate anew.
                        if !dryRun { try candidates.remove(object: object, device: row.device) }
                        report.renamed += 1
                    }
                }
                if named { continue }
                if try keeps(object, hold: hold, trash: trash, into: &report) { continue }
                deletable.append(object)
            }
            try delete(deletable, kind: .file, into: &report) { object in
                try candidates.removeAll(object: object)
                try device.fileRecords.forgetDeleted(object: object)
            }
        }
    }

    // MARK: Changes and snapshots

    /// Change objects every device not gone for good has applied and the newest retained
    /// snapshot covers (none without a snapshot: a new device needs them), but the latest of
    /// each device not gone for good.
    func collectChanges(into report: inout GCReport) throws {
        guard let newest = retained.first(where: { $0.coverage != nil }), let coverage = newest.coverage else { return }
        for (writer, _) in applied.sorted(by: { $0.key < $1.key }) {
            let floor = Int64(try deletedChanges.value(writer) ?? "0") ?? 0
            var upTo = coverage[writer] ?? 0
            if writer != me { upTo = min(upTo, applied[writer] ?? 0) }
            for other in others where other.id != writer { upTo = min(upTo, other.frontier[writer] ?? 0) }
            // The latest change of a live device stays: its publisher checks it is there at
            // every sync (a change storage lost at the tail is noticed by nobody else).
            if !gone.contains(writer) { upTo = min(upTo, (applied[writer] ?? 0) - 1) }
            guard upTo > floor else { continue }
            // A change holding a circle's section stays unless the snapshot has a part of that
            // circle in storage: a member added later, or a device joining from the snapshot,
            // reads the circle's history in the part, or else in the changes.
            let circles = try CircleSections(database: database).circleSections(of: writer, from: floor + 1, through: upTo)
            let parted = Set(newest.parts.keys).intersection(newest.partObjects.keys)
            // Those past a change passed over before may be gone already: storage lists what
            // is left (one listing), so no delete is sent twice.
            let left = circles.isEmpty ? nil : Set(try provider.list(prefix: "changes/\(writer)/").map(\.key))
            let keys = (floor + 1...upTo).filter { circles[$0]?.isSubset(of: parted) ?? true }
                .map { ChangeObject.path(device: writer, seq: UInt64($0)) }.filter { left?.contains($0) ?? true }
            let keptBefore = report.kept.count
            try delete(keys, kind: .change, into: &report) { _ in }
            // The floor moves up to just below the first change not deleted: one kept, or one
            // holding a section of a circle the snapshot has no part of (a later snapshot may).
            let passedOver = (floor + 1...upTo).first { circles[$0]?.isSubset(of: parted) == false }
            let firstKept = (report.kept[keptBefore...].compactMap { Int64($0.key.split(separator: "/").last ?? "") } + [passedOver].compactMap { $0 }).min()
            let newFloor = firstKept.map { $0 - 1 } ?? upTo
            if !dryRun, newFloor > floor {
                // This device's notes go with its changes (Sync/OwnNotes.swift): one listing,
                // usually empty.
                if writer == me {
                    let notes = try provider.list(prefix: "notes/\(me)/").map(\.key).filter { (Int64($0.split(separator: "/").last ?? "") ?? .max) <= newFloor }
                    if !notes.isEmpty { _ = try provider.deleteObjects(notes) }
                }
                try deletedChanges.set(writer, String(newFloor))
            }
        }
    }

    /// Up to which seq each device's changes were deleted from storage (`coven_gc_floors`,
    /// whose one writer this is): the next pass starts above it.
    private var deletedChanges: Journal { Journal(database: device.database, table: "coven_gc_floors") }

    /// Snapshots past the newest two this device can read the coverage of.
    func collectSnapshots(into report: inout GCReport) throws {
        let keep = Set(retained.map(\.key))
        // A circle's part goes with its snapshot (and one whose snapshot is gone: a snapshot's
        // own object is stored before its parts).
        let parts = partKeys.filter { !keep.contains($0.snapshot) }.map(\.key)
        try delete(snapshots.map(\.key).filter { !keep.contains($0) } + parts, kind: .snapshot, into: &report) { _ in }
    }
}

/// The object lists of the snapshots one gc pass reads, each read once.
final class SnapshotObjects {
    let provider: StorageProvider
    let keys: Keyring
    var lists: [String: Result<Set<String>, CovenError>] = [:]

    init(provider: StorageProvider, keys: Keyring) {
        self.provider = provider
        self.keys = keys
    }

    func of(_ snapshot: SnapshotInfo) throws -> Set<String> {
        if let known = lists[snapshot.key] { return try known.get() }
        let result: Result<Set<String>, CovenError>
        do {
            var objects = try DeviceSetup.snapshotObjects(provider: provider, info: ObjectInfo(key: snapshot.key, size: snapshot.size), keys: keys)
            // And its circles' parts: a device joining from it reads those its member is in.
            for (circle, generation) in snapshot.parts.sorted(by: { $0.key < $1.key }) {
                guard let part = snapshot.partObjects[circle] else { continue }  // never stored: names nothing
                guard let key = try keys.key(audience: circle, generation: generation) else {
                    throw CovenError(.keyUnavailable, "its part '\(part.key)' is of a circle this device cannot read", details: ["object": part.key])
                }
                objects.formUnion(try DeviceSetup.snapshotObjects(provider: provider, info: part, keys: keys, opening: key))
            }
            result = .success(objects)
        } catch let error as CovenError {
            result = .failure(error)
        } catch {
            result = .failure(CovenError(.internal, "snapshot '\(snapshot.key)' could not be read", cause: String(describing: error)))
        }
        lists[snapshot.key] = result
        return try result.get()
    }
}

/// The detail of an object the trash's window keeps, made once for each end of the window in a
/// row: the objects of one delete share one string instead of each holding a copy.
final class TrashDetail {
    private var last: (until: String, text: String)?

    func text(until: String) -> String {
        if let last, last.until == until { return last.text }
        let text = "a row deleted within the retention window names it, until \(until)"
        last = (until, text)
        return text
    }
}

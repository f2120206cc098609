import Foundation

/// What one `coven gc` did (or, with `dryRun`, would do).
public struct GCReport: Sendable, Equatable {
    /// What kind of stored object an entry is.
    public enum Kind: String, Sendable {
        case file, change, snapshot
        /// A temporary file an interrupted write left (file://).
        case temporary
    }

    /// Why an object stays.
    public enum KeepReason: String, Sendable {
        /// This device's upload queue still names it.
        case uploadQueued = "upload_queued"
        /// The write that made it a candidate is not published yet.
        case unpublished = "unpublished_write"
        /// A device not gone for good has not published a frontier that includes that write.
        case deviceBehind = "device_behind"
        /// A lost value names it (or the record it was).
        case lostValue = "lost_value"
        /// A retained snapshot may name it.
        case snapshot
        /// Another device's latest change says its unpublished records name it.
        case heldByDevice = "held_by_device"
        /// This device applied sections of circles it cannot read, whose records may name it.
        case unreadSections = "unread_sections"
        /// A row deleted within the store's retention window names it (the trash): it goes
        /// once the window ends, or after `coven trash empty`.
        case trash
        /// The provider refused the delete (403).
        case refused = "storage_refused"
        /// The delete failed (the network, the provider): it is not taken as deleted.
        case failed = "storage_failed"
    }

    /// An object deleted.
    public struct Deleted: Sendable, Equatable {
        public var key: String
        public var kind: Kind
    }

    /// An object kept back, and why; `devices` names the devices holding it back.
    public struct Kept: Sendable, Equatable {
        public var key: String
        public var kind: Kind
        public var reason: KeepReason
        public var devices: [String] = []
        public var detail: String?
    }

    public var dryRun = false
    public var deleted: [Deleted] = []
    /// Objects gc was to delete that storage said were not there (deleted by hand, by another
    /// device's gc, or lost): their candidates are settled as for a delete.
    public var alreadyGone: [Deleted] = []
    public var kept: [Kept] = []
    /// Unfinished uploads aborted: of gone devices (`--gone-devices`), and this device's own
    /// that no queued upload names (a start whose answer was lost).
    public var abortedUploads: [String] = []
    /// Changes applied by the pull that gc starts with.
    public var pulled = 0
    /// Candidates settled while a record names their object again, dropped from the table
    /// (the object stays; ending that record makes it a candidate anew).
    public var renamed = 0

    /// Whether a deletion failed (refused or not confirmed).
    public var hasFailures: Bool { kept.contains { $0.reason == .refused || $0.reason == .failed } }
}

/// A snapshot in storage and what it covers, as far as this device can tell.
struct SnapshotInfo {
    var key: String
    var size: Int64
    var device: String
    var seq: Int64
    /// For each device, the highest seq of it whose writes the snapshot holds; nil when this
    /// device cannot tell (it then may name anything).
    var coverage: [String: Int64]?
    /// The newest stamp it holds (orders snapshots).
    var newestStamp: String
    /// Its circles' parts, as its manifest lists them (circle → generation), and as storage
    /// holds them (circle → object).
    var parts: [String: UInt64] = [:]
    var partObjects: [String: ObjectInfo] = [:]
}

/// `coven gc`: one pass of deleting stored bytes nothing can still point at, under the device
/// lock (the pass itself is ``Collector``'s).
///
/// ```swift
/// let report = try GarbageCollection(device).collectGarbage()
/// ```
public struct GarbageCollection {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }
    /// Deletes the stored objects nothing can still point at (DESIGN.md "Deleting stored
    /// bytes"), under the device lock: syncs first (pulls only, with `dryRun`); then settles the
    /// candidates, deletes change objects every live device has applied that the newest retained
    /// snapshot covers, and snapshots past the newest two. With `goneDevices`, also ends the
    /// unfinished uploads of devices gone for good and deletes what no record names in their
    /// folders (one listing each).
    ///
    /// A quiet pass lists no files: it reads the candidates, the devices' frontiers and one
    /// listing of `snapshots/`.
    ///
    /// - Throws: `.storage` when storage cannot be reached or refuses a listing (deletes that
    ///   fail one by one are reported in the result, never taken as done); the errors of sync.
    ///
    /// - Parameter confirmed: called for each object as soon as its delete is confirmed (and
    ///   recorded here), `gone` true when storage said it was not there: a caller prints it
    ///   then, so a run killed later leaves a record of what went.
    public func collectGarbage(dryRun: Bool = false, goneDevices: Bool = false, wait: Bool = true, stop: Stop = Stop(),
                               confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) throws -> GCReport {
        let lock = try device.lock(wait: wait)
        defer { _ = lock }
        return try collectGarbage(provider: try device.connectStorage(), dryRun: dryRun, goneDevices: goneDevices, stop: stop, confirmed: confirmed)
    }

    /// ``collectGarbage(dryRun:goneDevices:wait:stop:confirmed:)`` through `provider`, under
    /// the caller's lock.
    func collectGarbage(provider: StorageProvider, dryRun: Bool, goneDevices: Bool, stop: Stop,
                        confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) throws -> GCReport {
        // A missing or damaged store key stops gc before anything else.
        _ = try device.keys.storeKey()
        var report = GCReport()
        report.dryRun = dryRun
        // One listing of devices/ serves the whole pass.
        report.pulled = try StoreSync(device).sync(provider: provider, push: !dryRun, pull: true, stop: stop).pulled.changes
        try stop.check("gc")
        var collector = Collector(device: device, provider: provider, keys: device.keys, dryRun: dryRun, confirmed: confirmed)
        // Rows past the window that keep no bytes leave the trash (those whose bytes this pass
        // frees stay until the next, so undelete can say so).
        if !dryRun { try device.database.transaction { try Trash(device).expire() } }
        try collector.prepare()
        try collector.collectFiles(into: &report)
        try collector.collectLeftovers(into: &report, age: Collector.leftoverAge)
        if goneDevices { try collector.collectGoneDevices(into: &report, stop: stop) }
        try collector.collectChanges(into: &report)
        try collector.collectSnapshots(into: &report)
        return report
    }
}

/// One gc pass: what names objects, read once, and the deletes.
struct Collector {
    let device: Device
    let provider: StorageProvider
    let keys: Keyring
    let dryRun: Bool
    /// Told of each delete once confirmed.
    let confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)?
    var database: Database { device.database }
    var me: String { device.deviceID }

    /// Devices not gone for good, but this one: their published frontier and held objects.
    private var others: [(id: String, frontier: [String: Int64])] = []
    private var applied: [String: Int64] = [:]
    private var gone: [String] = []
    private var held: [String: Set<String>] = [:]
    private var lostFiles: Set<String> = []
    private var lostObjects: Set<String> = []
    /// Sections of applied changes this device could not open, and of how many circles.
    private var unread: (sections: Int64, circles: Int64) = (0, 0)
    private var snapshots: [SnapshotInfo] = []
    /// Every circle's part in storage, and the snapshot it is of.
    private var partKeys: [(key: String, snapshot: String)] = []
    /// The newest two snapshots this device can read the coverage of, and those it cannot.
    private var retained: [SnapshotInfo] = []
    /// The object lists of retained snapshots, read when a candidate needs one.
    private let snapshotObjects = SnapshotObjects()

    init(device: Device, provider: StorageProvider, keys: Keyring, dryRun: Bool,
         confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) {
        self.device = device
        self.provider = provider
        self.keys = keys
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

    /// Why the bytes of `object` must stay, judged for a write of `writer`'s change `seq` (0:
    /// no write of any device is known to have ended a record naming it): nil when nothing
    /// holds them.
    private func holdBack(object: String, files: [String], writer: String, seq: Int64) throws -> (GCReport.KeepReason, [String], String?)? {
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
                if try snapshotObjects.of(snapshot, provider: provider, keys: keys).contains(object) {
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
        var trashDetails: [String: String] = [:]
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
                if let (reason, devices, detail) = hold {
                    report.kept.append(.init(key: object, kind: .file, reason: reason, devices: devices, detail: detail))
                    continue
                }
                // The proof says the object may go; the trash's window says when.
                if let until = try trash.holds(object: object) {
                    report.kept.append(.init(key: object, kind: .file, reason: .trash, detail: Self.trashDetail(until, &trashDetails)))
                    continue
                }
                deletable.append(object)
            }
            try delete(deletable, kind: .file, into: &report) { object in
                try candidates.removeAll(object: object)
                try device.fileRecords.forgetDeleted(object: object)
            }
        }
    }

    /// Deletes `keys` (only what may be deleted: files/, changes/, snapshots/), reporting each;
    /// `done` runs for each key the provider confirmed.
    private func delete(_ keys: [String], kind: GCReport.Kind, into report: inout GCReport, done: (String) throws -> Void) throws {
        let keys = keys.filter { $0.hasPrefix("files/") || $0.hasPrefix("changes/") || $0.hasPrefix("snapshots/") }
        guard !keys.isEmpty else { return }
        if dryRun {
            report.deleted += keys.map { .init(key: $0, kind: kind) }
            return
        }
        let (failed, absent) = try deleteInParallel(keys)
        for key in keys {
            if let error = failed[key] {
                let reason: GCReport.KeepReason = error.storageFailure == .denied ? .refused : .failed
                report.kept.append(.init(key: key, kind: kind, reason: reason, detail: error.message + (error.cause.map { ": \($0)" } ?? "")))
                continue
            }
            try database.transaction { try done(key) }
            let deleted = GCReport.Deleted(key: key, kind: kind)
            let gone = absent.contains(key)
            if gone { report.alreadyGone.append(deleted) } else { report.deleted.append(deleted) }
            confirmed?(deleted, gone)
        }
    }

    /// The detail of an object the trash keeps until `until`: one string for all the objects
    /// kept until one time, remembered in `known` (a mass delete's 100,000 objects held 17 MiB
    /// of equal strings in the report when each had its own).
    private static func trashDetail(_ until: String, _ known: inout [String: String]) -> String {
        if let detail = known[until] { return detail }
        let detail = "a row deleted within the retention window names it, until \(until)"
        if known.count < 1024 { known[until] = detail }
        return detail
    }

    /// How many objects' candidates one page of ``collectFiles(into:)`` reads (their deletes go
    /// before the next page is read).
    static let candidatePage = parallelDeletes * deleteBatch

    /// How many batches of deletes go at once, each over its own connection.
    static let parallelDeletes = 4
    /// The keys one batch holds (S3 DeleteObjects takes up to 1,000).
    static let deleteBatch = 1000

    /// Deletes `keys` in batches, up to ``parallelDeletes`` at once; the keys not deleted, with
    /// why. A batch whose request fails as a whole counts every key of it as not deleted.
    private func deleteInParallel(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>) {
        let batches = stride(from: 0, to: keys.count, by: Self.deleteBatch).map { Array(keys[$0..<min(keys.count, $0 + Self.deleteBatch)]) }
        guard batches.count > 1 else { return Self.run(keys, on: provider) }
        let connector = StorageConnector(location: device.storage, environment: device.storageEnvironment)
        let results = DeleteResults(count: batches.count)
        let next = DeleteResults.Counter()
        DispatchQueue.concurrentPerform(iterations: min(Self.parallelDeletes, batches.count)) { _ in
            guard let connection = try? connector.connect() else { return }
            while let index = next.take(below: batches.count) {
                results.set(index, Self.run(batches[index], on: connection))
            }
        }
        var failed: [String: CovenError] = [:]
        var absent: Set<String> = []
        for (index, batch) in batches.enumerated() {
            guard let result = results.get(index) else {
                // No connection could be made for it: nothing of it was sent.
                let error = CovenError.storage("storage could not be reached to delete \(batch.count) objects", failure: .network, cause: "no connection")
                for key in batch { failed[key] = error }
                continue
            }
            failed.merge(result.failed) { first, _ in first }
            absent.formUnion(result.absent)
        }
        return (failed, absent)
    }

    /// One batch's delete; every key of it not deleted when the request fails as a whole.
    private static func run(_ batch: [String], on provider: StorageProvider) -> (failed: [String: CovenError], absent: Set<String>) {
        do {
            return try provider.deleteObjectsNotingAbsent(batch)
        } catch let error as CovenError {
            return (Dictionary(uniqueKeysWithValues: batch.map { ($0, error) }), [])
        } catch {
            let failure = CovenError.storage("storage failed to delete \(batch.count) objects", failure: .provider, cause: String(describing: error))
            return (Dictionary(uniqueKeysWithValues: batch.map { ($0, failure) }), [])
        }
    }

    // MARK: Leftovers of interrupted uploads

    /// How old a leftover must be to go: a day.
    static let leftoverAge: TimeInterval = 86400

    /// The setting holding when leftovers were last looked for.
    static let leftoversSetting = "gc_leftovers_at"

    /// The leftovers of this device's interrupted writes, looked for at most once per `age` (a
    /// dry run looks every time)
    /// (one listing of this device's folders and of its unfinished uploads): temporary files
    /// a kill left in `files/<this device>/` and `changes/<this device>/` (file://), removed
    /// once older than `age` while no upload of this device is being sent; and multipart
    /// sessions under `files/<this device>/` started more than `age` ago for an object no
    /// queued upload names (a start whose answer was lost: nothing else will abort them; a
    /// queued upload's own sessions are the upload worker's to end).
    mutating func collectLeftovers(into report: inout GCReport, age: TimeInterval) throws {
        let now = Date()
        if !dryRun, let last = try device.setting(Self.leftoversSetting).flatMap(Double.init), now.timeIntervalSince1970 - last < age, last <= now.timeIntervalSince1970 {
            return
        }
        let before = now.addingTimeInterval(-age)
        let queue = device.uploadQueue
        // A temporary file of a write running now is fresh; one of an upload being sent now is
        // left to a later pass whatever its age.
        if try !queue.isSending(at: now.timeIntervalSince1970) {
            for prefix in ["files/\(me)/", "changes/\(me)/"] {
                for leftover in try provider.leftoverTemporaries(prefix: prefix) where leftover.modified <= before {
                    if !dryRun {
                        do {
                            try provider.removeLeftoverTemporary(leftover.key)
                        } catch let error as CovenError {
                            let reason: GCReport.KeepReason = error.storageFailure == .denied ? .refused : .failed
                            report.kept.append(.init(key: leftover.key, kind: .temporary, reason: reason, detail: error.message))
                            continue
                        }
                    }
                    report.deleted.append(.init(key: leftover.key, kind: .temporary))
                }
            }
        }
        // Listed before the queue is read: a session listed was started after its upload was
        // queued, so a queue without it means that upload is over.
        let sessions: [UploadInProgress]
        do {
            sessions = try provider.uploadsInProgress(prefix: "files/\(me)/")
        } catch let error as CovenError where error.storageFailure == .denied {
            // Credentials without the right to list unfinished uploads: said, and the rest goes on.
            report.kept.append(.init(key: "files/\(me)/", kind: .file, reason: .refused, detail: "its unfinished uploads cannot be listed: " + error.message))
            if !dryRun { try device.setSetting(Self.leftoversSetting, String(now.timeIntervalSince1970)) }
            return
        }
        for upload in sessions where (upload.initiated ?? now) <= before {
            if try queue.contains(upload.key) { continue }
            if !dryRun { try provider.abortMultipart(upload.key, uploadID: upload.uploadID) }
            report.abortedUploads.append(upload.key)
        }
        if !dryRun { try device.setSetting(Self.leftoversSetting, String(now.timeIntervalSince1970)) }
    }

    // MARK: Gone devices

    /// For each device gone for good: delete its published changes no device applied (one
    /// listing of its changes), abort its unfinished uploads, list its folder once and delete
    /// what nothing names.
    mutating func collectGoneDevices(into report: inout GCReport, stop: Stop) throws {
        // Changes this device cannot read yet (sealed under a key generation it does not hold)
        // may name a gone device's bytes, and the frontiers that would say so: keep them all.
        let waiting = try StoreSync(device).keyUnavailable()
        for goneDevice in gone.sorted() {
            try stop.check("gc")
            if !waiting.isEmpty {
                report.kept.append(.init(key: "files/\(goneDevice)/", kind: .file, reason: .deviceBehind, devices: waiting.keys.sorted(),
                                         detail: "this device cannot read their changes yet: sealed under a key generation it does not hold"))
                continue
            }
            // Its published changes no device applied: every device dropped them with it.
            try delete(try StoreSync(device).droppedChanges(of: goneDevice, provider: provider), kind: .change, into: &report) { _ in }
            let folder = "files/\(goneDevice)/"
            // What other devices applied of it, this device must have applied too (pull no longer
            // reads a gone device's changes): else a record naming its bytes may be missing here.
            let ahead = others.filter { ($0.frontier[goneDevice] ?? 0) > (applied[goneDevice] ?? 0) }.map(\.id)
            if !ahead.isEmpty {
                report.kept.append(.init(key: folder, kind: .file, reason: .deviceBehind, devices: ahead.sorted(),
                                         detail: "they applied changes of gone device \(goneDevice) that this device has not"))
                continue
            }
            for upload in try provider.uploadsInProgress(prefix: folder) {
                if !dryRun { try provider.abortMultipart(upload.key, uploadID: upload.uploadID) }
                report.abortedUploads.append(upload.key)
            }
            var deletable: [String] = []
            let trash = Trash(device)
            var trashDetails: [String: String] = [:]
            for info in try provider.list(prefix: folder) {
                let object = info.key
                if try !device.fileRecords.ids(object: object).isEmpty { continue }
                let rows = try device.candidates.naming(object)
                if rows.contains(where: { $0.device == me }) { continue }  // this device's own: collectFiles judges it
                var hold: (GCReport.KeepReason, [String], String?)?
                let files = rows.flatMap(\.files)
                if rows.isEmpty {
                    hold = try holdBack(object: object, files: [], writer: me, seq: 0)
                }
                for row in rows where hold == nil {
                    hold = try holdBack(object: object, files: files, writer: row.device, seq: row.seq ?? Int64.max)
                }
                if let (reason, devices, detail) = hold {
                    report.kept.append(.init(key: object, kind: .file, reason: reason, devices: devices, detail: detail))
                    continue
                }
                // The proof says the object may go; the trash's window says when.
                if let until = try trash.holds(object: object) {
                    report.kept.append(.init(key: object, kind: .file, reason: .trash, detail: Self.trashDetail(until, &trashDetails)))
                    continue
                }
                deletable.append(object)
            }
            try delete(deletable, kind: .file, into: &report) { object in
                try device.candidates.removeAll(object: object)
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
            let floor = Int64(try device.setting(Self.changesSetting(writer)) ?? "0") ?? 0
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
                try device.setSetting(Self.changesSetting(writer), String(newFloor))
            }
        }
    }

    static func changesSetting(_ device: String) -> String { "gc_changes_deleted:" + device }

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
    private var lists: [String: Result<Set<String>, CovenError>] = [:]

    func of(_ snapshot: SnapshotInfo, provider: StorageProvider, keys: Keyring) throws -> Set<String> {
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

/// The answers of parallel delete batches, behind one lock.
final class DeleteResults: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var results: [(failed: [String: CovenError], absent: Set<String>)?]

    init(count: Int) { results = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ result: (failed: [String: CovenError], absent: Set<String>)) {
        lock.lock()
        defer { lock.unlock() }
        results[index] = result
    }

    func get(_ index: Int) -> (failed: [String: CovenError], absent: Set<String>)? {
        lock.lock()
        defer { lock.unlock() }
        return results[index]
    }

    /// Hands out batch indexes, each once.
    final class Counter: @unchecked Sendable {
        // @unchecked: every access goes through `lock`.
        private let lock = NSLock()
        private var next = 0

        func take(below count: Int) -> Int? {
            lock.lock()
            defer { lock.unlock() }
            guard next < count else { return nil }
            next += 1
            return next - 1
        }
    }
}

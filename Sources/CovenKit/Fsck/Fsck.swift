import CLinux
import Dispatch
import Foundation

// MARK: - What a run is asked and what it finds

/// What `coven fsck` is asked to do.
public struct FsckOptions: Sendable {
    /// Presence and size only, from listings: no object body is read.
    public var fast = false
    /// Mend what can be mended (stored objects from a local source, this device's changes).
    public var repair = false
    /// Seconds the run may take; the objects verified longest ago go first. Nil: no limit.
    public var timeLimit: Double?
    /// The window of the summary's share of bytes verified lately, in days.
    public var recentDays = 30
    /// Objects verified at once (each with its own storage connection).
    public var jobs = 4
    /// The most objects one run verifies (tests of coverage across runs, without a clock).
    var maxObjects: Int?
    /// A repaired object up to this size is stored with one PUT, a larger one by a multipart
    /// upload of ``repairPartSize`` parts (tests make both small).
    var repairSingleLimit: Int64 = 16 << 20
    var repairPartSize = 8 << 20

    public init() {}
}

/// One thing found wrong.
public struct FsckProblem: Sendable, Equatable {
    /// What the problem is in.
    public enum Subject: String, Sendable {
        /// A stored file object a record of this device names.
        case object
        /// A published change.
        case change
        /// A snapshot.
        case snapshot
        /// A cache entry of this device (a fetched file or a partial).
        case cache
        /// coven's own copy of app bytes on this device (device-only, or waiting for upload).
        case copy
        /// A staged copy, not yet in a row.
        case staged
        /// A person's original on this device.
        case original
    }

    /// What is wrong.
    public enum Kind: String, Sendable {
        /// Storage (or the disk) holds nothing where something should be.
        case missing
        /// The object's size is not the size its record gives.
        case size
        /// Bytes fail authentication (a chunk, a signature, a tag).
        case damaged
        /// Every chunk authenticates but the whole is not the file the record names.
        case hash
        /// An original changed since it was staged.
        case changed
        /// One of this device's own changes authenticates but is not what it recorded
        /// publishing (another frontier, or writes newer than the change).
        case differs
    }

    public var subject: Subject
    public var kind: Kind
    /// The storage key, or the local path for an original or copy.
    public var key: String
    /// Why, for people.
    public var message: String
    /// The file ids concerned.
    public var files: [String]
    /// Whether this run mended it (and checked it again).
    public var mended = false
    /// What it was mended from (`original`, `copy`, `cache`, `republished`, `dropped`).
    public var mendedFrom: String?
}

/// A file whose bytes are gone for good (no intact stored object, no local source), with the
/// rows that name it, so a person can act.
public struct FsckLostFile: Sendable, Equatable {
    public var file: String
    public var object: String
    /// `table/id` of each row referencing the file.
    public var rows: [String]
}

/// Progress of a run, reported after each batch.
public struct FsckProgress: Sendable {
    /// `snapshots`, `changes`, `listing`, `objects`, `local`, `repair`.
    public var phase: String
    public var objectsChecked: Int
    public var bytesChecked: Int64
    public var problems: Int
}

/// What a run did and found.
public struct FsckReport: Sendable {
    public var fast: Bool
    public var objectsChecked = 0
    /// Plaintext bytes of the objects verified (full) or sized (fast).
    public var bytesChecked: Int64 = 0
    public var changesChecked = 0
    public var snapshotsChecked = 0
    public var localChecked = 0
    /// Storage listings made (the only requests of `--fast` but for none).
    public var listings = 0
    public var problems: [FsckProblem] = []
    /// Objects in storage that nothing this device knows names (reported only; gc deletes).
    public var unnamed: [String] = []
    public var lost: [FsckLostFile] = []
    /// False when the time limit ended the run before every object was verified.
    public var complete = true
    /// Stored objects not verified by this run because of the time limit.
    public var remaining = 0
    /// When the least recently verified stored object was verified (nil: one never was, or
    /// there is none).
    public var oldestVerified: Date?
    /// Stored objects never verified.
    public var neverVerified = 0
    public var recentDays = 30
    /// The share (0…1) of the stored bytes verified intact in the last ``recentDays`` days.
    public var recentShare = 1.0
    public var storedObjects = 0
    public var storedBytes: Int64 = 0

    /// Whether anything was found wrong.
    public var damageFound: Bool { !problems.isEmpty }
    /// Whether everything found was mended.
    public var allMended: Bool { !problems.isEmpty && problems.allSatisfy(\.mended) }
}

// MARK: - The verifier

/// `coven fsck`: proves the store is whole, a little every night, and mends what can be mended.
///
/// Checks the stored objects this device's file records name (``FsckOptions/fast``: presence and
/// size from listings a page at a time; full: every chunk authenticated through the one
/// ``ObjectReader`` and the whole plaintext's hash equal to the record's, several objects at once,
/// each streamed), the change objects of every device (present with no gap, signed, sealed for
/// their path) and snapshots (readable up to their object lists), and this device's own bytes
/// (cache entries against their tags, copies and staged copies against their hashes, originals
/// against their recorded identity and hash: reported, never touched). Each verification's time
/// is kept in `coven_fsck_verified` (``FsckLedger``), committed batch by batch, so a time limit
/// takes the least recently verified first and a killed run loses nothing.
public final class Fsck {
    let device: Device
    let options: FsckOptions
    let stop: Stop
    let progress: ((FsckProgress) -> Void)?
    var report: FsckReport
    var ledger: FsckLedger { FsckLedger(database: device.database) }
    private let started = Date()
    private var deadline: Date? { options.timeLimit.map { started.addingTimeInterval($0) } }
    /// Objects found missing or misshapen by the listing pass (not read again).
    private var listedBad: Set<String> = []
    /// Objects snapshots name.
    private var snapshotNamed: Set<String> = []
    /// Verifications waiting for their batch's commit.
    var pending: [FsckLedger.Entry] = []
    var dueCache: Double?
    /// This device's own changes found damaged or missing, for the repair.
    var ownDamaged: [Int64] = []
    /// Damage earlier runs found that this run has not checked again (Fsck/FsckKnown.swift).
    var knownDamage: [String: FsckKnownDamage] = [:]

    /// Objects read at once by one batch; their times are committed together.
    static let batchSize = 64
    /// Listing page size.
    static let pageSize = 1000
    /// Objects taken from the database at once, least recently verified first.
    static let queuePage = 4096

    public init(device: Device, options: FsckOptions, stop: Stop = Stop(), progress: ((FsckProgress) -> Void)? = nil) {
        self.device = device
        self.options = options
        self.stop = stop
        self.progress = progress
        report = FsckReport(fast: options.fast)
        report.recentDays = options.recentDays
    }

    /// Runs every check this device can make, then the repairs asked, then the summary.
    ///
    /// - Throws: `.storage` when storage cannot be reached (what was verified stays recorded);
    ///   `.interrupted` when `stop` was asked (likewise: the next run goes on from there).
    public func run(provider given: StorageProvider? = nil) throws -> FsckReport {
        let provider = try given ?? device.connectStorage()
        let keys = device.keys
        _ = try keys.storeKey()
        try ledger.forgetUnnamedObjects()
        try loadKnownDamage()
        if !options.fast {
            try checkSnapshots(provider: provider)
        }
        try checkChanges(provider: provider)
        try checkListings(provider: provider)
        if !options.fast {
            try verifyObjects(given: given)
            try checkLocalBytes()
        }
        reportKnownDamage()
        if options.repair {
            try repairObjects(provider: provider)
            try repairChanges(provider: provider)
        }
        try findLostFiles()
        try summarize()
        // In a stable order: by subject, then kind, then key; lost files by the rows naming them.
        report.problems.sort { ($0.subject.rawValue, $0.kind.rawValue, $0.key) < ($1.subject.rawValue, $1.kind.rawValue, $1.key) }
        report.lost.sort { ($0.rows.first ?? "", $0.file) < ($1.rows.first ?? "", $1.file) }
        return report
    }

    func tell(_ phase: String) {
        progress?(FsckProgress(phase: phase, objectsChecked: report.objectsChecked, bytesChecked: report.bytesChecked, problems: report.problems.count))
    }

    var pastDeadline: Bool { deadline.map { Date() >= $0 } ?? false }

    /// Throws `.interrupted` after committing what is done.
    func checkStop() throws {
        guard let reason = stop.reason else { return }
        try ledger.record(pending)
        pending.removeAll()
        throw CovenError(.interrupted, "fsck stopped: \(reason)", hint: "run 'coven fsck' again: it goes on with what it has not verified yet")
    }

    func add(_ problem: FsckProblem) {
        report.problems.append(problem)
    }

    // MARK: Snapshots

    private func checkSnapshots(provider: StorageProvider) throws {
        let keys = device.keys
        tell("snapshots")
        report.listings += 1
        let listed = try provider.list(prefix: "snapshots/")
        try forgetUnlisted(subject: "snapshot", prefix: "snapshots/", listed: Set(listed.map(\.key)))
        for info in listed {
            try checkStop()
            guard Snapshot.parse(info.key) != nil else { continue }
            checkedAgain(info.key)
            do {
                let objects = try DeviceSetup.snapshotObjects(provider: provider, info: info, keys: keys)
                snapshotNamed.formUnion(objects)
                pending.append(.init(key: info.key, kind: "snapshot", at: Date().timeIntervalSince1970, bytes: info.size, result: "ok"))
            } catch let error as CovenError where [.integrity, .decoding, .missing, .updateRequired].contains(error.code) {
                add(FsckProblem(subject: .snapshot, kind: error.code == .missing ? .missing : .damaged, key: info.key,
                                message: "snapshot '\(info.key)' cannot be read: \(error.message)", files: []))
                pending.append(.init(key: info.key, kind: "snapshot", at: Date().timeIntervalSince1970, bytes: info.size, result: "damaged"))
            }
            report.snapshotsChecked += 1
        }
        try ledger.record(pending)
        pending.removeAll()
    }

    // MARK: Listings

    /// One stored object as this device's records name it.
    struct StoredItem: Sendable {
        var object: String
        var file: String
        var size: Int64
        var hash: String?
        var keyHex: String
    }

    static let itemColumns = """
        f.object AS object, min(f.id) AS file, min(f.size) AS size, min(f.hash) AS hash, min(f.coordinates) AS coordinates
        """

    static func item(_ row: Row) -> StoredItem? {
        guard let object = row.string("object"), let file = row.string("file"), let size = row.int("size"),
              let coordinates = row.string("coordinates").flatMap({ try? Coordinates(json: $0) }) else { return nil }
        return StoredItem(object: object, file: file, size: size, hash: row.string("hash"), keyHex: coordinates.key)
    }

    /// Lists each device's folder of stored objects a page at a time beside this device's
    /// records of them, in key order: an object missing or of another size than its record
    /// gives is a problem; an object nothing names is reported.
    private func checkListings(provider: StorageProvider) throws {
        tell("listing")
        let prefixes = try listingPrefixes()
        // Objects snapshots name that no listing shows (not already missing for a record).
        var snapshotUnseen = snapshotNamed
        defer {
            for key in snapshotUnseen.sorted() where !listedBad.contains(key) && prefixes.contains(where: { key.hasPrefix($0) }) {
                add(FsckProblem(subject: .snapshot, kind: .missing, key: key,
                                message: "a snapshot names the object '\(key)', which storage does not hold (a device joining from it gets a record whose bytes are gone)",
                                files: []))
            }
        }
        for prefix in prefixes.sorted() {
            try checkListing(prefix, provider: provider, snapshotUnseen: &snapshotUnseen)
            try ledger.record(pending)
            pending.removeAll()
        }
    }

    /// The folders of stored objects to list: those this device's records name, and every
    /// registered device's.
    private func listingPrefixes() throws -> Set<String> {
        var prefixes = Set(try device.database.query("""
            SELECT DISTINCT substr(object, 1, 6 + instr(substr(object, 7), '/')) AS prefix FROM coven_files WHERE place = 'stored'
            """).compactMap { $0.string("prefix") }.filter { $0.hasPrefix("files/") && $0.hasSuffix("/") })
        for row in try device.database.query("SELECT device FROM coven_device_registry") {
            if let other = row.string("device") { prefixes.insert("files/\(other)/") }
        }
        return prefixes
    }

    /// One folder of stored objects listed a page at a time beside this device's records of
    /// it, both in key order.
    private func checkListing(_ prefix: String, provider: StorageProvider, snapshotUnseen: inout Set<String>) throws {
        // Every key with the prefix sorts before the prefix with its '/' made '0'.
        let upper = String(prefix.dropLast()) + "0"
        var records: [StoredItem] = []
        var recordAfter = prefix
        var recordsDone = false
        func nextRecord() throws -> StoredItem? {
            if records.isEmpty && !recordsDone {
                records = try device.database.query("""
                    SELECT \(Self.itemColumns) FROM coven_files AS f
                    WHERE f.place = 'stored' AND f.object > ?1 AND f.object < ?2 GROUP BY f.object ORDER BY f.object LIMIT ?3
                    """, [recordAfter, upper, Self.pageSize]).compactMap(Self.item).reversed()
                if records.isEmpty { recordsDone = true }
                if let last = records.first { recordAfter = last.object }
            }
            return records.last
        }
        func listedMissing(_ item: StoredItem) {
            noteListedBad(item, result: .missing)
            add(FsckProblem(subject: .object, kind: .missing, key: item.object,
                            message: "storage holds nothing at '\(item.object)', which file '\(item.file)' names", files: []))
        }
        var after = prefix
        while true {
            try checkStop()
            let page = try provider.list(prefix: prefix, after: after, limit: Self.pageSize)
            report.listings += 1
            for info in page {
                snapshotUnseen.remove(info.key)
                while let record = try nextRecord(), record.object.utf8.lexicographicallyPrecedes(info.key.utf8) {
                    listedMissing(record)
                    records.removeLast()
                }
                if let record = try nextRecord(), record.object == info.key {
                    records.removeLast()
                    let expected = ObjectLayout.encryptedSize(plaintextSize: record.size)
                    if info.size != expected {
                        noteListedBad(record, result: .size)
                        add(FsckProblem(subject: .object, kind: .size, key: record.object,
                                        message: "the stored object '\(record.object)' is \(info.size.counted("byte")), not \(expected) as file '\(record.file)' gives",
                                        files: []))
                    } else {
                        // Present at its size: what an earlier listing found is mended.
                        if let known = knownDamage[record.object], known.result == "missing" || known.result == "size" {
                            checkedAgain(record.object)
                        }
                        if options.fast {
                            report.objectsChecked += 1
                            report.bytesChecked += record.size
                        }
                    }
                } else if !options.fast, try !isNamed(info.key) {
                    report.unnamed.append(info.key)
                }
            }
            guard page.count == Self.pageSize, let last = page.last else { break }
            after = last.key
            tell("listing")
        }
        while let record = try nextRecord() {
            listedMissing(record)
            records.removeLast()
        }
    }

    /// An object the listing found missing or misshapen: not read again; a full run records it
    /// verified now, with that result.
    private func noteListedBad(_ item: StoredItem, result: FsckProblem.Kind) {
        listedBad.insert(item.object)
        checkedAgain(item.object)
        if !options.fast {
            pending.append(.init(key: item.object, kind: "object", at: Date().timeIntervalSince1970, bytes: item.size, result: result.rawValue))
        }
    }

    /// Whether anything this device knows names `object`: a file record (stored or not yet), a
    /// deleted record's image, a gc candidate, an upload, a snapshot.
    private func isNamed(_ object: String) throws -> Bool {
        if snapshotNamed.contains(object) { return true }
        return try device.database.scalar("""
            SELECT EXISTS (SELECT 1 FROM coven_files WHERE object = ?1)
                OR EXISTS (SELECT 1 FROM coven_deleted_files WHERE object = ?1)
                OR EXISTS (SELECT 1 FROM coven_gc_candidates WHERE object = ?1)
                OR EXISTS (SELECT 1 FROM coven_upload_queue WHERE object = ?1)
            """, [object]).intValue == 1
    }

    // MARK: Full verification

    /// Verifies stored objects, those verified longest ago (or never) first, a batch at a time
    /// in parallel, each batch's times committed together, until all are done, the time limit
    /// passes or a stop is asked.
    private func verifyObjects(given: StorageProvider?) throws {
        tell("objects")
        let runStart = started.timeIntervalSince1970
        let pool = FsckPool(connector: StorageConnector(location: device.storage, environment: device.storageEnvironment),
                            jobs: given == nil ? max(1, options.jobs) : 1, given: given.map(FsckProviderBox.init))
        var skipped: Set<String> = listedBad
        var queue: [StoredItem] = []
        while true {
            try checkStop()
            if pastDeadline {
                report.complete = false
                break
            }
            if queue.isEmpty {
                // The least recently verified first, a page at a time (one sort of the records
                // per page, not per batch).
                let rows = try device.database.query("""
                    SELECT \(Self.itemColumns) FROM coven_files AS f
                    LEFT JOIN coven_fsck_verified AS v ON v.key = f.object
                    WHERE f.place = 'stored' AND coalesce(v.verified_at, 0) < ?1
                    GROUP BY f.object ORDER BY coalesce(min(v.verified_at), 0), f.object LIMIT ?2
                    """, [runStart, Self.queuePage + skipped.count])
                queue = rows.compactMap(Self.item).filter { !skipped.contains($0.object) }.reversed()
            }
            let room = options.maxObjects.map { $0 - report.objectsChecked } ?? Self.batchSize
            let items = Array(queue.suffix(min(Self.batchSize, max(0, room))).reversed())
            queue.removeLast(items.count)
            guard !items.isEmpty else { break }
            let outcomes = try pool.verify(items, deadline: deadline, stop: stop)
            let now = Date().timeIntervalSince1970
            for (item, outcome) in zip(items, outcomes) {
                guard let outcome else { continue }  // not reached (time limit, stop)
                report.objectsChecked += 1
                checkedAgain(item.object)
                switch outcome {
                case .intact:
                    report.bytesChecked += item.size
                    pending.append(.init(key: item.object, kind: "object", at: now, bytes: item.size, result: "ok"))
                case .problem(let kind, let message):
                    skipped.insert(item.object)
                    add(FsckProblem(subject: .object, kind: kind, key: item.object, message: message, files: []))
                    pending.append(.init(key: item.object, kind: "object", at: now, bytes: item.size, result: kind.rawValue))
                }
            }
            try ledger.record(pending)
            pending.removeAll()
            tell("objects")
            if outcomes.contains(where: { $0 == nil }) {
                try checkStop()
                report.complete = false
                break
            }
        }
    }

    // MARK: Summary

    private func summarize() throws {
        let recentSince = Date().timeIntervalSince1970 - Double(options.recentDays) * 86400
        guard let row = try device.database.queryOne("""
            SELECT count(*) AS objects, coalesce(sum(size), 0) AS bytes,
                   sum(verified_at IS NULL) AS never, min(verified_at) AS oldest,
                   coalesce(sum(CASE WHEN verified_at >= ?1 AND result = 'ok' THEN size ELSE 0 END), 0) AS recent
            FROM (SELECT f.object, min(f.size) AS size, v.verified_at, v.result FROM coven_files AS f
                  LEFT JOIN coven_fsck_verified AS v ON v.key = f.object WHERE f.place = 'stored' GROUP BY f.object)
            """, [recentSince]) else { return }
        report.storedObjects = Int(row.int("objects") ?? 0)
        report.storedBytes = row.int("bytes") ?? 0
        report.neverVerified = Int(row.int("never") ?? 0)
        if report.neverVerified == 0, case .real(let oldest) = row["oldest"] {
            report.oldestVerified = Date(timeIntervalSince1970: oldest)
        }
        let recent = row.int("recent") ?? 0
        report.recentShare = report.storedBytes > 0 ? Double(recent) / Double(report.storedBytes)
            : (report.storedObjects > 0 && report.neverVerified == 0 ? 1 : (report.storedObjects == 0 ? 1 : 0))
        if !options.fast {
            report.remaining = Int(try device.database.scalar("""
                SELECT count(DISTINCT f.object) FROM coven_files AS f LEFT JOIN coven_fsck_verified AS v ON v.key = f.object
                WHERE f.place = 'stored' AND coalesce(v.verified_at, 0) < ?1
                """, [started.timeIntervalSince1970]).intValue ?? 0)
            if report.remaining > 0 { report.complete = false }
        }
    }
}

// MARK: - Reading objects in parallel

/// What one object's verification found.
enum FsckOutcome: Equatable {
    case intact
    case problem(FsckProblem.Kind, String)
}

/// A provider handed to one worker thread (a test's counting wrapper, one at a time).
final class FsckProviderBox: @unchecked Sendable {
    let provider: StorageProvider
    init(_ provider: StorageProvider) { self.provider = provider }
}

/// Verifies a batch of objects on `jobs` threads, each with its own storage connection kept
/// from batch to batch. Memory: per thread one ``ObjectReader`` (128 KiB) and the provider's
/// read buffer.
final class FsckPool: @unchecked Sendable {
    private let connector: StorageConnector
    private let jobs: Int
    private var providers: [FsckProviderBox?]
    private let lock = NSLock()

    init(connector: StorageConnector, jobs: Int, given: FsckProviderBox?) {
        self.connector = connector
        self.jobs = jobs
        providers = [FsckProviderBox?](repeating: given, count: jobs)
    }

    /// Verifies `items`; an outcome is nil for an item not reached before `deadline` or a stop.
    ///
    /// - Throws: the first storage error that is not about one object (`.storage`), after the
    ///   threads finished.
    func verify(_ items: [Fsck.StoredItem], deadline: Date?, stop: Stop) throws -> [FsckOutcome?] {
        lock.withLock {
            outcomes = [FsckOutcome?](repeating: nil, count: items.count)
            next = 0
            failure = nil
        }
        DispatchQueue.concurrentPerform(iterations: min(jobs, items.count)) { worker in
            while true {
                let index: Int? = lock.withLock {
                    guard failure == nil, next < items.count, !stop.isRequested, deadline.map({ Date() < $0 }) ?? true else { return nil }
                    defer { next += 1 }
                    return next
                }
                guard let index else { return }
                do {
                    let box = try lock.withLock { try providers[worker] ?? FsckProviderBox(connector.connect()) }
                    lock.withLock { providers[worker] = box }
                    let outcome = try Self.verify(items[index], provider: box.provider)
                    lock.withLock { outcomes[index] = outcome }
                } catch {
                    lock.withLock { if failure == nil { failure = error } }
                    return
                }
            }
        }
        return try lock.withLock {
            if let failure { throw failure }
            return outcomes
        }
    }

    private var outcomes: [FsckOutcome?] = []
    private var next = 0
    private var failure: Error?

    /// Reads one stored object whole through an ``ObjectReader`` (every chunk authenticated,
    /// the size the record gives) and hashes its plaintext against the record's hash.
    ///
    /// - Throws: `.storage` (storage unreachable or failing), `.internal`.
    static func verify(_ item: Fsck.StoredItem, provider: StorageProvider) throws -> FsckOutcome {
        let reader = try ObjectReader(key: FileKey(hex: item.keyHex), plaintextSize: item.size)
        let hasher = try SHA256()
        do {
            try provider.get(item.object, range: nil) { bytes in
                try reader.feed(bytes) { hasher.update($0) }
            }
            try reader.finish { hasher.update($0) }
        } catch let error as CovenError where error.code == .missing {
            return .problem(.missing, "storage holds nothing at '\(item.object)', which file '\(item.file)' names")
        } catch let error as CovenError where [.integrity, .decoding, .updateRequired].contains(error.code) {
            return .problem(.damaged, "the stored object '\(item.object)' of file '\(item.file)' fails its check: \(error.message)")
        }
        if let expected = item.hash {
            let digest = hasher.finish().hex
            guard digest == expected else {
                return .problem(.hash, "the stored object '\(item.object)' authenticates but is not file '\(item.file)': sha256 \(digest), recorded \(expected)")
            }
        }
        return .intact
    }
}

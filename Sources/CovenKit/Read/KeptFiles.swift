import CLinux
import Foundation

// MARK: - Pins

/// Kept files: pins, and fetching every kept file (pinned, or of a namespace the manifest
/// keeps) into the cache, with the failures remembered so that a retry waits its turn.
///
/// ```swift
/// try KeptFiles(device).pin([id])
/// let result = try KeptFiles(device).fetchKept()
/// ```
public struct KeptFiles {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }

    /// Keeps stored files offline: pinned files stay outside the budget and no trim takes them.
    ///
    /// - Parameter ids: file ids.
    /// - Returns: the ids newly pinned (already pinned ones are left as they are).
    /// - Throws: `.fileAbsent` for an id with no record (nothing is pinned then);
    ///   `.deviceOnly` for a file on another device only.
    @discardableResult
    public func pin(_ ids: [String]) throws -> [String] {
        for id in ids {
            let record = try device.requireFile(id)
            if record.coordinates.at == .device, record.coordinates.device != device.deviceID { throw Reader(device).deviceOnlyError(record) }
        }
        var added: [String] = []
        try device.database.transaction {
            for id in ids {
                if try device.fileRecords.pin(id) { added.append(id) }
            }
        }
        return added
    }

    /// Stops keeping files offline; their cached bytes count toward the budget again.
    ///
    /// - Returns: the ids that were pinned.
    /// - Throws: `.fileAbsent` for an id with no record and no pin.
    @discardableResult
    public func unpin(_ ids: [String]) throws -> [String] {
        var removed: [String] = []
        try device.database.transaction {
            for id in ids {
                if try device.fileRecords.unpin(id) { removed.append(id) } else { _ = try device.requireFile(id) }
            }
        }
        return removed
    }
}

// MARK: - fetch-kept

/// How `coven fetch-kept` ended.
public enum FetchKeptStop: String, Sendable {
    /// Every kept file is held (some may have failed otherwise: see the failures).
    case done
    /// The disk had no room for the next file.
    case noRoom = "no_room"
    /// Storage could not be reached.
    case offline
    /// The server asked for a wait longer than a minute.
    case throttled
    /// Interrupted (SIGINT).
    case interrupted
}

/// One kept file fetch-kept worked on.
public struct FetchKeptItem: Sendable {
    /// The file id.
    public var file: String
    /// Its size.
    public var size: Int64
    /// Sealed bytes fetched for it.
    public var bytesFetched: Int64
    /// The error that stopped it, if any.
    public var error: CovenError?
}

/// What `coven fetch-kept` did.
public struct FetchKeptResult: Sendable {
    /// Why it ended.
    public var stop: FetchKeptStop = .done
    /// The error that stopped it, for every stop but `.done`.
    public var stopError: CovenError?
    /// Files fetched whole, in order (empty when each was handed to the caller as it came).
    public var fetched: [FetchKeptItem] = []
    /// Files passed over because they failed otherwise (empty when each was handed to the
    /// caller as it came).
    public var failed: [FetchKeptItem] = []
    /// How many files were fetched whole, and their size.
    public var fetchedCount = 0
    public var fetchedBytes: Int64 = 0
    /// How many files failed otherwise.
    public var failedCount = 0
    /// Kept files that were already held.
    public var alreadyHeld: Int = 0
    /// Kept files not tried because it stopped first.
    public var remaining: Int = 0
    /// The waits the server asked for and that were waited out, in seconds.
    public var waited: [Double] = []
}

extension KeptFiles {
    /// The longest wait a server may ask for that fetch-kept waits out.
    public static let longestWaitedRetry: Double = 60

    /// The ids of the kept stored files not held whole, smallest first (ids, not records: a
    /// library of 100,000 files to fetch is a few MiB).
    func keptFilesToFetch() throws -> (toFetch: [String], held: Int) {
        // Each with its place and its cache entry's state, in the same pass: no query and no
        // JSON decoding per file but for those to fetch (a library of 100,000 kept files all held
        // is looked over in well under a second).
        // Read a row at a time: 100,000 rows held at once were most of the command's memory.
        let rows = try device.database.prepare("""
            SELECT f.id, f.place AS at, f.device AS device, f.object AS object, c.complete AS cache_state
            FROM coven_files f
            LEFT JOIN coven_cache c ON c.object = f.object
            WHERE \(Cache.keptFile)
            ORDER BY f.size, f.object, f.id
            """)
        try rows.bind([try Cache(device).keptNamespaces()])
        // Records of the same bytes come together (by size, then object): no set of every
        // object seen (100,000 of them were a third of the command's memory).
        var previous: String?
        var toFetch: [String] = []
        var held = 0
        while let row = try rows.next() {
            if row.string("at") == Coordinates.Place.device.rawValue {
                if row.string("device") == device.deviceID { held += 1 }
                continue
            }
            let object = row.string("object") ?? ""
            guard object != previous else { held += 1; continue }
            previous = object
            let state = row.int("cache_state").flatMap(CacheState.init(rawValue:))
            // Held: complete, and its data file checked and not written since (a file damaged
            // since is read through again by the fetch, every chunk checked).
            let data = Cache(device).cachePaths(object: object).data
            if state == .complete || state == .completeVerified, access(data, R_OK) == 0, CheckedBytes(device).isStillChecked("cache:" + object, path: data) {
                held += 1
                continue
            }
            toFetch.append(row.string("id") ?? "")
        }
        return (toFetch, held)
    }

    /// Fetches every kept file not held, smallest first (spec/keep-files-on-a-device.md
    /// "Keep attachments offline"), `parallel` at once, each on its own connection.
    ///
    /// Waits out a server asking for a wait of a minute or less; stops at the first file the
    /// disk has no room for, once storage cannot be reached, or once the server asks for a
    /// longer wait (the fetches in flight end first); passes over a file that fails otherwise.
    /// `stop` stops it between runs of chunks; files already fetched stay, and the bytes of the
    /// ones in flight stay as partials. Each failure is recorded for `coven status`.
    ///
    /// Paid per batch, not per file (``runFetches(_:parallel:)``).
    ///
    /// - Parameters:
    ///   - stop: polled often; a stop asked ends the fetch.
    ///   - parallel: files fetched at once (at least 1).
    ///   - sleep: waits out a server's Retry-After (replaceable in tests).
    ///   - each: given, takes each file fetched or failed, in order, once it is recorded (the
    ///     result's lists stay empty: a library of 100,000 files is not held in memory);
    ///     otherwise the result lists them.
    /// - Returns: what was fetched (smallest first), what failed and why it stopped.
    /// - Throws: an error of `each`, or of the device's database.
    public func fetchKept(
        stop: Stop = Stop(), parallel: Int = KeptFiles.keptFetchesAtOnce, sleep: @escaping (Double) -> Void = { Thread.sleep(forTimeInterval: $0) },
        each: ((FetchKeptItem) throws -> Void)? = nil
    ) throws -> FetchKeptResult {
        let (toFetch, held) = try keptFilesToFetch()
        // Failures recorded before: cleared as their files are fetched (no commit per file
        // otherwise).
        let failedBefore = try fetchFailures.keys()
        var list = toFetch.makeIterator()
        var result = FetchKeptResult()
        result.alreadyHeld = held
        let run = FetchRun(mode: .keep(failedBefore: failedBefore), command: "fetch-kept", stop: stop, sleep: sleep, next: { list.next() }) { id, outcome in
            let item: FetchKeptItem
            switch outcome.result {
            case .success(let held):
                item = FetchKeptItem(file: id, size: outcome.size, bytesFetched: held.report.bytesFetched)
                result.fetchedCount += 1
                result.fetchedBytes += outcome.size
            case .failure(let error):
                item = FetchKeptItem(file: id, size: outcome.size, bytesFetched: 0, error: error)
                result.failedCount += 1
            }
            if let each {
                try each(item)
            } else if item.error == nil {
                result.fetched.append(item)
            } else {
                result.failed.append(item)
            }
        }
        if !toFetch.isEmpty { try runFetches(run, parallel: parallel) }
        let (stopped, waited) = try run.ending()
        result.waited = waited
        if let (stop, error) = stopped {
            result.stop = stop
            result.stopError = error
            result.remaining = toFetch.count - result.fetchedCount - result.failedCount
        }
        return result
    }

    /// Fetches one kept file into the cache and clears its recorded failure (a file whose cache
    /// entry holds chunks already: resumed and checked through the usual read).
    ///
    /// - Returns: the held copy and what its read did, and the file's size.
    func fetchKeptFile(_ id: String, stop: Stop, failedBefore: Set<String>) throws -> (held: (path: String, report: ReadReport), size: Int64) {
        let record = try device.requireFile(id)
        let held = try Reader(device).holdFile(record.id, stop: stop)
        if failedBefore.contains(record.coordinates.object) { try setFetchFailure(record.coordinates.object, nil) }
        return (held, record.size)
    }

    /// Fetches one kept file whose cache row the caller begun (empty), writing its chunks but
    /// recording nothing: `deferred` says what it holds (also after a failure, for a partial).
    /// `session` is the worker's, kept from file to file (its connection and buffer).
    func fetchKeptFileDeferred(_ record: FileRecord, stop: Stop, deferred: DeferredCacheRecord, session: ReadSession) throws -> ReadReport {
        try Reader(device).checkRoom(for: record, held: 0)
        let read = try StoredRead(device: device, record: record, durable: true, stop: stop, deferred: deferred)
        read.session = session
        defer { read.close() }
        return try read.read(0..<record.size) { _ in }
    }

    /// Why each kept object could not be fetched, by object (`coven_fetch_failures`, whose one
    /// writer this is), for `coven status`.
    private var fetchFailures: Journal { Journal(database: device.database, table: "coven_fetch_failures") }

    /// Records (or clears) why a kept object could not be fetched, in a transaction of its own.
    func setFetchFailure(_ object: String, _ reason: String?) throws {
        try device.database.transaction { try noteFetchFailure(object, reason) }
    }

    /// Records (or, nil, clears) why a kept object could not be fetched, inside the caller's
    /// transaction.
    func noteFetchFailure(_ object: String, _ reason: String?) throws {
        try fetchFailures.set(object, reason)
    }

    /// Makes the cache files written since the last sync durable: one sync of the cache's
    /// filesystem, or where the system has no such sync, a sync of each file.
    ///
    /// - Throws: `.io` when the sync reports a failed write (a sync of each file opened now
    ///   would not see it: the bytes are gone, and the entries are not recorded).
    func syncCacheFiles(_ objects: [String]) throws {
        let folder = Foundation.open(device.paths.cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw CovenError.posix("open cache folder", path: device.paths.cache) }
        defer { Foundation.close(folder) }
        if coven_syncfs(folder) == 0 { return }
        guard errno == ENOSYS else { throw CovenError.posix("sync cache folder", path: device.paths.cache) }
        for object in objects {
            let files = Cache(device).cachePaths(object: object)
            for path in [files.data, files.tags] {
                let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw CovenError.posix("open cache file", path: path) }
                defer { Foundation.close(fd) }
                guard fdatasync(fd) == 0 else { throw CovenError.posix("sync cache file", path: path) }
            }
        }
        try AtomicFile.syncFolder(device.paths.cache)
    }
}

import Foundation

// MARK: - Pins

extension Device {
    /// Keeps stored files offline: pinned files stay outside the budget and no trim takes them.
    ///
    /// - Parameter ids: file ids.
    /// - Returns: the ids newly pinned (already pinned ones are left as they are).
    /// - Throws: `.fileAbsent` for an id with no record (nothing is pinned then);
    ///   `.deviceOnly` for a file on another device only.
    @discardableResult
    public func pin(_ ids: [String]) throws -> [String] {
        for id in ids {
            let record = try requireFile(id)
            if record.coordinates.at == .device, record.coordinates.device != deviceID { throw deviceOnlyError(record) }
        }
        var added: [String] = []
        try database.transaction {
            for id in ids {
                if try fileRecords.pin(id) { added.append(id) }
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
        try database.transaction {
            for id in ids {
                if try fileRecords.unpin(id) { removed.append(id) } else { _ = try requireFile(id) }
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
    /// Files fetched whole, in order.
    public var fetched: [FetchKeptItem] = []
    /// Files passed over because they failed otherwise.
    public var failed: [FetchKeptItem] = []
    /// Kept files that were already held.
    public var alreadyHeld: Int = 0
    /// Kept files not tried because it stopped first.
    public var remaining: Int = 0
    /// The waits the server asked for and that were waited out, in seconds.
    public var waited: [Double] = []
}

extension Device {
    /// The longest wait a server may ask for that fetch-kept waits out.
    public static let longestWaitedRetry: Double = 60

    /// The ids of the kept stored files not held whole, smallest first (ids, not records: a
    /// library of 100,000 files to fetch is a few MiB).
    func keptFilesToFetch() throws -> (toFetch: [String], held: Int) {
        // Each with its place and its cache entry's state, in the same pass: no query and no
        // JSON decoding per file but for those to fetch (a library of 100,000 kept files all held
        // is looked over in well under a second).
        // Read a row at a time: 100,000 rows held at once were most of the command's memory.
        let rows = try database.prepare("""
            SELECT f.id, f.place AS at, f.device AS device, f.object AS object, c.complete AS cache_state
            FROM coven_files f
            LEFT JOIN coven_cache c ON c.object = f.object
            WHERE \(Self.keptFile)
            ORDER BY f.size, f.id
            """)
        try rows.bind([try keptNamespaces()])
        var seen: Set<String> = []
        var toFetch: [String] = []
        var held = 0
        while let row = try rows.next() {
            if row.string("at") == Coordinates.Place.device.rawValue {
                if row.string("device") == deviceID { held += 1 }
                continue
            }
            let object = row.string("object") ?? ""
            guard seen.insert(object).inserted else { held += 1; continue }
            let state = row.int("cache_state").flatMap(CacheState.init(rawValue:))
            // Held: complete, and its data file checked and not written since (a file damaged
            // since is read through again by the fetch, every chunk checked).
            let data = cachePaths(object: object).data
            if state == .complete || state == .completeVerified, access(data, R_OK) == 0, isStillChecked("cache:" + object, path: data) {
                held += 1
                continue
            }
            toFetch.append(row.string("id") ?? "")
        }
        return (toFetch, held)
    }

    /// Files fetch-kept fetches at once, each on its own connection: the fetches, their syncs
    /// and their commits overlap (eight: a small file's cost is its syncs, which the disk's
    /// journal groups).
    public static let keptFetchesAtOnce = 8

    /// Fetches every kept file not held, smallest first (spec/keep-files-on-a-device.md
    /// "Keep attachments offline"), `parallel` at once, each on its own connection.
    ///
    /// Waits out a server asking for a wait of a minute or less; stops at the first file the
    /// disk has no room for, once storage cannot be reached, or once the server asks for a
    /// longer wait (the fetches in flight end first); passes over a file that fails otherwise.
    /// `stop` stops it between runs of chunks; files already fetched stay, and the bytes of the
    /// ones in flight stay as partials. Each failure is recorded for `coven status`.
    ///
    /// - Parameters:
    ///   - stop: polled often; a stop asked ends the fetch.
    ///   - parallel: files fetched at once (at least 1).
    ///   - sleep: waits out a server's Retry-After (replaceable in tests).
    /// - Returns: what was fetched (smallest first), what failed and why it stopped.
    public func fetchKept(
        stop: Stop = Stop(), parallel: Int = Device.keptFetchesAtOnce, sleep: @escaping (Double) -> Void = { Thread.sleep(forTimeInterval: $0) }
    ) throws -> FetchKeptResult {
        let (toFetch, held) = try keptFilesToFetch()
        // Failures recorded before: cleared as their files are fetched (no commit per file
        // otherwise).
        let failedBefore = Set(try database.query("SELECT key FROM coven_meta WHERE key LIKE 'fetch_failed:%'").compactMap { $0.string("key") })
        let run = KeptFetchRun(toFetch: toFetch, failedBefore: failedBefore, stop: stop, sleep: sleep)
        let workers = max(1, min(parallel, toFetch.count))
        if workers == 1 {
            try run.work(device: self)
        } else {
            let paths = self.paths
            let environment = storageEnvironment
            // A thread each: concurrentPerform runs no more at once than the pool has threads
            // (two on a machine of two cores, one when another is busy), and a fetch waits on
            // the network, not the CPU.
            let finished = DispatchGroup()
            for _ in 0..<workers {
                finished.enter()
                Thread.detachNewThread {
                    defer { finished.leave() }
                    do {
                        let device = try Device.open(paths: paths)
                        device.storageEnvironment = environment
                        // The worker's own connection commits without syncing the log: a kill
                        // loses nothing (the log is written), and a power cut only the last
                        // records (their files fetched again); an entry is recorded complete
                        // only after its files were synced, as before.
                        try device.database.execute("PRAGMA synchronous = NORMAL")
                        try run.work(device: device)
                    } catch {
                        run.fail(error)
                    }
                }
            }
            finished.wait()
        }
        return try run.result(alreadyHeld: held)
    }

    /// Fetches one kept file into the cache and clears its recorded failure.
    func fetchKeptFile(_ id: String, stop: Stop, failedBefore: Set<String>) throws -> FetchKeptItem {
        let record = try requireFile(id)
        let (_, report) = try holdFile(record.id, stop: stop)
        if failedBefore.contains("fetch_failed:" + record.coordinates.object) { try setFetchFailure(record.coordinates.object, nil) }
        return FetchKeptItem(file: record.id, size: record.size, bytesFetched: report.bytesFetched)
    }

    /// Records (or clears) why a kept object could not be fetched, for `coven status`.
    func setFetchFailure(_ object: String, _ reason: String?) throws {
        try database.transaction { try setSetting("fetch_failed:" + object, reason) }
    }
}

/// One fetch-kept run shared by its workers. @unchecked: every field is used under `lock`.
private final class KeptFetchRun: @unchecked Sendable {
    private let lock = NSLock()
    private let sleepLock = NSLock()
    private let toFetch: [String]
    let failedBefore: Set<String>
    let stop: Stop
    private let sleep: (Double) -> Void
    private var next = 0
    private var fetched: [(index: Int, item: FetchKeptItem)] = []
    private var failed: [(index: Int, item: FetchKeptItem)] = []
    private var waited: [Double] = []
    private var stopped: (FetchKeptStop, CovenError)?
    private var error: Error?

    init(toFetch: [String], failedBefore: Set<String>, stop: Stop, sleep: @escaping (Double) -> Void) {
        self.toFetch = toFetch
        self.failedBefore = failedBefore
        self.stop = stop
        self.sleep = sleep
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// The next file to fetch, unless the run stopped.
    private func take() -> (Int, String)? {
        locked {
            guard stopped == nil, error == nil, next < toFetch.count else { return nil }
            defer { next += 1 }
            return (next, toFetch[next])
        }
    }

    private func end(_ stop: FetchKeptStop, _ error: CovenError) { locked { if stopped == nil { stopped = (stop, error) } } }
    func fail(_ error: Error) { locked { if self.error == nil { self.error = error } } }

    /// One worker: fetches files in turn on `device` until none is left or the run stops.
    func work(device: Device) throws {
        while let (index, id) = take() {
            if let reason = stop.reason {
                end(.interrupted, CovenError(.interrupted, "fetch-kept stopped: \(reason)"))
                return
            }
            var throttledTries = 0
            while true {
                do {
                    let item = try device.fetchKeptFile(id, stop: stop, failedBefore: failedBefore)
                    locked { fetched.append((index, item)) }
                } catch {
                    let error = error.asCovenError
                    let object = (try? device.requireFile(id))?.coordinates.object ?? ""
                    switch (error.code, error.storageFailure) {
                    case (.interrupted, _):
                        end(.interrupted, error)
                    case (.noRoom, _):
                        try device.setFetchFailure(object, "too_large_for_disk")
                        end(.noRoom, error)
                    case (.storage, .network?):
                        end(.offline, error)
                    case (.storage, .throttled?):
                        let wait = error.retryAfter ?? 1
                        throttledTries += 1
                        if wait <= Device.longestWaitedRetry && throttledTries <= 5 {
                            locked { waited.append(wait) }
                            // One wait at a time (the waits a test records).
                            sleepLock.lock()
                            sleep(wait)
                            sleepLock.unlock()
                            continue
                        }
                        end(.throttled, error)
                    default:
                        try device.setFetchFailure(object, error.code == .missing ? "missing" : "failed")
                        let size = (try? device.requireFile(id))?.size ?? 0
                        locked { failed.append((index, FetchKeptItem(file: id, size: size, bytesFetched: 0, error: error))) }
                    }
                }
                break
            }
        }
    }

    /// The run's result, its lists in the order of the files (smallest first).
    func result(alreadyHeld: Int) throws -> FetchKeptResult {
        try locked { () throws -> FetchKeptResult in
            if let error { throw error }
            var result = FetchKeptResult()
            result.alreadyHeld = alreadyHeld
            result.fetched = fetched.sorted { $0.index < $1.index }.map(\.item)
            result.failed = failed.sorted { $0.index < $1.index }.map(\.item)
            result.waited = waited
            if let (stop, error) = stopped {
                result.stop = stop
                result.stopError = error
                result.remaining = toFetch.count - fetched.count - failed.count
            }
            return result
        }
    }
}

import CLinux
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

    /// Files fetch-kept fetches at once, each on its own connection: the fetches overlap (eight:
    /// a small file's cost is its requests and its writes).
    public static let keptFetchesAtOnce = 8

    /// Files fetch-kept prepares at a time: their records read and their cache rows begun in
    /// one transaction before any worker makes their files.
    static let keptPreparedAtOnce = 64
    /// The most fetched files recorded in one commit, and the longest a fetched file waits for
    /// its commit (seconds): a file fetched is recorded soon, even while another one hangs.
    static let keptRecordedAtOnce = 256
    static let keptRecordWait = 0.02

    /// Fetches every kept file not held, smallest first (spec/keep-files-on-a-device.md
    /// "Keep attachments offline"), `parallel` at once, each on its own connection.
    ///
    /// Waits out a server asking for a wait of a minute or less; stops at the first file the
    /// disk has no room for, once storage cannot be reached, or once the server asks for a
    /// longer wait (the fetches in flight end first); passes over a file that fails otherwise.
    /// `stop` stops it between runs of chunks; files already fetched stay, and the bytes of the
    /// ones in flight stay as partials. Each failure is recorded for `coven status`.
    ///
    /// Paid per batch, not per file: this thread begins the cache rows of a window of files in
    /// one transaction before the workers make their files (a row comes before its files), the
    /// workers fetch and write without touching the database, and this thread records the
    /// files fetched meanwhile in one transaction, after one sync of the cache's filesystem
    /// made their bytes durable: an entry is recorded complete only after its bytes are on the
    /// disk, and a kill at any point leaves at most entries recorded with fewer chunks than
    /// their files hold (fetched again).
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
        guard !toFetch.isEmpty else { return try run.result(alreadyHeld: held) }
        let workers = max(1, min(parallel, toFetch.count))
        let paths = self.paths
        let environment = storageEnvironment
        // The workers' rare writes (a failure, a resumed partial) and this thread's commits
        // queue here rather than in SQLite's busy handler.
        let writeGate = NSLock()
        let ownGate = database.writeGate
        database.writeGate = writeGate
        defer { database.writeGate = ownGate }
        // A thread each: concurrentPerform runs no more at once than the pool has threads
        // (two on a machine of two cores, one when another is busy), and a fetch waits on the
        // network, not the CPU.
        for _ in 0..<workers {
            run.workerStarted()
            Thread.detachNewThread {
                defer { run.workerEnded() }
                do {
                    let device = try Device.open(paths: paths)
                    device.storageEnvironment = environment
                    device.database.writeGate = writeGate
                    try run.work(device: device)
                } catch {
                    run.fail(error)
                }
            }
        }
        try run.coordinate(device: self)
        return try run.result(alreadyHeld: held)
    }

    /// Fetches one kept file into the cache and clears its recorded failure (a file whose cache
    /// entry holds chunks already: resumed and checked through the usual read).
    func fetchKeptFile(_ id: String, stop: Stop, failedBefore: Set<String>) throws -> FetchKeptItem {
        let record = try requireFile(id)
        let (_, report) = try holdFile(record.id, stop: stop)
        if failedBefore.contains("fetch_failed:" + record.coordinates.object) { try setFetchFailure(record.coordinates.object, nil) }
        return FetchKeptItem(file: record.id, size: record.size, bytesFetched: report.bytesFetched)
    }

    /// Fetches one kept file whose cache row the caller begun (empty), writing its chunks but
    /// recording nothing: `deferred` says what it holds (also after a failure, for a partial).
    func fetchKeptFileDeferred(_ record: FileRecord, stop: Stop, deferred: DeferredCacheRecord) throws -> ReadReport {
        try checkRoom(for: record)
        let read = try StoredRead(device: self, record: record, durable: true, stop: stop, deferred: deferred)
        defer { read.close() }
        return try read.read(0..<record.size) { _ in }
    }

    /// Records (or clears) why a kept object could not be fetched, for `coven status`.
    func setFetchFailure(_ object: String, _ reason: String?) throws {
        try database.transaction { try setSetting("fetch_failed:" + object, reason) }
    }

    /// Makes the cache files written since the last sync durable: one sync of the cache's
    /// filesystem, or where the system has no such sync, a sync of each file.
    ///
    /// - Throws: `.io` when the sync reports a failed write (a sync of each file opened now
    ///   would not see it: the bytes are gone, and the entries are not recorded).
    func syncCacheFiles(_ objects: [String]) throws {
        let folder = Foundation.open(paths.cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw CovenError.posix("open cache folder", path: paths.cache) }
        defer { Foundation.close(folder) }
        if coven_syncfs(folder) == 0 { return }
        guard errno == ENOSYS else { throw CovenError.posix("sync cache folder", path: paths.cache) }
        for object in objects {
            let files = cachePaths(object: object)
            for path in [files.data, files.tags] {
                let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw CovenError.posix("open cache file", path: path) }
                defer { Foundation.close(fd) }
                guard fdatasync(fd) == 0 else { throw CovenError.posix("sync cache file", path: path) }
            }
        }
        try AtomicFile.syncFolder(paths.cache)
    }
}

/// One kept file handed to a worker: a fresh one with its record and the place its deferred
/// read leaves what it held, or (nil) one whose entry holds chunks already, fetched the usual
/// way.
private struct KeptTask {
    var index: Int
    var id: String
    var record: FileRecord?
    var deferred: DeferredCacheRecord?
}

/// A fetched (or partly fetched) fresh file waiting for its commit.
private struct KeptFetched {
    var object: String
    var size: Int64
    var deferred: DeferredCacheRecord
    /// The data file as it was once written (its proof of being checked, when whole).
    var stamp: FileStamp?
    var clearsFailure: Bool
}

/// One fetch-kept run shared by its workers and its coordinator. @unchecked: every field is
/// used under `condition`.
private final class KeptFetchRun: @unchecked Sendable {
    private let condition = NSCondition()
    private let sleepLock = NSLock()
    private let toFetch: [String]
    let failedBefore: Set<String>
    let stop: Stop
    private let sleep: (Double) -> Void
    /// The next id the coordinator prepares.
    private var nextPrepared = 0
    /// Files prepared and not yet taken by a worker.
    private var ready: [KeptTask] = []
    private var readyAt = 0
    /// Files fetched and not yet recorded, and when the oldest of them was fetched.
    private var toRecord: [KeptFetched] = []
    private var oldestToRecord: Date?
    private var workersRunning = 0
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
        condition.lock()
        defer { condition.unlock() }
        return try body()
    }

    private var ended: Bool { stopped != nil || error != nil }

    func workerStarted() { locked { workersRunning += 1 } }
    func workerEnded() {
        locked { workersRunning -= 1 }
        condition.broadcast()
    }

    /// The next file to fetch, waiting for the coordinator to prepare it; nil once none is
    /// left or the run stopped.
    private func take() -> KeptTask? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if ended { return nil }
            if readyAt < ready.count {
                defer { readyAt += 1 }
                if readyAt + 1 == ready.count {
                    // Every prepared file taken: let the coordinator prepare the next window.
                    condition.broadcast()
                }
                return ready[readyAt]
            }
            if nextPrepared >= toFetch.count { return nil }
            condition.wait()
        }
    }

    private func end(_ stop: FetchKeptStop, _ error: CovenError) {
        locked { if stopped == nil { stopped = (stop, error) } }
        condition.broadcast()
    }

    func fail(_ error: Error) {
        locked { if self.error == nil { self.error = error } }
        condition.broadcast()
    }

    /// Hands a fresh file's outcome to the coordinator (a whole one, or a partial's chunks).
    private func handOver(_ fetched: KeptFetched) {
        locked {
            if toRecord.isEmpty { oldestToRecord = Date() }
            toRecord.append(fetched)
        }
        condition.broadcast()
    }

    // MARK: The coordinator

    /// Prepares windows of files for the workers and records what they fetched, in batches,
    /// until every worker has ended; on `device`, the caller's connection.
    func coordinate(device: Device) throws {
        var failure: Error?
        while true {
            condition.lock()
            let prepare = failure == nil && !ended && readyAt >= ready.count - min(ready.count, Device.keptFetchesAtOnce)
                && nextPrepared < toFetch.count
            let done = workersRunning == 0
            let due = !toRecord.isEmpty && (done || toRecord.count >= Device.keptRecordedAtOnce
                || Date().timeIntervalSince(oldestToRecord ?? Date()) >= Device.keptRecordWait || ended)
            var batch: [KeptFetched] = []
            if due {
                batch = toRecord
                toRecord.removeAll()
                oldestToRecord = nil
            }
            if !prepare && !due {
                if done {
                    condition.unlock()
                    break
                }
                condition.wait(until: Date().addingTimeInterval(Device.keptRecordWait / 2))
                condition.unlock()
                continue
            }
            condition.unlock()
            do {
                if !batch.isEmpty { try record(batch, device: device) }
                if prepare { try prepareWindow(device: device) }
            } catch {
                // Stop the workers, wait for them, then record what they handed over.
                failure = failure ?? error
                fail(error)
            }
        }
        if let failure { throw failure }
    }

    /// Reads the records of the next window of files and begins the cache rows of the fresh
    /// ones, in one transaction.
    private func prepareWindow(device: Device) throws {
        let (start, end) = locked { () -> (Int, Int) in
            let start = nextPrepared
            return (start, min(toFetch.count, start + Device.keptPreparedAtOnce))
        }
        var tasks: [KeptTask] = []
        try device.database.transaction {
            for index in start..<end {
                let id = toFetch[index]
                guard let record = try device.fileRecord(id) else {
                    tasks.append(KeptTask(index: index, id: id))
                    continue
                }
                let object = record.coordinates.object
                if let row = try device.cacheRow(object), row.size == record.size,
                   !row.chunks.allSatisfy({ $0 == 0 }) || row.state != .partial {
                    // Chunks held already: resumed and checked the usual way.
                    tasks.append(KeptTask(index: index, id: id))
                    continue
                }
                try device.beginCacheEntry(object, size: record.size, chunks: ChunkBitmap(count: ObjectLayout.chunkCount(plaintextSize: record.size)).bytes)
                tasks.append(KeptTask(index: index, id: id, record: record, deferred: DeferredCacheRecord()))
            }
        }
        locked {
            ready.removeFirst(readyAt)
            readyAt = 0
            ready.append(contentsOf: tasks)
            nextPrepared = end
        }
        condition.broadcast()
    }

    /// Records a batch of fetched files: syncs the whole ones' files first (once for them all),
    /// then one transaction records every entry, with the proof that a whole one was checked
    /// and its failure cleared.
    private func record(_ batch: [KeptFetched], device: Device) throws {
        let whole = batch.filter { $0.deferred.state != .partial }
        if !whole.isEmpty { try device.syncCacheFiles(whole.map(\.object)) }
        let now = cacheNow()
        try device.database.transaction {
            for fetched in batch where fetched.deferred.bytes > 0 || fetched.deferred.state != .partial {
                try device.recordCacheEntry(fetched.object, size: fetched.size, chunks: fetched.deferred.chunks,
                                            bytes: fetched.deferred.bytes, state: fetched.deferred.state, now: now)
                guard fetched.deferred.state != .partial else { continue }
                let data = device.cachePaths(object: fetched.object).data
                if let stamp = fetched.stamp, FileStamp(path: data) == stamp {
                    try device.setSetting(Device.checkedKey("cache:" + fetched.object), stamp.text)
                } else {
                    try device.setSetting(Device.checkedKey("cache:" + fetched.object), nil)
                }
                if fetched.clearsFailure { try device.setSetting("fetch_failed:" + fetched.object, nil) }
            }
        }
    }

    // MARK: The workers

    /// One worker: fetches files in turn on `device` until none is left or the run stops.
    func work(device: Device) throws {
        while let task = take() {
            let (index, id) = (task.index, task.id)
            if let reason = stop.reason {
                end(.interrupted, CovenError(.interrupted, "fetch-kept stopped: \(reason)"))
                return
            }
            var throttledTries = 0
            while true {
                do {
                    if let record = task.record, let deferred = task.deferred {
                        let object = record.coordinates.object
                        do {
                            let report = try device.fetchKeptFileDeferred(record, stop: stop, deferred: deferred)
                            handOver(KeptFetched(object: object, size: record.size, deferred: deferred,
                                                 stamp: FileStamp(path: device.cachePaths(object: object).data),
                                                 clearsFailure: failedBefore.contains("fetch_failed:" + object)))
                            locked { fetched.append((index, FetchKeptItem(file: record.id, size: record.size, bytesFetched: report.bytesFetched))) }
                        } catch {
                            // What was written before the failure stays, as a partial.
                            if deferred.bytes > 0 {
                                let partial = DeferredCacheRecord()
                                (partial.chunks, partial.bytes) = (deferred.chunks, deferred.bytes)
                                handOver(KeptFetched(object: object, size: record.size, deferred: partial, stamp: nil, clearsFailure: false))
                            }
                            throw error
                        }
                    } else {
                        let item = try device.fetchKeptFile(id, stop: stop, failedBefore: failedBefore)
                        locked { fetched.append((index, item)) }
                    }
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

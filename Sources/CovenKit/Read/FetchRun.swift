import Foundation

/// What a run of many fetches is for.
enum FetchRunMode {
    /// `coven fetch-kept`: each failure is recorded for `coven status` (those recorded before,
    /// `failedBefore`, cleared as their files are fetched); the run stops at the first file the
    /// disk has no room for, once storage cannot be reached, or once the server asks for a
    /// wait longer than a minute (shorter ones are waited out).
    case keep(failedBefore: Set<String>)
    /// `coven get` of many files: each file's held copy, or why it failed, reported in the
    /// order of the list; a failure is the file's own and the others go on.
    case hold
}

/// A held file's copy and what its read did, or why it could not be held.
typealias HeldResult = Result<(path: String, report: ReadReport), CovenError>

/// A file's outcome in a run, with its size (fetch-kept lists it; 0 where not known, `get`).
struct FetchOutcome {
    var result: HeldResult
    var size: Int64 = 0
}

/// One file handed to a worker: a fresh one with its record and the place its deferred read
/// leaves what it held, or (nil) one fetched or checked the usual way (its entry holds chunks
/// already, it is on this device, or it has no record).
private struct FetchTask {
    var index: Int
    var id: String
    var record: FileRecord?
    var deferred: DeferredCacheRecord?
}

/// A fetched (or partly fetched) fresh file waiting for its commit.
private struct FetchedFile {
    var index: Int
    var object: String
    var size: Int64
    var deferred: DeferredCacheRecord
    /// The data file as it was once written (its proof of being checked, when whole).
    var stamp: FileStamp?
    var clearsFailure: Bool
    /// What the read did; nil for the chunks a failed read left (a partial).
    var report: ReadReport?
}

extension KeptFiles {
    /// Files fetched at once, each on its own connection: the fetches overlap (eight: a small
    /// file's cost is its requests and its writes).
    public static let keptFetchesAtOnce = 8

    /// Files prepared at a time: their records read and their cache rows begun in one
    /// transaction before any worker makes their files.
    static let keptPreparedAtOnce = 64
    /// The most fetched files recorded in one commit, and the longest a fetched file waits for
    /// its commit (seconds): a file fetched is recorded soon, even while another one hangs.
    static let keptRecordedAtOnce = 256
    static let keptRecordWait = 0.02
    /// The most files of a `get` list taken ahead of the first not yet reported (the list is
    /// read as it goes: memory stays bounded whatever its length).
    static let heldAhead = 256

    /// Runs `run` on this device (the coordinator's connection) and `parallel` workers, each on
    /// a connection of its own (a fetch waits on storage and on its syncs, not on the CPU).
    ///
    /// Paid per batch, not per file: this thread begins the cache rows of a window of files in
    /// one transaction before the workers make their files (a row comes before its files), the
    /// workers fetch and write without touching the database, and this thread records the
    /// files fetched meanwhile in one transaction, after one sync of the cache's filesystem
    /// made their bytes durable: an entry is recorded complete only after its bytes are on the
    /// disk, and a kill at any point leaves at most entries recorded with fewer chunks than
    /// their files hold (fetched again).
    func runFetches(_ run: FetchRun, parallel: Int) throws {
        // The workers' rare writes (a failure, a resumed partial) and this thread's commits
        // queue here rather than in SQLite's busy handler.
        let writeGate = NSLock()
        let ownGate = device.database.writeGate
        device.database.writeGate = writeGate
        defer { device.database.writeGate = ownGate }
        // The first window is prepared before the workers start: no more workers than files.
        try run.prepareFirst(device: device)
        let workers = min(max(1, parallel), run.preparedCount)
        let paths = device.paths
        let environment = device.storageEnvironment
        // A thread each: concurrentPerform runs no more at once than the pool has threads
        // (two on a machine of two cores, one when another is busy), and a fetch waits on the
        // network, not the CPU.
        for _ in 0..<workers {
            run.workerStarted()
            Thread.detachNewThread {
                defer { run.workerEnded() }
                do {
                    let device = try Device.openKernel(paths: paths)
                    device.storageEnvironment = environment
                    device.database.writeGate = writeGate
                    try run.work(device: device)
                } catch {
                    run.fail(error)
                }
            }
        }
        try run.coordinate(device: device)
    }
}

/// One run of many fetches (fetch-kept's, or a `get` of many files) shared by its workers and
/// its coordinator. @unchecked: every field the workers touch is used under `condition`; the
/// list and the reporting state are the coordinator's (the caller's thread) alone.
final class FetchRun: @unchecked Sendable {
    private let condition = NSCondition()
    private let sleepLock = NSLock()
    let mode: FetchRunMode
    /// The command's name, for the error of a stop.
    let command: String
    let stop: Stop
    private let sleep: (Double) -> Void
    /// The list, read by the coordinator a window at a time.
    private let next: () throws -> String?
    /// Each file's outcome, in the order of the list (the coordinator's thread): `get`'s line, or
    /// fetch-kept's item once its file is recorded held (memory stays bounded whatever the count).
    private let report: (String, FetchOutcome) throws -> Void
    /// The list has ended.
    private var listEnded = false
    /// Ids taken from the list so far (the next index the coordinator prepares).
    private var nextPrepared = 0
    /// Files prepared and not yet taken by a worker.
    private var ready: [FetchTask] = []
    private var readyAt = 0
    /// Files fetched and not yet recorded, and when the oldest of them was fetched.
    private var toRecord: [FetchedFile] = []
    private var oldestToRecord: Date?
    private var workersRunning = 0
    private var waited: [Double] = []
    private var stopped: (FetchKeptStop, CovenError)?
    private var error: Error?
    /// The outcomes not yet reported, by index.
    private var outcomes: [Int: FetchOutcome] = [:]

    // The coordinator's own: what is reported next, the ids of the files not yet reported, and
    // (`get`) the ids given more than once.
    private var reported = 0
    private var ids: [Int: String] = [:]
    /// The first index of an id (or of a fresh file's object) not yet reported.
    private var firstOf: [String: Int] = [:]
    private var keyOf: [Int: String] = [:]
    /// An index whose file is the one of an earlier index: its outcome is the earlier one's.
    private var sameAs: [Int: Int] = [:]
    private var followers: [Int: Int] = [:]
    private var resultOf: [Int: FetchOutcome] = [:]

    init(mode: FetchRunMode, command: String, stop: Stop, sleep: @escaping (Double) -> Void = { Thread.sleep(forTimeInterval: $0) },
         next: @escaping () throws -> String?, report: @escaping (String, FetchOutcome) throws -> Void) {
        self.mode = mode
        self.command = command
        self.stop = stop
        self.sleep = sleep
        self.next = next
        self.report = report
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        condition.lock()
        defer { condition.unlock() }
        return try body()
    }

    private var ended: Bool { stopped != nil || error != nil }
    private var holding: Bool { if case .hold = mode { return true } else { return false } }
    private var failedBefore: Set<String> { if case .keep(let failedBefore) = mode { return failedBefore } else { return [] } }

    /// Files prepared so far.
    var preparedCount: Int { locked { nextPrepared } }

    func workerStarted() { locked { workersRunning += 1 } }
    func workerEnded() {
        locked { workersRunning -= 1 }
        condition.broadcast()
    }

    /// The next file to fetch, waiting for the coordinator to prepare it; nil once none is
    /// left or the run stopped.
    private func take() -> FetchTask? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if ended { return nil }
            if readyAt < ready.count {
                defer { readyAt += 1 }
                if readyAt + 1 == ready.count || readyAt + 1 == ready.count - KeptFiles.keptPreparedAtOnce / 2 {
                    // Half the prepared files taken (or all): let the coordinator prepare the
                    // next window.
                    condition.broadcast()
                }
                return ready[readyAt]
            }
            if listEnded { return nil }
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
    /// The coordinator is woken only for a full batch: it looks every half of
    /// ``Device/keptRecordWait`` anyway, and waking it (and every idle worker) for each small
    /// file cost more than the files' writes.
    private func handOver(_ fetched: FetchedFile) {
        let full = locked { () -> Bool in
            if toRecord.isEmpty { oldestToRecord = Date() }
            toRecord.append(fetched)
            return toRecord.count >= KeptFiles.keptRecordedAtOnce
        }
        if full { condition.broadcast() }
    }

    /// Sets a file's outcome, for the coordinator to report (`wake`: a worker's, for the
    /// coordinator waiting on it; the coordinator's own record needs no waking).
    private func settle(_ index: Int, _ result: HeldResult, size: Int64 = 0, wake: Bool = true) {
        locked { outcomes[index] = FetchOutcome(result: result, size: size) }
        if wake { condition.broadcast() }
    }

    // MARK: The coordinator

    /// Prepares the first window, before the workers start.
    func prepareFirst(device: Device) throws {
        try prepareWindow(device: device)
    }

    /// Prepares windows of files for the workers and records what they fetched, in batches,
    /// until every worker has ended; on `device`, the caller's connection. `get`'s outcomes are
    /// reported as they come, in the order of the list.
    ///
    /// - Throws: an error of the list, of a report or of a record; `.interrupted` for a `get`
    ///   stopped (the outcomes before the first file not held reported).
    func coordinate(device: Device) throws {
        var failure: Error?
        while true {
            condition.lock()
            // The next window is prepared while half of this one is left: the workers of small
            // files do not wait for it.
            let prepare = failure == nil && !ended && readyAt >= ready.count - min(ready.count, KeptFiles.keptPreparedAtOnce / 2)
                && !listEnded && (!holding || nextPrepared - reported < KeptFiles.heldAhead)
            let done = workersRunning == 0
            let due = !toRecord.isEmpty && (done || toRecord.count >= KeptFiles.keptRecordedAtOnce
                || Date().timeIntervalSince(oldestToRecord ?? Date()) >= KeptFiles.keptRecordWait || ended)
            var batch: [FetchedFile] = []
            if due {
                batch = toRecord
                toRecord.removeAll()
                oldestToRecord = nil
            }
            let reportable = failure == nil && (outcomes[reported] != nil || sameAs[reported] != nil)
            if !prepare && !due && !reportable {
                if done {
                    condition.unlock()
                    break
                }
                condition.wait(until: Date().addingTimeInterval(KeptFiles.keptRecordWait / 2))
                condition.unlock()
                continue
            }
            condition.unlock()
            do {
                if !batch.isEmpty { try record(batch, device: device) }
                if failure == nil {
                    try reportSettled()
                    // A cache over its budget gives way once the batch is reported (the last
                    // file recorded spared, as a single `get` spares its own).
                    if holding, let last = batch.last { _ = try? Cache(device).trimCache(sparing: last.object) }
                }
                if prepare { try prepareWindow(device: device) }
            } catch {
                // Stop the workers, wait for them, then record what they handed over.
                failure = failure ?? error
                fail(error)
            }
        }
        if let failure {
            // `get`: the files held before the failure (a bad entry of the list, say) still get
            // their lines, in order, up to the first one not held.
            if holding { try? reportSettled() }
            throw failure
        }
        if let error = locked({ self.error }) { throw error }
        try reportSettled()
        guard holding else {
            // fetch-kept: a file that stopped the run (no room, offline) leaves a gap; the
            // files fetched after it are reported still, in order.
            try reportAfterGaps()
            return
        }
        if let (_, error) = locked({ stopped }) { throw error }
    }

    /// Reads the next window of the list, reads its records and begins the cache rows of the
    /// fresh files, in one transaction.
    private func prepareWindow(device: Device) throws {
        let start = locked { nextPrepared }
        var given: [String] = []
        var endOfList = false
        while given.count < KeptFiles.keptPreparedAtOnce {
            guard let id = try next() else {
                endOfList = true
                break
            }
            given.append(id)
        }
        var tasks: [FetchTask] = []
        if !given.isEmpty {
            try device.database.transaction {
                for (offset, id) in given.enumerated() {
                    let index = start + offset
                    ids[index] = id
                    if holding {
                        // An id given again while the first is not reported: held once.
                        if let first = firstOf["id:" + id] {
                            follow(index, first)
                            continue
                        }
                    }
                    guard let record = try device.fileRecord(id), record.coordinates.at != .device, !device.readOnly else {
                        remember(index, key: "id:" + id)
                        tasks.append(FetchTask(index: index, id: id))
                        continue
                    }
                    let object = record.coordinates.object
                    if holding, let first = firstOf["object:" + object] {
                        // Another record of the same bytes, in flight: one fetch.
                        follow(index, first)
                        continue
                    }
                    if let row = try Cache(device).cacheRow(object), row.size == record.size,
                       !row.chunks.allSatisfy({ $0 == 0 }) || row.state != .partial {
                        // Chunks held already: resumed and checked the usual way.
                        remember(index, key: "id:" + id)
                        tasks.append(FetchTask(index: index, id: id))
                        continue
                    }
                    try Cache(device).beginCacheEntry(object, size: record.size, chunks: ChunkBitmap(count: ObjectLayout.chunkCount(plaintextSize: record.size)).bytes)
                    remember(index, key: "object:" + object)
                    tasks.append(FetchTask(index: index, id: id, record: record, deferred: DeferredCacheRecord()))
                }
            }
        }
        locked {
            ready.removeFirst(readyAt)
            readyAt = 0
            ready.append(contentsOf: tasks)
            nextPrepared = start + given.count
            if endOfList { listEnded = true }
        }
        condition.broadcast()
    }

    /// `get`: notes the first index of a file not yet reported.
    private func remember(_ index: Int, key: String) {
        guard holding else { return }
        firstOf[key] = index
        keyOf[index] = key
    }

    /// `get`: makes `index` take the outcome of `first`.
    private func follow(_ index: Int, _ first: Int) {
        sameAs[index] = first
        followers[first, default: 0] += 1
    }

    /// Reports the outcomes settled, in the order of the list, up to the first file not settled
    /// yet.
    private func reportSettled() throws {
        while true {
            let index = reported
            let result: FetchOutcome
            if let first = sameAs[index] {
                // The first was reported before (it comes earlier in the list).
                guard let earlier = resultOf[first] else { return }
                result = earlier
                sameAs[index] = nil
                followers[first, default: 1] -= 1
                if followers[first] == 0 {
                    followers[first] = nil
                    resultOf[first] = nil
                }
            } else {
                guard let settled = locked({ outcomes.removeValue(forKey: index) }) else { return }
                result = settled
                if followers[index] != nil { resultOf[index] = result }
                if let key = keyOf.removeValue(forKey: index), firstOf[key] == index { firstOf[key] = nil }
            }
            let id = ids.removeValue(forKey: index) ?? ""
            reported += 1
            try report(id, result)
        }
    }

    /// fetch-kept, once every worker ended: reports the outcomes settled past the files that
    /// stopped the run, in the order of the list.
    private func reportAfterGaps() throws {
        let rest = locked { () -> [(key: Int, value: FetchOutcome)] in
            defer { outcomes.removeAll() }
            return outcomes.sorted { $0.key < $1.key }
        }
        for (index, outcome) in rest {
            try report(ids.removeValue(forKey: index) ?? "", outcome)
        }
    }

    /// Records a batch of fetched files: syncs the whole ones' files first (once for them all),
    /// then one transaction records every entry, with the proof that a whole one was checked
    /// and its failure cleared.
    private func record(_ batch: [FetchedFile], device: Device) throws {
        let whole = batch.filter { $0.deferred.state != .partial }
        if !whole.isEmpty { try KeptFiles(device).syncCacheFiles(whole.map(\.object)) }
        let now = cacheNow()
        try device.database.transaction {
            for fetched in batch where fetched.deferred.bytes > 0 || fetched.deferred.state != .partial {
                try Cache(device).recordCacheEntry(fetched.object, size: fetched.size, chunks: fetched.deferred.chunks,
                                            bytes: fetched.deferred.bytes, state: fetched.deferred.state, now: now)
                guard fetched.deferred.state != .partial else { continue }
                let data = Cache(device).cachePaths(object: fetched.object).data
                if let stamp = fetched.stamp, FileStamp(path: data) == stamp {
                    try CheckedBytes(device).setProof("cache:" + fetched.object, stamp.text)
                } else {
                    try CheckedBytes(device).setProof("cache:" + fetched.object, nil)
                }
                if fetched.clearsFailure { try KeptFiles(device).noteFetchFailure(fetched.object, nil) }
            }
        }
        // Held now: the files are durable and recorded complete.
        for fetched in batch where fetched.deferred.state != .partial {
            if let report = fetched.report {
                settle(fetched.index, .success((Cache(device).cachePaths(object: fetched.object).data, report)), size: fetched.size, wake: false)
            }
        }
    }

    // MARK: The workers

    /// One worker: fetches files in turn on `device` until none is left or the run stops.
    func work(device: Device) throws {
        // One connection, carry and run buffer for every file this worker fetches fresh.
        let session = ReadSession(connector: StorageConnector(location: device.storage, environment: device.storageEnvironment))
        while let task = take() {
            let (index, id) = (task.index, task.id)
            if let reason = stop.reason {
                end(.interrupted, CovenError(.interrupted, "\(command) stopped: \(reason)"))
                return
            }
            var throttledTries = 0
            while true {
                do {
                    if let record = task.record, let deferred = task.deferred {
                        let object = record.coordinates.object
                        do {
                            let report = try KeptFiles(device).fetchKeptFileDeferred(record, stop: stop, deferred: deferred, session: session)
                            handOver(FetchedFile(index: index, object: object, size: record.size, deferred: deferred,
                                                 stamp: FileStamp(path: Cache(device).cachePaths(object: object).data),
                                                 clearsFailure: failedBefore.contains(object), report: report))
                        } catch {
                            // What was written before the failure stays, as a partial.
                            if deferred.bytes > 0 {
                                let partial = DeferredCacheRecord()
                                (partial.chunks, partial.bytes) = (deferred.chunks, deferred.bytes)
                                handOver(FetchedFile(index: index, object: object, size: record.size, deferred: partial, stamp: nil,
                                                     clearsFailure: false, report: nil))
                            }
                            throw error
                        }
                    } else if holding {
                        settle(index, .success(try Reader(device).holdFile(id, stop: stop)))
                    } else {
                        let (held, size) = try KeptFiles(device).fetchKeptFile(id, stop: stop, failedBefore: failedBefore)
                        settle(index, .success(held), size: size)
                    }
                } catch {
                    let error = error.asCovenError
                    if holding {
                        // A file's failure is its own; a stop ends the run.
                        if error.code == .interrupted { end(.interrupted, error) } else { settle(index, .failure(error)) }
                        break
                    }
                    let object = (try? device.requireFile(id))?.coordinates.object ?? ""
                    switch (error.code, error.storageFailure) {
                    case (.interrupted, _):
                        end(.interrupted, error)
                    case (.noRoom, _):
                        try KeptFiles(device).setFetchFailure(object, "too_large_for_disk")
                        end(.noRoom, error)
                    case (.storage, .network?):
                        end(.offline, error)
                    case (.storage, .throttled?):
                        let wait = error.retryAfter ?? 1
                        throttledTries += 1
                        if wait <= KeptFiles.longestWaitedRetry && throttledTries <= 5 {
                            locked { waited.append(wait) }
                            // One wait at a time (the waits a test records).
                            sleepLock.lock()
                            sleep(wait)
                            sleepLock.unlock()
                            continue
                        }
                        end(.throttled, error)
                    default:
                        try KeptFiles(device).setFetchFailure(object, error.code == .missing ? "missing" : "failed")
                        settle(index, .failure(error), size: (try? device.requireFile(id))?.size ?? 0)
                    }
                }
                break
            }
        }
    }

    /// Why the run stopped (nil: it went through the list) and the waits the server asked for.
    func ending() throws -> (stopped: (FetchKeptStop, CovenError)?, waited: [Double]) {
        try locked {
            if let error { throw error }
            return (stopped, waited)
        }
    }
}

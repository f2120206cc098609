import Foundation

// MARK: - Running the worker

/// What a worker reports as it goes (from its job threads; the receiver must be thread-safe).
public enum UploadEvent: Sendable {
    /// Bytes of an object the provider confirmed so far.
    case progress(object: String, confirmed: Int64, total: Int64)
    /// An attempt ended.
    case finished(object: String, files: [String], outcome: UploadOutcome)
}

/// What one run of the worker did.
public struct UploadRunSummary: Sendable {
    /// Uploads stored.
    public var stored = 0
    /// Attempts that failed and will be retried.
    public var retried = 0
    /// Uploads dropped (retired, cancelled, or of a failed move).
    public var dropped = 0
    /// Uploads failed for good, this run or before (file ids, code, message).
    public var failed: [(files: [String], code: ErrorCode, message: String)] = []
    /// Uploads waiting for a missing original.
    public var waiting: [(files: [String], code: ErrorCode, message: String)] = []
    /// Whether the run stopped because it was asked to.
    public var interrupted = false

    /// Whether every upload the run could send was sent.
    public var complete: Bool { failed.isEmpty && waiting.isEmpty }
}

/// Sends this device's queued uploads: `coven upload-worker`.
///
/// Each of `jobs` threads has its own database connection and storage provider, claims the
/// oldest eligible upload under a lease (``Device/claimUpload(worker:lease:excluded:)``), sends
/// it holding no lock, and records the outcome in short transactions. Overlapping runs (two cron
/// jobs) share the queue through the leases and never send one upload twice.
public enum UploadWorker {
    /// Runs the worker.
    ///
    /// - Parameters:
    ///   - paths: the device.
    ///   - jobs: uploads sent at once (at least 1).
    ///   - once: drain the queue and return (waiting for retries that fall due), instead of
    ///     running until `stop` is asked.
    ///   - settings: budget, part size, backoff, lease, poll interval.
    ///   - storageOptions: timeouts and retries of storage requests.
    ///   - connect: makes a provider for one job (the device's storage with the process
    ///     environment's credentials when nil).
    ///   - stop: polled between parts and while idle; a storage request in flight ends within a
    ///     second of a signal, and its upload goes back to the queue, resumable.
    ///   - events: progress and outcomes.
    /// - Returns: the run's summary.
    /// - Throws: `.noDevice`, `.sql`; a storage provider that cannot be made (`.storage`,
    ///   `.usage`).
    public static func run(
        paths: DevicePaths, jobs: Int, once: Bool, settings: UploadSettings = UploadSettings(),
        storageOptions: StorageOptions = StorageOptions(),
        connect: (@Sendable () throws -> any StorageProvider)? = nil,
        stop: Stop = Stop(),
        events: @escaping @Sendable (UploadEvent) -> Void = { _ in }
    ) throws -> UploadRunSummary {
        let device = try Job.openDevice(paths)
        // A device removed from the store for good (as its last sync learned) uploads nothing.
        try StoreSync(device).refuseIfGone()
        try Uploads(device).setNetworkMetered(settings.networkMetered ?? false)
        try Uploads(device).requeueStorageFailures()
        let connector = StorageConnector(location: device.storage, options: storageOptions)
        let makeProvider: @Sendable () throws -> any StorageProvider = connect ?? { try connector.connect() }
        // Fail early, before any thread, when storage cannot be made at all.
        _ = try makeProvider()
        let shared = RunState()
        let count = max(1, jobs)
        var laned = settings
        // Each lane holds a part buffer: more than two jobs send one part at a time each, so
        // memory stays within 128 MiB at four jobs.
        if count > 2 { laned.lanes = 1 }
        let settings = laned
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    try Job(paths: paths, connect: makeProvider, settings: settings, once: once, shared: shared,
                            stop: stop, events: events).run()
                } catch {
                    shared.fail(error)
                }
            }
            thread.name = "coven-upload-\(index)"
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        if let error = shared.error { throw error }
        var summary = shared.summary
        summary.interrupted = stop.isRequested
        // Failed for good, this run or before: a cron job should hear of them.
        let reported = Set(summary.failed.flatMap(\.files))
        for row in try device.database.query("""
            SELECT q.object, q.last_error_code, q.last_error FROM coven_upload_queue q WHERE q.state = \(UploadState.failed.sql) ORDER BY q.position
            """) {
            let files = try Uploads(device).fileIDs(object: row.string("object") ?? "")
            guard !files.contains(where: reported.contains) else { continue }
            summary.failed.append((files, ErrorCode(rawValue: row.string("last_error_code") ?? "") ?? .storage, row.string("last_error") ?? ""))
        }
        return summary
    }
}

/// State the jobs of one run share. @unchecked: every field is read and written under `lock`.
private final class RunState: @unchecked Sendable {
    private let lock = NSLock()
    private var _summary = UploadRunSummary()
    private var _excluded: Set<String> = []
    private var _busy = 0
    private var _error: Error?
    private var _denied = false

    /// Taken around every transaction of the jobs' connections: a job that claims while another
    /// records its batch waits here and goes on the moment the other commits, not in SQLite's
    /// busy handler, which sleeps 1, 2, 5, 10 ms and more however soon the lock is free (on
    /// 10,000 small files the two jobs slept there about a second each). A job takes the device
    /// lock before its transaction, never inside one, so the two locks are always taken in that
    /// order.
    let writeGate = NSLock()

    /// Whether storage refused this run's credentials: no job claims another upload.
    var denied: Bool { locked { _denied } }
    func deny() { locked { _denied = true } }

    var summary: UploadRunSummary { locked { _summary } }
    var error: Error? { locked { _error } }
    var excluded: Set<String> { locked { _excluded } }
    var busy: Int { locked { _busy } }

    func locked<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }

    func begin() { locked { _busy += 1 } }
    func end() { locked { _busy -= 1 } }

    /// Bumped, and the idle jobs woken, each time a job has handled an upload or stopped: the
    /// queue may hold more due work now, or a run with `once` may be drained. (Not when a job
    /// finds nothing to do: two idle jobs would wake each other in turn.)
    private let handled = NSCondition()
    private var _handled = 0

    /// How many uploads the jobs have handled so far.
    var handledCount: Int {
        handled.lock()
        defer { handled.unlock() }
        return _handled
    }

    /// A job ends its work on an upload.
    func endHandled() {
        end()
        changed()
    }

    /// Wakes the idle jobs.
    func changed() {
        handled.lock()
        _handled += 1
        handled.broadcast()
        handled.unlock()
    }

    /// Waits until a job has handled an upload since `count`, or `timeout` seconds pass; true
    /// if one has.
    func waitForHandled(since count: Int, timeout: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        handled.lock()
        defer { handled.unlock() }
        while _handled == count {
            if !handled.wait(until: deadline) { break }
        }
        return _handled != count
    }
    func exclude(_ object: String) { locked { _ = _excluded.insert(object) } }
    func fail(_ error: Error) { locked { if _error == nil { _error = error } } }
    func record(_ outcome: UploadOutcome, files: [String]) {
        locked {
            switch outcome {
            case .stored: _summary.stored += 1
            case .willRetry: _summary.retried += 1
            case .dropped: _summary.dropped += 1
            case .failed(let code, let message): _summary.failed.append((files, code, message))
            case .waitingForSource(let code, let message): _summary.waiting.append((files, code, message))
            }
        }
    }
}

/// One job: its own connection and provider, claiming and sending one upload at a time.
private final class Job {
    let device: Device
    let connect: @Sendable () throws -> any StorageProvider
    let settings: UploadSettings
    let once: Bool
    let shared: RunState
    let stop: Stop
    let events: @Sendable (UploadEvent) -> Void
    let worker = WorkerIdentity.current()
    private var providers: [any StorageProvider] = []
    private var batchProviders: [any StorageProvider] = []
    private var finishing: (any StorageProvider)?

    init(paths: DevicePaths, connect: @escaping @Sendable () throws -> any StorageProvider, settings: UploadSettings, once: Bool, shared: RunState,
         stop: Stop, events: @escaping @Sendable (UploadEvent) -> Void) throws {
        self.device = try Job.openDevice(paths)
        device.database.writeGate = shared.writeGate
        self.connect = connect
        self.settings = settings
        self.once = once
        self.shared = shared
        self.stop = stop
        self.events = events
    }

    /// Opens a connection for a job. (Device.openKernel changes the schema only when coven's views
    /// changed, in one transaction, so jobs and other processes may open at once.)
    static func openDevice(_ paths: DevicePaths) throws -> Device {
        try Device.openKernel(paths: paths)
    }

    func storage() throws -> any StorageProvider {
        try lanes()[0]
    }

    /// The job's providers, one per send lane, made on first use.
    func lanes() throws -> [any StorageProvider] {
        while providers.count < max(1, settings.lanes) { providers.append(try connect()) }
        return providers
    }

    func run() throws {
        // A job that stops may leave the run drained for the others.
        defer { shared.changed() }
        // The batch sent last, not yet made durable and recorded: that is done while the
        // next batch is sent (``finishBatch(_:)``).
        var sent: RunningBatch?
        do {
            while !stop.isRequested && !shared.denied {
                let handledBefore = shared.handledCount
                shared.begin()
                let claimed: Result<[UploadClaim], ClaimWaitBox>
                do {
                    let objectBytes = min(Self.batchObjectBytes, settings.singleRequestLimit, try storage().singleRequestLimit)
                    claimed = try Uploads(device).claimUploads(worker: worker, lease: settings.lease, excluded: shared.excluded,
                                                               limit: Self.batchLimit, objectBytes: objectBytes, batchBytes: Self.batchBytes)
                } catch let error as CovenError where error.code == .busy {
                    // Another job's record held the database past the busy timeout (the one write
                    // switching a move of 100,000 files): claim again once it is done.
                    shared.end()
                    continue
                } catch {
                    shared.end()
                    throw error
                }
                switch claimed {
                case .success(let claims) where claims.count > 1:
                    let next: RunningBatch
                    do {
                        next = try startBatch(claims, after: sent)
                    } catch {
                        shared.end()
                        throw error
                    }
                    let previous = sent
                    sent = next
                    if let previous { try finishBatch(previous) }
                case .success(let claims):
                    if let previous = sent {
                        sent = nil
                        try finishBatch(previous)
                    }
                    defer { shared.endHandled() }
                    try handle(claims[0])
                case .failure(let box):
                    shared.end()
                    if let previous = sent {
                        // Its ends may queue work again (a retry due now), or leave the run drained.
                        sent = nil
                        try finishBatch(previous)
                        continue
                    }
                    let wait = box.wait
                    let now = Date().timeIntervalSince1970
                    if once {
                        // Drained when nothing is due later and no other job may queue more work.
                        if wait.nextAttempt == nil && wait.heldElsewhere == 0 && shared.busy == 0 { return }
                        if wait.nextAttempt == nil && wait.heldElsewhere > 0 && shared.busy == 0 {
                            // Held by another run: leave them to it.
                            return
                        }
                    }
                    let until = min(wait.nextAttempt ?? (now + settings.poll), now + (once ? 0.5 : settings.poll))
                    sleep(until: until, unlessHandledSince: handledBefore)
                }
            }
            if let previous = sent {
                sent = nil
                try finishBatch(previous)
            }
        } catch {
            // The batch in flight is still recorded (what storage holds, what failed), or, if
            // that fails too, left leased to this run, which the next run finds dead.
            if let previous = sent { try? finishBatch(previous) }
            throw error
        }
    }

    /// Waits until `time`, or until another job has handled an upload since `count` (the
    /// queue may hold work again, or a run with `once` be drained: waking at once saved up to
    /// 0.2 s at the end of every `--once` run); polls `stop` every 0.2 s.
    private func sleep(until time: Double, unlessHandledSince count: Int) {
        while !stop.isRequested {
            let left = time - Date().timeIntervalSince1970
            if left <= 0 { return }
            if shared.waitForHandled(since: count, timeout: min(left, 0.2)) { return }
        }
    }

    /// Uploads claimed at once: one claim, one sync of their bytes and one record of their ends
    /// (a commit each) for up to this many small files (at 64, an upload of 10,000 small files
    /// paid 157 of each, and took 0.5 s more on disk). `batchBytes` bounds what a batch holds.
    static let batchLimit = 256
    /// Encrypted bytes of a batch at most: what a kill may leave sent but unrecorded (the next
    /// run finds those stored and sends them no more).
    static let batchBytes: Int64 = 64 << 20
    /// Objects up to this size batch (each sender holds one at a time); larger ones go alone.
    static let batchObjectBytes: Int64 = 8 << 20
    /// Senders of a batch per lane: small objects' requests and syncs overlap (on file://, a
    /// small file's two syncs, not its bytes, are its cost).
    static let batchSendersPerLane = 4
    /// Sealed bytes a job's senders hold at once at most (one object is always let through):
    /// with two jobs, the worker stays within 64 MiB whatever the sizes.
    static let batchBytesInFlight: Int64 = 8 << 20

    /// `count` providers for a batch's senders: the lanes' first, then more, made on first use.
    private func batchSenders(_ count: Int) throws -> [any StorageProvider] {
        var senders = try lanes()
        while batchProviders.count < count - senders.count { batchProviders.append(try connect()) }
        senders += batchProviders
        return Array(senders.prefix(count))
    }

    /// Starts sending a batch of whole objects, just claimed (the claim's transaction found
    /// each still wanted and leased it: a second transaction checking the same was a tenth of
    /// the job's database time): its database part is read on the job's thread (two queries),
    /// then, once the senders of the batch `after` are done (they are this batch's senders
    /// too), the senders seal and send its objects on threads of their own, touching no
    /// database, while the job makes the batch before durable and records it
    /// (``finishBatch(_:)``): the job's database work and the syncs no longer leave the
    /// senders idle (with the two queries and the one lease of a batch, an upload of 10,000
    /// small files took 1.95 s, now 1.78 s).
    private func startBatch(_ claims: [UploadClaim], after previous: RunningBatch?) throws -> RunningBatch {
        let batch = RunningBatch(claims: claims)
        var prepared: [(index: Int, whole: UploadSender.WholeObject)] = []
        for (index, result) in try UploadSender.prepareWhole(claims, device: device).enumerated() {
            switch result {
            case .success(let whole): prepared.append((index, whole))
            case .failure(let stop as UploadStop): batch.ends[index] = .stopped(stop)
            case .failure(let error): batch.ends[index] = .failed(error.asCovenError)
            }
        }
        let work = BatchWork(prepared.map { BatchItem(index: $0.index, object: claims[$0.index].object, resumed: claims[$0.index].resumed,
                                                       whole: $0.whole) },
                             budget: Self.batchBytesInFlight)
        previous?.waitSent()
        let providers = try batchSenders(min(Self.batchSendersPerLane * max(1, settings.lanes), max(1, work.count))).map { ProviderHandle($0) }
        let stop = self.stop
        let ends = batch.ends
        // Each sender on a thread of its own (blocking requests and syncs: not concurrentPerform,
        // which runs as many at once as there are cores).
        for (lane, handle) in providers.enumerated() {
            DispatchQueue(label: "coven.upload.batch.\(lane)").async(group: batch.group) {
                let provider = handle.provider
                var sealer: ObjectSealer?
                while let item = work.next() {
                    defer { work.done(item) }
                    ends[item.index] = stop.isRequested ? .stopped(.interrupted) : Self.send(item, provider: provider, sealer: &sealer)
                }
            }
        }
        return batch
    }

    /// Ends a batch once its senders are done: one request makes the stored objects durable
    /// (file://: one sync of their folder, not one an object); one transaction records every
    /// end. A kill before that record leaves the uploads leased by a dead process: the next
    /// run claims them, finds the ones storage already holds whole (`head`), makes them
    /// durable and records them without sending them again. Its requests go through a
    /// provider of their own: the next batch's senders use the others meanwhile.
    private func finishBatch(_ batch: RunningBatch) throws {
        defer { shared.endHandled() }
        batch.waitSent()
        let claims = batch.claims
        let ends = batch.ends
        let storage = try finisher()
        // Durable before recorded: one sync (file://: of the objects' folder) for the batch's
        // stored objects, those sent now and those a killed run left, found whole. Should it
        // fail, none of them is recorded stored: they are sent again later.
        let stored = claims.indices.filter { if case .stored = ends[$0] { return true } else { return false } }
        if !stored.isEmpty {
            do {
                try storage.makeDurable(stored.map { claims[$0].object })
                for index in stored {
                    events(.progress(object: claims[index].object, confirmed: claims[index].bytesTotal, total: claims[index].bytesTotal))
                }
            } catch {
                for index in stored { ends[index] = .failed(error.asCovenError) }
            }
        }
        let attempts = claims.enumerated().map { ($0.element, ends[$0.offset]) }
        let results = try Uploads(device).finishAttempts(attempts, worker: worker, settings: settings)
        let named = try device.fileRecords.ids(objects: claims.map(\.object))
        for (index, claim) in claims.enumerated() {
            let (outcome, orphan, abort) = results[index]
            if let orphan { try? storage.delete(orphan) }
            if let abort { try? storage.abortMultipart(claim.object, uploadID: abort) }
            let files = named[claim.object] ?? []
            if case .waitingForSource = outcome, once { shared.exclude(claim.object) }
            if case .failed(let error) = ends[index], error.code == .storage, error.storageFailure == .denied { shared.deny() }
            shared.record(outcome, files: files)
            events(.finished(object: claim.object, files: files, outcome: outcome))
        }
    }

    /// The provider that ends batches, made on first use.
    private func finisher() throws -> any StorageProvider {
        if let finishing { return finishing }
        let made = try connect()
        finishing = made
        return made
    }

    /// Seals and sends one whole object of a batch, not yet durable (the batch makes its
    /// objects durable together), with the sender's sealer: how its attempt ends.
    private static func send(_ item: BatchItem, provider: any StorageProvider, sealer: inout ObjectSealer?) -> AttemptEnd {
        do {
            // Sent before by a run a kill stopped: storage holds it whole already.
            if item.resumed, let info = try? provider.head(item.object), info.size == item.total {
                return .stored
            }
            let bytes = try item.whole.seal(reusing: &sealer)
            try provider.putPending(item.object, data: bytes)
            return .stored
        } catch let stopped as UploadStop {
            return .stopped(stopped)
        } catch let error as CovenError where error.code == .interrupted {
            return .stopped(.interrupted)
        } catch {
            return .failed(error.asCovenError)
        }
    }

    private func handle(_ claim: UploadClaim) throws {
        let files = try Uploads(device).fileIDs(object: claim.object)
        switch claim.task {
        case .retire, .cancel:
            try cleanUp(claim, files: files)
            return
        case .send:
            break
        }
        var end: AttemptEnd
        do {
            let sender = UploadSender(device: device, providers: try lanes(), settings: settings, worker: worker) { [events] object, confirmed, total in
                events(.progress(object: object, confirmed: confirmed, total: total))
            }
            try sender.send(claim)
            end = .stored
        } catch let stop as UploadStop {
            end = .stopped(stop)
        } catch let error as CovenError where error.code == .interrupted {
            // A signal ended a request in flight: back to the queue, resumable, no failure.
            end = .stopped(.interrupted)
        } catch {
            end = .failed(error.asCovenError)
        }
        let (outcome, orphan, abort) = try Uploads(device).finishAttempt(claim, worker: worker, end: end, settings: settings)
        if let orphan {
            // Stored bytes nothing names: delete them now, best effort (gc finds any left).
            try? storage().delete(orphan)
        }
        if let abort {
            try? storage().abortMultipart(claim.object, uploadID: abort)
        }
        if case .waitingForSource = outcome, once { shared.exclude(claim.object) }
        if case .failed(let error) = end, error.code == .storage, error.storageFailure == .denied { shared.deny() }
        shared.record(outcome, files: files)
        events(.finished(object: claim.object, files: files, outcome: outcome))
    }

    /// A retired or cancelled upload with a provider session: abort it, then drop the upload.
    /// Until the abort succeeds, the upload stays queued.
    private func cleanUp(_ claim: UploadClaim, files: [String]) throws {
        do {
            if let uploadID = claim.uploadID {
                try storage().abortMultipart(claim.object, uploadID: uploadID)
            }
            // And any upload a kill left unrecorded (UploadSender.abandonUnrecorded), best effort.
            if let provider = try? storage(), let ids = try? provider.uploadsInProgress(claim.object) {
                for id in ids where id != claim.uploadID { try? provider.abortMultipart(claim.object, uploadID: id) }
            }
            try device.lockedTransaction {
                guard try device.uploadQueue.holder(claim.object) == worker.text else { return }
                try Uploads(device).dropUpload(claim.object, forgetBytes: claim.task == .retire)
            }
            CopySweep(device).removeReleased()
            shared.record(.dropped, files: files)
            events(.finished(object: claim.object, files: files, outcome: .dropped))
        } catch {
            let failure = error.asCovenError
            try device.lockedTransaction {
                try device.uploadQueue.scheduleRetry(claim.object, worker: worker.text,
                                                     at: Date().timeIntervalSince1970 + settings.wait(after: max(1, claim.attempts)), error: failure)
            }
            if once { shared.exclude(claim.object) }
            shared.record(.willRetry(code: failure.code, message: failure.description), files: files)
        }
    }
}

extension Device {
    /// A short transaction under the device lock.
    func lockedTransaction<T>(_ body: () throws -> T) throws -> T {
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        return try database.transaction(body)
    }
}

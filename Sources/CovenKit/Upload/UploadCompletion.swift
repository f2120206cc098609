import Foundation

/// How one attempt ended, as the worker records it.
enum AttemptEnd {
    /// Storage holds the object.
    case stored
    /// The attempt failed.
    case failed(CovenError)
    /// The upload is no longer wanted or no longer this worker's.
    case stopped(UploadStop)
}

/// What the worker did with one attempt, for the run's summary.
public enum UploadOutcome: Sendable, Equatable {
    /// Stored; the file switched (or waits for the rest of its move).
    case stored
    /// Failed; retried later (after `retryAt`).
    case willRetry(code: ErrorCode, message: String)
    /// The original is missing: the upload waits for it and retries.
    case waitingForSource(code: ErrorCode, message: String)
    /// Failed for good (attempts budget spent, or a changed original failed its move).
    case failed(code: ErrorCode, message: String)
    /// Stopped or cleaned up: retired, cancelled, or its move failed.
    case dropped
}

extension Uploads {
    /// The record ids naming `object`.
    func fileIDs(object: String) throws -> [String] { try device.fileRecords.ids(object: object) }

    /// Records the end of `worker`'s attempt at `claim`, in one short transaction (and the
    /// device lock, since it may write file records): switches files to stored, schedules a
    /// retry, fails the upload or its move, or drops it.
    ///
    /// - Returns: the outcome, and objects whose stored bytes nothing names any more (to delete
    ///   best effort) and a provider session to abort, after the commit.
    func finishAttempt(_ claim: UploadClaim, worker: WorkerIdentity, end: AttemptEnd, settings: UploadSettings)
        throws -> (outcome: UploadOutcome, orphan: String?, abort: String?)
    {
        try finishAttempts([(claim, end)], worker: worker, settings: settings)[0]
    }

    /// Records the ends of `worker`'s attempts at a batch of claims as
    /// ``finishAttempt(_:worker:end:settings:)`` does, all in one transaction (one commit, one
    /// sync, for many small files), the files stored without a move, and those of the moves
    /// the batch completes, switched by one write.
    ///
    /// - Returns: per attempt, in order: the outcome, an object to delete, a session to abort.
    func finishAttempts(_ attempts: [(claim: UploadClaim, end: AttemptEnd)], worker: WorkerIdentity, settings: UploadSettings)
        throws -> [(outcome: UploadOutcome, orphan: String?, abort: String?)]
    {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        var cache: PageCache?
        defer { cache?.restore() }
        let results: [(outcome: UploadOutcome, orphan: String?, abort: String?)] = try device.database.transaction {
            var switching = Switching()
            var results: [(outcome: UploadOutcome, orphan: String?, abort: String?)] = []
            for (claim, end) in attempts {
                let (outcome, orphan, abort) = try finishInTransaction(claim, worker: worker, end: end, settings: settings, switching: &switching)
                results.append((outcome, orphan, abort))
            }
            try settleUploaded(&switching)
            if !switching.isEmpty {
                // A move's switch writes thousands of records, their images, uploads and local
                // bytes in one transaction: with SQLite's default cache its pages spilled to the
                // WAL before the commit (a sixth of the switch of 10,000 files, which ends a run
                // alone). The cache is set back after the commit.
                if !switching.moves.isEmpty { cache = try PageCache(database: device.database) }
                try device.recordWrite { write in
                    try switchToStored(switching.objects, stamp: write.stamp)
                    for move in switching.moves { try switchMoveToStored(move, stamp: write.stamp, pageSize: settings.pageSize) }
                }
            }
            return results
        }
        CopySweep(device).removeReleased()
        return results
    }

    /// What a batch's one write switches to stored: objects stored outside a move (at most a
    /// batch of them), and moves whose every object is stored, each switched a page of its
    /// objects at a time (a move may hold 100,000 files: they are never all in memory).
    struct Switching {
        var objects: [String] = []
        var moves: [String] = []
        /// The objects of the batch stored for a move, by move, in the order they came: marked
        /// uploaded together once the batch's attempts are read (``settleUploaded(_:)``).
        var uploaded: [(move: String, objects: [String])] = []
        var isEmpty: Bool { objects.isEmpty && moves.isEmpty }
    }

    /// One attempt's end, inside the caller's transaction; an object stored without a move,
    /// or the move it completes, goes in `switching`, for the caller's one write.
    private func finishInTransaction(_ claim: UploadClaim, worker: WorkerIdentity, end: AttemptEnd, settings: UploadSettings,
                                     switching: inout Switching) throws -> (UploadOutcome, String?, String?) {
        guard let row = try device.database.queryOneCached("""
            SELECT q.*, m.state AS move_state FROM coven_upload_queue q LEFT JOIN coven_move_state m ON m.id = q.move
            WHERE q.object = ?1
            """, [claim.object]) else {
            // Removed meanwhile (a cancel): whatever was stored is named by nothing.
            if case .stored = end { return (.dropped, claim.object, nil) }
            return (.dropped, nil, claim.uploadID)
        }
        guard row.string("worker") == worker.text else {
            return (.dropped, nil, nil)  // another worker owns it now
        }
        let uploadID = row.string("upload_id")
        let state = row.string("state").flatMap(UploadState.init(rawValue:))
        let moveState = row.string("move_state").flatMap(MoveState.init(rawValue:))
        if state == .retired || moveState == .cancelled {
            let stored: Bool
            if case .stored = end { stored = true } else { stored = false }
            if uploadID != nil && !stored {
                // A provider session to abort first: the upload stays queued (retired or
                // cancelled) until a claim of its own aborts it.
                try device.uploadQueue.unlease(claim.object)
                return (.dropped, nil, nil)
            }
            try dropUpload(claim.object, forgetBytes: state == .retired)
            if case .stored = end { return (.dropped, claim.object, nil) }
            return (.dropped, nil, uploadID)
        }
        if moveState == .failed {
            try device.uploadQueue.requeue(claim.object, clearingSession: true)
            if case .stored = end { return (.dropped, claim.object, nil) }
            return (.dropped, nil, uploadID)
        }
        switch end {
        case .stored:
            storeCompleted(claim.object, move: row.string("move"), switching: &switching)
            return (.stored, nil, nil)
        case .stopped(let stop):
            if stop == .leaseLost || stop == .gone { return (.dropped, nil, nil) }
            try device.uploadQueue.requeue(claim.object, clearingSession: false)
            return (.dropped, nil, nil)
        case .failed(let error):
            return try recordFailure(claim, error: error, row: row, settings: settings)
        }
    }

    /// Removes an upload from the queue; its local bytes go too when no record names them.
    func dropUpload(_ object: String, forgetBytes: Bool) throws {
        try device.uploadQueue.remove(object)
        if forgetBytes, try fileIDs(object: object).isEmpty {
            try device.forgetLocalBytes(object: object)
        }
    }

    /// Storage holds `object`: a bound upload's file goes in `switching` now; a move's upload
    /// waits until every file of the move is stored (``settleUploaded(_:)``), then the move goes
    /// in `switching`, for the caller's one write.
    private func storeCompleted(_ object: String, move: String?, switching: inout Switching) {
        guard let move else {
            switching.objects.append(object)
            return
        }
        if let index = switching.uploaded.firstIndex(where: { $0.move == move }) {
            switching.uploaded[index].objects.append(object)
        } else {
            switching.uploaded.append((move, [object]))
        }
    }

    /// Marks the batch's uploads stored for a move uploaded, a statement a move; a move with
    /// nothing left to send (and still moving) is done, and goes in `switching` for the
    /// caller's one write, with the batch's other files.
    private func settleUploaded(_ switching: inout Switching) throws {
        for (move, objects) in switching.uploaded {
            try device.uploadQueue.markUploaded(objects)
            guard try !device.uploadQueue.hasUnsent(move: move) else { continue }
            let state = try device.moveRecords.state(move)
            guard state == nil || state == .moving else { continue }
            if !switching.moves.contains(move) { switching.moves.append(move) }
            try device.moveRecords.markDone(move)
        }
    }

    /// Switches the stored objects of `move` (``switchToStored(_:stamp:)``), a page at a time
    /// as the queue's move index gives them: each page leaves the queue, so the next is read
    /// from its start.
    private func switchMoveToStored(_ move: String, stamp: String, pageSize: Int) throws {
        while true {
            let page = try device.uploadQueue.uploaded(move: move, limit: pageSize)
            guard !page.isEmpty else { return }
            try switchToStored(page, stamp: stamp)
            if page.count < pageSize { return }
        }
    }

    /// Switches every record of this device naming `objects` to stored, with its content hash;
    /// the uploads leave the queue and coven's copies are released: a statement or two each
    /// for the page of objects, and one update a record.
    private func switchToStored(_ objects: [String], stamp: String) throws {
        try device.fileRecords.switchToStored(objects: objects, stamp: stamp)
        try device.uploadQueue.remove(objects)
        try device.fileRecords.forgetLocalBytes(objects: objects)
    }

    /// Gives back to the queue, with fresh attempts, the uploads that failed for good because
    /// of the storage (unreachable, refused, full), not of their bytes: a new run has its own
    /// environment (another endpoint, new credentials) and tries them before reporting.
    ///
    /// - Returns: how many were given back.
    /// - Throws: `.sql`, `.busy`.
    @discardableResult
    func requeueStorageFailures() throws -> Int {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        return try device.database.transaction {
            try device.uploadQueue.requeueFailed(codes: [.storage, .noStorage, .storageFull])
        }
    }

    private func recordFailure(_ claim: UploadClaim, error: CovenError, row: Row, settings: UploadSettings) throws -> (UploadOutcome, String?, String?) {
        let now = Date().timeIntervalSince1970
        let attempts = row.int("attempts") ?? claim.attempts
        let message = error.description
        func update(state: UploadState, next: Double) throws {
            try device.uploadQueue.recordFailure(claim.object, state: state, retryAt: next, error: error)
        }
        switch error.code {
        case .userFileMissing:
            // An unplugged drive: wait and retry, without spending the attempts budget.
            try update(state: .queued, next: now + settings.wait(after: attempts))
            return (.waitingForSource(code: error.code, message: message), nil, nil)
        case .userFileChanged:
            // A changed original fails its move: no file of it switches.
            try update(state: .failed, next: 0)
            let uploadID = row.string("upload_id")
            try device.uploadQueue.clearSession(claim.object)
            if let move = row.string("move") {
                try device.moveRecords.markFailed(move, error: error, file: try fileIDs(object: claim.object).first)
            }
            return (.failed(code: error.code, message: message), nil, uploadID)
        case .storage where error.storageFailure == .denied:
            // Bad credentials or permissions: no attempt of this run can do better, so it fails
            // now (the next run, with its own environment, tries again).
            try update(state: .failed, next: 0)
            return (.failed(code: error.code, message: message), nil, nil)
        default:
            if attempts >= Int64(settings.attempts) {
                try update(state: .failed, next: 0)
                return (.failed(code: error.code, message: message), nil, nil)
            }
            let wait = max(settings.wait(after: attempts), error.retryAfter ?? 0)
            try update(state: .queued, next: now + wait)
            return (.willRetry(code: error.code, message: message), nil, nil)
        }
    }
}

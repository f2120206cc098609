import Foundation

// MARK: - Workers and leases

/// Who holds an upload: `host pid token`. A claim carries a lease in `coven_upload_queue`
/// (`worker`, `lease_until`), renewed while the worker sends; another worker takes the upload
/// over only once the lease ran out or, on the same host, once the holder's process is gone
/// (a `kill -9` leaves a lease that nobody renews).
struct WorkerIdentity: Sendable, Equatable {
    let host: String
    let pid: Int32
    let token: String
    /// `host pid token`, as the queue's `worker` column holds it: made once, compared for every
    /// row a claim reads and every attempt a batch finishes.
    let text: String

    static func current() -> WorkerIdentity {
        WorkerIdentity(host: thisHost, pid: getpid(), token: Identifier.objectName().prefix(8).lowercased())
    }

    init(host: String, pid: Int32, token: String) {
        self.host = host
        self.pid = pid
        self.token = token
        self.text = "\(host) \(pid) \(token)"
    }

    init?(text: String) {
        let parts = text.split(separator: " ").map(String.init)
        guard parts.count == 3, let pid = Int32(parts[1]) else { return nil }
        self.init(host: parts[0], pid: pid, token: parts[2])
    }

    /// Whether this holder is a process of this host that no longer runs.
    var isGoneHere: Bool {
        guard host == Self.thisHost, pid > 0 else { return false }
        if pid == getpid() { return false }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// This host's name, read once a process: a claim asks it of every leased row it reads
    /// (a hundredth of an upload of 10,000 small files went to gethostname and its text).
    static let thisHost = hostName()

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self).replacingOccurrences(of: " ", with: "_")
        return name.isEmpty ? "localhost" : name
    }
}

/// What a worker claimed.
struct UploadClaim: Sendable {
    enum Task: Sendable, Equatable {
        /// Send the object's bytes.
        case send
        /// No record names the object any more: abort its provider session, then drop it.
        case retire
        /// Its move was cancelled: abort its provider session, then drop it (the file stays on
        /// this device only, with its local bytes).
        case cancel
    }

    var task: Task
    var object: String
    var move: String?
    var bound: Bool
    var attempts: Int64
    var bytesTotal: Int64
    var uploadID: String?
    var partSize: Int64?
    /// Whether another worker held the upload before (a run a kill stopped): its object may
    /// already be stored, unrecorded.
    var resumed = false
}

/// Why nothing could be claimed, for a worker deciding whether to wait or stop.
struct ClaimWait: Sendable {
    /// The earliest time an upload waiting for a retry becomes eligible.
    var nextAttempt: Double?
    /// Uploads held by other live workers.
    var heldElsewhere: Int
}

extension Uploads {
    /// Claims the oldest eligible upload for `worker`, in one short IMMEDIATE transaction, so
    /// two workers (two cron runs, or two jobs of one run) never claim the same upload.
    ///
    /// Bound uploads come first and ignore pause and the unmetered-only setting; trailing ones
    /// wait for them. Uploads of a failed or done move are not sent; those of a cancelled
    /// move, and retired ones with a provider session, are claimed to be cleaned up.
    ///
    /// - Parameters:
    ///   - worker: the claiming worker.
    ///   - lease: seconds the claim holds without renewal.
    ///   - excluded: objects this run leaves alone (waiting for their source).
    /// - Returns: the claim, or why there is none.
    func claimUpload(worker: WorkerIdentity, lease: Double, excluded: Set<String>) throws -> Result<UploadClaim, ClaimWaitBox> {
        try claimUploads(worker: worker, lease: lease, excluded: excluded, limit: 1, objectBytes: 0, batchBytes: 0).map { $0[0] }
    }

    /// Claims a batch: the oldest eligible upload (as ``claimUpload(worker:lease:excluded:)``)
    /// and, when it is a whole object to send in one request, the next eligible ones of the
    /// same kind (each of at most `objectBytes`), up to `limit` uploads and `batchBytes`
    /// encrypted bytes in all, in one short
    /// IMMEDIATE transaction: a worker pays one commit for the claims of many small files.
    ///
    /// The queue is read a row at a time (never all of it in memory) and only as far as the
    /// batch needs.
    ///
    /// - Returns: the claims (at least one), or why there is none.
    func claimUploads(worker: WorkerIdentity, lease: Double, excluded: Set<String>, limit: Int, objectBytes: Int64, batchBytes: Int64) throws -> Result<[UploadClaim], ClaimWaitBox> {
        // A claim a power cut loses leaves the upload queued as it was: claimed again, once.
        try device.database.transactionLosableToPowerCut {
            let now = Date().timeIntervalSince1970
            let paused = try device.setting("uploads_paused") == "1"
            let networkBlocked = try device.setting("unmetered_only") == "1" && device.setting("network_metered") == "1"
            let statement = try device.database.prepare("""
                SELECT q.object, q.move, q.bound, q.state, q.attempts, q.next_attempt_at, q.upload_id, q.part_size,
                       q.bytes_total, q.worker, q.lease_until, m.state AS move_state
                FROM coven_upload_queue q LEFT JOIN coven_move_state m ON m.id = q.move
                WHERE q.uploaded = 0 AND q.state <> \(UploadState.failed.sql)
                ORDER BY q.bound DESC, q.position
                """)
            let queue = device.uploadQueue
            var wait = ClaimWait(nextAttempt: nil, heldElsewhere: 0)
            var retiredNow: [String] = []
            var claims: [UploadClaim] = []
            var bytes: Int64 = 0
            /// Whether a claim is a whole object sent in one request, which batches.
            func batches(_ claim: UploadClaim) -> Bool {
                claim.task == .send && claim.uploadID == nil && claim.bytesTotal <= objectBytes
            }
            while let row = try statement.next() {
                guard let object = row.string("object"), !excluded.contains(object) else { continue }
                let claim: UploadClaim
                switch Self.claimable(row, object: object, now: now, holdsBack: paused || networkBlocked, worker: worker.text, wait: &wait) {
                case .skip: continue
                case .retiredNow:
                    retiredNow.append(object)
                    continue
                case .claim(let found): claim = found
                }
                if let first = claims.first {
                    // Only whole objects batch; the batch ends at the first that does not fit.
                    guard batches(first), batches(claim), bytes + claim.bytesTotal <= batchBytes else { break }
                }
                claims.append(claim)
                bytes += claim.bytesTotal
                if claims.count >= limit || !batches(claim) { break }
            }
            statement.reset()
            for object in retiredNow {
                try queue.remove(object)
                if try device.fileRecords.ids(object: object).isEmpty {
                    try device.forgetLocalBytes(object: object)
                }
            }
            guard !claims.isEmpty else { return .failure(ClaimWaitBox(wait)) }
            try queue.lease(claims.map { ($0.object, $0.attempts) }, worker: worker.text, until: now + lease)
            return .success(claims)
        }
    }

    /// What one queued upload's row says to a claim now: nothing (held by a live worker, waiting
    /// its next attempt, its move over, or paused), a retired upload with nothing at the
    /// provider to drop, or a claim. `wait` learns why nothing can be claimed yet.
    private enum Claimable {
        case skip
        case retiredNow
        case claim(UploadClaim)
    }

    private static func claimable(_ row: Row, object: String, now: Double, holdsBack: Bool, worker: String, wait: inout ClaimWait) -> Claimable {
        let state = UploadState(rawValue: row.string("state") ?? "") ?? .queued
        let holderText = row.string("worker")
        if state == .sending || holderText != nil {
            let leaseUntil = row["lease_until"].doubleValue ?? 0
            // The claiming worker's own uploads in flight (the batches it sends while it
            // claims the next) are live without asking the system about the process.
            let live = leaseUntil > now
                && (holderText == worker || !(holderText.flatMap(WorkerIdentity.init(text:))?.isGoneHere ?? true))
            if live {
                wait.heldElsewhere += 1
                return .skip
            }
        }
        let moveState = row.string("move_state").flatMap(MoveState.init(rawValue:))
        var task = UploadClaim.Task.send
        if state == .retired {
            // Nothing at the provider to abort: dropped once the queue is read.
            if row["upload_id"].isNull { return .retiredNow }
            task = .retire
        } else if moveState == .cancelled {
            task = .cancel
        } else if moveState == .failed || moveState == .done {
            return .skip
        }
        let nextAttempt = row["next_attempt_at"].doubleValue ?? 0
        if nextAttempt > now {
            wait.nextAttempt = min(wait.nextAttempt ?? nextAttempt, nextAttempt)
            return .skip
        }
        let bound = (row.int("bound") ?? 0) != 0
        if task == .send && !bound && holdsBack { return .skip }
        let attempts = (row.int("attempts") ?? 0) + (task == .send ? 1 : 0)
        return .claim(UploadClaim(
            task: task, object: object, move: row.string("move"), bound: bound, attempts: attempts,
            bytesTotal: row.int("bytes_total") ?? 0, uploadID: row.string("upload_id"), partSize: row.int("part_size"),
            resumed: row.string("worker") != nil))
    }

    /// Renews `worker`'s lease on `object` and says whether the upload is still wanted.
    ///
    /// - Returns: nil when the worker may go on; otherwise why it must stop.
    func renewLease(object: String, worker: WorkerIdentity, lease: Double) throws -> UploadStop? {
        try device.database.transaction { try renewLeaseInTransaction(object: object, worker: worker, lease: lease) }
    }

    private func renewLeaseInTransaction(object: String, worker: WorkerIdentity, lease: Double) throws -> UploadStop? {
        guard let row = try device.database.queryOneCached("""
            SELECT q.state, q.worker, m.state AS move_state FROM coven_upload_queue q
            LEFT JOIN coven_move_state m ON m.id = q.move WHERE q.object = ?1
            """, [object]) else { return .gone }
        guard row.string("worker") == worker.text else { return .leaseLost }
        if row.string("state") == UploadState.retired.rawValue { return .retired }
        switch row.string("move_state").flatMap(MoveState.init(rawValue:)) {
        case .cancelled: return .cancelled
        case .failed: return .moveFailed
        case .moving, .done, nil: break
        }
        try device.uploadQueue.renew(object, until: Date().timeIntervalSince1970 + lease)
        return nil
    }
}

/// Why a worker stops an upload part way.
enum UploadStop: String, Error, Sendable {
    /// The queue row went (a cancel removed it).
    case gone
    /// Another worker took the upload over (this one's lease ran out).
    case leaseLost
    /// A signal asked the worker to stop while it sent.
    case interrupted
    /// The file's last reference went.
    case retired
    /// Its move was cancelled.
    case cancelled
    /// Another file of its move changed.
    case moveFailed
}

/// ``ClaimWait`` as an `Error`, so a claim can be a `Result`.
struct ClaimWaitBox: Error, Sendable {
    let wait: ClaimWait
    init(_ wait: ClaimWait) { self.wait = wait }
}

extension SQLValue {
    /// The value as a real number, or nil when it is not a number.
    var doubleValue: Double? {
        switch self {
        case .real(let v): return v
        case .integer(let v): return Double(v)
        case .text(let v): return Double(v)
        default: return nil
        }
    }
}

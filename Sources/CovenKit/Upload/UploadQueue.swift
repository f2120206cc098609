import Foundation

// MARK: - What the queue shows

/// One upload of this device's queue, as `coven uploads` lists it (the `coven_uploads` view).
public struct QueuedUpload: Sendable, Equatable {
    /// The file id (one line per record naming the object).
    public var file: String
    /// Its place in the queue, oldest first.
    public var position: Int64
    /// The move it belongs to; nil for a bound upload.
    public var move: String?
    /// Where the upload is.
    public var state: UploadState
    /// What it waits for: `storage`, `sending`, `pause`, `network`, `retry`, `source`, `move`,
    /// `failed`, `retire`.
    public var waitingFor: String
    /// Whether a bound reference holds a write until it is stored.
    public var bound: Bool
    /// Attempts made so far.
    public var attempts: Int64
    /// Bytes the provider confirmed.
    public var bytesConfirmed: Int64
    /// The encrypted size.
    public var bytesTotal: Int64
    /// The last failure's code, if any.
    public var error: String?
    /// The last failure's message.
    public var errorMessage: String?
}

/// The pause and network settings of the upload queue.
public struct UploadPause: Sendable, Equatable {
    /// Trailing uploads are paused (`coven pause`).
    public var paused: Bool
    /// Trailing uploads run on unmetered networks only (`coven pause --unmetered-only`).
    public var unmeteredOnly: Bool
    /// The network was last declared metered (`COVEN_NETWORK_METERED=1` when a worker started).
    public var metered: Bool
    /// Trailing uploads still to send.
    public var queued: Int64
}

/// The settings an upload worker reads from its environment, documented in
/// docs/coven-upload-worker.md.
public struct UploadSettings: Sendable {
    /// Attempts before an upload fails for good (`COVEN_UPLOAD_ATTEMPTS`, default 5).
    public var attempts: Int = 5
    /// Plaintext bytes per multipart part, rounded down to whole 64 KiB chunks
    /// (`COVEN_UPLOAD_PART_SIZE`, default 8 MiB, above S3's 5 MiB minimum; an explicit value is
    /// used as given, for servers that accept smaller parts). A resumed upload keeps the part
    /// size it started with.
    public var partSize: Int64 = 8 << 20
    /// Encrypted objects up to this size go in one request (`COVEN_UPLOAD_SINGLE_LIMIT`,
    /// default 32 MiB; never above the provider's single-request limit).
    public var singleRequestLimit: Int64 = 32 << 20
    /// The first retry's wait in seconds, doubled per attempt (`COVEN_UPLOAD_BACKOFF`, default 2).
    public var backoff: Double = 2
    /// The longest wait between attempts (`COVEN_UPLOAD_BACKOFF_MAX`, default 600).
    public var backoffMax: Double = 600
    /// How long a claim holds an upload without being renewed (`COVEN_UPLOAD_LEASE`, default 300).
    public var lease: Double = 300
    /// Seconds between looks at an idle queue when running until stopped (`COVEN_UPLOAD_POLL`,
    /// default 5).
    public var poll: Double = 5
    /// Parts one upload sends at once, each on its own connection (`COVEN_UPLOAD_LANES`, 1 to 4,
    /// default 2; 1 when the worker runs more than two jobs).
    public var lanes: Int = 2
    /// Whether the network is metered (`COVEN_NETWORK_METERED=1`); nil when not declared.
    public var networkMetered: Bool?
    /// Rows of the queue read at a time where many are walked (a move's files switched to
    /// stored); tests make it small.
    var pageSize = UploadQueue.pageSize

    /// Defaults overridden by the environment's `COVEN_UPLOAD_*` and `COVEN_NETWORK_METERED`.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        if let v = environment["COVEN_UPLOAD_ATTEMPTS"].flatMap(Int.init), v >= 1 { attempts = v }
        if let v = environment["COVEN_UPLOAD_PART_SIZE"].flatMap(Int64.init), v >= 1 {
            partSize = max(ObjectLayout.chunkSize, v / ObjectLayout.chunkSize * ObjectLayout.chunkSize)
        }
        if let v = environment["COVEN_UPLOAD_SINGLE_LIMIT"].flatMap(Int64.init), v >= 0 { singleRequestLimit = v }
        if let v = environment["COVEN_UPLOAD_BACKOFF"].flatMap(Double.init), v >= 0 { backoff = v }
        if let v = environment["COVEN_UPLOAD_BACKOFF_MAX"].flatMap(Double.init), v >= 0 { backoffMax = v }
        if let v = environment["COVEN_UPLOAD_LEASE"].flatMap(Double.init), v >= 1 { lease = v }
        if let v = environment["COVEN_UPLOAD_LANES"].flatMap(Int.init), (1...4).contains(v) { lanes = v }
        if let v = environment["COVEN_UPLOAD_POLL"].flatMap(Double.init), v > 0 { poll = v }
        if let v = environment["COVEN_NETWORK_METERED"], !v.isEmpty { networkMetered = v == "1" || v == "true" || v == "yes" }
    }

    /// The wait before attempt `attempts + 1`.
    func wait(after attempts: Int64) -> Double {
        let exponent = Double(max(0, min(attempts - 1, 30)))
        return min(backoffMax, backoff * pow(2, exponent))
    }
}

/// Source failures: the file's bytes on this device are missing or changed.
let sourceErrorCodes: Set<ErrorCode> = [.userFileMissing, .userFileChanged, .fileUnavailable]

// MARK: - The queue's commands

/// The upload queue's commands and its workers' side: the queue as people see it (`coven
/// uploads`, pause and resume, retry), a worker's claims and leases, and the end of each
/// attempt (a record switched to stored, a failure scheduled for retry, an upload dropped).
/// The queue's table is ``UploadQueue``'s; this type holds the rules around it.
///
/// ```swift
/// try Uploads(device).setUploadsPaused(true)
/// let queue = try Uploads(device).uploads()
/// ```
public struct Uploads {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }
    /// The queue, oldest first, one entry per file record naming a queued object.
    ///
    /// - Throws: `.sql`.
    public func uploads() throws -> [QueuedUpload] {
        try device.database.query("SELECT * FROM coven_uploads ORDER BY position, file").map { row in
            QueuedUpload(
                file: row.string("file") ?? "", position: row.int("position") ?? 0, move: row.string("move"),
                state: UploadState(rawValue: row.string("state") ?? "") ?? .queued, waitingFor: row.string("waiting_for") ?? "",
                bound: (row.int("bound") ?? 0) != 0, attempts: row.int("attempts") ?? 0,
                bytesConfirmed: row.int("bytes_confirmed") ?? 0, bytesTotal: row.int("bytes_total") ?? 0,
                error: row.string("error"), errorMessage: row.string("error_message"))
        }
    }

    /// The pause and network settings.
    public func uploadPause() throws -> UploadPause {
        let row = try device.database.queryOne("SELECT p.paused AS paused, p.queued AS queued, n.metered AS metered, n.unmetered_only AS unmetered_only FROM coven_upload_pause p, coven_network n")
        return UploadPause(
            paused: (row?.int("paused") ?? 0) != 0, unmeteredOnly: (row?.int("unmetered_only") ?? 0) != 0,
            metered: (row?.int("metered") ?? 0) != 0, queued: row?.int("queued") ?? 0)
    }

    /// Pauses or resumes trailing uploads; bound ones run on, since writes wait for them.
    /// The queue keeps every upload's place. Takes the device lock.
    public func setUploadsPaused(_ paused: Bool) throws {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        try device.database.transaction { try device.setSetting("uploads_paused", paused ? "1" : "0") }
    }

    /// Sets whether trailing uploads wait while the network is metered. Takes the device lock.
    public func setUnmeteredOnly(_ on: Bool) throws {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        try device.database.transaction { try device.setSetting("unmetered_only", on ? "1" : "0") }
    }

    /// Records whether the network is metered (what `coven_network` shows).
    func setNetworkMetered(_ metered: Bool) throws {
        try device.database.transaction { try device.setSetting("network_metered", metered ? "1" : "0") }
    }

    /// Makes failed uploads (and ones waiting for a retry) eligible again now, with a fresh
    /// attempts budget: all of them, or those of `files`.
    ///
    /// An upload of a failed or cancelled move stays as it is: the move decides (stage the file
    /// afresh or cancel the move).
    ///
    /// - Returns: the file ids whose uploads were made eligible, in queue order.
    /// - Throws: `.fileAbsent` for a file this device has no record of; `.notFound` for a file
    ///   with no upload queued here.
    @discardableResult
    public func retryUploads(files: [String] = []) throws -> [String] {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        return try device.database.transaction {
            var objects: [String]? = nil
            if !files.isEmpty {
                var list: [String] = []
                for file in files {
                    let record = try device.requireFile(file)
                    guard try device.uploadQueue.contains(record.coordinates.object) else {
                        throw CovenError(.notFound, "file '\(file)' has no upload queued on this device", details: ["file": file])
                    }
                    list.append(record.coordinates.object)
                }
                objects = list
            }
            let eligible = """
                SELECT q.object FROM coven_upload_queue q LEFT JOIN coven_move_state m ON m.id = q.move
                WHERE q.state IN (\(UploadState.failed.sql), \(UploadState.queued.sql)) AND q.uploaded = 0
                  AND (q.state = \(UploadState.failed.sql) OR q.next_attempt_at > 0 OR q.attempts > 0)
                  AND (q.move IS NULL OR m.state IS NULL OR m.state = \(MoveState.moving.sql))
                """
            var chosen: [String] = []
            for row in try device.database.query(eligible + " ORDER BY q.position") {
                guard let object = row.string("object") else { continue }
                if let objects, !objects.contains(object) { continue }
                chosen.append(object)
            }
            var retried: [String] = []
            for object in chosen {
                try device.uploadQueue.retryNow(object)
                retried += try device.fileRecords.ids(object: object)
            }
            return retried
        }
    }
}

// MARK: - The owner of the queue

/// Where an upload is, in `coven_upload_queue.state`.
public enum UploadState: String, Sendable, CaseIterable {
    /// Waiting to be sent (or for a retry, or for the rest of its move once stored).
    case queued
    /// Claimed by a worker, under a lease.
    case sending
    /// Failed for good (attempts spent, or a changed original); `coven retry` queues it again.
    case failed
    /// Retired by an older coven, when no record named its object any more: the worker aborts
    /// its provider session, if any, then drops it, switching nothing. (A record's end no longer
    /// retires its upload: the upload goes on and switches the record's image, and gc frees the
    /// bytes; Files/FileRecords.swift.)
    case retired

    /// The state as an SQL string literal, for SQL text.
    var sql: String { "'\(rawValue)'" }
}

/// The one writer of `coven_upload_queue` (this device's uploads, oldest first) and
/// `coven_upload_parts` (the parts a provider confirmed): writes, moves, claims, the sender and
/// the worker call it, never their SQL.
///
/// Every method runs inside the caller's transaction (or is one statement).
struct UploadQueue {
    let database: Database

    /// The SQL condition, over `coven_upload_queue`, of an upload that has sent nothing: no
    /// provider session, not being sent (a live lease; the time is `?2`), not stored yet.
    static let idleCondition = "upload_id IS NULL AND NOT (state = \(UploadState.sending.sql) AND coalesce(lease_until, 0) > ?2) AND uploaded = 0"

    // MARK: Reading

    /// Whether a bound reference's upload is done (its object no longer waits in the queue).
    func isUploaded(_ object: String) throws -> Bool {
        try database.scalar("SELECT count(*) FROM coven_upload_queue WHERE object = ?1 AND state <> \(UploadState.retired.sql)", [object]).intValue ?? 0 == 0
    }

    /// The worker holding an upload's claim, or nil (no claim, or no such upload).
    func holder(_ object: String) throws -> String? {
        try database.scalar("SELECT worker FROM coven_upload_queue WHERE object = ?1", [object]).textValue
    }

    /// Whether an upload is being sent now (a live lease at `now`, seconds since the epoch).
    func isSending(at now: Double) throws -> Bool {
        try database.queryOne("""
            SELECT 1 FROM coven_upload_queue WHERE state = \(UploadState.sending.sql) AND coalesce(lease_until, 0) > ?1
            """, [now]) != nil
    }

    /// Whether an upload of `object` is queued.
    func contains(_ object: String) throws -> Bool {
        try database.queryOne("SELECT 1 FROM coven_upload_queue WHERE object = ?1", [object]) != nil
    }

    /// Whether `object` is uploading for a bound reference (queued or being sent).
    func isBoundUpload(_ object: String) throws -> Bool {
        try database.scalar("""
            SELECT count(*) FROM coven_upload_queue
            WHERE object = ?1 AND bound = 1 AND state IN (\(UploadState.queued.sql), \(UploadState.sending.sql))
            """, [object]).intValue ?? 0 > 0
    }

    /// How many uploads belong to `move`.
    func count(move: String) throws -> Int64 {
        try database.scalar("SELECT count(*) FROM coven_upload_queue WHERE move = ?1", [move]).intValue ?? 0
    }

    /// Whether `move` has an upload storage does not hold yet and still wanted (not retired):
    /// the first one found (by the
    /// index on the move), not a count, so each of a move of 100,000 files asks in constant time.
    func hasUnsent(move: String) throws -> Bool {
        try database.queryOneCached(
            "SELECT EXISTS (SELECT 1 FROM coven_upload_queue WHERE move = ?1 AND uploaded = 0 AND state <> \(UploadState.retired.sql))", [move]
        )?[0].intValue == 1
    }

    /// Rows of the queue read at a time where a whole move's are walked.
    static let pageSize = 500

    /// `limit` objects of `move` that storage holds, as the move's index gives them: no sort,
    /// so a move's switch, which takes them a page at a time and removes each page, reads only
    /// the page it takes (ordered by position, each page sorted every one left: 7% of the
    /// switch of 10,000 files in perf).
    func uploaded(move: String, limit: Int) throws -> [String] {
        try database.query("SELECT object FROM coven_upload_queue WHERE move = ?1 AND uploaded = 1 LIMIT ?2", [move, limit])
            .compactMap { $0.string("object") }
    }

    /// The parts the provider confirmed for `object`, as recorded.
    func parts(_ object: String) throws -> [UploadedPart] {
        try database.query("SELECT number, etag, size FROM coven_upload_parts WHERE object = ?1 ORDER BY number", [object]).map {
            UploadedPart(number: Int($0.int("number") ?? 0), etag: $0.string("etag") ?? "", size: $0.int("size") ?? 0)
        }
    }

    // MARK: Writes and moves

    /// Queues an upload of `object` at the end of the queue, for `move` (nil: outside a move).
    ///
    /// One prepared statement for every call, its position a subquery of a single row: an
    /// `INSERT … SELECT` from the queue itself made SQLite copy the select into a temporary
    /// table each time (a write putting 100,000 files spent a third of its time there).
    func enqueue(_ object: String, move: String?, bytesTotal: Int64) throws {
        try database.runCached("""
            INSERT INTO coven_upload_queue (object, position, move, bytes_total)
            VALUES (?1, (SELECT coalesce(max(position), 0) + 1 FROM coven_upload_queue), ?2, ?3)
            """, [object, move, bytesTotal])
    }

    /// Queues the uploads of a write's puts (those of staged files for the cloud), after every
    /// upload queued, in the order the write made them (``enqueue(_:move:bytesTotal:)`` of
    /// each, in one statement).
    func enqueuePuts(_ puts: PutIntents, move: String?) throws {
        try database.run("""
            INSERT INTO coven_upload_queue (object, position, move, bytes_total)
            SELECT object, (SELECT coalesce(max(position), 0) FROM coven_upload_queue) + row_number() OVER (ORDER BY seq), ?1, upload_bytes
            FROM \(PutIntents.table) WHERE upload_bytes IS NOT NULL ORDER BY seq
            """, [move])
    }

    /// Makes an upload bound: outside any move, sent before trailing ones, never paused.
    func bind(_ object: String) throws {
        try database.run("UPDATE coven_upload_queue SET bound = 1, move = NULL WHERE object = ?1", [object])
    }

    /// Removes an upload and its recorded parts (stored, cancelled, dropped, or replaced by a
    /// new move).
    func remove(_ object: String) throws {
        try remove([object])
    }

    /// Removes the uploads of `objects` (a page of them) and their recorded parts: stored.
    func remove(_ objects: [String]) throws {
        let list = RecordedChanges.json(ids: objects)
        try database.run("DELETE FROM coven_upload_parts WHERE object IN (SELECT value FROM json_each(?1))", [list])
        try database.run("DELETE FROM coven_upload_queue WHERE object IN (SELECT value FROM json_each(?1))", [list])
    }

    /// Removes the uploads of a cancelled move that have sent nothing; the others stay for the
    /// worker, which aborts their sessions.
    func removeIdle(move: String) throws {
        let now = Date().timeIntervalSince1970
        try database.run("DELETE FROM coven_upload_parts WHERE object IN (SELECT object FROM coven_upload_queue WHERE move = ?1 AND \(Self.idleCondition))",
                         [move, now])
        try database.run("DELETE FROM coven_upload_queue WHERE move = ?1 AND \(Self.idleCondition)", [move, now])
    }

    /// Makes a failed upload, or one waiting for a retry, eligible now with a fresh attempts
    /// budget (`coven retry`).
    func retryNow(_ object: String) throws {
        try database.run("""
            UPDATE coven_upload_queue SET state = \(UploadState.queued.sql), attempts = 0, next_attempt_at = 0
            WHERE object = ?1
            """, [object])
    }

    /// Gives back to the queue, with fresh attempts, the uploads failed for good with one of
    /// `codes`.
    ///
    /// - Returns: how many were given back.
    func requeueFailed(codes: [ErrorCode]) throws -> Int {
        let list = String(decoding: try JSONSerialization.data(withJSONObject: codes.map(\.rawValue)), as: UTF8.self)
        try database.run("""
            UPDATE coven_upload_queue SET state = \(UploadState.queued.sql), attempts = 0, next_attempt_at = 0
            WHERE state = \(UploadState.failed.sql) AND last_error_code IN (SELECT value FROM json_each(?1))
            """, [list])
        return database.changes
    }

    // MARK: Claims and leases

    /// Claims uploads (a batch's, in one statement) for `worker` until `leaseUntil`: each is
    /// being sent (a retired one stays retired, claimed for its clean-up), with its `attempts`
    /// made.
    func lease(_ claims: [(object: String, attempts: Int64)], worker: String, until leaseUntil: Double) throws {
        try database.run("""
            UPDATE coven_upload_queue
            SET state = CASE WHEN state = \(UploadState.retired.sql) THEN \(UploadState.retired.sql) ELSE \(UploadState.sending.sql) END,
                worker = ?2, lease_until = ?3, attempts = a.value
            FROM json_each(?1) a
            WHERE coven_upload_queue.object = a.key
            """, [RecordedChanges.json(numbers: claims.map { ($0.object, $0.attempts) }), worker, leaseUntil])
    }

    /// Renews a claim's lease.
    func renew(_ object: String, until leaseUntil: Double) throws {
        try database.runCached("UPDATE coven_upload_queue SET lease_until = ?2 WHERE object = ?1", [object, leaseUntil])
    }

    /// Lets go of a claim, leaving the state as it is (a retired or cancelled upload waiting
    /// for a claim of its own to abort its session).
    func unlease(_ object: String) throws {
        try database.run("UPDATE coven_upload_queue SET worker = NULL, lease_until = NULL WHERE object = ?1", [object])
    }

    /// Gives an upload back to the queue (no worker, no lease); with `clearingSession`, its
    /// provider session and recorded parts are forgotten too (its move failed).
    func requeue(_ object: String, clearingSession: Bool) throws {
        try database.run(
            "UPDATE coven_upload_queue SET state = \(UploadState.queued.sql), worker = NULL, lease_until = NULL WHERE object = ?1", [object])
        if clearingSession { try clearSession(object) }
    }

    /// Forgets an upload's provider session and its recorded parts.
    func clearSession(_ object: String) throws {
        try database.run("UPDATE coven_upload_queue SET upload_id = NULL, part_size = NULL, bytes_confirmed = 0 WHERE object = ?1", [object])
        try database.run("DELETE FROM coven_upload_parts WHERE object = ?1", [object])
    }

    // MARK: Sending

    /// Records a new provider session for `worker`'s claim, with no part confirmed yet.
    ///
    /// - Returns: false when the claim is no longer `worker`'s (nothing recorded).
    func startSession(_ object: String, worker: String, uploadID: String, partSize: Int64) throws -> Bool {
        guard try holder(object) == worker else { return false }
        try database.run("DELETE FROM coven_upload_parts WHERE object = ?1", [object])
        try database.run("UPDATE coven_upload_queue SET upload_id = ?2, part_size = ?3, bytes_confirmed = 0 WHERE object = ?1",
                         [object, uploadID, partSize])
        return true
    }

    /// Records exactly `parts` as the confirmed parts of a resumed upload (those both sides
    /// agree on), and their bytes as confirmed.
    func replaceParts(_ object: String, with parts: [UploadedPart]) throws {
        try database.run("DELETE FROM coven_upload_parts WHERE object = ?1", [object])
        for part in parts {
            try database.run("INSERT INTO coven_upload_parts (object, number, etag, size) VALUES (?1, ?2, ?3, ?4)",
                             [object, part.number, part.etag, part.size])
        }
        try database.run("UPDATE coven_upload_queue SET bytes_confirmed = ?2 WHERE object = ?1",
                         [object, parts.reduce(Int64(0)) { $0 + $1.size }])
    }

    /// Records one part the provider confirmed for `worker`'s claim, renewing its lease.
    ///
    /// - Returns: false when the claim is no longer `worker`'s (nothing recorded).
    func recordPart(_ object: String, _ part: UploadedPart, worker: String, leaseUntil: Double) throws -> Bool {
        guard try holder(object) == worker else { return false }
        try database.run("INSERT OR REPLACE INTO coven_upload_parts (object, number, etag, size) VALUES (?1, ?2, ?3, ?4)",
                         [object, part.number, part.etag, part.size])
        try database.run("""
            UPDATE coven_upload_queue SET lease_until = ?2,
                bytes_confirmed = (SELECT coalesce(sum(size), 0) FROM coven_upload_parts WHERE object = ?1)
            WHERE object = ?1
            """, [object, leaseUntil])
        return true
    }

    // MARK: Attempts ending

    /// Storage holds the uploads of `objects` (a batch's, of one move) whose move waits for
    /// its other files: they stay queued, marked uploaded, every byte confirmed.
    func markUploaded(_ objects: [String]) throws {
        try database.run("""
            UPDATE coven_upload_queue SET uploaded = 1, state = \(UploadState.queued.sql), worker = NULL, lease_until = NULL,
                bytes_confirmed = bytes_total, last_error = NULL, last_error_code = NULL
            WHERE object IN (SELECT value FROM json_each(?1))
            """, [RecordedChanges.json(ids: objects)])
    }

    /// Records a failed attempt: the upload goes back to the queue (to be retried at
    /// `retryAt`) or fails for good, without its claim, with the error.
    func recordFailure(_ object: String, state: UploadState, retryAt: Double, error: CovenError) throws {
        try database.run("""
            UPDATE coven_upload_queue SET state = ?2, worker = NULL, lease_until = NULL, next_attempt_at = ?3,
                last_error = ?4, last_error_code = ?5
            WHERE object = ?1
            """, [object, state.rawValue, retryAt, error.description, error.code.rawValue])
    }

    /// Records a failed clean-up (an abort of a retired or cancelled upload's session) by
    /// `worker`: its claim goes, and it is tried again at `retryAt`.
    func scheduleRetry(_ object: String, worker: String, at retryAt: Double, error: CovenError) throws {
        try database.run("""
            UPDATE coven_upload_queue SET worker = NULL, lease_until = NULL, next_attempt_at = ?2, last_error = ?3, last_error_code = ?4
            WHERE object = ?1 AND worker = ?5
            """, [object, retryAt, error.description, error.code.rawValue, worker])
    }
}

extension Device {
    /// The owner of this device's upload queue.
    var uploadQueue: UploadQueue { UploadQueue(database: database) }
}

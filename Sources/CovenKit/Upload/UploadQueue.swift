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
    /// `queued`, `sending`, `failed` or `retired`.
    public var state: String
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

extension Device {
    /// The queue, oldest first, one entry per file record naming a queued object.
    ///
    /// - Throws: `.sql`.
    public func uploads() throws -> [QueuedUpload] {
        try database.query("SELECT * FROM coven_uploads ORDER BY position, file").map { row in
            QueuedUpload(
                file: row.string("file") ?? "", position: row.int("position") ?? 0, move: row.string("move"),
                state: row.string("state") ?? "", waitingFor: row.string("waiting_for") ?? "",
                bound: (row.int("bound") ?? 0) != 0, attempts: row.int("attempts") ?? 0,
                bytesConfirmed: row.int("bytes_confirmed") ?? 0, bytesTotal: row.int("bytes_total") ?? 0,
                error: row.string("error"), errorMessage: row.string("error_message"))
        }
    }

    /// The pause and network settings.
    public func uploadPause() throws -> UploadPause {
        let row = try database.queryOne("SELECT p.paused AS paused, p.queued AS queued, n.metered AS metered, n.unmetered_only AS unmetered_only FROM coven_upload_pause p, coven_network n")
        return UploadPause(
            paused: (row?.int("paused") ?? 0) != 0, unmeteredOnly: (row?.int("unmetered_only") ?? 0) != 0,
            metered: (row?.int("metered") ?? 0) != 0, queued: row?.int("queued") ?? 0)
    }

    /// Pauses or resumes trailing uploads; bound ones run on, since writes wait for them.
    /// The queue keeps every upload's place. Takes the device lock.
    public func setUploadsPaused(_ paused: Bool) throws {
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        try database.transaction { try setSetting("uploads_paused", paused ? "1" : "0") }
    }

    /// Sets whether trailing uploads wait while the network is metered. Takes the device lock.
    public func setUnmeteredOnly(_ on: Bool) throws {
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        try database.transaction { try setSetting("unmetered_only", on ? "1" : "0") }
    }

    /// Records whether the network is metered (what `coven_network` shows).
    func setNetworkMetered(_ metered: Bool) throws {
        try database.transaction { try setSetting("network_metered", metered ? "1" : "0") }
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
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        return try database.transaction {
            var objects: [String]? = nil
            if !files.isEmpty {
                var list: [String] = []
                for file in files {
                    let record = try requireFile(file)
                    guard try database.queryOne("SELECT 1 FROM coven_upload_queue WHERE object = ?1", [record.coordinates.object]) != nil else {
                        throw CovenError(.notFound, "file '\(file)' has no upload queued on this device", details: ["file": file])
                    }
                    list.append(record.coordinates.object)
                }
                objects = list
            }
            let eligible = """
                SELECT q.object FROM coven_upload_queue q LEFT JOIN coven_move_state m ON m.id = q.move
                WHERE q.state IN ('failed', 'queued') AND q.uploaded = 0
                  AND (q.state = 'failed' OR q.next_attempt_at > 0 OR q.attempts > 0)
                  AND (q.move IS NULL OR m.state IS NULL OR m.state = 'moving')
                """
            var chosen: [String] = []
            for row in try database.query(eligible + " ORDER BY q.position") {
                guard let object = row.string("object") else { continue }
                if let objects, !objects.contains(object) { continue }
                chosen.append(object)
            }
            var retried: [String] = []
            for object in chosen {
                try database.run("""
                    UPDATE coven_upload_queue SET state = 'queued', attempts = 0, next_attempt_at = 0
                    WHERE object = ?1
                    """, [object])
                retried += try database.query(
                    "SELECT id FROM coven_files WHERE json_extract(coordinates, '$.object') = ?1 ORDER BY id", [object]
                ).compactMap { $0.string("id") }
            }
            return retried
        }
    }
}

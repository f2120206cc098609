import Foundation

/// The whole device at a glance: what `coven status` prints.
public struct DeviceStatus: Sendable {
    /// Counts of file records by where they are.
    public struct Files: Sendable {
        public var total: Int64 = 0
        public var stored: Int64 = 0
        public var deviceOnlyHere: Int64 = 0
        public var deviceOnlyElsewhere: Int64 = 0
        public var uploading: Int64 = 0
        public var missing: Int64 = 0
    }

    /// The upload queue.
    public struct Uploads: Sendable {
        public var queued: Int64 = 0
        public var sending: Int64 = 0
        public var failed: Int64 = 0
        public var paused = false
        public var bytesConfirmed: Int64 = 0
        public var bytesTotal: Int64 = 0
    }

    public var storeID: String
    public var storage: String
    public var deviceID: String
    public var deviceName: String
    public var database: String
    public var namespaces: [Manifest.Namespace]
    public var tables: [String]
    public var migrations: Int
    public var staged: Int64
    public var files = Files()
    public var uploads = Uploads()
    public var outbox: Int64 = 0
    public var cache: CacheSummary
    public var sync = SyncSummary()
    /// The damage `coven fsck` found that no run has found whole or mended since.
    public var fsckDamage: [FsckKnownDamage] = []
}

/// Sync at a glance: the last push and pull, what waits to be published, the lost values.
public struct SyncSummary: Sendable {
    /// When this device last published a change and last applied one (nil: never).
    public var lastPush: String?
    public var lastPull: String?
    /// Writes recorded and not yet published (those of frozen changes too), and of those how
    /// many a bound upload holds.
    public var waiting: Int64 = 0
    public var heldByUploads: Int64 = 0
    /// Changes frozen for publishing but not yet written to storage (sent at the next sync),
    /// and the writes they hold (counted in ``waiting`` too).
    public var frozen: Int64 = 0
    public var frozenWrites: Int64 = 0
    /// Lost values not restored (concurrent edits and rows taken out).
    public var lostValues: Int64 = 0
    /// The other devices known here, and how many of them are gone for good.
    public var devices: Int64 = 0
    public var goneDevices: Int64 = 0
    /// What stopped the pull of another device's changes at the last sync: a gap or damage.
    public var problems: [SyncProblem] = []
    /// Devices whose next change is sealed under a generation of the store's key this device
    /// does not hold (as the last pull found): the seq it waits at.
    public var keyUnavailable: [String: Int64] = [:]
    /// Sections of applied changes sealed for circles this device's member is not in.
    public var unreadSections: Int64 = 0
    /// Audiences whose chain of key generations in storage ends below the generation this
    /// device holds, as its last sync or roster change found (storage lost generations).
    public var keyChainsBehind: [KeyChainLoss] = []
}

/// The file cache: its budget, what it holds, and the kept files ("attachments") held or not.
public struct CacheSummary: Sendable {
    /// Why a kept file is not held.
    public struct NotHeld: Sendable {
        public var reason: String
        public var count: Int64
        public var bytes: Int64
        public var unstated: Int64
    }

    /// The budget in bytes (nil: keep everything).
    public var budget: Int64?
    /// Whether the budget is the default.
    public var budgetIsDefault: Bool
    /// Bytes held against the budget: fetched files and partials not kept.
    public var used: Int64
    /// Bytes of partial downloads.
    public var partial: Int64
    /// Kept files held whole.
    public var heldCount: Int64
    /// Their bytes (and their partials').
    public var heldBytes: Int64
    /// Kept files not held, by reason.
    public var notHeld: [NotHeld]
}

extension DeviceStatus {
    /// Gathers `device`'s status (reads only).
    public init(of device: Device) throws {
        let db = device.database
        func count(_ sql: String, _ parameters: [SQLBindable] = []) throws -> Int64 {
            try db.scalar(sql, parameters).intValue ?? 0
        }
        var status = DeviceStatus(
            storeID: device.storeID, storage: device.storage.description, deviceID: device.deviceID, deviceName: device.deviceName,
            database: device.paths.database, namespaces: device.manifest.namespaces, tables: device.manifest.tables.map(\.name),
            migrations: device.manifest.migrations.count, staged: try count("SELECT count(*) FROM coven_staged"),
            cache: try Cache(device).cacheSummary())
        let me = device.deviceID
        // One pass over the file records for the places, and the queue (few rows) joined to
        // its records through their index for the rest.
        let places = try db.queryOne("""
            SELECT count(*) AS total, coalesce(sum(place = ?2), 0) AS stored,
                   coalesce(sum(place = ?3 AND device = ?1), 0) AS here, coalesce(sum(place = ?3 AND device <> ?1), 0) AS elsewhere
            FROM coven_files
            """, [me, Coordinates.Place.stored.rawValue, Coordinates.Place.device.rawValue])
        status.files.total = places?.int("total") ?? 0
        status.files.stored = places?.int("stored") ?? 0
        let queued = """
            FROM coven_upload_queue q CROSS JOIN coven_files f ON f.object = q.object
            WHERE q.state IN (\(UploadState.queued.sql), \(UploadState.sending.sql))
            """
        status.files.uploading = try count("""
            SELECT count(*) \(queued)
            AND f.place = \(Coordinates.Place.device.sql) AND f.device = ?1
            """, [me])
        // A file on this device only whose bytes this device does not record (a database put
        // back from a backup older than the write that placed it here, its bytes not found
        // again: Sync/OwnNotes.swift) is missing, never counted as held.
        let unheld = try count("""
            SELECT count(*) FROM coven_files f WHERE f.place = \(Coordinates.Place.device.sql) AND f.device = ?1
              AND NOT EXISTS (SELECT 1 FROM coven_local l WHERE l.object = f.object)
            """, [me])
        status.files.deviceOnlyHere = (places?.int("here") ?? 0) - status.files.uploading - unheld
        status.files.deviceOnlyElsewhere = places?.int("elsewhere") ?? 0
        status.files.missing = try count("SELECT count(*) \(queued) AND q.last_error_code IN ('user_file_missing', 'file_unavailable', 'missing')") + unheld
        let (queuedState, sending, failed) = (UploadState.queued.sql, UploadState.sending.sql, UploadState.failed.sql)
        status.uploads.queued = try count("SELECT count(*) FROM coven_upload_queue WHERE state = \(queuedState)")
        status.uploads.sending = try count("SELECT count(*) FROM coven_upload_queue WHERE state = \(sending) AND lease_until > ?1", [Date().timeIntervalSince1970])
        status.uploads.queued += try count("SELECT count(*) FROM coven_upload_queue WHERE state = \(sending) AND NOT (lease_until > ?1)", [Date().timeIntervalSince1970])
        status.uploads.failed = try count("SELECT count(*) FROM coven_upload_queue WHERE state = \(failed)")
        status.uploads.paused = try device.setting("uploads_paused") == "1"
        let unfinished = "state IN (\(queuedState), \(sending), \(failed))"
        status.uploads.bytesConfirmed = try count("SELECT coalesce(sum(bytes_confirmed), 0) FROM coven_upload_queue WHERE \(unfinished)")
        status.uploads.bytesTotal = try count("SELECT coalesce(sum(bytes_total), 0) FROM coven_upload_queue WHERE \(unfinished)")
        let waiting = try Outbox(database: db).waiting(isStored: { try device.uploadQueue.isUploaded($0) })
        status.outbox = waiting.writes
        status.sync.waiting = waiting.writes
        status.sync.heldByUploads = waiting.held
        status.sync.lastPush = try SyncFlags(database: db).lastPush
        status.sync.lastPull = try SyncFlags(database: db).lastPull
        status.sync.frozen = try count("SELECT count(*) FROM coven_push")
        // A change frozen before its count was kept holds at least one write if any entry.
        status.sync.frozenWrites = try count("SELECT coalesce(sum(coalesce(writes, min(entries, 1))), 0) FROM coven_push")
        status.sync.waiting += status.sync.frozenWrites
        status.sync.lostValues = try count("SELECT count(*) FROM coven_lost_values WHERE restored_at IS NULL")
        status.sync.devices = try count("SELECT count(*) FROM coven_device_registry WHERE device <> ?1", [device.deviceID])
        status.sync.problems = try ChangeDamage(device: device).problems()
        status.sync.keyUnavailable = try StoreSync(device).keyUnavailable()
        status.sync.unreadSections = try CircleSections(database: db).unread().sections
        status.sync.keyChainsBehind = try ChainLosses(device: device).all()
        status.fsckDamage = try FsckLedger(database: db).knownDamage()
        status.sync.goneDevices = try count("SELECT count(*) FROM coven_device_registry WHERE device <> ?1 AND gone = 1", [device.deviceID])
        self = status
    }
}

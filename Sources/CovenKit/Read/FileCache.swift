import Foundation

// MARK: - The file cache on disk

/// The cache of fetched file bytes beside the device (spec/keep-files-on-a-device.md).
///
/// One entry per stored *object* (several records may name one), in `<db>.d/cache/`:
///
/// - `<device>-<name>`: the plaintext, at its own offsets, sparse while chunks are missing; once
///   every chunk is there it is the whole file, and ``Device/holdFile(_:)`` prints its path.
/// - `<device>-<name>.tags`: the 16-byte AES-GCM tag of each chunk at `16 · i`. A cached chunk is
///   checked before it is served by sealing its plaintext again under the file's key and nonce
///   and comparing the tag, so a corrupted cached chunk is caught by its tag, as a fetched one is.
///
/// `coven_cache` keeps the bookkeeping: the plaintext size, a bitmap of the chunks held, their
/// bytes, the entry's state (`complete`, ``CacheState``), and when it was last read (trims take
/// the longest ago first) and touched. A chunk's bit is set only after its plaintext and tag are
/// written, so a crash loses at most chunks that were never recorded; a power cut that loses
/// written bytes of a recorded chunk makes it fail its tag, so it is fetched again, never served.
///
/// The states: 0 *partial*, some chunk missing: never answered as the file, resumed by fetching
/// only its missing chunks (Range requests), and removed at open once untouched for seven days
/// unless kept. 1 *complete*: every chunk held and both files synced, so ``Device/holdFile(_:stop:)``
/// (`coven get`) hands the file to other programs, which do not check tags; 2 the same, and the
/// whole file once found to match its record's hash. 3 *whole*: every chunk held but not synced
/// (a read such as `coven cat` does not wait for the disk); 4 the same, hash-checked. A whole
/// entry is no partial: it counts as held for status and budgets and is never removed as a stale
/// partial; reads serve it as any cached chunks (each checked against its tag); `coven get` and
/// `coven fetch-kept` read it through once, checking every tag, sync it and mark it complete.
///
/// A reader holds a shared `flock` on the data file while it reads; trims and `cache clear`
/// take an exclusive one without waiting and pass over an entry that is being read.
public struct CacheEntryPaths: Sendable {
    /// The plaintext file.
    public let data: String
    /// The tags file.
    public let tags: String

    init(paths: DevicePaths, object: String) {
        let parts = object.split(separator: "/")
        let name = parts.suffix(2).joined(separator: "-")
        data = paths.cache + "/" + name
        tags = data + ".tags"
    }
}

/// The state of a cache entry, in `coven_cache.complete`.
enum CacheState: Int64 {
    /// Some chunk missing.
    case partial = 0
    /// Every chunk held, both files synced.
    case complete = 1
    /// Complete, and the whole file once found to match its record's hash.
    case completeVerified = 2
    /// Every chunk held, not synced.
    case whole = 3
    /// Whole, and the whole file once found to match its record's hash.
    case wholeVerified = 4

    /// The state of an entry holding every chunk.
    init(synced: Bool, verified: Bool) {
        switch (synced, verified) {
        case (true, false): self = .complete
        case (true, true): self = .completeVerified
        case (false, false): self = .whole
        case (false, true): self = .wholeVerified
        }
    }
}

/// One row of `coven_cache`.
struct CacheEntryRow {
    var object: String
    var size: Int64
    var chunks: [UInt8]
    var bytes: Int64
    var state: CacheState
    /// Every chunk held and both files synced: the file can be handed to other programs.
    var complete: Bool { state == .complete || state == .completeVerified }
    /// Every chunk held, synced or not (not a partial).
    var whole: Bool { state != .partial }
    /// Every chunk held, and once read whole and found to match the record's hash.
    var verified: Bool { state == .completeVerified || state == .wholeVerified }
    var lastRead: Double

    init(row: Row) {
        object = row.string("object") ?? ""
        size = row.int("size") ?? 0
        chunks = row.bytes("chunks") ?? []
        bytes = row.int("bytes") ?? 0
        // An unknown state (never written by this code) is treated as a partial: resumed, checked.
        state = CacheState(rawValue: row.int("complete") ?? 0) ?? .partial
        lastRead = row["last_read"].textValue.flatMap(Double.init) ?? 0
    }
}

/// A set of chunk indexes as a little-endian bitmap (bit `i % 8` of byte `i / 8`).
struct ChunkBitmap {
    var bytes: [UInt8]
    let count: Int64

    init(count: Int64, bytes: [UInt8] = []) {
        self.count = count
        let needed = Int((count + 7) / 8)
        var bytes = bytes
        if bytes.count < needed { bytes += [UInt8](repeating: 0, count: needed - bytes.count) }
        if bytes.count > needed { bytes.removeLast(bytes.count - needed) }
        self.bytes = bytes
    }

    func contains(_ chunk: Int64) -> Bool {
        guard chunk >= 0, chunk < count else { return false }
        return bytes[Int(chunk / 8)] & (1 << UInt8(chunk % 8)) != 0
    }

    mutating func insert(_ chunk: Int64) {
        bytes[Int(chunk / 8)] |= 1 << UInt8(chunk % 8)
    }

    mutating func remove(_ chunk: Int64) {
        bytes[Int(chunk / 8)] &= ~(1 << UInt8(chunk % 8))
    }

    var isFull: Bool { (0..<count).allSatisfy(contains) }

    /// Whether every chunk of this set is also in `other`.
    func isSubset(of other: ChunkBitmap) -> Bool {
        zip(bytes, other.bytes).allSatisfy { $0 & ~$1 == 0 } && bytes.count <= other.bytes.count
    }

    /// The plaintext bytes the set chunks hold in a file of `size` bytes.
    func heldBytes(size: Int64) -> Int64 {
        var total: Int64 = 0
        for chunk in 0..<count where contains(chunk) {
            total += Int64(ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size).count)
        }
        return total
    }
}

/// The seconds since the epoch, as coven_cache stores times.
func cacheNow() -> Double { Date().timeIntervalSince1970 }

/// The one owner of the file cache on a device: `coven_cache` (its entries, which chunks each
/// holds, when each was read), the files under `<db>.d/cache/`, the budget and the trims, and
/// the sweeps of what a crash left. Readers record what they fetched through it; `status`
/// reads its summary.
///
/// ```swift
/// let removed = try Cache(device).clearCache()
/// try Cache(device).setCacheBudget("2GiB")
/// ```
public struct Cache {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }


    // MARK: The one writer of coven_cache (with the removals and trims below)

    /// Marks an entry read now, for the trims (oldest read first).
    func touchCacheEntry(_ object: String) throws {
        try device.database.run("UPDATE coven_cache SET last_read = ?2 WHERE object = ?1", [object, cacheNow()])
    }

    /// Starts an entry for a read that fetches chunks of `object` (nothing held yet).
    func beginCacheEntry(_ object: String, size: Int64, chunks: [UInt8]) throws {
        try device.database.run("""
            INSERT INTO coven_cache (object, size, chunks, bytes, complete, last_read, touched)
            VALUES (?1, ?2, ?3, 0, 0, ?4, ?4) ON CONFLICT (object) DO NOTHING
            """, [object, size, chunks, cacheNow()])
    }

    /// Records which chunks an entry holds, partial from now on (chunks forgotten, files gone).
    func recordCacheChunks(_ object: String, chunks: [UInt8], bytes: Int64) throws {
        try device.database.run("UPDATE coven_cache SET chunks = ?2, bytes = ?3, complete = 0 WHERE object = ?1", [object, chunks, bytes])
    }

    /// Records an entry's chunks and state after a read wrote into it.
    func recordCacheEntry(_ object: String, size: Int64, chunks: [UInt8], bytes: Int64, state: CacheState, now: Double) throws {
        try device.database.run("""
            INSERT INTO coven_cache (object, size, chunks, bytes, complete, last_read, touched) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
            ON CONFLICT (object) DO UPDATE SET size = excluded.size, chunks = excluded.chunks, bytes = excluded.bytes,
                complete = excluded.complete, last_read = excluded.last_read, touched = excluded.touched
            """, [object, size, chunks, bytes, state.rawValue, now])
    }

    /// The paths of the cache entry of `object`.
    public func cachePaths(object: String) -> CacheEntryPaths {
        CacheEntryPaths(paths: device.paths, object: object)
    }

    /// SQL true of a kept file record `f`: pinned, or in a namespace the manifest declares kept.
    /// `?1` is ``keptNamespaces()``.
    static let keptFile = "(f.id IN (SELECT file FROM coven_pins) OR f.namespace IN (SELECT value FROM json_each(?1)))"

    /// The namespaces the manifest declares kept, as the JSON array ``keptFile`` takes.
    func keptNamespaces() throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: device.manifest.namespaces.filter(\.kept).map(\.name)), as: UTF8.self)
    }

    /// Objects of kept files: pinned, or in a namespace the manifest declares kept.
    func keptObjects() throws -> Set<String> {
        let rows = try device.database.query(
            "SELECT DISTINCT f.object AS object FROM coven_files f WHERE \(Self.keptFile)",
            [try keptNamespaces()])
        return Set(rows.compactMap { $0.string("object") })
    }

    func cacheRow(_ object: String) throws -> CacheEntryRow? {
        try device.database.queryOne("SELECT * FROM coven_cache WHERE object = ?1", [object]).map(CacheEntryRow.init)
    }

    /// Removes one cache entry if nobody reads it now. Returns the bytes it held, or nil when
    /// it is being read (a shared lock on its data file).
    func removeCacheEntry(_ entry: CacheEntryRow) throws -> Int64? {
        let files = cachePaths(object: entry.object)
        let fd = Foundation.open(files.data, O_RDONLY | O_CLOEXEC)
        defer { if fd >= 0 { close(fd) } }
        if fd >= 0 { guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return nil } }
        // Forget the entry first, noting its files as to be removed (``uncacheNotes``): never a
        // row claiming chunks that are gone, and a crash before the unlinks leaves the note,
        // which the next open acts on (``removeUncachedFiles()``).
        let note = entry.object
        try device.database.transaction {
            try device.database.run("DELETE FROM coven_cache WHERE object = ?1", [entry.object])
            try CheckedBytes(device).setProof("cache:" + entry.object, nil)
            try uncacheNotes.set(note, entry.object)
        }
        if unlinkCacheFiles(files) { try? uncacheNotes.set(note, nil) }
        return entry.bytes
    }

    /// The forgotten entries whose files are still to be removed, by object (`coven_uncache`,
    /// whose one writer this is).
    var uncacheNotes: Journal { Journal(database: device.database, table: "coven_uncache") }

    /// Forgets the cache entry of `object`, inside the caller's transaction, once no record
    /// here reads the object from storage any more (make-device-only switched its files: the
    /// copy is their original here, and the bytes are not kept twice). Its files are noted as
    /// to be removed; ``removeForgottenCacheFiles(objects:)`` removes them after the commit (a
    /// crash before leaves the note, which the next open acts on).
    func forgetCacheEntry(object: String) throws {
        guard try cacheRow(object) != nil else { return }
        let stored = try device.database.scalar("SELECT count(*) FROM coven_files WHERE object = ?1 AND place = \(Coordinates.Place.stored.sql)", [object])
        guard stored.intValue ?? 0 == 0 else { return }
        try device.database.run("DELETE FROM coven_cache WHERE object = ?1", [object])
        try uncacheNotes.set(object, object)
    }

    /// Removes the files of the entries ``forgetCacheEntry(object:)`` forgot, once its
    /// transaction has committed; best effort.
    func removeForgottenCacheFiles(objects: [String]) {
        for object in objects {
            // Only while noted and not made again since.
            guard let forgotten = try? uncacheNotes.value(object) != nil && cacheRow(object) == nil, forgotten else { continue }
            if unlinkCacheFiles(cachePaths(object: object)) { try? uncacheNotes.set(object, nil) }
        }
    }

    /// Removes an entry's two files; false if one is still there.
    private func unlinkCacheFiles(_ files: CacheEntryPaths) -> Bool {
        [files.data, files.tags].allSatisfy { (path: String) in unlink(path) == 0 || errno == ENOENT }
    }

    // MARK: - Trimming

    /// Trims the cache to its budgets: each namespace's own budget from the manifest, then the
    /// device's. Removes what was read longest ago first; never a kept file's entry, never one
    /// being read, never `sparing`.
    ///
    /// - Parameter sparing: an object the caller is reading or has just fetched.
    /// - Returns: the bytes removed.
    /// - Throws: `.sql`, `.io`.
    @discardableResult
    public func trimCache(sparing: String? = nil) throws -> Int64 {
        var removed: Int64 = 0
        for namespace in device.manifest.namespaces {
            if let budget = namespace.budget {
                removed += try trim(to: budget, namespace: namespace.name, sparing: sparing)
            }
        }
        if let budget = try cacheBudget().bytes {
            removed += try trim(to: budget, namespace: nil, sparing: sparing)
        }
        return removed
    }

    /// Entries the trims may take, as SQL over `coven_cache c`: not a kept file's, not `?2`
    /// (the entry spared), and with `?3` not NULL only those of that namespace's files. `?1` is
    /// the manifest's kept namespaces, as a JSON array.
    private static let trimmable = """
        c.object != ?2
        AND c.object NOT IN (SELECT f.object FROM coven_files f WHERE \(keptFile))
        AND (?3 IS NULL OR c.object IN (
            SELECT f.object FROM coven_files f WHERE f.namespace = ?3))
        """

    /// Removes what was read longest ago among the entries a budget covers (a namespace's, or
    /// with nil every one, kept files' aside) until they hold no more than `budget` bytes; passes
    /// over entries being read and never takes `sparing`, though its bytes count. Costs one read
    /// of a total while the whole cache is within the budget (the check after every read), one
    /// sum over the entries otherwise, and then only the oldest entries.
    private func trim(to budget: Int64, namespace: String?, sparing: String?) throws -> Int64 {
        // Every budget covers at most every entry: within the budget, nothing to do.
        guard try cacheBytes() > budget else { return 0 }
        let parameters = try trimParameters(sparing: sparing ?? "", namespace: namespace)
        // The spared entry counts toward the budget; it is only never taken.
        let used = try device.database.scalar("SELECT coalesce(sum(c.bytes), 0) FROM coven_cache c WHERE \(Self.trimmable)",
                                       [parameters[0], SQLValue.text(""), parameters[2]]).intValue ?? 0
        return try removeOldest(parameters) { used - $0 <= budget }
    }

    /// The parameters of ``trimmable``.
    private func trimParameters(sparing: String, namespace: String?) throws -> [SQLValue] {
        [.text(try keptNamespaces()), .text(sparing), namespace.map { .text($0) } ?? .null]
    }

    /// Removes the ``trimmable`` entries read longest ago first, a batch at a time, until
    /// `enough` says so of the bytes removed or none is left; passes over entries being read.
    ///
    /// - Returns: the bytes removed.
    private func removeOldest(_ parameters: [SQLValue], until enough: (Int64) -> Bool) throws -> Int64 {
        var removed: Int64 = 0
        var busy: Set<String> = []
        while !enough(removed) {
            // The oldest few not yet passed over, in the order trims take them.
            let rows = try device.database.query(
                "SELECT c.* FROM coven_cache c WHERE \(Self.trimmable) ORDER BY c.last_read, c.object LIMIT ?4",
                parameters + [.integer(Int64(busy.count + Self.trimBatch))])
            let entries = rows.map(CacheEntryRow.init).filter { !busy.contains($0.object) }
            guard !entries.isEmpty else { break }
            for entry in entries {
                if let freed = try removeCacheEntry(entry) { removed += freed } else { busy.insert(entry.object) }
                if enough(removed) { break }
            }
        }
        return removed
    }

    /// Entries a trim reads at a time.
    static let trimBatch = 64

    /// Makes room on the disk for `bytes` more of cache (plus ``roomMargin``) by removing the
    /// entries read longest ago, whatever the budget: kept files' and `sparing` never, entries
    /// being read passed over. Does nothing while the disk has the room. The disk fills with
    /// other programs' files too; then what was read longest ago gives way to what is read now.
    ///
    /// - Returns: the bytes removed.
    @discardableResult
    func makeRoom(for bytes: Int64, sparing: String) throws -> Int64 {
        guard bytes > 0 else { return 0 }
        func free() -> Int64? {
            var info = statvfs()
            guard statvfs(device.paths.cache, &info) == 0 else { return nil }
            return Int64(info.f_bavail) * Int64(info.f_frsize)
        }
        guard let before = free(), before < bytes + Self.roomMargin else { return 0 }
        // Stops once the bytes removed cover the shortfall, even if the disk shows less free:
        // a file another program holds open (a path `coven get` printed) frees its blocks only
        // when closed, and the whole cache must not go for it.
        let shortfall = bytes + Self.roomMargin - before
        return try removeOldest(try trimParameters(sparing: sparing, namespace: nil)) { removed in
            removed >= shortfall || (free() ?? 0) >= bytes + Self.roomMargin
        }
    }

    /// Room left beside a fetch for the device's records (SQLite's journal) and the tags.
    static let roomMargin: Int64 = 4 << 20

    /// Sets the device's cache budget (bytes, `default` or `keep-all`), stores the choice and
    /// trims to it at once.
    ///
    /// - Parameter choice: a byte count (at least 0), `"default"` or `"keep-all"`.
    /// - Returns: the bytes the trim removed.
    /// - Throws: `.usage` for anything else.
    @discardableResult
    public func setCacheBudget(_ choice: String) throws -> Int64 {
        let value: String
        switch choice {
        case "default", "keep-all":
            value = choice
        default:
            guard let bytes = ByteSize.parse(choice), bytes >= 0 else {
                throw CovenError(.usage, "'\(choice)' is not a budget", hint: "give bytes (5000000000, 2GiB), default or keep-all")
            }
            value = String(bytes)
        }
        try device.database.transaction { try device.setSetting("cache_budget", value) }
        return try trimCache()
    }

    /// Removes every cached file coven can fetch again; kept files, uploads not yet sent (never
    /// in the cache) and files being read stay. The budget is unchanged.
    ///
    /// - Returns: the bytes removed.
    public func clearCache() throws -> Int64 {
        let kept = try keptObjects()
        var removed: Int64 = 0
        for row in try device.database.query("SELECT * FROM coven_cache ORDER BY object") {
            let entry = CacheEntryRow(row: row)
            guard !kept.contains(entry.object) else { continue }
            removed += try removeCacheEntry(entry) ?? 0
        }
        return removed
    }

    // MARK: - Maintenance at open

    /// The age after which an untouched partial goes: seven days, the longest a link lasts.
    public static let partialLifetime: TimeInterval = 7 * 24 * 3600

    /// How often an open lists the cache folder for files no entry names: a day.
    static let cacheSweepInterval: TimeInterval = 24 * 3600

    /// Removes partial downloads untouched for seven days (by their data file's modification
    /// time) unless they are a kept file's, the files of entries a crash forgot before removing
    /// them, and, once a day, files in the cache folder no entry names. Runs when the device
    /// opens for writing; with no partial and no crash behind it, that costs two small queries
    /// whatever the number of entries.
    func removeStalePartials(now: Date = Date()) {
        guard !device.readOnly else { return }
        removeUncachedFiles(now: now)
        sweepCacheFolder(now: now)
        guard let rows = try? device.database.query("SELECT * FROM coven_cache WHERE complete = 0"), !rows.isEmpty else { return }
        let kept = (try? keptObjects()) ?? []
        for row in rows {
            let entry = CacheEntryRow(row: row)
            guard !kept.contains(entry.object) else { continue }
            let files = cachePaths(object: entry.object)
            var info = stat()
            // An entry with no data file yet counts from its row's making: a batch (fetch-kept,
            // `get` of many) begins the rows of a window of files before its workers make their
            // files, and an open meanwhile must not take the rows, nor files made since.
            let touched = stat(files.data, &info) == 0 ? Double(info.st_mtim.tv_sec) : (row["touched"].textValue.flatMap(Double.init) ?? 0)
            if now.timeIntervalSince1970 - touched >= Self.partialLifetime {
                _ = try? removeCacheEntry(entry)
            }
        }
    }

    /// Removes the files of entries forgotten by a process that died before removing them
    /// (their `uncache:` notes), unless the entry was made again since.
    func removeUncachedFiles(now: Date = Date()) {
        guard let rows = try? uncacheNotes.page(after: nil, limit: Int.max) else { return }
        for (key, object) in rows {
            let files = cachePaths(object: object)
            let made: Bool
            do { made = try cacheRow(object) != nil } catch { continue }
            if !made {
                // A reader makes its row before its files: a file younger than a minute may be
                // a new entry's whose row is being made now; a later open decides.
                var info = stat()
                if stat(files.data, &info) == 0, now.timeIntervalSince1970 - Double(info.st_mtim.tv_sec) <= 60 { continue }
                guard unlinkCacheFiles(files) else { continue }
            }
            try? uncacheNotes.set(key, nil)
        }
    }

    /// Once a day, removes files in the cache folder that no entry names: left by a power cut
    /// that lost the commit of an entry's row but not its files (reads commit without waiting
    /// for the disk), or by anything else. Listing the folder costs time in proportion to the
    /// entries (about 18 ms for 100,000), so not at every open.
    func sweepCacheFolder(now: Date = Date()) {
        let last = ((try? device.setting("cache_swept_at")) ?? nil).flatMap(Double.init) ?? 0
        guard now.timeIntervalSince1970 - last >= Self.cacheSweepInterval || now.timeIntervalSince1970 < last else { return }
        try? device.database.transaction { try device.setSetting("cache_swept_at", String(Int64(now.timeIntervalSince1970))) }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: device.paths.cache),
              let objects = try? device.database.query("SELECT object FROM coven_cache") else { return }
        let known = Set(objects.compactMap { $0.string("object") }.map { cachePaths(object: $0).data })
        for name in names {
            let path = device.paths.cache + "/" + name
            let data = path.hasSuffix(".tags") ? String(path.dropLast(5)) : path
            guard !known.contains(data) else { continue }
            // A reader creates its row before its files, so an unnamed file is garbage unless a
            // row is being made right now; leave files younger than a minute alone.
            var info = stat()
            if stat(path, &info) == 0, now.timeIntervalSince1970 - Double(info.st_mtim.tv_sec) > 60 {
                unlink(path)
            }
        }
    }
}

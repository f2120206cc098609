import CLinux
import Foundation

// MARK: - A read from the cache and storage

/// What a deferred read (fetch-kept's) held, for its caller to record: the entry's chunks, the
/// bytes they hold and its state once the caller has synced its files (a whole entry is
/// recorded complete only then). @unchecked: written by the reading thread, read by the caller
/// after the read ended (handed over under the run's lock).
final class DeferredCacheRecord: @unchecked Sendable {
    var chunks: [UInt8] = []
    var bytes: Int64 = 0
    var state: CacheState = .partial
}

/// One read of a stored file through the cache. Holds a shared lock on the cache entry's data
/// file while it lives, so trims and `cache clear` pass over it.
final class StoredRead {
    let device: Device
    let record: FileRecord
    let object: String
    let size: Int64
    let files: CacheEntryPaths
    let stop: Stop
    /// Whether a read that completes the entry syncs its files and marks it complete (for
    /// `coven get`, which hands the file to other programs), or leaves that to a later `get`.
    let durable: Bool
    private var dataFD: Int32 = -1
    private var tagsFD: Int32 = -1
    private var bitmap: ChunkBitmap
    private var pending: [Int64] = []
    private var pendingBytes: Int64 = 0
    private var dropped: [Int64] = []
    /// The entry was complete and verified against the record's hash when the read began.
    private var verified = false
    /// This read checked the whole file against the record's hash.
    private var hashChecked = false
    private var report = ReadReport(source: .cache)
    /// The connection's `synchronous` setting before this read relaxed it (2: FULL).
    private var restoredSynchronous: Int64 = 2
    /// Whether this read relaxed the connection's `synchronous` setting.
    private var relaxed = false

    /// How many plaintext bytes are written between two records of their chunks (a read
    /// stopped part way keeps what was recorded).
    static let recordEvery: Int64 = 16 << 20
    /// Chunks per request: 1 MiB of plaintext.
    static let runChunks: Int64 = 16

    /// - Parameters:
    ///   - caching: false for a read that keeps nothing, on a disk with no room for even the
    ///     entry's record: every chunk is fetched and checked, none is written or recorded.
    ///   - keepsFetched: false for a read that serves the chunks the cache holds but adds
    ///     nothing to it (make-device-only, whose copy holds the bytes): no entry is made and
    ///     fetched chunks are not written.
    ///   - deferred: for fetch-kept's workers: the entry's row was begun (empty) by the caller,
    ///     who records what the read held later, with other entries, after syncing their files
    ///     at once; the read touches no database.
    init(device: Device, record: FileRecord, durable: Bool, stop: Stop, caching: Bool = true, keepsFetched: Bool = true,
         deferred: DeferredCacheRecord? = nil) throws {
        self.device = device
        self.deferred = deferred
        self.caching = caching
        self.keepsFetched = keepsFetched
        self.record = record
        self.object = record.coordinates.object
        self.size = record.size
        self.files = Cache(device).cachePaths(object: record.coordinates.object)
        self.stop = stop
        self.durable = durable
        _ = try FileKey(hex: record.coordinates.key)  // a bad key fails here, before any file is made
        bitmap = ChunkBitmap(count: ObjectLayout.chunkCount(plaintextSize: record.size))
        if !caching {
            report.notKept = true
        } else if try keepsFetched || Cache(device).cacheRow(object) != nil {
            try openEntry()
        }
    }

    /// Where a deferred read leaves what it held (``DeferredCacheRecord``), nil otherwise.
    let deferred: DeferredCacheRecord?
    /// Whether fetched chunks are written to the cache (see ``init(device:record:durable:stop:caching:keepsFetched:)``).
    let keepsFetched: Bool
    /// Run buffers to read through, when the caller keeps its own (their count is the depth).
    var buffers: [RunBuffer] = []
    /// The reading worker's connection and buffer, kept from file to file (fetch-kept's).
    var session: ReadSession?

    /// Whether this read keeps what it fetches (see ``init(device:record:durable:stop:caching:keepsFetched:)``).
    let caching: Bool

    /// Creates the entry's row and files if needed, locks the data file shared and loads the
    /// bitmap. A row comes before its files, so a file without a row is garbage.
    private func openEntry() throws {
        if deferred != nil {
            // The caller begun the row (empty) before handing the file out: only the files
            // (the cache folder made again only when it is gone).
            try openFiles()
            return
        }
        let db = device.database
        // The cache's bookkeeping may lose its last commits to a power cut (never to a crash of
        // the process): every cached chunk is checked against its tag when read, so a lost
        // record or lost bytes only mean fetching the chunk again. So commits here need not
        // wait for the disk; `close()` restores the device's setting.
        // (The setting it had is restored: a fetch-kept worker's connection runs relaxed throughout.)
        restoredSynchronous = try db.scalar("PRAGMA synchronous").intValue ?? 2
        try db.execute("PRAGMA synchronous = NORMAL")
        relaxed = true
        if try Cache(device).cacheRow(object) == nil {
            try db.transaction {
                try Cache(device).beginCacheEntry(object, size: size, chunks: bitmap.bytes)
            }
        }
        // A cache folder someone removed is made again, and an entry whose files are gone is
        // not cached: its record is cleared before the files are made afresh.
        try AtomicFile.makeFolder(device.paths.cache, mode: 0o700)
        if access(files.data, F_OK) != 0 || access(files.tags, F_OK) != 0, try Cache(device).cacheRow(object) != nil {
            try db.transaction {
                try Cache(device).recordCacheChunks(object, chunks: [], bytes: 0)
                try CheckedBytes(device).setProof("cache:" + object, nil)
            }
        }
        try openFiles()
        if let row = try Cache(device).cacheRow(object), row.size == size {
            bitmap = ChunkBitmap(count: bitmap.count, bytes: row.chunks)
            verified = row.verified && bitmap.isFull
        }
    }

    /// Opens (or makes) the entry's data and tags files, the data file locked shared and both
    /// the entry's size.
    private func openFiles() throws {
        for _ in 0..<3 {
            var fd = Foundation.open(files.data, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            if fd < 0, errno == ENOENT {
                // The cache folder was removed: made again.
                try AtomicFile.makeFolder(device.paths.cache, mode: 0o700)
                fd = Foundation.open(files.data, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            }
            guard fd >= 0 else { throw CovenError.posix("open cache file", path: files.data) }
            while flock(fd, LOCK_SH) != 0 && errno == EINTR {}
            // A trim may have removed the file between open and lock: use the file the path names.
            var held = stat(), named = stat()
            if fstat(fd, &held) == 0, stat(files.data, &named) == 0, held.st_ino == named.st_ino, held.st_nlink > 0 {
                dataFD = fd
                break
            }
            Foundation.close(fd)
        }
        guard dataFD >= 0 else { throw CovenError(.busy, "the cache entry of file '\(record.id)' keeps being removed") }
        tagsFD = Foundation.open(files.tags, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard tagsFD >= 0 else { throw CovenError.posix("open cache file", path: files.tags) }
        var info = stat()
        if fstat(dataFD, &info) == 0, Int64(info.st_size) != size {
            guard ftruncate(dataFD, off_t(size)) == 0 else { throw CovenError.posix("size cache file", path: files.data) }
        }
    }

    func close() {
        if relaxed { try? device.database.execute("PRAGMA synchronous = \(restoredSynchronous)") }
        relaxed = false
        if dataFD >= 0 { Foundation.close(dataFD) }
        if tagsFD >= 0 { Foundation.close(tagsFD) }
        dataFD = -1
        tagsFD = -1
    }

    deinit { close() }

    // MARK: Planning

    /// Cuts the chunks into runs: cached ones, and missing ones up to 1 MiB per request.
    private func plan(_ chunks: Range<Int64>) -> [ReadStep] {
        var steps: [ReadStep] = []
        var chunk = chunks.lowerBound
        while chunk < chunks.upperBound {
            let cached = bitmap.contains(chunk)
            var end = chunk + 1
            while end < chunks.upperBound, end - chunk < Self.runChunks, bitmap.contains(end) == cached { end += 1 }
            steps.append(cached ? .cached(chunk..<end) : .fetch(chunk..<end))
            chunk = end
        }
        return steps
    }

    // MARK: Reading

    /// Reads `wanted` into `output`.
    func read(_ wanted: Range<Int64>, output: (UnsafeRawBufferPointer) throws -> Void) throws -> ReadReport {
        let chunks = ObjectLayout.chunks(covering: wanted, plaintextSize: size)
        let whole = wanted == 0..<size
        // A whole read of an empty file still fetches and checks its one (empty) chunk.
        let steps = plan(whole && size == 0 ? 0..<1 : chunks)
        // A whole read checks the file against its record's hash before its last bytes go out.
        // A cache entry that passed that check once and whose every chunk passes its tag now
        // holds exactly the bytes checked, so it is not hashed again.
        let allCached = steps.allSatisfy { if case .cached = $0 { return true } else { return false } }
        let hasher = whole && !(verified && allCached) ? try SHA256() : nil
        makeRoom(fetching: steps)
        // While this thread hashes, the producer opens and checks runs on one thread, so the two
        // keep both cores busy without queueing for one; otherwise it uses both.
        let producer = Prefetcher(
            connector: StorageConnector(location: device.storage, environment: device.storageEnvironment), object: object, keyHex: record.coordinates.key,
            size: size, steps: steps, dataFD: dataFD, tagsFD: tagsFD,
            // A deferred read's files are synced with a batch of others, by one sync of the
            // filesystem: their writeback is left to it rather than started file by file.
            writing: caching && keepsFetched ? .init(dataPath: files.data, tagsPath: files.tags, startWriteback: durable && deferred == nil, required: durable) : nil,
            threads: hasher == nil ? ChunkRun.threads : 1, depth: buffers.isEmpty ? 3 : buffers.count,
            reusing: session?.buffers ?? buffers, session: session)
        producer.start()
        defer { producer.stop() }
        var failure: Error?
        do {
            for index in steps.indices {
                if let reason = stop.reason {
                    throw CovenError(.interrupted, "the read of file '\(record.id)' stopped: \(reason)", details: ["file": record.id])
                }
                let run = try producer.next()
                defer { producer.recycle(run) }
                try take(run, wanted: wanted, last: index == steps.count - 1, hasher: hasher, output: output)
            }
        } catch let error as CovenError where error.code == .missing {
            failure = missing(error)
        } catch {
            failure = error
        }
        producer.stop()
        // Record what was written and checked, also after a failure: a partial keeps it.
        do {
            try keepingIfRoom { try recordChunks() }
        } catch where failure == nil {
            failure = error
        } catch {}
        if let failure { throw failure }
        return report
    }

    /// Room for what this read fetches: on a full disk the entries read longest ago give way.
    /// (A durable read, `get`, made room before it began, and was refused if even that left
    /// too little: ``Device/checkRoom(for:)``.)
    private func makeRoom(fetching steps: [ReadStep]) {
        guard !durable && caching && keepsFetched else { return }
        let fetching = steps.reduce(Int64(0)) { total, step in
            guard case .fetch(let run) = step else { return total }
            return total + ObjectLayout.encryptedRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
                - ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: size).lowerBound
        }
        _ = try? Cache(device).makeRoom(for: fetching, sparing: object)
    }

    /// One run the producer opened and checked: counted, kept (recorded later, or its bad
    /// chunks forgotten and rewritten), hashed on a whole read (the last run checks the
    /// record's hash before its bytes go out), and the part of it in `wanted` handed to `output`.
    private func take(_ run: RunBuffer, wanted: Range<Int64>, last: Bool, hasher: SHA256?,
                      output: (UnsafeRawBufferPointer) throws -> Void) throws {
        if run.transferred > 0 {
            report.source = .storage
            report.bytesFetched += run.transferred
            report.requests += run.fromCache ? 0 : 1
        }
        if run.fromCache {
            if !run.refetched.isEmpty {
                // Forget the bad chunks first, so a crash now never leaves them recorded;
                // then write the good bytes fetched for them.
                report.chunksRefetched += run.refetched.count
                report.requests += 1
                try forget(run.refetched)
                if keepsFetched { try keepingIfRoom { try store(run, only: run.refetched) } }
            }
        } else if run.stored {
            // The producer wrote the run to the cache files: record it (later).
            pending.append(contentsOf: run.chunks)
            pendingBytes += Int64(run.plainCount)
            if pendingBytes >= Self.recordEvery { try keepingIfRoom { try recordChunks() } }
        } else if run.noRoom {
            report.notKept = true
        }
        let runStart = ObjectLayout.plaintextRange(chunk: run.chunks.lowerBound, plaintextSize: size).lowerBound
        let from = Int(max(runStart, wanted.lowerBound) - runStart)
        let to = Int(min(runStart + Int64(run.plainCount), wanted.upperBound) - runStart)
        let slice = from < to ? UnsafeRawBufferPointer(rebasing: run.plainBytes[from..<to]) : UnsafeRawBufferPointer(start: nil, count: 0)
        if let hasher {
            hasher.update(slice)
            if last {
                let digest = hasher.finish().hex
                if let expected = record.hash, digest != expected {
                    // The chunks passed their tags but the file is not the one the
                    // record names: forget them, serve nothing more.
                    dropped.append(contentsOf: run.chunks)
                    throw CovenError(.integrity, "file '\(record.id)' does not match its recorded hash",
                                     cause: "sha256 \(digest), recorded \(expected)", details: ["file": record.id, "reason": "hash"])
                }
                hashChecked = record.hash != nil
            }
        }
        if from < to { try output(slice) }
        report.bytesRead += Int64(max(0, to - from))
    }

    /// Storage confirms nothing at the path: the error names the file and the device that stored it.
    private func missing(_ error: CovenError) -> CovenError {
        let parts = object.split(separator: "/")
        let uploader = parts.count >= 3 ? String(parts[1]) : ""
        return CovenError(.missing, "storage holds nothing at the path file '\(record.id)' names", cause: error.cause,
                          details: ["file": record.id, "device": uploader, "key": object])
    }

    /// Runs a write to the cache, or to its records; when the disk has no room, a read that need
    /// not keep its bytes goes on without it (the bytes it could not record are fetched again
    /// by a later read), and says so in its report.
    private func keepingIfRoom(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as CovenError where error.code == .noRoom && !durable {
            pending.removeAll()
            pendingBytes = 0
            report.notKept = true
        }
    }

    /// Writes the `only` chunks of a cached run, fetched again, to the cache; they are recorded
    /// at the next ``recordChunks()``.
    private func store(_ run: RunBuffer, only: [Int64]) throws {
        let base = ObjectLayout.plaintextRange(chunk: run.chunks.lowerBound, plaintextSize: size).lowerBound
        for chunk in only {
            let plain = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
            let offset = Int(plain.lowerBound - base)
            let k = Int(chunk - run.chunks.lowerBound)
            try pwriteAll(dataFD, UnsafeRawBufferPointer(rebasing: run.plainBytes[offset..<(offset + plain.count)]), at: plain.lowerBound, path: files.data)
            try pwriteAll(tagsFD, UnsafeRawBufferPointer(rebasing: run.tagBytes[(k * 16)..<(k * 16 + 16)]), at: chunk * 16, path: files.tags)
            pending.append(chunk)
            pendingBytes += Int64(plain.count)
        }
    }

    /// Records the written chunks, with the read time.
    ///
    /// A chunk is recorded only after its bytes and tag are written. They need not be on the
    /// disk yet: a chunk a power cut loses reads back wrong, fails its tag and is fetched again,
    /// never served. A durable read marks the entry complete only after both files are synced,
    /// since `coven get` hands the complete file to other programs, which do not check tags;
    /// another read marks it whole but unsynced (3, or 4 once hash-checked), which `get` reads
    /// through, checking every tag, and syncs before handing it out.
    private func recordChunks() throws {
        // Not without an entry (a read keeping nothing, that found none).
        guard caching, dataFD >= 0 else { return }
        let chunks = pending.filter { !dropped.contains($0) }
        pending.removeAll()
        pendingBytes = 0
        if let deferred {
            // Left for the caller, who syncs the files before it records an entry complete.
            for chunk in chunks { bitmap.insert(chunk) }
            for chunk in dropped { bitmap.remove(chunk) }
            dropped.removeAll()
            deferred.chunks = bitmap.bytes
            deferred.bytes = bitmap.heldBytes(size: size)
            deferred.state = bitmap.isFull ? CacheState(synced: true, verified: hashChecked) : .partial
            return
        }
        let db = device.database
        let existing = try Cache(device).cacheRow(object).flatMap { $0.size == size ? $0 : nil }
        var next = ChunkBitmap(count: bitmap.count, bytes: existing?.chunks ?? [])
        for chunk in chunks { next.insert(chunk) }
        // The chunks whose bytes this read made sure are on the disk.
        var synced: ChunkBitmap?
        if durable && next.isFull && !(existing?.complete ?? false) {
            guard fdatasync(dataFD) == 0 else { throw CovenError.posix("sync cache file", path: files.data) }
            guard fdatasync(tagsFD) == 0 else { throw CovenError.posix("sync cache file", path: files.tags) }
            synced = next
        }
        try db.transaction {
            let row = try Cache(device).cacheRow(object).flatMap { $0.size == size ? $0 : nil }
            var current = ChunkBitmap(count: bitmap.count, bytes: row?.chunks ?? [])
            for chunk in chunks { current.insert(chunk) }
            for chunk in dropped { current.remove(chunk) }
            bitmap = current
            let now = cacheNow()
            let checked = hashChecked || (row?.verified ?? false)
            // Complete (synced) when it was so already: this read wrote nothing new into it (a
            // refetch forgets the chunk first, which makes the entry partial until it is recorded
            // again); or when this read synced every chunk now recorded (another reader may have
            // recorded chunks since, unsynced: then it stays whole, for the next `get` to sync).
            let isSynced = (row?.complete ?? false) || (synced.map { current.isSubset(of: $0) } ?? false)
            let state = !current.isFull ? CacheState.partial : CacheState(synced: isSynced, verified: checked)
            try Cache(device).recordCacheEntry(object, size: size, chunks: current.bytes, bytes: current.heldBytes(size: size), state: state, now: now)
        }
        dropped.removeAll()
    }

    /// Clears chunks' bits at once.
    private func forget(_ chunks: [Int64]) throws {
        let db = device.database
        try db.transaction {
            guard let row = try Cache(device).cacheRow(object) else { return }
            var current = ChunkBitmap(count: bitmap.count, bytes: row.chunks)
            for chunk in chunks { current.remove(chunk) }
            try Cache(device).recordCacheChunks(object, chunks: current.bytes, bytes: current.heldBytes(size: size))
        }
    }
}

// MARK: - Whole reads and writes at an offset

func preadAll(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int {
    var done = 0
    while done < buffer.count, let base = buffer.baseAddress {
        let got = pread(fd, base + done, buffer.count - done, off_t(offset) + done)
        if got < 0 && errno == EINTR { continue }
        if got <= 0 { break }
        done += got
    }
    return done
}

func pwriteAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
    var done = 0
    while done < buffer.count, let base = buffer.baseAddress {
        let wrote = pwrite(fd, base + done, buffer.count - done, off_t(offset) + done)
        if wrote < 0 {
            if errno == EINTR { continue }
            throw CovenError.posix("write cache file", path: path)
        }
        done += wrote
    }
}

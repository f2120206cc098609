import CLinux
import Foundation

// MARK: - What a read did

/// Where a read found a file's bytes.
public enum ReadSource: String, Sendable {
    /// The person's original, before upload.
    case original
    /// coven's own copy of app bytes, before upload.
    case copy
    /// The cache, every chunk already held.
    case cache
    /// Storage, for at least one chunk.
    case storage
}

/// What one read did: where the bytes came from and what storage sent.
public struct ReadReport: Sendable {
    /// Where the bytes came from.
    public var source: ReadSource
    /// Sealed bytes received from storage.
    public var bytesFetched: Int64 = 0
    /// Ranged GET requests sent.
    public var requests: Int = 0
    /// Cached chunks that failed their tag and were fetched again (never served).
    public var chunksRefetched: Int = 0
    /// The plaintext bytes written to the output.
    public var bytesRead: Int64 = 0
    /// The disk had no room for some fetched bytes: they went out checked but not kept in the
    /// cache (a read that must keep them, `coven get`, fails with `no_room` instead).
    public var notKept = false
}

/// A range of a file to read: from `offset`, `length` bytes or to the end.
public struct ReadRange: Sendable, Equatable {
    /// The first byte.
    public var offset: Int64
    /// How many bytes; nil for the rest of the file.
    public var length: Int64?

    /// The whole file.
    public static let whole = ReadRange(offset: 0, length: nil)

    /// Creates a range.
    public init(offset: Int64, length: Int64?) {
        self.offset = offset
        self.length = length
    }

    /// The byte range within a file of `size` bytes.
    ///
    /// - Throws: `.rangeOutOfBounds` when it lies outside the file (a read is never short).
    func resolve(size: Int64, file: String) throws -> Range<Int64> {
        let end = length.map { offset.addingReportingOverflow($0) }
        guard offset >= 0, (length ?? 0) >= 0, offset <= size, end.map({ !$0.overflow && $0.partialValue <= size }) ?? true else {
            let text = length.map { "\($0.counted("byte")) at offset \(offset)" } ?? "offset \(offset)"
            throw CovenError(.rangeOutOfBounds, "\(text) lies outside file '\(file)' of \(size.counted("byte"))",
                             details: ["file": file, "size": String(size)])
        }
        return offset..<(end?.partialValue ?? size)
    }
}

// MARK: - Reading

/// Reading files back: a whole file or any range, from the person's original, coven's copy,
/// the cache or storage (fetching only the chunks the range needs, each checked), and holding
/// a whole file in the cache for a path to hand out (`coven cat`, `coven get`). The cache's
/// records are ``Cache``'s; the chunks are read by ``StoredRead``, the one reader of chunks.
///
/// ```swift
/// let report = try Reader(device).readFile(id, range: .bytes(0..<100)) { bytes in ... }
/// ```
public struct Reader {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }
    /// Reads a file, or exactly a range of it, into `output`, from wherever it is: the person's
    /// original before upload (checked first), coven's own copy, the cache, or storage
    /// (spec/files.md "Reading a file").
    ///
    /// From storage it fetches only the encrypted chunks covering the range, neighbouring ones
    /// together up to 1 MiB per request, ahead of the output; checks each chunk as it arrives;
    /// and keeps them in the cache. A cached chunk that fails its tag is fetched again, never
    /// served. A read of the whole file checks it against the record's hash before its last
    /// bytes go out.
    ///
    /// - Parameters:
    ///   - id: the file's id.
    ///   - range: the bytes to read.
    ///   - stop: polled between runs of chunks; a stop asked ends the read with `.interrupted`.
    ///   - output: receives the bytes in order.
    /// - Returns: what the read did.
    /// - Throws: `.fileAbsent`, `.deviceOnly` (on another device only), `.userFileMissing`,
    ///   `.userFileChanged`, `.rangeOutOfBounds`, `.integrity`, `.missing`, `.storage` (offline:
    ///   failure `.network`), `.updateRequired`, `.noRoom`, `.interrupted`.
    @discardableResult
    public func readFile(
        _ id: String, range: ReadRange = .whole, stop: Stop = Stop(),
        output: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> ReadReport {
        let record = try device.requireFile(id)
        let coordinates = record.coordinates
        if coordinates.at == .device {
            guard coordinates.device == device.deviceID else {
                throw deviceOnlyError(record)
            }
            return try readLocal(record, range: range, stop: stop, output: output)
        }
        let wanted = try range.resolve(size: record.size, file: id)
        let read: StoredRead
        do {
            // A device that cannot be written keeps nothing: every chunk is fetched and checked.
            read = try StoredRead(device: device, record: record, durable: false, stop: stop, caching: !device.readOnly)
        } catch let error as CovenError where error.code == .noRoom {
            // Not even the cache entry's record or files fit: what was read longest ago gives
            // way, and failing that the read goes on without the cache.
            _ = try? Cache(device).makeRoom(for: min(Int64(wanted.count), record.size), sparing: coordinates.object)
            do {
                read = try StoredRead(device: device, record: record, durable: false, stop: stop)
            } catch let again as CovenError where again.code == .noRoom {
                read = try StoredRead(device: device, record: record, durable: false, stop: stop, caching: false)
            }
        }
        defer { read.close() }
        var report = try read.read(wanted, output: output)
        if device.readOnly { report.notKept = false } else { _ = try? Cache(device).trimCache(sparing: coordinates.object) }
        return report
    }

    /// Reads a whole stored file for a copy that becomes the file's bytes on this device
    /// (make-device-only), through the same read as ``readFile(_:range:stop:output:)``:
    /// the chunks the cache holds are read from it, each checked against its tag, the others
    /// fetched, and the whole file is checked against the record's hash before its last bytes go
    /// out. Nothing is added to the cache: the copy holds the bytes, and the cache entry goes
    /// once the copy is the file's original here (``Cache(self).forgetCacheEntry(object:)``).
    ///
    /// - Parameter session: the connection and run buffers to read through (their count is the
    ///   read's depth), kept by a caller reading file after file, so their memory is touched
    ///   once and the connection to the server opened once.
    /// - Throws: as ``readFile(_:range:stop:output:)`` for a stored file.
    func readStoredFile(
        _ record: FileRecord, session: ReadSession, stop: Stop, output: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> ReadReport {
        let read = try StoredRead(device: device, record: record, durable: false, stop: stop, keepsFetched: false)
        defer { read.close() }
        read.buffers = session.buffers
        read.session = session
        return try read.read(0..<record.size, output: output)
    }

    func deviceOnlyError(_ record: FileRecord) -> CovenError {
        let holder = record.coordinates.device ?? ""
        if (try? isGone(holder)) == true {
            return CovenError(.deviceOnly, "file '\(record.id)' was on device '\(holder)' only, which was removed from the store: its bytes went with it",
                              hint: "write the file again from a copy you hold, or delete the rows naming it",
                              details: ["file": record.id, "device": holder, "device_gone": "true"])
        }
        return CovenError(.deviceOnly, "file '\(record.id)' is on device '\(holder)' only", hint: "read it on that device, or move it to the cloud there",
                          details: ["file": record.id, "device": holder])
    }

    /// Whether `device` was removed from the store for good (as this device knows).
    func isGone(_ other: String) throws -> Bool {
        try device.database.scalar("SELECT gone FROM coven_device_registry WHERE device = ?1", [other]).intValue == 1
    }

    /// The local bytes of a file on this device only: the original's path or coven's copy.
    func localSource(_ record: FileRecord) throws -> (row: Row, path: String, kind: ReadSource) {
        guard let row = try device.database.queryOne("SELECT * FROM coven_local WHERE object = ?1", [record.coordinates.object]) else {
            throw CovenError(.missing, "this device holds no bytes of file '\(record.id)'", details: ["file": record.id, "device": device.deviceID])
        }
        if row.string("kind") == "user" {
            let pathBytes = row.bytes("path") ?? []
            try Staging(device).checkOriginal(path: pathBytes, recorded: OriginalIdentity(
                size: row.int("size") ?? 0, modifiedSeconds: row.int("modified_seconds") ?? 0,
                modifiedNanos: row.int("modified_nanos") ?? 0, changeStamp: row.string("change_stamp") ?? ""),
                contentHash: row.bytes("content_hash") ?? [])
            return (row, PathText.string(fromOSBytes: pathBytes), .original)
        }
        return (row, device.paths.folder + "/" + (row.string("copy") ?? ""), .copy)
    }

    /// Reads the original or coven's copy of a file on this device only, each chunk checked
    /// against its recorded hash before any of its bytes go out (``LocalRead``).
    private func readLocal(_ record: FileRecord, range: ReadRange, stop: Stop, output: (UnsafeRawBufferPointer) throws -> Void) throws -> ReadReport {
        let (row, path, kind) = try localSource(record)
        let size = row.int("size") ?? record.size
        let wanted = try range.resolve(size: size, file: record.id)
        let display = PathText.display(path)
        func changed(_ chunk: Int64?) -> CovenError {
            let cause = chunk.map { "chunk \($0) differs from its recorded hash" } ?? "its SHA-256 differs from the recorded one"
            return kind == .original
                ? CovenError(.userFileChanged, "'\(display)' changed since it was staged", hint: "stage it again", cause: cause, details: ["path": display, "file": record.id])
                : CovenError(.integrity, "coven's copy of file '\(record.id)' fails its check", cause: cause, details: ["file": record.id, "path": display])
        }
        let fd = PathText.withCString(path) { Foundation.open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else {
            if kind == .original { throw CovenError(.userFileMissing, "'\(display)' is missing", cause: String(cString: strerror(errno)), details: ["path": display, "file": record.id]) }
            if errno == ENOENT {
                throw CovenError(.integrity, "coven's copy of file '\(record.id)' is missing", cause: String(cString: strerror(errno)), details: ["file": record.id, "path": display])
            }
            throw CovenError.posix("open", path: display)
        }
        defer { Foundation.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, Int64(info.st_size) == size else {
            throw changed(nil)
        }
        posix_fadvise(fd, off_t(wanted.lowerBound), off_t(wanted.count), Int32(POSIX_FADV_SEQUENTIAL))
        var read = LocalRead(fd: fd, size: size, chunkHashes: row.bytes("chunk_hashes") ?? [], changed: changed, stop: stop)
        if !read.hasChunkHashes {
            // No chunk hashes recorded: one whole check first, nothing served before it.
            let content = row.bytes("content_hash") ?? []
            let chunks = try LocalRead.deriveChunkHashes(fd: fd, path: path, size: size, contentHash: content, stop: stop, changed: changed)
            CheckedBytes(device).recordDerivedChunkHashes(object: record.coordinates.object, content: content, chunks: chunks)
            read = LocalRead(fd: fd, size: size, chunkHashes: chunks, changed: changed, stop: stop)
        }
        try read.read(wanted, output: output)
        return ReadReport(source: kind, bytesRead: Int64(wanted.count))
    }

    /// Checks coven's copy of a file on this device only, whole, unless it was checked and not
    /// written since (a proof in `coven_meta`), so that the path `coven get` prints is to bytes
    /// checked since they were last written.
    ///
    /// - Throws: `.integrity` when it fails its check; as ``readFile(_:range:stop:output:)``.
    private func checkLocalCopy(_ record: FileRecord, copy: String, path: String, stop: Stop) throws {
        let subject = "copy:" + copy
        guard !CheckedBytes(device).isStillChecked(subject, path: path) else { return }
        let stamp = FileStamp(path: path)
        _ = try readLocal(record, range: .whole, stop: stop) { _ in }
        CheckedBytes(device).recordChecked(subject, path: path, stamp: stamp)
    }

    // MARK: - Holding a whole file

    /// Makes sure the whole file is held on this device and returns the path of the held
    /// copy: the person's original or coven's copy before upload, or the complete cache file.
    ///
    /// A partial is resumed: only its missing chunks are fetched. An entry a read completed
    /// without syncing (``CacheEntryRow/whole`` but not ``CacheEntryRow/complete``) is read
    /// through once, every chunk checked against its tag (a chunk a power cut lost is fetched
    /// again), then synced. A file larger than the budget is still fetched; a trim afterwards
    /// spares it.
    ///
    /// - Throws: as ``readFile(_:range:stop:output:)``; `.noRoom` when the disk has no
    ///   room for the rest of it.
    @discardableResult
    public func holdFile(_ id: String, stop: Stop = Stop()) throws -> (path: String, report: ReadReport) {
        let record = try device.requireFile(id)
        if record.coordinates.at == .device {
            guard record.coordinates.device == device.deviceID else { throw deviceOnlyError(record) }
            let (row, path, kind) = try localSource(record)
            // An original is checked by localSource (size, time, and its bytes when touched);
            // coven's copy by its bytes, unless they were checked and not written since.
            if kind == .copy { try checkLocalCopy(record, copy: row.string("copy") ?? "", path: path, stop: stop) }
            return (path, ReadReport(source: kind))
        }
        let files = Cache(device).cachePaths(object: record.coordinates.object)
        let subject = "cache:" + record.coordinates.object
        // A complete entry whose data file was checked and not written since is handed out as
        // it is; one written since (or never checked) is read through first, every chunk
        // checked against its tag, any that fails fetched again.
        if let row = try Cache(device).cacheRow(record.coordinates.object), row.complete, access(files.data, R_OK) == 0,
           CheckedBytes(device).isStillChecked(subject, path: files.data) {
            if !device.readOnly {
                try? device.database.transaction {
                    try Cache(device).touchCacheEntry(record.coordinates.object)
                }
            }
            return (files.data, ReadReport(source: .cache))
        }
        guard !device.readOnly else {
            throw CovenError(.io, "cannot hold file '\(id)' in the cache: the device database cannot be written",
                             hint: "read it with 'coven cat', or make '\(device.paths.database)' writable", details: ["file": id])
        }
        try checkRoom(for: record)
        let read = try StoredRead(device: device, record: record, durable: true, stop: stop)
        defer { read.close() }
        let stamp = FileStamp(path: files.data)
        let report = try read.read(0..<record.size) { _ in }
        read.close()
        CheckedBytes(device).recordChecked(subject, path: files.data, stamp: report.chunksRefetched > 0 || report.bytesFetched > 0 ? FileStamp(path: files.data) : stamp)
        _ = try? Cache(device).trimCache(sparing: record.coordinates.object)
        return (files.data, report)
    }

    /// Refuses a fetch the disk has no room for, before any byte is fetched.
    ///
    /// - Parameter held: the bytes of the file the cache holds already, when the caller knows
    ///   (a fetch-kept worker's fresh entry holds none: no query of the database per file).
    /// - Throws: `.noRoom` with the bytes needed and free.
    func checkRoom(for record: FileRecord, held: Int64? = nil) throws {
        let held = try held ?? (Cache(device).cacheRow(record.coordinates.object)?.bytes ?? 0)
        let needed = record.size - held + Int64(ObjectLayout.chunkCount(plaintextSize: record.size)) * ObjectLayout.tagSize
        func freeBytes() -> Int64? {
            var info = statvfs()
            guard statvfs(device.paths.cache, &info) == 0 else { return nil }
            return Int64(info.f_bavail) * Int64(info.f_frsize)
        }
        guard var free = freeBytes() else { return }
        if free < needed + Cache.roomMargin {
            // What was read longest ago gives way first.
            _ = try? Cache(device).makeRoom(for: needed, sparing: record.coordinates.object)
            free = freeBytes() ?? free
        }
        if needed > free {
            throw CovenError(.noRoom, "no room on the disk for file '\(record.id)'",
                             cause: "\(needed.counted("byte")) needed, \(free) free",
                             details: ["file": record.id, "needed": String(needed), "free": String(free)])
        }
    }
}

import CLinux
import Foundation

/// A file staged or prepared, waiting for a write to put it in rows.
public struct StagedFile: Sendable, Equatable {
    /// The staged (or prepared) id the write names.
    public var id: String
    /// Whose bytes.
    public var kind: FileKind
    /// Its namespace.
    public var namespace: String
    /// Where it goes when the write commits.
    public var place: String
    /// Its size.
    public var size: Int64
    /// The exact modification time of a user's original: whole seconds since the epoch rounded
    /// down, and nanoseconds past that second.
    public var modifiedSeconds: Int64?
    /// See ``modifiedSeconds``.
    public var modifiedNanos: Int64?
    /// The hex SHA-256 of its bytes.
    public var contentHash: String
}

/// How a user's original looked when it was read: what a later check compares against.
struct OriginalIdentity: Equatable {
    var size: Int64
    var modifiedSeconds: Int64
    var modifiedNanos: Int64
    /// Device, inode and change time: an edit that restores size and mtime still moves ctime.
    var changeStamp: String

    init(_ info: stat) {
        size = Int64(info.st_size)
        modifiedSeconds = Int64(info.st_mtim.tv_sec)
        modifiedNanos = Int64(info.st_mtim.tv_nsec)
        changeStamp = "\(info.st_dev):\(info.st_ino):\(info.st_ctim.tv_sec):\(info.st_ctim.tv_nsec)"
    }

    init(size: Int64, modifiedSeconds: Int64, modifiedNanos: Int64, changeStamp: String) {
        self.size = size
        self.modifiedSeconds = modifiedSeconds
        self.modifiedNanos = modifiedNanos
        self.changeStamp = changeStamp
    }
}

/// Staging: a person's originals prepared where they are (never copied, moved or changed),
/// app bytes copied into coven's folder, both hashed, and batches of either; the staged files
/// wait in `coven_staged` (``StagedFiles``) for a write to put them in rows.
///
/// ```swift
/// let staged = try Staging(device).prepareUserFile(path: "/music/a.flac", namespace: "music", place: .cloud)
/// ```
public struct Staging {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }

    /// `path` made absolute against the working folder (a String that may carry non-UTF-8 bytes).
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Reads a person's original at `absolute` once, hashing it, and checks it did not change
    /// while it was read: what preparing one (alone or in a batch) records.
    ///
    /// - Throws: `.userFileMissing`, `.userFileChanged`, `.io` (not a regular file, unreadable),
    ///   `.interrupted`.
    static func readOriginal(_ absolute: String, stop: Stop, progress: ((Int64) -> Void)? = nil, afterRead: ((String) -> Void)? = nil) throws -> (OriginalIdentity, ContentDigests) {
        let file = try FileHandleFD(reading: absolute)
        let before = try file.status()
        guard (before.st_mode & S_IFMT) == S_IFREG else {
            throw CovenError(.io, "'\(PathText.display(absolute))' is not a regular file", details: ["path": PathText.display(absolute)])
        }
        posix_fadvise(file.fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
        let digests = try ContentHasher.run(file: file, sizeHint: Int64(before.st_size), stop: stop, progress: progress)
        afterRead?(absolute)
        let after = try file.status()
        let identity = OriginalIdentity(before)
        guard OriginalIdentity(after) == identity, digests.size == identity.size else {
            throw CovenError(.userFileChanged, "'\(PathText.display(absolute))' changed while it was being read", hint: "stage it again once it is saved", details: ["path": PathText.display(absolute)])
        }
        return (identity, digests)
    }

    // MARK: - Preparing a user's original

    /// Reads a person's original once: its size, exact modification time, whole-file SHA-256
    /// and a SHA-256 of each 64 KiB chunk. Never copies, moves, changes or deletes it.
    ///
    /// - Parameters:
    ///   - path: the original's path (a String that may carry non-UTF-8 bytes, see ``PathText``).
    ///   - namespace: a declared `user` namespace.
    ///   - place: where the file goes when a write puts it.
    ///   - progress: called with the bytes read so far.
    ///   - wait: whether to wait for the device lock; when false the lock is taken before the
    ///     read and a busy device fails at once (`--no-wait`).
    ///   - stop: polled between blocks; a stop asked ends the call with `.interrupted`.
    /// - Returns: the prepared file, recorded until a write puts it.
    /// - Throws: `.undeclaredNamespace`, `.namespaceKind`, `.userFileMissing`,
    ///   `.userFileChanged` (it changed while being read), `.busy`, `.io`, `.interrupted`.
    public func prepareUserFile(path: String, namespace name: String, place: Place, wait: Bool = true, stop: Stop = Stop(), progress: ((Int64) -> Void)? = nil) throws -> StagedFile {
        _ = try device.manifest.namespace(name, kind: .user)
        // Under --no-wait a busy device fails before any byte is read.
        let early = wait ? nil : try device.lock(wait: false)
        defer { _ = early }
        let absolute = Self.absolute(path)
        let (identity, digests) = try Self.readOriginal(absolute, stop: stop, progress: progress)
        let id = Identifier.uuid7()
        let lock = try early ?? device.lock(wait: true)
        defer { _ = lock }
        try device.database.transaction {
            try device.stagedFiles.addOriginal(id: id, namespace: name, place: place, path: PathText.osBytes(absolute), identity: identity,
                                        contentHash: digests.content, chunkHashes: digests.chunks)
        }
        return StagedFile(id: id, kind: .user, namespace: name, place: place.rawValue, size: digests.size, modifiedSeconds: identity.modifiedSeconds, modifiedNanos: identity.modifiedNanos, contentHash: digests.content.hex)
    }

    // MARK: - Staging app bytes

    /// Copies app bytes from an open descriptor (a file or stdin) into coven's own copy,
    /// hashing them as they stream; the copy is written and synced before this returns.
    ///
    /// A crash part way leaves only a temporary file that no record names, which the next
    /// open removes.
    ///
    /// With `wait` false (`--no-wait`) the device lock is taken before the first byte is
    /// read, so a busy device fails at once; otherwise it is taken only to record the copy.
    ///
    /// A stop asked (`stop`, polled between blocks, or a signal while a read waits on a pipe)
    /// ends the call with `.interrupted`, its temporary file removed.
    ///
    /// - Throws: `.undeclaredNamespace`, `.namespaceKind`, `.noRoom`, `.busy`, `.io`,
    ///   `.interrupted`.
    public func stageAppBytes(from descriptor: Int32, sourceName: String, namespace name: String, place: Place, wait: Bool = true, stop: Stop = Stop(), progress: ((Int64) -> Void)? = nil) throws -> StagedFile {
        _ = try device.manifest.namespace(name, kind: .app)
        let early = wait ? nil : try device.lock(wait: false)
        defer { _ = early }
        let copy = try Self.copyAppBytes(from: descriptor, sourceName: sourceName, temporaryFolder: device.paths.temporary, stop: stop, progress: progress)
        defer { unlink(copy.temporary) }
        try stop.check("stage")
        let lock = try early ?? device.lock(wait: true)
        defer { _ = lock }
        try recordCopies([copy], namespace: name, place: place)
        return copy.staged(namespace: name, place: place)
    }

    /// App bytes copied under tmp/ and synced, not yet linked into copies/ nor recorded.
    struct AppCopy {
        var id: String
        /// The synced temporary file, stamped with this process's pid; removed by the caller
        /// once the record commits (or the staging failed).
        var temporary: String
        var digests: ContentDigests

        var relative: String { "copies/" + id }

        func staged(namespace: String, place: Place) -> StagedFile {
            StagedFile(id: id, kind: .app, namespace: namespace, place: place.rawValue, size: digests.size, modifiedSeconds: nil, modifiedNanos: nil, contentHash: digests.content.hex)
        }
    }

    /// Copies app bytes from `descriptor` into a temporary file under tmp/, hashing them as they
    /// stream, and syncs it: the first half of staging them, which needs no lock (a batch runs
    /// several at once, so their syncs overlap).
    ///
    /// The temporary name goes only after the record commits (``recordCopies(_:namespace:place:)``),
    /// so a crash anywhere in between leaves it behind, stamped with this process's pid, and the
    /// next open finds its copy from it without listing copies/ (CopySweep.removeDeadWriters, at open).
    /// On a throw the temporary file is already gone.
    static func copyAppBytes(from descriptor: Int32, sourceName: String, temporaryFolder: String, stop: Stop, progress: ((Int64) -> Void)? = nil) throws -> AppCopy {
        let id = Identifier.uuid7()
        let temporary = temporaryFolder + "/" + id + ".tmp." + String(getpid())
        let out = Foundation.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw CovenError.posix("create", path: temporary) }
        defer { close(out) }
        do {
            let duplicate = dup(descriptor)
            guard duplicate >= 0 else { throw CovenError.posix("read", path: sourceName) }
            let source = FileHandleFD(descriptor: duplicate, path: sourceName)
            posix_fadvise(source.fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
            var sourceInfo = stat()
            let sizeHint: Int64? = fstat(source.fd, &sourceInfo) == 0 && (sourceInfo.st_mode & S_IFMT) == S_IFREG ? Int64(sourceInfo.st_size) : nil
            var written: Int64 = 0
            let digests = try ContentHasher.run(read: { try stop.check("stage"); return try source.read(into: $0) }, write: { block in
                try AtomicFile.writeAll(out, block, path: temporary)
                // Start writing back now, so the final fsync has little left to wait for.
                _ = coven_start_writeback(out, Int64(written), Int64(block.count))
                written += Int64(block.count)
            }, sizeHint: sizeHint, progress: progress)
            guard fsync(out) == 0 else { throw CovenError.posix("sync", path: temporary) }
            return AppCopy(id: id, temporary: temporary, digests: digests)
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// Links synced copies into copies/, syncs the folder once and records them all in one
    /// transaction: the second half of staging app bytes, under the device lock. On a throw
    /// none is recorded and the links made are gone; the caller removes the temporary files.
    func recordCopies(_ copies: [AppCopy], namespace name: String, place: Place) throws {
        var linked: [String] = []
        do {
            var stamps: [String: FileStamp] = [:]
            for copy in copies {
                let final = device.paths.folder + "/" + copy.relative
                // A link never replaces: the id is new, so anything already at `final` is a fault.
                guard link(copy.temporary, final) == 0 else { throw CovenError.posix("link into", path: final) }
                linked.append(final)
                // The copy holds exactly the bytes hashed: the proof that `coven get` and
                // `coven file-status` need not read it again until it is written.
                stamps[copy.id] = FileStamp(path: final)
            }
            try AtomicFile.syncFolder(device.paths.copies)
            try device.database.transaction {
                for copy in copies {
                    if let stamp = stamps[copy.id] { try CheckedBytes(device).setProof("copy:" + copy.relative, stamp.text) }
                    try device.stagedFiles.addCopy(id: copy.id, namespace: name, place: place, copy: copy.relative, size: copy.digests.size,
                                            contentHash: copy.digests.content, chunkHashes: copy.digests.chunks)
                }
            }
        } catch {
            linked.forEach { unlink($0) }
            throw error
        }
    }

    // MARK: - Staging many files in one run

    /// Stages many files in one run (`coven stage --files-from`): app bytes copied (`kind`
    /// `.app`) or people's originals prepared where they are (`.user`), read from `next` one
    /// path at a time and reported to `report` one by one, in input order.
    ///
    /// The paths are taken a window at a time (at most ``BatchStaging/window`` files, or about
    /// ``BatchStaging/windowBytes`` of them): the window's files are hashed (and copied, and
    /// synced) in parallel on a few workers, then recorded under the device lock in one
    /// transaction; only then are they reported. The next window is taken from the input
    /// while one is read, and read while the one before it is recorded and reported. Memory is
    /// bounded by two windows whatever the count of paths.
    ///
    /// A path that fails (missing, unreadable, not a regular file, changed while read) is
    /// reported as failed and the others go on. A stop asked (`stop`, a signal) ends the run
    /// after the window in hand: the files of it read whole are recorded and reported, and the
    /// call throws `.interrupted` saying how many paths were staged.
    ///
    /// - Parameters:
    ///   - next: the next path (a String that may carry non-UTF-8 bytes), nil at the end.
    ///   - report: each path's outcome, in input order, once recorded; it may throw to end the
    ///     run (stdout gone), what was recorded staying staged.
    ///   - windowReported: called once a window's outcomes are all reported (to flush them).
    /// - Returns: how many paths were staged and how many failed.
    /// - Throws: `.undeclaredNamespace`, `.namespaceKind` before any path is read; `.busy`
    ///   (`wait` false), `.sql`, `.noRoom` when recording a window fails (its files are not
    ///   staged; those of earlier windows are); `.interrupted`; what `next` or `report` throw
    ///   (`next`'s once the windows read before it are recorded and reported).
    public func stageBatch(kind: FileKind, namespace name: String, place: Place, wait: Bool = true, stop: Stop = Stop(),
                           workers: Int = BatchStaging.workers, next: () throws -> String?,
                           report: (BatchStaging.Outcome) throws -> Void, windowReported: () throws -> Void = {},
                           afterRead: (@Sendable (String) -> Void)? = nil) throws -> BatchStaging.Summary {
        _ = try device.manifest.namespace(name, kind: kind)
        let early = wait ? nil : try device.lock(wait: false)
        defer { _ = early }
        var summary = BatchStaging.Summary()
        var ended = false
        // Why the input ended early: thrown once the windows read before it are recorded.
        var inputFailure: Error?
        let folder = FileManager.default.currentDirectoryPath
        // Takes a window of paths; an input that fails ends the input.
        func takeWindow() -> [BatchWindow.Item] {
            var window: [BatchWindow.Item] = []
            var bytes: Int64 = 0
            do {
                while window.count < BatchStaging.window, bytes < BatchStaging.windowBytes {
                    guard !stop.isRequested, let path = try next() else { ended = true; break }
                    let absolute = path.hasPrefix("/") ? path : folder + "/" + path
                    window.append(.init(index: summary.read + window.count, path: path, absolute: absolute))
                    var info = stat()
                    if PathText.withCString(absolute, { lstat($0, &info) }) == 0 { bytes += Int64(info.st_size) }
                }
            } catch {
                inputFailure = error
                ended = true
                return []
            }
            summary.read += window.count
            return window
        }
        // A window's files are read and hashed by workers while the one before it is recorded
        // and reported, and the one after it is taken from the input: the window's one commit
        // (its sync) and the reading of the next paths no longer leave the cores idle (a
        // stage of 10,000 small files had a quarter of its time idle).
        var running: BatchWindow? = BatchWindow.start(takeWindow(), kind: kind, device: device, workers: workers, stop: stop, afterRead: afterRead)
        while let current = running {
            let following = ended ? [] : takeWindow()
            let done = current.wait()
            // A file a stop cut short is neither staged nor failed: it was not read whole.
            let interrupted = stop.isRequested
            running = interrupted ? nil : BatchWindow.start(following, kind: kind, device: device, workers: workers, stop: stop, afterRead: afterRead)
            do {
                try recordWindow(current, done: done, interrupted: interrupted, namespace: name, place: place, early: early,
                                 summary: &summary, report: report, windowReported: windowReported)
            } catch {
                running?.discard()
                throw error
            }
            if stop.isRequested {
                // The run ends after this window, as it did before the next was taken early:
                // the paths taken after it are forgotten (its copies removed), not counted read.
                running?.discard()
                summary.read -= following.count
                break
            }
        }
        if let inputFailure { throw inputFailure }
        if let reason = stop.reason {
            throw CovenError(.interrupted, "stage stopped: \(reason), after \(summary.staged.counted("file")) staged and \(summary.failed) failed of the \(summary.read) read",
                             hint: "the staged files are kept and were printed; stage the paths after them again",
                             details: ["staged": String(summary.staged), "failed": String(summary.failed), "read": String(summary.read)])
        }
        return summary
    }

    /// Records a window's hashed files in one transaction (one commit, one sync of copies/),
    /// then reports every outcome in the input's order.
    private func recordWindow(_ window: BatchWindow, done: [BatchWindow.Done?], interrupted: Bool, namespace name: String, place: Place,
                              early: DeviceLock?, summary: inout BatchStaging.Summary, report: (BatchStaging.Outcome) throws -> Void,
                              windowReported: () throws -> Void) throws {
        var outcomes: [BatchStaging.Outcome] = []
        var copies: [AppCopy] = []
        var originals: [(id: String, absolute: String, identity: OriginalIdentity, digests: ContentDigests)] = []
        for (slot, item) in zip(done, window.items) {
            switch slot {
            case .some(.original(let identity, let digests)):
                let id = Identifier.uuid7()
                originals.append((id, item.absolute, identity, digests))
                outcomes.append(.init(index: item.index, path: item.path, result: .success(StagedFile(
                    id: id, kind: .user, namespace: name, place: place.rawValue, size: digests.size, modifiedSeconds: identity.modifiedSeconds,
                    modifiedNanos: identity.modifiedNanos, contentHash: digests.content.hex))))
            case .some(.copy(let copy)):
                copies.append(copy)
                outcomes.append(.init(index: item.index, path: item.path, result: .success(copy.staged(namespace: name, place: place))))
            case .some(.failed(let error)):
                if interrupted, error.code == .interrupted { continue }
                outcomes.append(.init(index: item.index, path: item.path, result: .failure(error)))
            case .none:
                continue
            }
        }
        defer { copies.forEach { unlink($0.temporary) } }
        do {
            let lock = try early ?? device.lock(wait: true)
            defer { _ = lock }
            if !copies.isEmpty { try recordCopies(copies, namespace: name, place: place) }
            if !originals.isEmpty {
                try device.database.transaction {
                    for original in originals {
                        try device.stagedFiles.addOriginal(id: original.id, namespace: name, place: place, path: PathText.osBytes(original.absolute), identity: original.identity,
                                                    contentHash: original.digests.content, chunkHashes: original.digests.chunks)
                    }
                }
            }
        }
        for outcome in outcomes {
            if case .success = outcome.result { summary.staged += 1 } else { summary.failed += 1 }
            try report(outcome)
        }
        try windowReported()
    }

    // MARK: - Taking a staging back

    /// Forgets a staged file no write has put yet, and removes coven's copy of its bytes: for a
    /// staging whose id could not be handed out (stdout full), which nothing can name.
    ///
    /// - Throws: `.notFound` when no staged file has the id; `.busy`, `.sql`.
    public func discardStaged(_ id: String) throws {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let copy: String? = try device.database.transaction {
            guard let row = try device.stagedFiles.row(id) else {
                throw CovenError(.notFound, "no staged file '\(id)'", details: ["staged": id])
            }
            try device.stagedFiles.remove(id)
            return row.string("copy")
        }
        if let copy, !copy.contains(".."), try device.database.scalar("SELECT count(*) FROM coven_local WHERE copy = ?1", [copy]).intValue == 0 {
            unlink(device.paths.folder + "/" + copy)
        }
    }

    // MARK: - Checking an original again

    /// Checks a user's original against what was recorded: missing, or changed (size, mtime,
    /// or, when its change time moved, its bytes).
    ///
    /// - Throws: `.userFileMissing`, `.userFileChanged`.
    func checkOriginal(path: [UInt8], recorded: OriginalIdentity, contentHash: [UInt8]) throws {
        // The path's bytes as they are, with no String made of them unless the check goes on
        // past the stat (a write putting 100,000 originals checks each).
        var info = stat()
        let code = (path + [0]).withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { stat($0, &info) }
        }
        let failure = code == 0 ? 0 : errno
        var display: String { PathText.text(path) }
        guard code == 0 else {
            throw CovenError(.userFileMissing, "'\(display)' is missing", cause: String(cString: strerror(failure)), details: ["path": display])
        }
        let now = OriginalIdentity(info)
        guard now.size == recorded.size, now.modifiedSeconds == recorded.modifiedSeconds, now.modifiedNanos == recorded.modifiedNanos else {
            throw CovenError(.userFileChanged, "'\(display)' changed since it was staged", hint: "stage it again", details: ["path": display])
        }
        if now.changeStamp != recorded.changeStamp {
            // Size and time match but something touched the file: compare the bytes.
            let file = try FileHandleFD(reading: PathText.string(fromOSBytes: path))
            let digests = try ContentHasher.run(file: file)
            guard digests.content == contentHash else {
                throw CovenError(.userFileChanged, "'\(display)' changed since it was staged", hint: "stage it again", details: ["path": display])
            }
        }
    }
}

/// The limits and results of ``Device/stageBatch(kind:namespace:place:wait:stop:workers:next:report:windowReported:afterRead:)``.
public enum BatchStaging {
    /// The most files taken (hashed in parallel, recorded in one transaction) at a time.
    public static let window = 256
    /// A window is closed early once its files hold this many bytes, so a crash or a stop
    /// loses little work on big files.
    public static let windowBytes: Int64 = 256 << 20
    /// The workers hashing a window's files: the cores, at most 4 (each big file's hashing
    /// uses two lanes of its own).
    public static let workers = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))

    /// What became of one input path.
    public struct Outcome: Sendable {
        /// Its position in the input, from 0.
        public var index: Int
        /// The path as given.
        public var path: String
        /// The staged file, or why it was not staged.
        public var result: Result<StagedFile, CovenError>
    }

    /// The counts of one run.
    public struct Summary: Sendable, Equatable {
        /// Paths read from the input.
        public var read = 0
        /// Paths staged.
        public var staged = 0
        /// Paths that failed.
        public var failed = 0
    }
}

/// A window of a batch stage whose files workers are reading and hashing (user originals) or
/// copying (app bytes), each into a slot of its own, on threads of their own.
final class BatchWindow: @unchecked Sendable {
    // @unchecked: `items` and `slots` are set before the workers start; slots are written
    // under their own lock.
    struct Item: Sendable {
        var index: Int
        var path: String
        var absolute: String
    }

    enum Done: @unchecked Sendable { case original(OriginalIdentity, ContentDigests), copy(Staging.AppCopy), failed(CovenError) }

    let items: [Item]
    private let slots: BatchSlots<Done>
    private let group = DispatchGroup()

    private init(items: [Item]) {
        self.items = items
        slots = BatchSlots<Done>(count: items.count)
    }

    /// Starts the workers on `items` (none when empty: nil).
    static func start(_ items: [Item], kind: FileKind, device: Device, workers: Int, stop: Stop,
                      afterRead: (@Sendable (String) -> Void)?) -> BatchWindow? {
        guard !items.isEmpty else { return nil }
        let window = BatchWindow(items: items)
        let queue = BatchQueue(count: items.count)
        let paths = items.map(\.absolute)
        let temporaryFolder = device.paths.temporary
        let slots = window.slots
        let work = { @Sendable in
            while let index = queue.take() {
                let absolute = paths[index]
                do {
                    switch kind {
                    case .user:
                        let (identity, digests) = try Staging.readOriginal(absolute, stop: stop, afterRead: afterRead)
                        slots.set(index, .original(identity, digests))
                    case .app:
                        // As `coven stage PATH`: a path that cannot be opened is an `io` failure.
                        let descriptor = PathText.withCString(absolute) { Foundation.open($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
                        guard descriptor >= 0 else { throw CovenError.posix("open", path: PathText.display(absolute)) }
                        let file = FileHandleFD(descriptor: descriptor, path: absolute)
                        let info = try file.status()
                        guard (info.st_mode & S_IFMT) == S_IFREG else {
                            throw CovenError(.io, "'\(PathText.display(absolute))' is not a regular file", details: ["path": PathText.display(absolute)])
                        }
                        _ = fcntl(file.fd, F_SETFL, fcntl(file.fd, F_GETFL) & ~O_NONBLOCK)
                        slots.set(index, .copy(try Staging.copyAppBytes(from: file.fd, sourceName: PathText.display(absolute), temporaryFolder: temporaryFolder, stop: stop)))
                    }
                } catch let error as CovenError {
                    slots.set(index, .failed(error))
                } catch {
                    slots.set(index, .failed(CovenError(.io, "cannot stage '\(PathText.display(absolute))'", cause: "\(error)")))
                }
            }
        }
        for lane in 0..<max(1, min(workers, items.count)) {
            let thread = Thread { work(); window.group.leave() }
            thread.name = "coven-stage-\(lane)"
            thread.stackSize = 1 << 20
            window.group.enter()
            thread.start()
        }
        return window
    }

    /// Waits for the workers; each slot holds its file's outcome (nil: not taken, a stop).
    func wait() -> [Done?] {
        group.wait()
        return slots.values()
    }

    /// Waits for the workers and removes the copies they made: for a window that will not be
    /// recorded.
    func discard() {
        for case .some(.copy(let copy)) in wait() { unlink(copy.temporary) }
    }
}

/// One result slot per file of a window, each written by one worker.
final class BatchSlots<Value>: @unchecked Sendable {
    // @unchecked: every access is under `lock`.
    private let lock = NSLock()
    private var slots: [Value?]

    init(count: Int) { slots = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ value: Value) {
        lock.lock()
        defer { lock.unlock() }
        slots[index] = value
    }

    func values() -> [Value?] {
        lock.lock()
        defer { lock.unlock() }
        return slots
    }
}

/// The next index of a window for a worker to take.
final class BatchQueue: @unchecked Sendable {
    // @unchecked: `next` is used under `lock`.
    private let lock = NSLock()
    private var next = 0
    private let count: Int

    init(count: Int) { self.count = count }

    func take() -> Int? {
        lock.lock()
        defer { lock.unlock() }
        guard next < count else { return nil }
        next += 1
        return next - 1
    }
}

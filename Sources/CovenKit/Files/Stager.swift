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

extension Device {
    // MARK: - Namespaces

    /// The namespace, checked to exist and to be of `kind`.
    ///
    /// - Throws: `.undeclaredNamespace`, `.namespaceKind`.
    func namespace(_ name: String, kind: FileKind) throws -> Manifest.Namespace {
        guard let namespace = manifest.namespace(name) else {
            throw CovenError(.undeclaredNamespace, "namespace '\(name)' is not declared in the manifest", details: ["namespace": name])
        }
        guard namespace.kind == kind else {
            throw CovenError(.namespaceKind, "namespace '\(name)' holds \(namespace.kind == .user ? "the person's originals" : "app-provided bytes"), not \(kind == .user ? "a person's original" : "app bytes")",
                             hint: kind == .user ? "stage app bytes without --user" : "stage a person's original with --user", details: ["namespace": name])
        }
        return namespace
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
        _ = try namespace(name, kind: .user)
        // Under --no-wait a busy device fails before any byte is read.
        let early = wait ? nil : try self.lock(wait: false)
        defer { _ = early }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let file = try FileHandleFD(reading: absolute)
        let before = try file.status()
        guard (before.st_mode & S_IFMT) == S_IFREG else {
            throw CovenError(.io, "'\(PathText.display(absolute))' is not a regular file", details: ["path": PathText.display(absolute)])
        }
        posix_fadvise(file.fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
        let digests = try ContentHasher.run(file: file, sizeHint: Int64(before.st_size), stop: stop, progress: progress)
        let after = try file.status()
        let identity = OriginalIdentity(before)
        guard OriginalIdentity(after) == identity, digests.size == identity.size else {
            throw CovenError(.userFileChanged, "'\(PathText.display(absolute))' changed while it was being read", hint: "stage it again once it is saved", details: ["path": PathText.display(absolute)])
        }
        let id = Identifier.uuid7()
        let lock = try early ?? self.lock(wait: true)
        defer { _ = lock }
        try database.transaction {
            try stagedFiles.addOriginal(id: id, namespace: name, place: place, path: PathText.osBytes(absolute), identity: identity,
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
        _ = try namespace(name, kind: .app)
        let early = wait ? nil : try self.lock(wait: false)
        defer { _ = early }
        let id = Identifier.uuid7()
        let relative = "copies/" + id
        let final = paths.folder + "/" + relative
        // The bytes are written under tmp/ and linked into copies/ once whole; the temporary
        // name goes only after the record commits, so a crash anywhere in between leaves it
        // behind, stamped with this process's pid, and the next open finds its copy from it
        // without listing copies/ (Device.sweepAfterCrash).
        let temporary = paths.temporary + "/" + id + ".tmp." + String(getpid())
        let out = Foundation.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw CovenError.posix("create", path: temporary) }
        defer {
            close(out)
            unlink(temporary)
        }
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
        try stop.check("stage")
        let lock = try early ?? self.lock(wait: true)
        defer { _ = lock }
        // A link never replaces: the id is new, so anything already at `final` is a fault.
        guard link(temporary, final) == 0 else { throw CovenError.posix("link into", path: final) }
        // The copy holds exactly the bytes hashed: the proof that `coven get` and
        // `coven file-status` need not read it again until it is written.
        let stamp = FileStamp(path: final)
        do {
            try AtomicFile.syncFolder(paths.copies)
            try database.transaction {
                if let stamp { try setSetting(Self.checkedKey("copy:" + relative), stamp.text) }
                try stagedFiles.addCopy(id: id, namespace: name, place: place, copy: relative, size: digests.size,
                                        contentHash: digests.content, chunkHashes: digests.chunks)
            }
        } catch {
            unlink(final)
            throw error
        }
        return StagedFile(id: id, kind: .app, namespace: name, place: place.rawValue, size: digests.size, modifiedSeconds: nil, modifiedNanos: nil, contentHash: digests.content.hex)
    }

    // MARK: - Taking a staging back

    /// Forgets a staged file no write has put yet, and removes coven's copy of its bytes: for a
    /// staging whose id could not be handed out (stdout full), which nothing can name.
    ///
    /// - Throws: `.notFound` when no staged file has the id; `.busy`, `.sql`.
    public func discardStaged(_ id: String) throws {
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        let copy: String? = try database.transaction {
            guard let row = try stagedFiles.row(id) else {
                throw CovenError(.notFound, "no staged file '\(id)'", details: ["staged": id])
            }
            try stagedFiles.remove(id)
            return row.string("copy")
        }
        if let copy, !copy.contains(".."), try database.scalar("SELECT count(*) FROM coven_local WHERE copy = ?1", [copy]).intValue == 0 {
            unlink(paths.folder + "/" + copy)
        }
    }

    // MARK: - Checking an original again

    /// Checks a user's original against what was recorded: missing, or changed (size, mtime,
    /// or, when its change time moved, its bytes).
    ///
    /// - Throws: `.userFileMissing`, `.userFileChanged`.
    func checkOriginal(path: [UInt8], recorded: OriginalIdentity, contentHash: [UInt8]) throws {
        let text = PathText.string(fromOSBytes: path)
        let display = PathText.text(path)
        var info = stat()
        let code = PathText.withCString(text) { stat($0, &info) }
        guard code == 0 else {
            throw CovenError(.userFileMissing, "'\(display)' is missing", cause: String(cString: strerror(errno)), details: ["path": display])
        }
        let now = OriginalIdentity(info)
        guard now.size == recorded.size, now.modifiedSeconds == recorded.modifiedSeconds, now.modifiedNanos == recorded.modifiedNanos else {
            throw CovenError(.userFileChanged, "'\(display)' changed since it was staged", hint: "stage it again", details: ["path": display])
        }
        if now.changeStamp != recorded.changeStamp {
            // Size and time match but something touched the file: compare the bytes.
            let file = try FileHandleFD(reading: text)
            let digests = try ContentHasher.run(file: file)
            guard digests.content == contentHash else {
                throw CovenError(.userFileChanged, "'\(display)' changed since it was staged", hint: "stage it again", details: ["path": display])
            }
        }
    }
}

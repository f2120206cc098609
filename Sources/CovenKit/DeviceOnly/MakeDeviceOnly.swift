import CLinux
import Foundation

// MARK: - Values

/// How far a make-device-only call is: one file's bytes, and the call's.
public struct DeviceOnlyProgress: Sendable {
    /// The file this report is about.
    public var file: String
    /// Its path under the folder, as written.
    public var path: String
    /// Its bytes down so far.
    public var bytes: Int64
    /// Its size.
    public var size: Int64
    /// Whether it is whole, synced and at its final name.
    public var done: Bool
    /// Every file's bytes down so far.
    public var callBytes: Int64
    /// Every file's size.
    public var callSize: Int64
    /// Files whole so far.
    public var filesDone: Int
    /// Files in the call.
    public var fileCount: Int
}

/// A copy make-device-only wrote and switched to: the file's original on this device now.
public struct DeviceOnlyCopy: Sendable, Equatable {
    /// The file's id.
    public var file: String
    /// The copy's absolute path.
    public var path: String
    /// Its path under the folder, names joined by `/` as written.
    public var relativePath: String
    /// Its size.
    public var size: Int64
}

/// One file of a call, checked and placed.
struct PlannedCopy: Sendable {
    var request: DeviceOnlyRequest
    var record: FileRecord
    var written: [String]
    var folder: String
    var final: String
    var temporary: String
    var relativePath: String { written.joined(separator: "/") }
}

/// The hashes a download computed as it wrote.
struct CopyDigests: Sendable {
    var content: [UInt8]
    var chunks: [UInt8]
}

/// Everything a call does, checked before any byte downloads.
struct DeviceOnlyPlan: Sendable {
    var folder: String
    var copies: [PlannedCopy]
    /// Folders to make, outermost first.
    var folders: [String]
}

/// `coven make-device-only`: brings stored files back into a folder on this device, in parallel
/// and crash-safe (a journal, temporaries renamed into place, one sync of the copies), then
/// switches their records to device-only in one write. The plan and its refusals are
/// ``DeviceOnlyPlanner``'s; the copies' bytes are read through the one reader of chunks.
///
/// ```swift
/// let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: "/music", requests: requests)
/// ```
public struct DeviceOnlyMaker {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }
    // MARK: - make-device-only

    /// Brings stored files back into `folder`, then switches every one to this device only in
    /// one write, with each copy as the file's original here (listed in `coven_user_files`).
    ///
    /// Every refusal comes before any byte downloads. Each file downloads with its content hash
    /// checked, into a temporary name in its final folder; it is synced and takes its final name
    /// once whole. Until the switch commits, a failure or a stop removes every copy and folder
    /// the call made (a folder that was there, or that someone made meanwhile, stays); after a
    /// crash, the next open of the device does (``DeviceOnlyJournal``).
    ///
    /// - Parameters:
    ///   - folder: the folder the person picked; it must exist.
    ///   - requests: the files and their paths under the folder.
    ///   - parallel: how many files download at once.
    ///   - stop: stops the call when asked; it then fails with `.interrupted`.
    ///   - progress: called (one call at a time, from any thread) as bytes come down.
    /// - Returns: the copies, in the order of `requests`.
    /// - Throws: `.empty`, `.notUnicode`, `.link`, `.exists`, `.clash`, `.notInCloud`,
    ///   `.namespaceKind`, `.fileAbsent` (each naming its input), `.usage` for a file given
    ///   twice, `.io` for a folder that is not there; then `.storage`, `.missing`, `.integrity`,
    ///   `.noRoom`, `.interrupted`.
    public func makeDeviceOnly(
        folder: String, requests: [DeviceOnlyRequest], parallel: Int = 8, stop: Stop = Stop(),
        progress: (@Sendable (DeviceOnlyProgress) -> Void)? = nil
    ) throws -> [DeviceOnlyCopy] {
        let plan = try DeviceOnlyPlanner(device: device).plan(folder: folder, requests: requests)
        guard !plan.copies.isEmpty else { return [] }
        var entries = plan.folders.map { DeviceOnlyJournal.Entry(kind: "folder", path: $0, pair: nil) }
        for copy in plan.copies {
            entries.append(.init(kind: "temporary", path: copy.temporary, pair: nil))
            entries.append(.init(kind: "file", path: copy.final, pair: copy.temporary))
        }
        let journal = try DeviceOnlyJournal.begin(database: device.database, entries: entries)
        var committed = false
        defer { if !committed { try? journal.cleanUp() } }

        // Folders, outermost first; one that appeared meanwhile is someone else's and stays.
        var made: [String] = []
        for folder in plan.folders {
            if PathText.withCString(folder, { mkdir($0, 0o777) }) == 0 {
                made.append(folder)
                continue
            }
            let failure = errno
            var info = stat()
            if failure == EEXIST, PathText.withCString(folder, { lstat($0, &info) }) == 0 {
                if (info.st_mode & S_IFMT) == S_IFDIR { continue }
                let copy = plan.copies.first { $0.final.hasPrefix(folder + "/") }
                throw Self.pathError((info.st_mode & S_IFMT) == S_IFLNK ? .link : .exists, copy?.request, path: folder)
            }
            throw CovenError.posix("create folder", path: PathText.display(folder), errno: failure)
        }
        try journal.markMade(made)

        let digests = try downloadCopies(plan, parallel: parallel, stop: stop, progress: progress)
        try stop.check("make-device-only")

        // Every copy's bytes, and every new name, are durable before the switch names them.
        try Self.syncCopies(plan.copies)
        var synced: Set<String> = []
        for folder in plan.copies.map(\.folder) + made.map({ ($0 as NSString).deletingLastPathComponent }) + [plan.folder] where synced.insert(folder).inserted {
            try AtomicFile.syncFolder(folder)
        }

        let lock = try device.lock(wait: true)
        defer { _ = lock }
        try switchToDeviceOnly(plan, digests: digests, journal: journal, madeFolders: made)
        committed = true
        Cache(device).removeForgottenCacheFiles(objects: plan.copies.map(\.record.coordinates.object))

        // The temporaries go now; each copy's change time moves with its link count, so record
        // the time it settles at.
        for copy in plan.copies { _ = PathText.withCString(copy.temporary) { unlink($0) } }
        for folder in synced { try? AtomicFile.syncFolder(folder) }
        try? device.database.transaction {
            for copy in plan.copies {
                var info = stat()
                guard PathText.withCString(copy.final, { stat($0, &info) }) == 0 else { continue }
                try device.fileRecords.recordChangeStamp(object: copy.record.coordinates.object, path: PathText.osBytes(copy.final),
                                                  changeStamp: OriginalIdentity(info).changeStamp)
            }
            try journal.forget()
        }
        return plan.copies.map { DeviceOnlyCopy(file: $0.record.id, path: $0.final, relativePath: $0.relativePath, size: $0.record.size) }
    }

    // MARK: Refusals, before any byte downloads

    static func pathError(_ code: ErrorCode, _ request: DeviceOnlyRequest?, path: String) -> CovenError {
        let display = PathText.display(path)
        let what: String
        switch code {
        case .link: what = "goes through the symbolic link '\(display)'"
        default: what = "has something already at '\(display)'"
        }
        guard let request else { return CovenError(code, "'\(display)' is in the way", details: ["path": display]) }
        return CovenError(code, "\(request.input): the path '\(request.given)' of file '\(request.file)' \(what)",
                          hint: code == .exists ? "coven never replaces a file: pick another path or folder" : nil,
                          details: ["input": request.input, "file": request.file, "path": request.given, "at": display])
    }

    // MARK: Downloads

    /// Copies larger than this are written straight to the disk (``CopyWriter``).
    static let directCopyFrom: Int64 = 1 << 20

    /// Makes the copies durable: one sync of each filesystem they are on (their folders'), not
    /// an fsync each; where the system has no such sync, each copy is synced. A sync reporting
    /// a failed write fails the call (a sync of each copy opened now would not see it).
    static func syncCopies(_ copies: [PlannedCopy]) throws {
        var byFilesystem: [UInt64: (folder: String, copies: [PlannedCopy])] = [:]
        var filesystemOf: [String: UInt64] = [:]
        for copy in copies {
            if filesystemOf[copy.folder] == nil {
                var info = stat()
                guard PathText.withCString(copy.folder, { stat($0, &info) }) == 0 else {
                    throw CovenError.posix("look at", path: PathText.display(copy.folder))
                }
                filesystemOf[copy.folder] = UInt64(info.st_dev)
            }
            byFilesystem[filesystemOf[copy.folder]!, default: (copy.folder, [])].copies.append(copy)
        }
        for (folder, group) in byFilesystem.values {
            let fd = PathText.withCString(folder) { Foundation.open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            guard fd >= 0 else { throw CovenError.posix("open", path: PathText.display(folder)) }
            defer { close(fd) }
            if coven_syncfs(fd) == 0 { continue }
            guard errno == ENOSYS else { throw CovenError.posix("sync", path: PathText.display(folder)) }
            for copy in group {
                let file = PathText.withCString(copy.temporary) { Foundation.open($0, O_RDONLY | O_CLOEXEC) }
                guard file >= 0 else { throw CovenError.posix("open", path: PathText.display(copy.temporary)) }
                defer { close(file) }
                guard fsync(file) == 0 else { throw CovenError.posix("sync", path: PathText.display(copy.temporary)) }
            }
        }
    }

    /// Downloads every copy, `parallel` files at once, each through the read path of a
    /// connection of its own (``readStoredFile(_:session:stop:output:)``).
    func downloadCopies(
        _ plan: DeviceOnlyPlan, parallel: Int, stop: Stop, progress: (@Sendable (DeviceOnlyProgress) -> Void)?
    ) throws -> [CopyDigests] {
        let paths = device.paths
        let environment = device.storageEnvironment
        let state = DownloadState(count: plan.copies.count, callSize: plan.copies.reduce(0) { $0 + $1.record.size }, progress: progress)
        let workers = max(1, min(parallel, plan.copies.count))
        let group = DispatchGroup()
        for _ in 0..<workers {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                var reader: Device?
                let block = CopyBlock()
                // Run buffers reused file after file (fresh ones per file cost memory and
                // system time): two for a download alone, one filling while the other is written
                // out; one each when downloads run side by side and overlap one another. The
                // connection too: one per worker, not one per file.
                var session: ReadSession?
                while let index = state.take(stopping: stop) {
                    let copy = plan.copies[index]
                    do {
                        if reader == nil {
                            reader = try Device.openKernel(paths: paths)
                            // The storage credentials this device was given, if any.
                            reader?.storageEnvironment = environment
                        }
                        guard let reader else { return }
                        if session == nil {
                            session = ReadSession(connector: StorageConnector(location: reader.storage, environment: reader.storageEnvironment),
                                                  buffers: workers > 1 ? 1 : 2)
                        }
                        guard let session else { return }
                        let digests = try Self.download(copy, reader: reader, block: block, session: session, stop: stop) { bytes in
                            state.report(index, copy, bytes: bytes, done: false)
                        }
                        state.finish(index, copy, digests)
                    } catch {
                        state.fail(error)
                        return
                    }
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        if let failure = state.failure { throw failure }
        try stop.check("make-device-only")
        return try state.results()
    }

    /// Downloads one file into its temporary through the read path (cached chunks from the
    /// cache, the rest from storage, every chunk checked and the whole file against its content
    /// hash), syncs it and links it at its final name (never over anything).
    static func download(
        _ copy: PlannedCopy, reader: Device, block: CopyBlock, session: ReadSession, stop: Stop, onBytes: @escaping (Int64) -> Void
    ) throws -> CopyDigests {
        let record = copy.record
        guard let hash = record.hash, let content = [UInt8](hex: hash.lowercased()), content.count == 32 else {
            throw CovenError(.integrity, "file '\(record.id)' has no content hash to check its copy against", details: ["file": record.id])
        }
        // A small copy through the page cache: the copies are synced together, one sync of the
        // filesystem for them all (``syncCopies(_:)``), where a direct write waits on the disk
        // file by file.
        let writer = try CopyWriter(creating: copy.temporary, block: block, direct: record.size > Self.directCopyFrom)
        var reported: Int64 = 0
        do {
            _ = try Reader(reader).readStoredFile(record, session: session, stop: stop) { plain in
                // A chunk at a time, so progress comes at the first bytes, then every MiB: a
                // report takes the call's lock and draws, too dear for every chunk.
                var offset = 0
                while offset < plain.count {
                    let piece = UnsafeRawBufferPointer(rebasing: plain[offset..<min(plain.count, offset + Int(ObjectLayout.chunkSize))])
                    try writer.append(piece)
                    offset += piece.count
                    if reported == 0 || writer.count - reported >= 1 << 20 {
                        reported = writer.count
                        onBytes(reported)
                    }
                }
            }
        } catch let error as CovenError where error.code == .interrupted {
            try stop.check("make-device-only")
            throw error
        } catch let error as CovenError where error.code == .integrity && error.details["short"] == "true" {
            // The whole object was read: one shorter than its record lost its last chunks.
            var details = error.details
            details["reason"] = "truncated"
            details["file"] = record.id
            throw CovenError(.integrity, "the stored object of file '\(record.id)' is truncated", cause: error.cause, details: details)
        }
        // The read checked every byte against the content hash (or served a cache entry that
        // matched it, every chunk checked against its tag), so that hash is the copy's. Its
        // chunk hashes are not recorded: a later move derives them from the copy, checked
        // against that hash, before it sends any byte (UploadSource.open).
        let chunks: [UInt8] = record.size == 0 ? SHA256.digest([UInt8]()) : []
        let written = writer.count
        guard written == record.size else {
            throw CovenError(.integrity, "file '\(record.id)' does not match its content hash", details: ["file": record.id])
        }
        // Synced with the others before the switch (``syncCopies(_:)``).
        try writer.finish(sync: false)
        // A hard link is a rename that never replaces: the final name appears whole, or the call
        // fails if something took the name meanwhile. The temporary goes once the switch commits.
        let linked = PathText.withCString(copy.temporary) { from in PathText.withCString(copy.final) { to in link(from, to) } }
        guard linked == 0 else {
            if errno == EEXIST { throw pathError(.exists, copy.request, path: copy.final) }
            throw CovenError.posix("link into", path: PathText.display(copy.final))
        }
        onBytes(written)
        return CopyDigests(content: content, chunks: chunks)
    }

    // MARK: The switch

    /// One write switching every copied file to this device only, recorded for publishing.
    func switchToDeviceOnly(_ plan: DeviceOnlyPlan, digests: [CopyDigests], journal: DeviceOnlyJournal, madeFolders: [String] = []) throws {
        try device.database.transaction {
          try device.recordWrite { write in
            for (copy, digest) in zip(plan.copies, digests) {
                let id = copy.record.id
                guard let now = try device.fileRecord(id) else {
                    throw CovenError(.fileAbsent, "\(copy.request.input): file '\(id)' was deleted meanwhile", details: ["input": copy.request.input, "file": id])
                }
                guard now.coordinates == copy.record.coordinates else {
                    throw CovenError(.notInCloud, "\(copy.request.input): file '\(id)' changed place meanwhile", details: ["input": copy.request.input, "file": id])
                }
                var info = stat()
                guard PathText.withCString(copy.final, { stat($0, &info) }) == 0 else {
                    throw CovenError.posix("look at", path: PathText.display(copy.final))
                }
                let identity = OriginalIdentity(info)
                let coordinates = Coordinates(at: .device, device: device.deviceID, object: now.coordinates.object, key: now.coordinates.key)
                try device.fileRecords.setCoordinates(id, coordinates, stamp: write.stamp)
                try device.fileRecords.recordLocal(LocalBytes(
                    object: now.coordinates.object, kind: .user, path: PathText.osBytes(copy.final), copy: nil, size: identity.size,
                    modifiedSeconds: identity.modifiedSeconds, modifiedNanos: identity.modifiedNanos, changeStamp: identity.changeStamp,
                    contentHash: digest.content, chunkHashes: digest.chunks))
                _ = try device.fileRecords.unpin(id)
                // Should another device's make-device-only of the file win, this copy and the
                // folders made for it go again (FileRecords.applyRemote).
                try device.fileRecords.noteMadeCopy(object: now.coordinates.object, path: PathText.osBytes(copy.final),
                                             folders: madeFolders.filter { copy.final.hasPrefix($0 + "/") }.map(PathText.osBytes))
                // The copy holds the bytes now: the cache does not hold them twice.
                try Cache(device).forgetCacheEntry(object: now.coordinates.object)
            }
            try journal.markCommitted()
          }
        }
    }
}

/// What the download threads share, behind one lock.
final class DownloadState: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var nextIndex = 0
    private let count: Int
    private var digests: [CopyDigests?]
    private var bytes: [Int64]
    private var callBytes: Int64 = 0
    private let callSize: Int64
    private var filesDone = 0
    private(set) var failure: (any Error)?
    private let progress: (@Sendable (DeviceOnlyProgress) -> Void)?

    init(count: Int, callSize: Int64, progress: (@Sendable (DeviceOnlyProgress) -> Void)?) {
        self.count = count
        self.callSize = callSize
        self.progress = progress
        digests = Array(repeating: nil, count: count)
        bytes = Array(repeating: 0, count: count)
    }

    func take(stopping stop: Stop) -> Int? {
        lock.lock()
        defer { lock.unlock() }
        guard failure == nil, !stop.isRequested, nextIndex < count else { return nil }
        nextIndex += 1
        return nextIndex - 1
    }

    func report(_ index: Int, _ copy: PlannedCopy, bytes now: Int64, done: Bool) {
        lock.lock()
        defer { lock.unlock() }
        callBytes += now - bytes[index]
        bytes[index] = now
        if done { filesDone += 1 }
        progress?(DeviceOnlyProgress(file: copy.record.id, path: copy.relativePath, bytes: now, size: copy.record.size, done: done,
                                     callBytes: callBytes, callSize: callSize, filesDone: filesDone, fileCount: count))
    }

    func finish(_ index: Int, _ copy: PlannedCopy, _ result: CopyDigests) {
        lock.lock()
        digests[index] = result
        lock.unlock()
        report(index, copy, bytes: copy.record.size, done: true)
    }

    func fail(_ error: any Error) {
        lock.lock()
        defer { lock.unlock() }
        if failure == nil { failure = error }
    }

    func results() throws -> [CopyDigests] {
        lock.lock()
        defer { lock.unlock() }
        return try digests.map { digest in
            guard let digest else { throw CovenError(.internal, "a download ended without its result") }
            return digest
        }
    }
}

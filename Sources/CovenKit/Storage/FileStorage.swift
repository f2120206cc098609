import CLinux
import Foundation

// MARK: - file:// provider

/// A `file:///dir` store: every key is a file under the directory (a disk, a NAS mount).
///
/// Writes are crash-safe: bytes go to a temporary name in the same folder, are fsynced, renamed
/// over the key, and the folder is fsynced, so a reader (or a restart after `kill -9`) sees the
/// old object or the new one, never part of one. Temporary names start with `.coven-tmp-` and
/// are never listed. The objects of a batch (``putPending(_:data:)``) share one sync of the
/// filesystem and one of each folder (``makeDurable(_:)``), made before the caller counts any
/// of them stored (FileStorage+Batch.swift).
///
/// Multipart uploads live in `DIR/.uploads/<uploadID>/`, built under `.coven-tmp-<uploadID>` and
/// renamed into place whole: a `data` file the size of the object,
/// written in place with `pwrite`, an `info` record (key, total size, part size) and a `parts`
/// table with one 64-byte checked slot per confirmed part (number, offset, size, etag), each
/// written and fdatasynced only after the part's bytes are fdatasynced. All three are made
/// durable entries once, when the upload is created, so a part costs two data syncs and no
/// folder sync. An upload whose id never reached its caller (a kill -9 right after the start)
/// is found by its key (``uploadsInProgress(_:)``) and aborted by the next start for that key. A part's etag is a random token (the object is authenticated chunk by chunk;
/// hashing each part again would cost a third of the upload's CPU). A killed upload keeps every
/// part it confirmed; ``completeMultipart(_:uploadID:parts:)`` checks the caller's list against
/// the table and the data file's size, then renames.
///
/// Only `ENOENT` means "nothing there"; any other failure is an error. `ENOSPC` and `EDQUOT` are
/// `.storageFull` (failure `.full`); a vanished mount (`ENOTCONN`, `ESTALE`, the directory
/// itself gone) is failure `.network`; the rest is failure `.provider` with the `strerror` text.
///
/// Not Sendable by convention (like every provider), though it holds no open handles between
/// calls: several instances may work on one directory at once.
public final class FileStorage: StorageProvider {
    /// The store's directory, absolute, without a trailing `/`.
    public let directory: String

    /// Unlimited: one file of any size.
    public var singleRequestLimit: Int64 { Int64.max }
    /// Any part size works.
    public var minimumPartSize: Int64 { 1 }

    /// The largest piece read at once by ``get(_:range:sink:)``.
    static let readPiece = 1 << 20
    private static let uploadsFolder = ".uploads"
    private static let temporaryPrefix = ".coven-tmp-"

    /// Opens a store directory.
    ///
    /// - Parameters:
    ///   - directory: an absolute path.
    ///   - create: make the directory (and its parents) when it does not exist, as `coven init`
    ///     does. Otherwise a missing directory is an error: an unmounted disk must never look
    ///     like an empty store.
    /// - Throws: ``CovenError`` `.storage` with failure `.network` when the directory is not there
    ///   (and `create` is false), `.provider` when it is not a directory or cannot be made.
    public init(directory: String, create: Bool = false) throws {
        var path = directory
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        self.directory = path
        if create {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), !isFolder.boolValue {
                throw CovenError.storage(
                    "cannot create storage directory '\(path)'", failure: .provider, cause: "a file is there, not a folder")
            }
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                // Foundation's sentence, not its whole NSError dump.
                throw CovenError.storage(
                    "cannot create storage directory '\(path)'", failure: .provider, cause: error.localizedDescription)
            }
        }
        try checkRoot()
    }

    // MARK: - Errors

    /// The error for a failed system call.
    func failure(_ operation: String, key: String?, path: String, errno code: Int32) -> CovenError {
        // A signal cut the call short (a read of a hung mount or a FIFO): that is the signal's
        // stop, `interrupted` (130), not a storage failure.
        if code == EINTR { return interruption(operation, key: key, path: path) }
        let reason = String(cString: strerror(code))
        let failure: StorageFailure
        switch code {
        case ENOSPC, EDQUOT: failure = .full
        case ENOTCONN, ESTALE, EHOSTDOWN, EHOSTUNREACH, ETIMEDOUT, ENETDOWN, ENETUNREACH: failure = .network
        default: failure = .provider
        }
        var error = CovenError.storage("cannot \(operation) '\(key ?? path)'", failure: failure, cause: reason)
        error.details["path"] = path
        if let key { error.details["key"] = key }
        return error
    }

    /// The error of a call a signal stopped.
    private func interruption(_ operation: String, key: String?, path: String) -> CovenError {
        CovenError(.interrupted, "the \(operation) of '\(key ?? path)' stopped: \(Stop.process.reason ?? "interrupted by a signal")",
                   details: ["path": path])
    }

    private func missing(_ key: String) -> CovenError {
        CovenError(.missing, "nothing is stored at '\(key)'", details: ["key": key])
    }

    /// Throws unless the store directory is there: ENOENT below a vanished root is not absence.
    private func checkRoot() throws {
        var info = stat()
        guard stat(directory, &info) == 0 else {
            let code = errno
            if code == ENOENT {
                var error = CovenError.storage(
                    "storage directory '\(directory)' is not there", failure: .network, cause: String(cString: strerror(code)))
                error.hint = "is the disk or network share mounted? if the store moved, point this device there: coven storage set URL"
                error.details["path"] = directory
                throw error
            }
            throw failure("open storage directory", key: nil, path: directory, errno: code)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            var error = CovenError.storage(
                "storage path '\(directory)' is not a directory", failure: .provider, cause: "not a directory")
            error.details["path"] = directory
            throw error
        }
    }

    // MARK: - Keys and paths

    /// The file path of a key, after checking the key names a file inside the store.
    func path(for key: String) throws -> String {
        let segments = key.split(separator: "/", omittingEmptySubsequences: false)
        let valid = !key.isEmpty && !key.contains("\0")
            && segments.allSatisfy { !$0.isEmpty && $0 != "." && $0 != ".." && !$0.hasPrefix(Self.temporaryPrefix) }
            && segments.first != Substring(Self.uploadsFolder)
        guard valid else {
            throw CovenError.storage(
                "'\(key)' cannot be a key of a file:// store", failure: .provider,
                cause: "keys are relative paths without empty, '.', '..' or reserved segments", details: key)
        }
        return directory + "/" + key
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    private static func temporaryName() -> String {
        temporaryPrefix + SecureRandom.nonce(8).hex
    }

    /// Creates the folders of `folder` below the store directory (never the directory itself),
    /// fsyncing each parent that gained an entry.
    func makeFolders(_ folder: String, key: String?) throws {
        guard folder.count > directory.count, folder.hasPrefix(directory + "/") else { return }
        var info = stat()
        if stat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { return }
        let relative = folder.dropFirst(directory.count + 1).split(separator: "/")
        var current = directory
        for segment in relative {
            let next = current + "/" + segment
            if mkdir(next, 0o755) == 0 {
                try syncFolder(current, key: key)
            } else {
                let code = errno
                guard code == EEXIST else {
                    if code == ENOENT, current == directory { try checkRoot() }
                    throw failure("create folder for", key: key, path: next, errno: code)
                }
            }
            current = next
        }
    }

    /// Folders fsynced by every file:// provider of this process so far: what a test counts to
    /// see a batch of objects pay one folder sync, not one an object.
    static var folderSyncs: Int { folderSyncCount.withLock { $0 } }
    private static let folderSyncCount = LockedCount()

    /// fsyncs a folder so a rename or a new entry in it survives a crash.
    func syncFolder(_ folder: String, key: String?) throws {
        Self.folderSyncCount.withLock { $0 += 1 }
        let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("open folder of", key: key, path: folder, errno: errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw failure("sync folder of", key: key, path: folder, errno: errno) }
    }

    /// Writes every byte at `offset` (or the file position when nil), resuming on EINTR and
    /// short writes.
    private func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64?, key: String?, path: String) throws {
        guard var base = bytes.baseAddress else { return }
        var remaining = bytes.count
        var position = offset
        while remaining > 0 {
            let written: Int
            if let at = position {
                written = pwrite(fd, base, remaining, off_t(at))
            } else {
                written = write(fd, base, remaining)
            }
            if written < 0 {
                if errno == EINTR, !Stop.signalled { continue }
                throw failure("write", key: key, path: path, errno: errno)
            }
            remaining -= written
            base += written
            position = position.map { $0 + Int64(written) }
        }
    }

    /// Writes `bytes` to a new temporary file in `folder`, fsynced (unless `syncing` is false:
    /// a batch's, synced by ``makeDurable(_:)`` before it is renamed) and closed; returns its path.
    func writeTemporary(_ bytes: UnsafeRawBufferPointer, in folder: String, key: String?, syncing: Bool = true) throws -> String {
        let temporary = folder + "/" + Self.temporaryName()
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw failure("write", key: key, path: temporary, errno: errno) }
        do {
            try writeAll(fd, bytes, offset: nil, key: key, path: temporary)
            guard !syncing || fsync(fd) == 0 else { throw failure("sync", key: key, path: temporary, errno: errno) }
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        guard close(fd) == 0 else {
            let code = errno
            unlink(temporary)
            throw failure("write", key: key, path: temporary, errno: code)
        }
        return temporary
    }

    /// Replaces `path` with `bytes` atomically: temporary file, fsync, rename, then (unless
    /// `syncingFolder` is false, when the caller syncs it later) fsync the folder.
    private func replaceFile(_ path: String, with bytes: UnsafeRawBufferPointer, key: String?, syncingFolder: Bool = true) throws {
        let folder = Self.parent(of: path)
        let temporary = try writeTemporary(bytes, in: folder, key: key)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw failure("write", key: key, path: path, errno: code)
        }
        if syncingFolder { try syncFolder(folder, key: key) }
    }

    // MARK: - Objects

    public func put(_ key: String, data: [UInt8]) throws {
        let path = try path(for: key)
        try makeFolders(Self.parent(of: path), key: key)
        try data.withUnsafeBytes { try replaceFile(path, with: $0, key: key) }
    }

    /// Stores `data` at `key` unless a file is there, atomically across processes and devices
    /// sharing the directory: the bytes are written and fsynced under a temporary name, then
    /// `link(2)`ed to the key, which fails with `EEXIST` for the loser of a race.
    ///
    /// On a filesystem without hard links (some SMB/FAT mounts), the key is claimed with
    /// `open(O_CREAT | O_EXCL)` and the complete temporary file renamed over the claim; a reader
    /// may then briefly see the empty claim.
    public func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool {
        let path = try path(for: key)
        let folder = Self.parent(of: path)
        try makeFolders(folder, key: key)
        let temporary = try data.withUnsafeBytes { try writeTemporary($0, in: folder, key: key) }
        defer { unlink(temporary) }
        if link(temporary, path) == 0 {
            try syncFolder(folder, key: key)
            return true
        }
        let code = errno
        switch code {
        case EEXIST:
            return false
        case EPERM, ENOTSUP, EOPNOTSUPP, EMLINK, ENOSYS:
            let claim = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard claim >= 0 else {
                let claimCode = errno
                if claimCode == EEXIST { return false }
                throw failure("write", key: key, path: path, errno: claimCode)
            }
            close(claim)
            guard rename(temporary, path) == 0 else {
                throw failure("write", key: key, path: path, errno: errno)
            }
            try syncFolder(folder, key: key)
            return true
        default:
            throw failure("write", key: key, path: path, errno: code)
        }
    }

    @discardableResult
    public func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64? {
        let path = try path(for: key)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                throw missing(key)
            }
            throw failure("read", key: key, path: path, errno: code)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("read", key: key, path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw missing(key) }
        let size = Int64(info.st_size)
        var start: Int64 = 0
        var end = size
        if let range {
            guard range.isEmpty ? range.lowerBound <= size : range.lowerBound < size else {
                throw CovenError(
                    .rangeOutOfBounds, "range starts past the end of '\(key)'", details: ["key": key, "size": String(size)])
            }
            start = range.lowerBound
            end = min(range.upperBound, size)
        }
        guard start < end else { return size }
        let capacity = Int(min(Int64(Self.readPiece), end - start))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        guard let base = buffer.baseAddress else { return size }
        var position = start
        while position < end {
            let want = Int(min(Int64(capacity), end - position))
            let count = pread(fd, base, want, off_t(position))
            if count < 0 {
                if errno == EINTR, !Stop.signalled { continue }
                throw failure("read", key: key, path: path, errno: errno)
            }
            if count == 0 {
                // The file shrank under us: an object is immutable, so this is a fault.
                throw CovenError.storage(
                    "'\(key)' ended early", failure: .provider, cause: "end of file at \(position) of \(size.counted("byte"))",
                    details: key)
            }
            try sink(UnsafeRawBufferPointer(start: base, count: count))
            position += Int64(count)
        }
        return size
    }

    public func head(_ key: String) throws -> ObjectInfo? {
        let path = try path(for: key)
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                return nil
            }
            throw failure("look up", key: key, path: path, errno: code)
        }
        guard info.st_mode & S_IFMT == S_IFREG else { return nil }
        return ObjectInfo(key: key, size: Int64(info.st_size))
    }

    public func delete(_ key: String) throws {
        _ = try deleteNotingAbsent(key)
    }

    /// Deletes `key`; false when nothing was there.
    private func deleteNotingAbsent(_ key: String) throws -> Bool {
        let path = try path(for: key)
        guard unlink(path) == 0 else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                return false
            }
            throw failure("delete", key: key, path: path, errno: code)
        }
        try syncFolder(Self.parent(of: path), key: key)
        return true
    }

    public func deleteObjectsNotingAbsent(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>) {
        var failed: [String: CovenError] = [:]
        var absent: Set<String> = []
        for key in keys {
            do {
                if try !deleteNotingAbsent(key) { absent.insert(key) }
            } catch let error as CovenError {
                failed[key] = error
            }
        }
        return (failed, absent)
    }

    public func list(prefix: String) throws -> [ObjectInfo] {
        try checkRoot()
        // Walk only the deepest folder the prefix names in full.
        let folderPart: String
        if let slash = prefix.lastIndex(of: "/") {
            folderPart = String(prefix[...slash])
        } else {
            folderPart = ""
        }
        guard !folderPart.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) else { return [] }
        var objects: [ObjectInfo] = []
        try walk(relative: folderPart, prefix: prefix, into: &objects)
        objects.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        return objects
    }

    /// One page of a folder of files (`files/<device>/`, `changes/<device>/`): the folder's names
    /// are read and sorted once, and only the page's are looked up; the next page of the same
    /// listing (asked after the last key of a full page, within a minute) goes on in those
    /// names, so paging through a folder of 100,000 objects reads and sorts it once, not once a
    /// page. A folder holding folders is listed whole and cut (the protocol's default).
    public func list(prefix: String, after startAfter: String, limit: Int) throws -> [ObjectInfo] {
        try checkRoot()
        guard let slash = prefix.lastIndex(of: "/"), limit > 0 else {
            return Array(try list(prefix: prefix).lazy.filter { startAfter.utf8.lexicographicallyPrecedes($0.key.utf8) }.prefix(limit))
        }
        let relative = String(prefix[...slash])
        guard !relative.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) else { return [] }
        let keys: [String]
        if let paging, paging.prefix == prefix, paging.next == startAfter, Date().timeIntervalSince(paging.read) < 60 {
            keys = paging.keys
        } else {
            guard let names = try flatFolderKeys(relative: relative, prefix: prefix) else {
                paging = nil
                return Array(try list(prefix: prefix).lazy.filter { startAfter.utf8.lexicographicallyPrecedes($0.key.utf8) }.prefix(limit))
            }
            keys = names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            paging = Paging(prefix: prefix, keys: keys, next: "", read: Date())
        }
        // The first key after startAfter.
        var low = 0, high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if startAfter.utf8.lexicographicallyPrecedes(keys[middle].utf8) { high = middle } else { low = middle + 1 }
        }
        var page: [ObjectInfo] = []
        var index = low
        while index < keys.count, page.count < limit {
            let key = keys[index]
            index += 1
            var info = stat()
            guard stat(directory + "/" + key, &info) == 0 else {
                let code = errno
                if code == ENOENT { continue }  // deleted while listing
                throw failure("list", key: key, path: directory + "/" + key, errno: code)
            }
            if info.st_mode & S_IFMT == S_IFREG { page.append(ObjectInfo(key: key, size: Int64(info.st_size))) }
        }
        if page.count == limit, let last = page.last {
            paging?.next = last.key
        } else {
            paging = nil
        }
        return page
    }

    /// A listing being paged through (``list(prefix:after:limit:)``).
    private struct Paging {
        var prefix: String
        var keys: [String]
        /// The key the next page is asked after.
        var next: String
        var read: Date
    }
    private var paging: Paging?

    /// The keys starting with `prefix` of the files in the folder `relative` (ending in `/`),
    /// temporaries left out; nil when the folder holds anything but files.
    private func flatFolderKeys(relative: String, prefix: String) throws -> [String]? {
        let folder = directory + "/" + relative.dropLast()
        guard let stream = opendir(folder) else {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return [] }
            throw failure("list", key: nil, path: folder, errno: code)
        }
        defer { closedir(stream) }
        var keys: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw failure("list", key: nil, path: folder, errno: errno) }
                break
            }
            let type = entry.pointee.d_type
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name == "." || name == ".." || name.hasPrefix(Self.temporaryPrefix) { continue }
            guard type == UInt8(DT_REG) else { return nil }
            let key = relative + name
            if key.hasPrefix(prefix) { keys.append(key) }
        }
        return keys
    }

    /// Adds the files below `relative` (a folder key ending in `/`, or empty for the root)
    /// whose keys start with `prefix`.
    private func walk(relative: String, prefix: String, into objects: inout [ObjectInfo]) throws {
        let folder = relative.isEmpty ? directory : directory + "/" + relative.dropLast()
        guard let stream = opendir(folder) else {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return }
            throw failure("list", key: nil, path: folder, errno: code)
        }
        defer { closedir(stream) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw failure("list", key: nil, path: folder, errno: errno) }
                break
            }
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name == "." || name == ".." || name.hasPrefix(Self.temporaryPrefix) { continue }
            if relative.isEmpty && name == Self.uploadsFolder { continue }
            names.append(name)
        }
        for name in names {
            let key = relative + name
            var info = stat()
            guard stat(folder + "/" + name, &info) == 0 else {
                let code = errno
                if code == ENOENT { continue }  // deleted while listing
                throw failure("list", key: key, path: folder + "/" + name, errno: code)
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                let below = key + "/"
                if below.hasPrefix(prefix) || prefix.hasPrefix(below) {
                    try walk(relative: below, prefix: prefix, into: &objects)
                }
            case S_IFREG:
                if key.hasPrefix(prefix) { objects.append(ObjectInfo(key: key, size: Int64(info.st_size))) }
            default:
                continue
            }
        }
    }

    // MARK: - Multipart

    /// What `DIR/.uploads/<id>/info` records.
    private struct UploadInfo: Codable {
        var key: String
        var totalSize: Int64
        var partSize: Int64
    }

    /// A confirmed part: a slot of `DIR/.uploads/<id>/parts` (or, from older versions, a
    /// `part-<n>` JSON file).
    struct PartRecord: Codable, Equatable {
        var number: Int
        var offset: Int64
        var size: Int64
        var etag: String
    }

    private func uploadFolder(_ uploadID: String, key: String) throws -> String {
        // Ids are ours: lowercase hex. Anything else cannot name an upload (nor escape the folder).
        guard Self.isUploadID(uploadID) else { throw missingUpload(key, uploadID) }
        return directory + "/" + Self.uploadsFolder + "/" + uploadID
    }

    private func missingUpload(_ key: String, _ uploadID: String) -> CovenError {
        CovenError(.missing, "the upload of '\(key)' no longer exists", details: ["key": key, "upload": uploadID])
    }

    /// Reads the upload's info record; `.missing` when the upload is gone.
    private func loadInfo(_ folder: String, key: String, uploadID: String) throws -> UploadInfo {
        let bytes: [UInt8]
        do {
            bytes = try readSmallFile(folder + "/info", key: key)
        } catch let error as CovenError where error.details["errno"] == "ENOENT" {
            try checkRoot()
            throw missingUpload(key, uploadID)
        }
        guard let info = try? JSONDecoder().decode(UploadInfo.self, from: Data(bytes)) else {
            throw CovenError.storage(
                "the record of upload '\(uploadID)' is damaged", failure: .provider, cause: "unreadable info file",
                details: key)
        }
        guard info.key == key else {
            throw CovenError.storage(
                "upload '\(uploadID)' is for '\(info.key)', not '\(key)'", failure: .provider, cause: "key mismatch",
                details: key)
        }
        return info
    }

    /// A whole small file (a record); errors carry `errno: ENOENT` in details when it is absent.
    private func readSmallFile(_ path: String, key: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            var error = failure("read", key: key, path: path, errno: code)
            if code == ENOENT { error.details["errno"] = "ENOENT" }
            throw error
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR, !Stop.signalled { continue }
                throw failure("read", key: key, path: path, errno: errno)
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }

    private func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        do {
            return Array(try JSONEncoder().encode(value))
        } catch {
            throw CovenError(.internal, "cannot encode an upload record", cause: String(describing: error))
        }
    }

    public func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String {
        _ = try path(for: key)
        guard totalSize >= 0, partSize >= 1 else {
            throw CovenError.storage(
                "cannot start an upload of '\(key)'", failure: .provider,
                cause: "total size \(totalSize) and part size \(partSize) are not valid", details: key)
        }
        let uploads = directory + "/" + Self.uploadsFolder
        try makeFolders(uploads, key: key)
        let uploadID = SecureRandom.nonce(16).hex
        // Built under a temporary name and renamed into place whole, so `<id>` is always a
        // complete upload; the info record comes first, so whatever a kill -9 leaves names its
        // key and the next start of an upload to that key removes it (uploadsInProgress).
        let building = uploads + "/" + Self.temporaryPrefix + uploadID
        let folder = uploads + "/" + uploadID
        guard mkdir(building, 0o755) == 0 else { throw failure("start an upload of", key: key, path: building, errno: errno) }
        do {
            let info = try encode(UploadInfo(key: key, totalSize: totalSize, partSize: partSize))
            try info.withUnsafeBytes { try replaceFile(building + "/info", with: $0, key: key) }
            let dataPath = building + "/data"
            let fd = open(dataPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw failure("start an upload of", key: key, path: dataPath, errno: errno) }
            defer { close(fd) }
            guard ftruncate(fd, off_t(totalSize)) == 0 else {
                throw failure("start an upload of", key: key, path: dataPath, errno: errno)
            }
            guard fsync(fd) == 0 else { throw failure("start an upload of", key: key, path: dataPath, errno: errno) }
            let tablePath = building + "/parts"
            let table = open(tablePath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard table >= 0 else { throw failure("start an upload of", key: key, path: tablePath, errno: errno) }
            close(table)
            try syncFolder(building, key: key)
            guard rename(building, folder) == 0 else { throw failure("start an upload of", key: key, path: folder, errno: errno) }
            try syncFolder(uploads, key: key)
        } catch {
            removeUploadFolder(building)
            removeUploadFolder(folder)
            throw error
        }
        return uploadID
    }

    /// The uploads to `key` this store holds: every `.uploads/<id>` (and every one a kill left
    /// half-built, `.uploads/.coven-tmp-<id>`) whose info record names `key`, whatever started
    /// them.
    ///
    /// - Throws: `.storage` when the uploads folder cannot be read.
    public func uploadsInProgress(_ key: String) throws -> [String] {
        _ = try path(for: key)
        let uploads = directory + "/" + Self.uploadsFolder
        guard let stream = opendir(uploads) else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                return []
            }
            throw failure("list the uploads of", key: key, path: uploads, errno: code)
        }
        var names: [String] = []
        while let entry = readdir(stream) {
            names.append(withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            })
        }
        closedir(stream)
        var ids: Set<String> = []
        for name in names {
            let id = name.hasPrefix(Self.temporaryPrefix) ? String(name.dropFirst(Self.temporaryPrefix.count)) : name
            guard Self.isUploadID(id),
                  let bytes = try? readSmallFile(uploads + "/" + name + "/info", key: key),
                  let info = try? JSONDecoder().decode(UploadInfo.self, from: Data(bytes)), info.key == key
            else { continue }
            ids.insert(id)
        }
        return ids.sorted()
    }

    public func uploadsInProgress(prefix: String) throws -> [UploadInProgress] {
        try checkRoot()
        let uploads = directory + "/" + Self.uploadsFolder
        guard let stream = opendir(uploads) else {
            let code = errno
            if code == ENOENT { return [] }
            throw failure("list the uploads under", key: prefix, path: uploads, errno: code)
        }
        var names: [String] = []
        while let entry = readdir(stream) {
            names.append(withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            })
        }
        closedir(stream)
        var found: [UploadInProgress] = []
        for name in names.sorted() {
            let id = name.hasPrefix(Self.temporaryPrefix) ? String(name.dropFirst(Self.temporaryPrefix.count)) : name
            guard Self.isUploadID(id), let bytes = try? readSmallFile(uploads + "/" + name + "/info", key: prefix),
                  let info = try? JSONDecoder().decode(UploadInfo.self, from: Data(bytes)), info.key.hasPrefix(prefix)
            else { continue }
            var status = stat()
            let initiated = stat(uploads + "/" + name + "/info", &status) == 0
                ? Date(timeIntervalSince1970: TimeInterval(status.st_mtim.tv_sec)) : nil
            found.append(UploadInProgress(key: info.key, uploadID: id, initiated: initiated))
        }
        return found
    }

    /// The `.coven-tmp-` files in the folder `prefix` (not below it) that writes killed before
    /// their rename left; a folder that is not there has none.
    ///
    /// - Throws: `.storage` when the folder cannot be read.
    public func leftoverTemporaries(prefix: String) throws -> [LeftoverTemporary] {
        try checkRoot()
        guard prefix.hasSuffix("/"), (try? path(for: String(prefix.dropLast()))) != nil else { return [] }
        let folder = directory + "/" + prefix.dropLast()
        guard let stream = opendir(folder) else {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return [] }
            throw failure("list", key: prefix, path: folder, errno: code)
        }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name.hasPrefix(Self.temporaryPrefix) { names.append(name) }
        }
        closedir(stream)
        var found: [LeftoverTemporary] = []
        for name in names.sorted() {
            var info = stat()
            guard lstat(folder + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            found.append(LeftoverTemporary(key: prefix + name, modified: Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec))))
        }
        return found
    }

    /// Removes a `.coven-tmp-` file ``leftoverTemporaries(prefix:)`` listed (nothing else).
    public func removeLeftoverTemporary(_ key: String) throws {
        guard let slash = key.lastIndex(of: "/"), key[key.index(after: slash)...].hasPrefix(Self.temporaryPrefix),
              (try? path(for: String(key[..<slash]))) != nil else {
            throw CovenError(.internal, "'\(key)' is not a temporary file of the store")
        }
        let path = directory + "/" + key
        guard unlink(path) == 0 || errno == ENOENT else { throw failure("delete", key: key, path: path, errno: errno) }
    }

    /// Ids are ours: lowercase hex.
    private static func isUploadID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    public func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart {
        let folder = try uploadFolder(uploadID, key: key)
        let info = try loadInfo(folder, key: key, uploadID: uploadID)
        guard number >= 1, offset >= 0, offset + Int64(data.count) <= info.totalSize else {
            throw CovenError.storage(
                "cannot send part \(number) of '\(key)'", failure: .provider,
                cause: "bytes \(offset)..<\(offset + Int64(data.count)) are outside the object's \(info.totalSize)",
                details: key)
        }
        let dataPath = folder + "/data"
        let fd = open(dataPath, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw missingUpload(key, uploadID) }
            throw failure("send part \(number) of", key: key, path: dataPath, errno: code)
        }
        do {
            // Write-back starts behind each piece, so the fdatasync that confirms the part has
            // little left to do. fdatasync suffices: the file's size was fixed and made durable
            // when the upload was created; the blocks a hole gains are flushed with the data.
            // Allocating the part's blocks first makes the writes cheaper on ext4 (no per-page
            // delayed allocation). Only a help: a failure (no room) shows at the write.
            if !data.isEmpty { _ = coven_preallocate(fd, offset, Int64(data.count)) }
            var written = 0
            while written < data.count {
                let piece = min(Self.writebackPiece, data.count - written)
                try writeAll(fd, UnsafeRawBufferPointer(rebasing: data[written..<(written + piece)]),
                             offset: offset + Int64(written), key: key, path: dataPath)
                _ = coven_start_writeback(fd, offset + Int64(written), Int64(piece))
                written += piece
            }
            guard fdatasync(fd) == 0 else { throw failure("sync part \(number) of", key: key, path: dataPath, errno: errno) }
        } catch {
            close(fd)
            throw error
        }
        guard close(fd) == 0 else { throw failure("send part \(number) of", key: key, path: dataPath, errno: errno) }
        // The part's identity: a fresh random token, not a hash of its bytes (the object is
        // authenticated chunk by chunk, and its content hash is checked by its readers). A part
        // sent again gets a new token, so a caller's stale record never matches it.
        let etag = SecureRandom.nonce(16).hex
        let record = PartRecord(number: number, offset: offset, size: Int64(data.count), etag: etag)
        try writeSlot(record, folder: folder, key: key, uploadID: uploadID)
        return UploadedPart(number: number, etag: etag, size: Int64(data.count))
    }

    // MARK: - The part table

    /// Bytes of one part's slot in `DIR/.uploads/<id>/parts`.
    static let slotSize = 64
    /// Bytes written at a time before write-back of a part is started.
    static let writebackPiece = 1 << 20
    private static let slotMagic: [UInt8] = Array("CVP1".utf8)

    /// The 64 bytes of a part's slot: magic, number (u32), offset (i64), size (i64), etag (16
    /// bytes), then the first 8 bytes of the SHA-256 of those 40 bytes, zero padded. A slot that
    /// is all zeros (never written) or fails its check (torn by a power loss) is no part.
    static func slotBytes(_ record: PartRecord) -> [UInt8]? {
        guard let token = Self.tokenBytes(record.etag), record.number >= 1, record.number <= Int(UInt32.max) else { return nil }
        var bytes = slotMagic
        withUnsafeBytes(of: UInt32(record.number).littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: record.offset.littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: record.size.littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: token)
        bytes.append(contentsOf: SHA256.digest(bytes).prefix(8))
        bytes.append(contentsOf: [UInt8](repeating: 0, count: slotSize - bytes.count))
        return bytes
    }

    /// The record in a slot, or nil when the slot holds no (intact) part.
    static func record(slot: ArraySlice<UInt8>) -> PartRecord? {
        let bytes = Array(slot)
        guard bytes.count == slotSize, Array(bytes[0..<4]) == slotMagic,
              Array(SHA256.digest(Array(bytes[0..<40])).prefix(8)) == Array(bytes[40..<48]) else { return nil }
        func integer<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
            bytes[at..<(at + MemoryLayout<T>.size)].withUnsafeBytes { T(littleEndian: $0.loadUnaligned(as: T.self)) }
        }
        return PartRecord(number: Int(integer(4, UInt32.self)), offset: integer(8, Int64.self),
                          size: integer(16, Int64.self), etag: Array(bytes[24..<40]).hex)
    }

    private static func tokenBytes(_ etag: String) -> [UInt8]? {
        let utf8 = Array(etag.utf8)
        guard utf8.count == 32 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(16)
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            default: return nil
            }
        }
        for index in stride(from: 0, to: 32, by: 2) {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
        }
        return out
    }

    /// Records a confirmed part in its slot of the part table, durably (fdatasync), after its
    /// bytes were made durable. The table was created with the upload, so no folder needs a
    /// sync here.
    private func writeSlot(_ record: PartRecord, folder: String, key: String, uploadID: String) throws {
        guard let slot = Self.slotBytes(record) else {
            throw CovenError(.internal, "cannot encode the record of part \(record.number)")
        }
        let tablePath = folder + "/parts"
        var fd = open(tablePath, O_WRONLY | O_CLOEXEC)
        if fd < 0 && errno == ENOENT {
            // Abandoned meanwhile, or an upload an older version started (parts as files).
            guard folderExists(folder) else { throw missingUpload(key, uploadID) }
            fd = open(tablePath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            if fd >= 0 {
                do { try syncFolder(folder, key: key) } catch { close(fd); throw error }
            }
        }
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw missingUpload(key, uploadID) }
            throw failure("record part \(record.number) of", key: key, path: tablePath, errno: code)
        }
        defer { close(fd) }
        try slot.withUnsafeBytes {
            try writeAll(fd, $0, offset: Int64(record.number - 1) * Int64(Self.slotSize), key: key, path: tablePath)
        }
        guard fdatasync(fd) == 0 else { throw failure("record part \(record.number) of", key: key, path: tablePath, errno: errno) }
    }

    private func folderExists(_ folder: String) -> Bool {
        var info = stat()
        return stat(folder, &info) == 0
    }

    private func partRecords(_ folder: String, key: String, uploadID: String) throws -> [PartRecord] {
        guard let stream = opendir(folder) else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                throw missingUpload(key, uploadID)
            }
            throw failure("list the parts of", key: key, path: folder, errno: code)
        }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                let code = errno
                closedir(stream)
                if code != 0 { throw failure("list the parts of", key: key, path: folder, errno: code) }
                break
            }
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name.hasPrefix("part-") { names.append(name) }
        }
        var records: [PartRecord] = []
        var numbers = Set<Int>()
        do {
            let table = try readSmallFile(folder + "/parts", key: key)
            var at = 0
            while at + Self.slotSize <= table.count {
                if let record = Self.record(slot: table[at..<(at + Self.slotSize)]), record.number == at / Self.slotSize + 1 {
                    records.append(record)
                    numbers.insert(record.number)
                }
                at += Self.slotSize
            }
        } catch let error as CovenError where error.details["errno"] == "ENOENT" {
            // An upload started by an older version: its parts are `part-<n>` files only.
        }
        for name in names {
            let bytes: [UInt8]
            do {
                bytes = try readSmallFile(folder + "/" + name, key: key)
            } catch let error as CovenError where error.details["errno"] == "ENOENT" {
                continue
            }
            guard let record = try? JSONDecoder().decode(PartRecord.self, from: Data(bytes)), name == "part-\(record.number)" else {
                throw CovenError.storage(
                    "the record of a part of upload '\(uploadID)' is damaged", failure: .provider, cause: "unreadable \(name)",
                    details: key)
            }
            if !numbers.contains(record.number) { records.append(record) }
        }
        return records.sorted { $0.number < $1.number }
    }

    public func listParts(_ key: String, uploadID: String) throws -> [UploadedPart] {
        let folder = try uploadFolder(uploadID, key: key)
        _ = try loadInfo(folder, key: key, uploadID: uploadID)
        return try partRecords(folder, key: key, uploadID: uploadID).map {
            UploadedPart(number: $0.number, etag: $0.etag, size: $0.size)
        }
    }

    public func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws {
        let path = try path(for: key)
        let folder = try uploadFolder(uploadID, key: key)
        let expectedSize = parts.reduce(Int64(0)) { $0 + $1.size }
        let info: UploadInfo
        do {
            info = try loadInfo(folder, key: key, uploadID: uploadID)
        } catch let error as CovenError where error.code == .missing {
            // Completed by an earlier call whose answer was lost?
            if let object = try head(key), object.size == expectedSize { return }
            throw error
        }
        let dataPath = folder + "/data"
        var dataInfo = stat()
        if stat(dataPath, &dataInfo) != 0 {
            let code = errno
            guard code == ENOENT else { throw failure("complete the upload of", key: key, path: dataPath, errno: code) }
            // A crash after the rename and before the folder was removed.
            if let object = try head(key), object.size == info.totalSize {
                removeUploadFolder(folder)
                return
            }
            throw missingUpload(key, uploadID)
        }

        // A data file cut short (or grown) after its parts were confirmed is not the object.
        guard Int64(dataInfo.st_size) == info.totalSize else {
            throw incomplete(key, "the upload's data is \(dataInfo.st_size.counted("byte")), not \(info.totalSize)")
        }
        let records = Dictionary(try partRecords(folder, key: key, uploadID: uploadID).map { ($0.number, $0) }) { a, _ in a }
        let sorted = parts.sorted { $0.number < $1.number }
        var offset: Int64 = 0
        for (index, part) in sorted.enumerated() {
            guard part.number == index + 1 else {
                throw incomplete(key, "part \(index + 1) is missing from the list")
            }
            guard let record = records[part.number] else {
                throw incomplete(key, "part \(part.number) was never confirmed")
            }
            guard record.etag == part.etag, record.size == part.size else {
                throw incomplete(key, "part \(part.number) does not match what was confirmed")
            }
            guard record.offset == offset else {
                throw incomplete(key, "part \(part.number) starts at \(record.offset), not \(offset)")
            }
            offset += record.size
        }
        guard offset == info.totalSize else {
            throw incomplete(key, "the parts hold \(offset) of \(info.totalSize.counted("byte"))")
        }

        let fd = open(dataPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("complete the upload of", key: key, path: dataPath, errno: errno) }
        let synced = fsync(fd) == 0
        let syncCode = errno
        close(fd)
        guard synced else { throw failure("complete the upload of", key: key, path: dataPath, errno: syncCode) }

        let target = Self.parent(of: path)
        try makeFolders(target, key: key)
        guard rename(dataPath, path) == 0 else {
            throw failure("complete the upload of", key: key, path: path, errno: errno)
        }
        try syncFolder(target, key: key)
        try syncFolder(folder, key: key)
        removeUploadFolder(folder)
        try? syncFolder(directory + "/" + Self.uploadsFolder, key: key)
    }

    private func incomplete(_ key: String, _ reason: String) -> CovenError {
        CovenError.storage("cannot complete the upload of '\(key)'", failure: .provider, cause: reason, details: key)
    }

    public func abortMultipart(_ key: String, uploadID: String) throws {
        let folder: String
        do {
            folder = try uploadFolder(uploadID, key: key)
        } catch {
            return  // not an id of ours: nothing to abandon
        }
        // What a kill left of the upload's start, if anything.
        let building = directory + "/" + Self.uploadsFolder + "/" + Self.temporaryPrefix + uploadID
        guard removeUploadFolder(building) else {
            throw failure("abandon the upload of", key: key, path: building, errno: errno)
        }
        var info = stat()
        guard stat(folder, &info) == 0 else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                return
            }
            throw failure("abandon the upload of", key: key, path: folder, errno: code)
        }
        guard removeUploadFolder(folder) else {
            throw failure("abandon the upload of", key: key, path: folder, errno: errno)
        }
        try syncFolder(directory + "/" + Self.uploadsFolder, key: key)
    }

    /// Removes an upload folder and its files; true when it is gone.
    @discardableResult
    private func removeUploadFolder(_ folder: String) -> Bool {
        if let stream = opendir(folder) {
            var names: [String] = []
            while let entry = readdir(stream) {
                let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                    pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(stream)
            for name in names { unlink(folder + "/" + name) }
        }
        return rmdir(folder) == 0 || errno == ENOENT
    }
}

extension CovenError {
    /// A `.storage` error with its failure class, cause and the key it concerns.
    fileprivate static func storage(
        _ message: String, failure: StorageFailure, cause: String, details key: String
    ) -> CovenError {
        var error = CovenError.storage(message, failure: failure, cause: cause)
        error.details["key"] = key
        return error
    }
}

/// A count under a lock. @unchecked: `value` is read and written under `lock` only.
final class LockedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func withLock<T>(_ body: (inout Int) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

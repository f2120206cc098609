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
    static let uploadsFolder = ".uploads"
    static let temporaryPrefix = ".coven-tmp-"

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
    func interruption(_ operation: String, key: String?, path: String) -> CovenError {
        CovenError(.interrupted, "the \(operation) of '\(key ?? path)' stopped: \(Stop.process.reason ?? "interrupted by a signal")",
                   details: ["path": path])
    }

    func missing(_ key: String) -> CovenError {
        CovenError(.missing, "nothing is stored at '\(key)'", details: ["key": key])
    }

    /// Throws unless the store directory is there: ENOENT below a vanished root is not absence.
    func checkRoot() throws {
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
        guard Self.isPlainKey(key) || Self.isValidKey(key) else {
            throw CovenError.storage(
                "'\(key)' cannot be a key of a file:// store", failure: .provider,
                cause: "keys are relative paths without empty, '.', '..' or reserved segments", details: key)
        }
        return directory + "/" + key
    }

    /// Whether `key` is a key of a file:// store: a relative path without empty, `.`, `..` or
    /// reserved segments (temporary names, the uploads folder) and without a NUL byte.
    static func isValidKey(_ key: String) -> Bool {
        let segments = key.split(separator: "/", omittingEmptySubsequences: false)
        return !key.isEmpty && !key.utf8.contains(0)
            && segments.allSatisfy { !$0.isEmpty && $0 != "." && $0 != ".." && !$0.hasPrefix(Self.temporaryPrefix) }
            && segments.first != Substring(Self.uploadsFolder)
    }

    /// The keys coven names (`files/DEVICE/NAME`, one pass over the bytes): non-empty
    /// segments none of which starts with a dot, no NUL. Every such key is valid
    /// (``isValidKey(_:)``: each reserved segment starts with a dot); a key that is not plain
    /// is judged by the full check.
    static func isPlainKey(_ key: String) -> Bool {
        var previous: UInt8 = UInt8(ascii: "/")
        for byte in key.utf8 {
            if byte == 0 { return false }
            if previous == UInt8(ascii: "/") && (byte == UInt8(ascii: "/") || byte == UInt8(ascii: ".")) { return false }
            previous = byte
        }
        return previous != UInt8(ascii: "/")
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
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
}

extension CovenError {
    /// A `.storage` error with its failure class, cause and the key it concerns.
    static func storage(
        _ message: String, failure: StorageFailure, cause: String, details key: String
    ) -> CovenError {
        var error = CovenError.storage(message, failure: failure, cause: cause)
        error.details["key"] = key
        return error
    }
}

import CLinux
import Foundation

extension FileStorage {
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
        return Array(Set(try uploadFolders(listing: "list the uploads of", key: key) { $0.key == key }.map(\.id))).sorted()
    }

    public func uploadsInProgress(prefix: String) throws -> [UploadInProgress] {
        try checkRoot()
        let uploads = directory + "/" + Self.uploadsFolder
        var found: [UploadInProgress] = []
        for (name, id, info) in try uploadFolders(listing: "list the uploads under", key: prefix, matching: { $0.key.hasPrefix(prefix) }) {
            var status = stat()
            let initiated = stat(uploads + "/" + name + "/info", &status) == 0
                ? Date(timeIntervalSince1970: TimeInterval(status.st_mtim.tv_sec)) : nil
            found.append(UploadInProgress(key: info.key, uploadID: id, initiated: initiated))
        }
        return found
    }

    /// The folders of `.uploads/` (finished or, `.coven-tmp-<id>`, half-built) whose info record
    /// `matches`, in name order: each one's name, upload id and info. No uploads folder: none
    /// (once the store is known to be there).
    ///
    /// - Throws: `.storage` (`operation` on `key`) when the uploads folder cannot be read.
    private func uploadFolders(listing operation: String, key: String,
                               matching: (UploadInfo) -> Bool) throws -> [(name: String, id: String, info: UploadInfo)] {
        let uploads = directory + "/" + Self.uploadsFolder
        guard let stream = opendir(uploads) else {
            let code = errno
            if code == ENOENT {
                try checkRoot()
                return []
            }
            throw failure(operation, key: key, path: uploads, errno: code)
        }
        var names: [String] = []
        while let entry = readdir(stream) {
            names.append(withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            })
        }
        closedir(stream)
        var found: [(name: String, id: String, info: UploadInfo)] = []
        for name in names.sorted() {
            let id = name.hasPrefix(Self.temporaryPrefix) ? String(name.dropFirst(Self.temporaryPrefix.count)) : name
            guard Self.isUploadID(id), let bytes = try? readSmallFile(uploads + "/" + name + "/info", key: key),
                  let info = try? JSONDecoder().decode(UploadInfo.self, from: Data(bytes)), matching(info)
            else { continue }
            found.append((name, id, info))
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
            //
            // One part at a time is written into an upload's file, under a lock of this process:
            // the kernel writes into a file under its inode's lock anyway, and a second sender
            // waiting for it there spun on a core (7% of an upload of 1 GiB to tmpfs) that a
            // sealer could have used; it sleeps here instead. The sync is outside the lock.
            try Self.partWriters.withLock(dataPath) {
                if !data.isEmpty { _ = coven_preallocate(fd, offset, Int64(data.count)) }
                var written = 0
                while written < data.count {
                    let piece = min(Self.writebackPiece, data.count - written)
                    try writeAll(fd, UnsafeRawBufferPointer(rebasing: data[written..<(written + piece)]),
                                 offset: offset + Int64(written), key: key, path: dataPath)
                    _ = coven_start_writeback(fd, offset + Int64(written), Int64(piece))
                    written += piece
                }
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

    /// A lock for each upload file a part is being written into, in this process.
    static let partWriters = KeyedLocks()
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

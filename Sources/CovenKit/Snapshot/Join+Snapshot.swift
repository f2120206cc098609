import Foundation

/// A snapshot `coven join` did not start from, and why.
public struct SnapshotSkip: Sendable, Equatable {
    /// Its storage key.
    public var key: String
    /// Why: an error code (`integrity`, `decoding`, `missing`, `update_required`) or
    /// `newer_schema` / `other_schema` / `other_store`.
    public var reason: String
    /// One line for people.
    public var message: String
}

/// Where `coven join` started from.
public struct SnapshotJoin: Sendable, Equatable {
    /// The snapshot the device was built from (nil: none could be used, every change is
    /// pulled), and its manifest.
    public var key: String?
    public var manifest: SnapshotManifest?
    /// The snapshots passed over, in the order they were considered.
    public var skipped: [SnapshotSkip] = []
    /// The device was there already, of this store (a join run again after a kill or a
    /// failure): nothing was built, and the pull finishes the join.
    public var resumed = false

    public init(key: String? = nil, manifest: SnapshotManifest? = nil, skipped: [SnapshotSkip] = [], resumed: Bool = false) {
        self.key = key
        self.manifest = manifest
        self.skipped = skipped
        self.resumed = resumed
    }
}

extension DeviceSetup {
    /// Finds the newest snapshot of the store whose schema this device can read and unpacks
    /// its database at `path`: the snapshots are ranked by how much history they hold (their
    /// seq and frontier, read from each one's first chunk), and one that is of a newer schema,
    /// fails authentication, is truncated or cannot be decoded is passed over for the next,
    /// and finally for none (the device then pulls every change).
    ///
    /// - Throws: `.storage` when storage fails (not a snapshot's fault); `.noRoom`/`.io`.
    static func restoreSnapshot(provider: StorageProvider, keys: Keyring, storeID: String, manifest: Manifest,
                                into path: String, temporary: String) throws -> SnapshotJoin {
        var result = SnapshotJoin()
        let local = (count: manifest.migrations.count, migrations: manifest.migrations)
        var candidates: [(info: ObjectInfo, manifest: SnapshotManifest)] = []
        func skip(_ key: String, _ error: CovenError) throws {
            guard [.integrity, .decoding, .missing, .updateRequired].contains(error.code) else { throw error }
            result.skipped.append(SnapshotSkip(key: key, reason: error.code.rawValue, message: error.description))
        }
        for info in try provider.list(prefix: "snapshots/") {
            guard let name = Snapshot.parse(info.key) else { continue }
            let peeked: SnapshotManifest
            do {
                peeked = try peekManifest(provider: provider, info: info, keys: keys)
            } catch let error as CovenError {
                try skip(info.key, error)
                continue
            }
            guard peeked.device == name.device, peeked.seq == name.seq else {
                try skip(info.key, CovenError(.integrity, "snapshot '\(info.key)' says it is change \(peeked.seq) of device \(peeked.device)"))
                continue
            }
            guard peeked.store == storeID else {
                result.skipped.append(SnapshotSkip(key: info.key, reason: "other_store", message: "snapshot '\(info.key)' is of store \(peeked.store)"))
                continue
            }
            if peeked.covenSchema > Schema.version || peeked.migrations > local.count {
                result.skipped.append(SnapshotSkip(
                    key: info.key, reason: "newer_schema",
                    message: "snapshot '\(info.key)' was made under a newer schema (coven schema \(peeked.covenSchema), \(peeked.migrations.counted("migration")))"))
                continue
            }
            let digest = SHA256.digest(Array(local.migrations.prefix(peeked.migrations).joined(separator: "\u{0}").utf8)).hex
            guard digest == peeked.migrationsDigest else {
                result.skipped.append(SnapshotSkip(key: info.key, reason: "other_schema",
                                                   message: "snapshot '\(info.key)' was made by migrations other than the store's manifest"))
                continue
            }
            candidates.append((info, peeked))
        }
        candidates.sort { ($0.manifest.coverage, $0.manifest.createdAt, $0.info.key) > ($1.manifest.coverage, $1.manifest.createdAt, $1.info.key) }
        for candidate in candidates {
            do {
                try unpackSnapshot(provider: provider, key: candidate.info.key, expected: candidate.manifest, keys: keys, into: path, temporary: temporary)
                result.key = candidate.info.key
                result.manifest = candidate.manifest
                return result
            } catch let error as CovenError {
                for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
                try skip(candidate.info.key, error)
            }
        }
        return result
    }

    /// The manifest of a snapshot, read from its first sealed chunk alone (one ranged GET):
    /// each chunk is authenticated on its own, so the manifest is genuine even if the rest of
    /// the object is damaged.
    static func peekManifest(provider: StorageProvider, info: ObjectInfo, keys: Keyring) throws -> SnapshotManifest {
        let archive = try openRanged(provider: provider, info: info, keys: keys, firstChunkOnly: true)
        return try readManifest(archive, key: info.key)
    }

    /// The first sealed chunk of a stored snapshot (its header and first chunk: one ranged GET).
    static func firstChunk(provider: StorageProvider, info: ObjectInfo) throws -> [UInt8] {
        var bytes: [UInt8] = []
        let firstSize = min(info.size, Int64(StoreSealer.headerSize + ChunkRun.sealedChunkSize))
        try provider.get(info.key, range: 0..<firstSize) { bytes.append(contentsOf: $0) }
        guard bytes.count == Int(firstSize) else {
            throw CovenError(.integrity, "snapshot '\(info.key)' is shorter than listed", details: ["object": info.key])
        }
        return bytes
    }

    /// The manifest in `first` (``firstChunk(provider:info:)``), opened with `key`; nil when
    /// the key does not open it.
    static func manifest(inFirstChunk first: [UInt8], info: ObjectInfo, keys: Keyring, key: FileKey) throws -> SnapshotManifest? {
        var at = 0
        guard let reader = try? keys.opener(boundTo: info.key, sealedSize: info.size, key: key, read: { buffer in
            let count = min(buffer.count, first.count - at)
            if count > 0 { first.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + count)])) } }
            at += count
            return count
        }), let chunk = try? reader.nextChunk() else { return nil }
        var chunks = 0
        let archive = try ArchiveReader {
            chunks += 1
            return chunks > 1 ? nil : chunk
        }
        return try readManifest(archive, key: info.key)
    }

    /// The stored objects a snapshot names (its `objects` entry, right after the manifest),
    /// read by ranged GETs of a few sealed chunks at a time, stopping where the list ends.
    /// (`opening`: the key of a circle's part.)
    static func snapshotObjects(provider: StorageProvider, info: ObjectInfo, keys: Keyring, opening: FileKey? = nil) throws -> Set<String> {
        let archive = try openRanged(provider: provider, info: info, keys: keys, opening: opening)
        _ = try readManifest(archive, key: info.key)
        guard let entry = try archive.nextEntry(), entry.name == Snapshot.objectsEntry else {
            throw CovenError(.decoding, "snapshot '\(info.key)' has no object list", details: ["object": info.key])
        }
        var objects: Set<String> = []
        var line: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try archive.read(into: buffer)
            if count == 0 { break }
            for byte in buffer[0..<count] {
                if byte == 10 {
                    objects.insert(String(decoding: line, as: UTF8.self))
                    line.removeAll(keepingCapacity: true)
                } else {
                    line.append(byte)
                }
            }
        }
        guard line.isEmpty else {
            throw CovenError(.decoding, "snapshot '\(info.key)' has a cut object list", details: ["object": info.key])
        }
        return objects
    }

    private static func readManifest(_ archive: ArchiveReader, key: String) throws -> SnapshotManifest {
        guard let entry = try archive.nextEntry(), entry.name == Snapshot.manifestEntry else {
            throw CovenError(.decoding, "snapshot '\(key)' does not start with its manifest", details: ["object": key])
        }
        return try SnapshotManifest(json: try archive.readAll(maximumSize: 1 << 20), key: key)
    }

    /// The archive of a stored snapshot, opened chunk by chunk (each authenticated) from ranged
    /// GETs made as the reader goes: the first covers the header and first chunk, each later
    /// one four chunks. With `firstChunkOnly`, the archive ends after the first chunk (the
    /// manifest is within it: one GET).
    private static func openRanged(provider: StorageProvider, info: ObjectInfo, keys: Keyring, opening: FileKey? = nil, firstChunkOnly: Bool = false) throws -> ArchiveReader {
        // The first GET (the header and first chunk) also tells which key opens it.
        var bytes = try firstChunk(provider: provider, info: info)
        var at = 0
        var fetched = Int64(bytes.count)
        let first = bytes
        let key = try opening ?? keys.key(opening: info.key, sealedSize: info.size) { first }
        let sealed = try keys.opener(boundTo: info.key, sealedSize: info.size, key: key) { buffer in
            if at == bytes.count, fetched < info.size {
                let step = fetched == 0 ? Int64(StoreSealer.headerSize + ChunkRun.sealedChunkSize) : Int64(4 * ChunkRun.sealedChunkSize)
                let upTo = min(info.size, fetched + step)
                bytes.removeAll(keepingCapacity: true)
                at = 0
                try provider.get(info.key, range: fetched..<upTo) { bytes.append(contentsOf: $0) }
                guard bytes.count == Int(upTo - fetched) else {
                    throw CovenError(.integrity, "snapshot '\(info.key)' is shorter than listed", details: ["object": info.key])
                }
                fetched = upTo
            }
            let count = min(buffer.count, bytes.count - at)
            if count > 0 { bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + count)])) } }
            at += count
            return count
        }
        var chunks = 0
        return try ArchiveReader {
            chunks += 1
            return firstChunkOnly && chunks > 1 ? nil : try sealed.nextChunk()
        }
    }

    /// Downloads the snapshot at `key` into a temporary file, then opens it chunk by chunk,
    /// unpacking its database at `path`; every chunk is authenticated, through the last.
    ///
    /// `opening` is the key of a circle's part (``SnapshotParts``); a store part's is found
    /// among the store's keys.
    static func unpackSnapshot(provider: StorageProvider, key: String, expected: SnapshotManifest, keys: Keyring, opening known: FileKey? = nil,
                               into path: String, temporary: String) throws {
        let download = temporary + "/snapshot-" + Identifier.objectName() + ".sealed"
        let fd = Glibc.open(download, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CovenError.posix("create", path: download) }
        defer {
            close(fd)
            unlink(download)
        }
        try provider.get(key, range: nil) { try AtomicFile.writeAll(fd, $0, path: download) }
        var info = stat()
        guard fstat(fd, &info) == 0, lseek(fd, 0, SEEK_SET) == 0 else { throw CovenError.posix("read", path: download) }
        let firstSize = Int(min(Int64(info.st_size), Int64(StoreSealer.headerSize + ChunkRun.sealedChunkSize)))
        let opening = try known ?? keys.key(opening: key, sealedSize: Int64(info.st_size)) {
            var first = [UInt8](repeating: 0, count: firstSize)
            guard pread(fd, &first, firstSize, 0) == firstSize else { throw CovenError.posix("read", path: download) }
            return first
        }
        let sealed = try keys.opener(boundTo: key, sealedSize: Int64(info.st_size), key: opening) { buffer in
            while true {
                let count = read(fd, buffer.baseAddress, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count >= 0 else { throw CovenError.posix("read", path: download) }
                return count
            }
        }
        do {
            let archive = try ArchiveReader { try sealed.nextChunk() }
            guard let first = try archive.nextEntry(), first.name == Snapshot.manifestEntry else {
                throw CovenError(.decoding, "snapshot '\(key)' does not start with its manifest", details: ["object": key])
            }
            let manifest = try SnapshotManifest(json: try archive.readAll(maximumSize: 1 << 20), key: key)
            guard manifest == expected else {
                throw CovenError(.integrity, "snapshot '\(key)' changed while it was read", details: ["object": key])
            }
            guard let objects = try archive.nextEntry(), objects.name == Snapshot.objectsEntry else {
                throw CovenError(.decoding, "snapshot '\(key)' has no object list", details: ["object": key])
            }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while try archive.read(into: buffer) > 0 {}
            guard let database = try archive.nextEntry(), database.name == Snapshot.databaseEntry else {
                throw CovenError(.decoding, "snapshot '\(key)' has no database", details: ["object": key])
            }
            let out = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard out >= 0 else { throw CovenError.posix("create", path: path) }
            defer { close(out) }
            var written: Int64 = 0
            while true {
                let count = try archive.read(into: buffer)
                if count == 0 { break }
                try AtomicFile.writeAll(out, UnsafeRawBufferPointer(rebasing: buffer[0..<count]), path: path)
                written += Int64(count)
            }
            guard written == database.size else {
                throw CovenError(.decoding, "snapshot '\(key)' has a short database", details: ["object": key])
            }
            guard try archive.nextEntry() == nil else {
                throw CovenError(.decoding, "snapshot '\(key)' has entries past its database", details: ["object": key])
            }
            // Through the final chunk: a snapshot cut short fails here if nowhere before.
            while try sealed.nextChunk() != nil {}
            guard fsync(out) == 0 else { throw CovenError.posix("sync", path: path) }
        } catch var error as CovenError {
            error.details["object"] = key
            if !error.message.contains(key) { error.message = "snapshot '\(key)': " + error.message }
            throw error
        }
    }
}

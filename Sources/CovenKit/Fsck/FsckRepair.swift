import CLinux
import Foundation

// MARK: - Mending stored objects

extension Fsck {
    /// Names the files whose stored object is damaged or missing and was not mended, and the
    /// rows that reference them; fills in each problem's files. A file this device still holds
    /// a local source of (the original, coven's copy, a whole cache entry) is not lost: its
    /// problem says `--repair` mends it from there.
    func findLostFiles() throws {
        for index in report.problems.indices where report.problems[index].subject == .object {
            let object = report.problems[index].key
            let files = try device.database.query("SELECT id FROM coven_files WHERE object = ?1 ORDER BY id", [object]).compactMap { $0.string("id") }
            report.problems[index].files = files
            guard !report.problems[index].mended else { continue }
            if !options.repair, let size = try device.database.scalar("SELECT min(size) FROM coven_files WHERE object = ?1", [object]).intValue,
               let source = try sources(object: object, size: size).first {
                report.problems[index].message += " ('coven fsck --repair' mends it from the \(source.0))"
                continue
            }
            for file in files {
                report.lost.append(FsckLostFile(file: file, object: object, rows: try rows(naming: file)))
            }
        }
    }

    /// `table/id` of every row of the app's tables whose file columns name `file`.
    func rows(naming file: String) throws -> [String] {
        var rows: [String] = []
        for table in device.manifest.tables where !table.files.isEmpty {
            for column in table.files {
                let ids = try device.database.query(
                    "SELECT id FROM main.\(RowCapture.quote(table.name)) WHERE \(RowCapture.quote(column.column)) = ?1 ORDER BY id", [file])
                rows += ids.compactMap { $0.string("id") }.map { "\(table.name)/\($0)" }
            }
        }
        return rows
    }

    /// Mends each stored object found damaged or missing from a local source whose SHA-256 is
    /// the record's: sealed again under the file's key (deterministic: the object comes back
    /// byte for byte), stored in its place atomically, then read and checked again.
    func repairObjects(provider: StorageProvider) throws {
        for index in report.problems.indices where report.problems[index].subject == .object && !report.problems[index].mended {
            try checkStop()
            let object = report.problems[index].key
            guard let row = try device.database.queryOne("""
                SELECT \(Self.itemColumns) FROM coven_files AS f WHERE f.object = ?1 AND f.place = 'stored' GROUP BY f.object
                """, [object]), let item = Self.item(row), let hash = item.hash else { continue }
            tell("repair")
            for (source, path) in try sources(object: object, size: item.size) {
                guard try Self.hashFile(path, size: item.size)?.hex == hash else { continue }
                guard try reseal(item, from: path, hash: hash, provider: provider) else { continue }
                guard try FsckPool.verify(item, provider: provider) == .intact else { continue }
                report.problems[index].mended = true
                report.problems[index].mendedFrom = source
                try ledger.record([.init(key: object, kind: "object", at: Date().timeIntervalSince1970, bytes: item.size, result: "ok")])
                break
            }
        }
    }

    /// The local bytes that may hold an object's plaintext: the original or coven's copy this
    /// device records for it, then a cache entry holding every chunk.
    func sources(object: String, size: Int64) throws -> [(String, String)] {
        var sources: [(String, String)] = []
        if let row = try device.database.queryOne("SELECT * FROM coven_local WHERE object = ?1", [object]) {
            sources.append((row.string("kind") == "user" ? "original" : "copy", localPath(row)))
        }
        if let row = try Cache(device).cacheRow(object), row.size == size,
           ChunkBitmap(count: ObjectLayout.chunkCount(plaintextSize: size), bytes: row.chunks).isFull {
            sources.append(("cache", Cache(device).cachePaths(object: object).data))
        }
        return sources
    }

    /// Seals the file at `path` under the item's key and stores it at the item's object: one
    /// PUT up to 16 MiB, else a multipart upload of 8 MiB parts, completed only once the
    /// plaintext sealed hashed to `hash` (storage keeps the old bytes until then).
    ///
    /// - Returns: false when the file no longer matches (nothing stored).
    private func reseal(_ item: StoredItem, from path: String, hash: String, provider: StorageProvider) throws -> Bool {
        let fd = PathText.withCString(path) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let size = item.size
        let sealer = try ObjectSealer(key: FileKey(hex: item.keyHex))
        let total = ObjectLayout.encryptedSize(plaintextSize: size)
        let hasher = try SHA256()
        let runChunks = StoredRead.runChunks
        let plain = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(runChunks * ObjectLayout.chunkSize), alignment: 64)
        let sealed = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(runChunks * ObjectLayout.sealedChunkSize), alignment: 64)
        defer {
            plain.deallocate()
            sealed.deallocate()
        }
        let writer = try SealedObjectWriter(key: item.object, total: total, provider: provider,
                                            singleLimit: options.repairSingleLimit, partSize: options.repairPartSize)
        do {
            try sealer.header.withUnsafeBytes { try writer.write($0) }
            let count = ObjectLayout.chunkCount(plaintextSize: size)
            var chunk: Int64 = 0
            while chunk < count {
                let run = chunk..<min(chunk + runChunks, count)
                let lower = ObjectLayout.plaintextRange(chunk: run.lowerBound, plaintextSize: size).lowerBound
                let upper = ObjectLayout.plaintextRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
                let want = Int(upper - lower)
                let slice = UnsafeMutableRawBufferPointer(rebasing: plain[0..<want])
                guard preadAll(fd, slice, at: lower) == want else {
                    writer.abandon()
                    return false
                }
                hasher.update(UnsafeRawBufferPointer(slice))
                let written = try sealer.sealChunks(firstChunk: run.lowerBound, plaintext: UnsafeRawBufferPointer(slice),
                                                    totalPlaintextSize: size, into: sealed)
                try writer.write(UnsafeRawBufferPointer(rebasing: sealed[0..<written]))
                chunk = run.upperBound
            }
            guard hasher.finish().hex == hash else {
                writer.abandon()
                return false
            }
            try writer.finish()
            return true
        } catch {
            writer.abandon()
            throw error
        }
    }
}

/// Writes one object's bytes to storage as they are sealed: held and PUT whole when small,
/// else sent as the parts of a multipart upload that completes only at ``finish()``.
final class SealedObjectWriter {
    private let key: String
    private let total: Int64
    private let provider: StorageProvider
    private var buffer: [UInt8] = []
    private var uploadID: String?
    private var parts: [UploadedPart] = []
    private var sent: Int64 = 0
    /// The part size of a multipart upload.
    private let partSize: Int

    /// - Parameters:
    ///   - singleLimit: objects up to this size are sent with one PUT (16 MiB).
    ///   - partSize: the part size of larger ones (8 MiB; S3 takes 5 MiB at least).
    init(key: String, total: Int64, provider: StorageProvider, singleLimit: Int64 = 16 << 20, partSize: Int = 8 << 20) throws {
        self.key = key
        self.total = total
        self.provider = provider
        self.partSize = partSize
        if total > singleLimit {
            buffer.reserveCapacity(partSize)
            uploadID = try provider.createMultipart(key, totalSize: total, partSize: Int64(partSize))
        } else {
            buffer.reserveCapacity(Int(total))
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while !rest.isEmpty {
            let room = uploadID == nil ? rest.count : min(rest.count, partSize - buffer.count)
            buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: rest[0..<room]))
            rest = UnsafeRawBufferPointer(rebasing: rest[room...])
            if uploadID != nil, buffer.count == partSize { try sendPart() }
        }
    }

    private func sendPart() throws {
        guard let uploadID, !buffer.isEmpty else { return }
        let part = try buffer.withUnsafeBytes {
            try provider.uploadPart(key, uploadID: uploadID, number: parts.count + 1, offset: sent, data: $0)
        }
        parts.append(part)
        sent += Int64(buffer.count)
        buffer.removeAll(keepingCapacity: true)
    }

    func finish() throws {
        if let uploadID {
            try sendPart()
            try provider.completeMultipart(key, uploadID: uploadID, parts: parts)
        } else {
            try provider.put(key, data: buffer)
        }
    }

    /// Gives up: an unfinished upload is aborted; nothing was stored.
    func abandon() {
        if let uploadID { try? provider.abortMultipart(key, uploadID: uploadID) }
        uploadID = nil
        buffer = []
    }
}

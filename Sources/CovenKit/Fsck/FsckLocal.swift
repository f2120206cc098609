import CLinux
import Foundation

// MARK: - This device's bytes

extension Fsck {
    /// Checks this device's own bytes: originals against their recorded size, modification time
    /// and hash (never touched), coven's copies and staged copies against their hashes, and the
    /// held chunks of each cache entry against their tags (a chunk that fails is forgotten under
    /// `--repair`: it is fetched again when read).
    func checkLocalBytes() throws {
        tell("local")
        for row in try device.database.query("SELECT * FROM coven_local ORDER BY object") {
            try checkStop()
            let object = row.string("object") ?? ""
            let files = try device.database.query("SELECT id FROM coven_files WHERE object = ?1 ORDER BY id", [object]).compactMap { $0.string("id") }
            try checkLocal(row, subject: row.string("kind") == "user" ? .original : .copy, files: files)
        }
        // A file on this device only whose bytes this device records nowhere (its database put
        // back from a backup older than the write that placed it here, the bytes not found
        // again: Sync/OwnNotes.swift) is missing, never held.
        for row in try device.database.query("""
            SELECT f.id, f.object FROM coven_files f WHERE f.place = \(Coordinates.Place.device.sql) AND f.device = ?1
              AND NOT EXISTS (SELECT 1 FROM coven_local l WHERE l.object = f.object) ORDER BY f.id
            """, [device.deviceID]) {
            try checkStop()
            let id = row.string("id") ?? ""
            add(FsckProblem(subject: .original, kind: .missing, key: row.string("object") ?? "",
                            message: "file '\(id)' is on this device only, but this device records no bytes of it", files: [id]))
        }
        for row in try device.database.query("SELECT * FROM coven_staged ORDER BY id") {
            try checkStop()
            let before = report.problems.count
            try checkLocal(row, subject: row.string("kind") == "user" ? .original : .staged, files: [])
            // Staged, not put: nothing but taking it back ends the problem.
            if report.problems.count > before, let id = row.string("id") {
                report.problems[before].message += " ('coven unstage \(id)' takes it back)"
            }
        }
        for row in try device.database.query("SELECT object, size, chunks FROM coven_cache ORDER BY object") {
            try checkStop()
            try checkCacheEntry(object: row.string("object") ?? "", size: row.int("size") ?? 0, chunks: row.bytes("chunks") ?? [])
        }
    }

    /// The path of an original or of coven's copy, from a `coven_local` or `coven_staged` row.
    func localPath(_ row: Row) -> String {
        if row.string("kind") == "user" { return PathText.string(fromOSBytes: row.bytes("path") ?? []) }
        return device.paths.folder + "/" + (row.string("copy") ?? "")
    }

    private func checkLocal(_ row: Row, subject: FsckProblem.Subject, files: [String]) throws {
        let path = localPath(row)
        let display = PathText.display(path)
        let size = row.int("size") ?? 0
        report.localChecked += 1
        var info = stat()
        guard PathText.withCString(path, { stat($0, &info) }) == 0, info.st_mode & S_IFMT == S_IFREG else {
            add(FsckProblem(subject: subject, kind: .missing, key: display,
                            message: subject == .original ? "the original '\(display)' is missing" : "coven's copy '\(display)' is missing", files: files))
            return
        }
        if subject == .original {
            let identity = OriginalIdentity(info)
            guard identity.size == size, identity.modifiedSeconds == row.int("modified_seconds"), identity.modifiedNanos == row.int("modified_nanos") else {
                add(FsckProblem(subject: .original, kind: .changed, key: display,
                                message: "the original '\(display)' changed since it was staged (size or modification time)", files: files))
                return
            }
        } else if Int64(info.st_size) != size {
            add(FsckProblem(subject: subject, kind: .size, key: display,
                            message: "coven's copy '\(display)' is \(Int64(info.st_size).counted("byte")), not \(size)", files: files))
            return
        }
        guard let digest = try Self.hashFile(path, size: size), digest == (row.bytes("content_hash") ?? []) else {
            add(FsckProblem(subject: subject, kind: subject == .original ? .changed : .hash, key: display,
                            message: subject == .original ? "the original '\(display)' changed since it was staged (its SHA-256)"
                                : "coven's copy '\(display)' does not match its recorded SHA-256", files: files))
            return
        }
    }

    /// The SHA-256 of the file at `path`, read whole; nil when it cannot be read or is not
    /// `size` bytes.
    static func hashFile(_ path: String, size: Int64) throws -> [UInt8]? {
        let fd = PathText.withCString(path) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
        let hasher = try SHA256()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while true {
            let count = read(fd, buffer.baseAddress, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            total += Int64(count)
        }
        return total == size ? hasher.finish() : nil
    }

    /// Checks every held chunk of a cache entry against its tag, through the ``TagChecker`` the
    /// reads use.
    private func checkCacheEntry(object: String, size: Int64, chunks: [UInt8]) throws {
        guard let json = try device.database.scalar("SELECT coordinates FROM coven_files WHERE object = ?1 LIMIT 1", [object]).textValue,
              let coordinates = try? Coordinates(json: json) else { return }
        let bitmap = ChunkBitmap(count: ObjectLayout.chunkCount(plaintextSize: size), bytes: chunks)
        let held = (0..<bitmap.count).filter(bitmap.contains)
        guard !held.isEmpty else { return }
        report.localChecked += 1
        let files = Cache(device).cachePaths(object: object)
        let display = "cache of \(object)"
        let dataFD = open(files.data, O_RDONLY | O_CLOEXEC)
        let tagsFD = open(files.tags, O_RDONLY | O_CLOEXEC)
        defer {
            if dataFD >= 0 { close(dataFD) }
            if tagsFD >= 0 { close(tagsFD) }
        }
        var failed: [Int64] = []
        if dataFD < 0 || tagsFD < 0 {
            failed = held
        } else {
            let checker = try TagChecker(key: FileKey(hex: coordinates.key), threads: 1)
            let buffer = RunBuffer(chunks: StoredRead.runChunks)
            var index = 0
            while index < held.count {
                var end = index + 1
                while end < held.count, held[end] == held[end - 1] + 1, end - index < Int(StoredRead.runChunks) { end += 1 }
                failed += try checker.readCached(held[index]..<(held[end - 1] + 1), size: size, dataFD: dataFD, tagsFD: tagsFD, into: buffer)
                index = end
            }
        }
        guard !failed.isEmpty else { return }
        let ids = try device.database.query("SELECT id FROM coven_files WHERE object = ?1 ORDER BY id", [object]).compactMap { $0.string("id") }
        var problem = FsckProblem(subject: .cache, kind: .damaged, key: display,
                                  message: "\(failed.count.counted("cached chunk")) of \(object) fail their tags", files: ids)
        if options.repair {
            var next = bitmap
            for chunk in failed { next.remove(chunk) }
            try device.database.transaction {
                try Cache(device).recordCacheChunks(object, chunks: next.bytes, bytes: next.heldBytes(size: size))
                try CheckedBytes(device).setProof("cache:" + object, nil)
            }
            problem.mended = true
            problem.mendedFrom = "dropped"
        }
        add(problem)
    }
}

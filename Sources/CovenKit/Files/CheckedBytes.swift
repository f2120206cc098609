import Foundation

/// The one owner of the proofs that local bytes were checked: a person's original, coven's copy
/// of app bytes (`copy:<relative>`), a cache entry's data file (`cache:<object>`). A proof is
/// the file's stamp (size, times, inode) when its check began; the bytes count as checked while
/// the file still has that stamp, so a read need not hash them again. Any write to the file
/// moves its stamp and voids the proof.
///
/// The proofs are kept as `checked:<subject>` in `coven_meta` (written through
/// ``DeviceSettings``, as every key there is).
///
/// ```swift
/// let proofs = CheckedBytes(device)
/// if !proofs.isStillChecked("copy:" + relative, path: path) { ...check, then proofs.recordChecked(...) }
/// ```
struct CheckedBytes {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    /// The proofs that the bytes each subject names were checked (`coven_checked`, whose one
    /// writer this is): the file stamp they had when checked.
    private var proofs: Journal { Journal(database: device.database, table: "coven_checked") }

    /// Whether the file at `path` is still the one checked for `subject`: not written since
    /// (``recordChecked(_:path:stamp:)``).
    func isStillChecked(_ subject: String, path: String) -> Bool {
        guard let stamp = FileStamp(path: path),
              let recorded = try? proofs.value(subject) else { return false }
        return recorded == stamp.text
    }

    /// Records that the file at `path` was checked for `subject`, if it is still as it was
    /// when the check began (`stamp`). Best effort: a device that cannot be written (a
    /// read-only database) checks again next time.
    func recordChecked(_ subject: String, path: String, stamp: FileStamp?) {
        guard !device.readOnly, let stamp, FileStamp(path: path) == stamp else { return }
        try? device.database.transaction { try proofs.set(subject, stamp.text) }
    }

    /// Sets or (nil) forgets the proof of `subject`, inside the caller's transaction: a check
    /// that ended with the stamp `stamp`, or bytes that changed or went.
    func setProof(_ subject: String, _ stamp: String?) throws {
        try proofs.set(subject, stamp)
    }

    /// Records chunk hashes derived from local bytes that matched their content hash, only into
    /// the row they were checked against (still without hashes, same content). Best effort.
    func recordDerivedChunkHashes(object: String, content: [UInt8], chunks: [UInt8]) {
        guard !device.readOnly else { return }
        try? device.fileRecords.recordChunkHashes(object: object, chunkHashes: chunks, contentHash: content)
    }
}

extension CheckedBytes {
    /// What keeps an upload's local bytes from being sent, judged cheaply: an original missing
    /// or of another size or time; coven's copy missing, of another size, or written since it
    /// was last checked and now failing its chunk hashes. Nil when the bytes are there.
    func localSourceProblem(_ object: String) -> ErrorCode? {
        guard let row = try? device.database.queryOne("SELECT * FROM coven_local WHERE object = ?1", [object]) else { return nil }
        let size = row.int("size") ?? 0
        var info = stat()
        if row.string("kind") == FileKind.user.rawValue {
            let path = PathText.string(fromOSBytes: row.bytes("path") ?? [])
            guard PathText.withCString(path, { stat($0, &info) }) == 0 else { return .userFileMissing }
            let now = OriginalIdentity(info)
            guard (info.st_mode & S_IFMT) == S_IFREG, now.size == size, now.modifiedSeconds == row.int("modified_seconds"),
                  now.modifiedNanos == row.int("modified_nanos") else { return .userFileChanged }
            return nil
        }
        let copy = row.string("copy") ?? ""
        let path = device.paths.folder + "/" + copy
        guard stat(path, &info) == 0, Int64(info.st_size) == size else { return .fileUnavailable }
        if isStillChecked("copy:" + copy, path: path) { return nil }
        // Written since it was checked (or never checked): its bytes against its chunk hashes.
        let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .fileUnavailable }
        defer { Foundation.close(fd) }
        let stamp = FileStamp(path: path)
        let read = LocalRead(fd: fd, size: size, chunkHashes: row.bytes("chunk_hashes") ?? [],
                             changed: { _ in CovenError(.fileUnavailable, "coven's copy fails its check") }, stop: Stop())
        if read.hasChunkHashes {
            guard (try? read.read(0..<size) { _ in }) != nil else { return .fileUnavailable }
        } else {
            let content = row.bytes("content_hash") ?? []
            guard (try? LocalRead.deriveChunkHashes(fd: fd, path: path, size: size, contentHash: content, stop: Stop(),
                                                     changed: { _ in CovenError(.fileUnavailable, "coven's copy fails its check") })) != nil
            else { return .fileUnavailable }
        }
        recordChecked("copy:" + copy, path: path, stamp: stamp)
        return nil
    }
}

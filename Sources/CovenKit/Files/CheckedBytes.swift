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

    /// The `coven_meta` key of the proof that the bytes `subject` names were checked.
    private static func key(_ subject: String) -> String { "checked:" + subject }

    /// Whether the file at `path` is still the one checked for `subject`: not written since
    /// (``recordChecked(_:path:stamp:)``).
    func isStillChecked(_ subject: String, path: String) -> Bool {
        guard let stamp = FileStamp(path: path),
              let recorded = try? device.setting(Self.key(subject)) else { return false }
        return recorded == stamp.text
    }

    /// Records that the file at `path` was checked for `subject`, if it is still as it was
    /// when the check began (`stamp`). Best effort: a device that cannot be written (a
    /// read-only database) checks again next time.
    func recordChecked(_ subject: String, path: String, stamp: FileStamp?) {
        guard !device.readOnly, let stamp, FileStamp(path: path) == stamp else { return }
        try? device.database.transaction { try device.setSetting(Self.key(subject), stamp.text) }
    }

    /// Sets or (nil) forgets the proof of `subject`, inside the caller's transaction: a check
    /// that ended with the stamp `stamp`, or bytes that changed or went.
    func setProof(_ subject: String, _ stamp: String?) throws {
        try device.setSetting(Self.key(subject), stamp)
    }

    /// Records chunk hashes derived from local bytes that matched their content hash, only into
    /// the row they were checked against (still without hashes, same content). Best effort.
    func recordDerivedChunkHashes(object: String, content: [UInt8], chunks: [UInt8]) {
        guard !device.readOnly else { return }
        try? device.fileRecords.recordChunkHashes(object: object, chunkHashes: chunks, contentHash: content)
    }
}

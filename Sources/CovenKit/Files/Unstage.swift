import CLinux
import Foundation

/// `coven unstage`: takes back staged files and prepared originals no write has put yet.
///
/// A staging nothing puts stays until someone takes it back: a prepared original that changed
/// since can never be put (`user_file_changed`), yet fsck checks it at every run and exits 6
/// for it, and a staged copy of app bytes keeps its disk space. Taking one back forgets its
/// record (``StagedFiles``) and removes coven's copy of its bytes; a person's original is never
/// touched. All or nothing: one id that names no staged file refuses the whole request.
///
/// ```swift
/// let taken = try Unstage(device: device).run(.changed)   // the ids taken back
/// ```
public struct Unstage {
    /// Which staged files to take back.
    public enum Selection: Sendable, Equatable {
        /// These ids.
        case ids([String])
        /// Every staged file and prepared original.
        case all
        /// Those that can no longer be put as staged: an original missing or changed since it
        /// was prepared, a staged copy missing or not its recorded bytes.
        case changed
    }

    let device: Device
    private var database: Database { device.database }

    public init(device: Device) { self.device = device }

    /// Takes back the staged files `selection` names, in one transaction; the copies go after.
    ///
    /// The caller holds the device lock (a mutating command).
    ///
    /// - Returns: the ids taken back, in id order.
    /// - Throws: `.notFound` when an id names no staged file (nothing is taken back); `.sql`.
    public func run(_ selection: Selection) throws -> [String] {
        let candidates = try database.query("SELECT * FROM coven_staged ORDER BY id")
        var chosen: [Row]
        switch selection {
        case .all:
            chosen = candidates
        case .changed:
            chosen = try candidates.filter(isChanged)
        case .ids(let ids):
            let byID = Dictionary(candidates.compactMap { row in row.string("id").map { ($0, row) } }, uniquingKeysWith: { first, _ in first })
            if let unknown = ids.first(where: { byID[$0] == nil }) {
                throw CovenError(.notFound, "no staged file '\(unknown)'", hint: "'coven sql \"SELECT id FROM coven_staged\"' lists them",
                                 details: ["staged": unknown])
            }
            chosen = Set(ids).sorted().compactMap { byID[$0] }
        }
        let staged = device.stagedFiles
        let copies: [String] = try database.transaction {
            for row in chosen { try staged.remove(row.string("id") ?? "") }
            return chosen.compactMap { $0.string("copy") }
        }
        for copy in copies where !copy.contains("..") {
            if try database.scalar("SELECT count(*) FROM coven_local WHERE copy = ?1", [copy]).intValue == 0 {
                unlink(device.paths.folder + "/" + copy)
            }
        }
        return chosen.compactMap { $0.string("id") }
    }

    /// Whether a staged row can no longer be put as it was staged.
    private func isChanged(_ row: Row) throws -> Bool {
        let size = row.int("size") ?? 0
        let hash = row.bytes("content_hash") ?? []
        if row.string("kind") == "user" {
            let identity = OriginalIdentity(size: size, modifiedSeconds: row.int("modified_seconds") ?? 0,
                                            modifiedNanos: row.int("modified_nanos") ?? 0, changeStamp: row.string("change_stamp") ?? "")
            do {
                try Staging(device).checkOriginal(path: row.bytes("path") ?? [], recorded: identity, contentHash: hash)
                return false
            } catch let error as CovenError where error.code == .userFileMissing || error.code == .userFileChanged {
                return true
            }
        }
        let path = device.paths.folder + "/" + (row.string("copy") ?? "")
        return try Fsck.hashFile(path, size: size) != hash
    }
}

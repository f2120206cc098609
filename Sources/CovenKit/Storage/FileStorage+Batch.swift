import CLinux
import Foundation

// MARK: - A batch of objects: one sync for all of their bytes

extension FileStorage {
    /// ``put(_:data:)`` for one object of a batch: its bytes go to a temporary file in its
    /// folder, not synced and not yet at `key`; ``makeDurable(_:)`` syncs the filesystem once
    /// for the whole batch, then renames each into place and syncs their folders. An import of
    /// 3,000 small files paid 3,000 fsyncs (a third of its time on disk); it now pays one
    /// `syncfs` a batch (up to 256 objects), as the way back does for its copies (MakeDeviceOnly).
    ///
    /// Crash-safe as before: a name only ever holds bytes synced before the rename, so a kill
    /// or a power cut leaves at a key the old object or the whole new one, never part of one (a
    /// later run that finds an object whole at its key counts it stored). A batch cut short
    /// leaves temporary files, never listed, which gc removes.
    public func putPending(_ key: String, data: [UInt8]) throws {
        let path = try path(for: key)
        let folder = Self.parent(of: path)
        try makeFolders(folder, key: key)
        let temporary = try data.withUnsafeBytes { try writeTemporary($0, in: folder, key: key, syncing: false) }
        if let older = Self.pendingRenames.set(path, temporary) { unlink(older) }
    }

    /// Makes the objects at `keys` durable: the temporaries ``putPending(_:data:)`` wrote for
    /// them are synced (one `syncfs` of the store's filesystem; where the system has none, an
    /// fsync each) and renamed into place, then each of their folders is synced once, as it is
    /// for whole objects a killed run left at their keys. When it fails, the batch's
    /// temporaries are removed and none of its objects is there to count stored.
    public func makeDurable(_ keys: [String]) throws {
        let paths = try keys.map { try path(for: $0) }
        let pending = Self.pendingRenames.take(paths)
        do {
            if !pending.isEmpty {
                try syncTemporaries(pending.map(\.temporary), key: keys.first)
                for (path, temporary) in pending where rename(temporary, path) != 0 {
                    throw failure("write", key: nil, path: path, errno: errno)
                }
            }
        } catch {
            for (_, temporary) in pending { unlink(temporary) }
            throw error
        }
        var synced: Set<String> = []
        for (key, path) in zip(keys, paths) {
            let folder = Self.parent(of: path)
            if synced.insert(folder).inserted { try syncFolder(folder, key: key) }
        }
    }

    /// Writes out the bytes of `temporaries`: one sync of the filesystem holding the store
    /// (since Linux 5.8 it reports writeback errors, as fsync does), else an fsync each.
    private func syncTemporaries(_ temporaries: [String], key: String?) throws {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("open storage directory", key: key, path: directory, errno: errno) }
        defer { close(fd) }
        if coven_syncfs(fd) == 0 { return }
        guard errno == ENOSYS else { throw failure("sync", key: key, path: directory, errno: errno) }
        for temporary in temporaries {
            let file = open(temporary, O_RDONLY | O_CLOEXEC)
            guard file >= 0 else { throw failure("sync", key: key, path: temporary, errno: errno) }
            defer { close(file) }
            guard fsync(file) == 0 else { throw failure("sync", key: key, path: temporary, errno: errno) }
        }
    }

    /// The temporaries of objects put pending by any file:// provider of this process, by the
    /// path they go to: a batch's senders each have a provider of their own, and the one that
    /// makes them durable is another.
    static let pendingRenames = PendingRenames()
}

/// Temporary files waiting to be renamed to their paths. @unchecked: `waiting` is read and
/// written under `lock` only.
final class PendingRenames: @unchecked Sendable {
    private let lock = NSLock()
    private var waiting: [String: String] = [:]

    /// Records `temporary` for `path`; returns the one it replaces.
    func set(_ path: String, _ temporary: String) -> String? {
        lock.lock()
        defer { lock.unlock() }
        return waiting.updateValue(temporary, forKey: path)
    }

    /// Removes and returns the temporaries waiting for `paths`, each path once.
    func take(_ paths: [String]) -> [(path: String, temporary: String)] {
        lock.lock()
        defer { lock.unlock() }
        var taken: [(path: String, temporary: String)] = []
        for path in paths {
            if let temporary = waiting.removeValue(forKey: path) { taken.append((path, temporary)) }
        }
        return taken
    }
}

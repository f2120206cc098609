import CLinux
import Foundation

// MARK: - file:// provider: folders, temporary files, writes and syncs (POSIX calls)

extension FileStorage {
    /// A name for a temporary file no other is given: this process's random tag and a count.
    /// (Eight bytes from libgcrypt's nonce generator a file, under its one lock, kept a batch's
    /// 16 senders waiting a second in all on 10,000 small files.) `O_EXCL` still refuses a name
    /// another process took.
    static func temporaryName() -> String {
        let number = temporaryCount.withLock { count in
            count += 1
            return count
        }
        return temporaryPrefix + processTag + String(number, radix: 16)
    }

    /// Random for each process, so two processes writing to one store never pick the same name.
    private static let processTag = SecureRandom.nonce(8).hex + "-"
    private static let temporaryCount = LockedCount()

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
    func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, offset: Int64?, key: String?, path: String) throws {
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
            if syncing {
                guard fsync(fd) == 0 else { throw failure("sync", key: key, path: temporary, errno: errno) }
            }
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        if !syncing {
            // Its bytes start for the disk now, while the batch goes on; the batch's one sync
            // then waits for what is left (as git's batched fsync does), and reports any
            // error writing them back.
            Writeback.shared.start(fd)
            return temporary
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
    func replaceFile(_ path: String, with bytes: UnsafeRawBufferPointer, key: String?, syncingFolder: Bool = true) throws {
        let folder = Self.parent(of: path)
        let temporary = try writeTemporary(bytes, in: folder, key: key)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw failure("write", key: key, path: path, errno: code)
        }
        if syncingFolder { try syncFolder(folder, key: key) }
    }
}

/// Starts the writeback of files a batch wrote, then closes them, on a thread of its own: a
/// request to write back waits while the disk's queue is full (the block layer's writeback
/// throttle), and the senders of an upload of 10,000 small files waited there 4 s in all,
/// their cores idle, where they now go on sealing the next objects. At most ``depth`` files
/// wait; a sender handing one more waits for room. @unchecked: `files` and `running` are read
/// and written under `condition` only.
final class Writeback: @unchecked Sendable {
    static let shared = Writeback()
    static let depth = 64

    private let condition = NSCondition()
    private var files: [Int32] = []
    private var running = false

    /// Takes `fd` (a file just written, not synced): its writeback is started and it is
    /// closed, soon.
    func start(_ fd: Int32) {
        condition.lock()
        while files.count >= Self.depth { condition.wait() }
        files.append(fd)
        if !running {
            running = true
            let thread = Thread { [self] in run() }
            thread.name = "coven-writeback"
            thread.stackSize = 1 << 18
            thread.start()
        }
        condition.broadcast()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while files.isEmpty { condition.wait() }
            let taken = files
            files.removeAll(keepingCapacity: true)
            condition.broadcast()
            condition.unlock()
            for fd in taken {
                _ = coven_start_writeback(fd, 0, 0)
                close(fd)
            }
        }
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

/// A lock for each key in use: `withLock(key)` runs one body at a time per key, bodies of
/// different keys at once; a key's lock goes when no body holds or waits for it.
/// @unchecked: `locks` is read and written under `lock` only.
final class KeyedLocks: @unchecked Sendable {
    private let lock = NSLock()
    private var locks: [String: (lock: NSLock, users: Int)] = [:]

    func withLock<T>(_ key: String, _ body: () throws -> T) rethrows -> T {
        lock.lock()
        let entry = locks[key] ?? (NSLock(), 0)
        locks[key] = (entry.lock, entry.users + 1)
        lock.unlock()
        entry.lock.lock()
        defer {
            entry.lock.unlock()
            lock.lock()
            if let now = locks[key] {
                if now.users <= 1 { locks[key] = nil } else { locks[key] = (now.lock, now.users - 1) }
            }
            lock.unlock()
        }
        return try body()
    }

    /// Keys with a lock now (a test sees them go).
    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return locks.count
    }
}

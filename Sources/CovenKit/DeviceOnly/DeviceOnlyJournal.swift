import Foundation

/// The crash-safe record of what one make-device-only call created (the table
/// `coven_device_only_made`), so that until its switch commits, a failure, a signal or a kill
/// removes every copy and folder it made — and nothing else.
///
/// - `folder` rows are written before the call makes a folder, and marked `made` once it made it
///   (a folder that was there, or that someone made meanwhile, is never marked, so it stays);
/// - `temporary` rows name the random temporary file a download writes (recorded before it is
///   created, so a name in the journal is always the call's own);
/// - `file` rows name a copy's final path with its temporary as `pair`: the copy is linked to its
///   final name once whole and synced, and the temporary keeps the same inode until the switch
///   commits, so cleanup removes a final path only while it is still that same file.
///
/// The switch write marks the call `committed` in its transaction; then only the temporaries go.
///
/// The one writer of `coven_device_only_made`: make-device-only calls it, never its SQL.
/// ``begin(database:entries:)`` and ``markMade(_:)`` are transactions of their own (each is
/// durable before the call goes on to make what it names); ``markCommitted()`` and
/// ``forget()`` run inside the caller's transaction.
struct DeviceOnlyJournal {
    let database: Database
    let call: String

    /// One thing a call makes: a `folder`, a `temporary` or a `file` (with its temporary as
    /// `pair`).
    struct Entry {
        var kind: String
        var path: String
        var pair: String?
    }

    /// Records the entries of a new call in one transaction.
    static func begin(database: Database, entries: [Entry]) throws -> DeviceOnlyJournal {
        let call = Identifier.uuid7()
        let pid = getpid()
        let start = ProcessStart.of(pid) ?? ""
        try database.transaction {
            for (seq, entry) in entries.enumerated() {
                try database.run("INSERT INTO coven_device_only_made (call, seq, kind, path, pair, pid, pid_start) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                 [call, seq, entry.kind, PathText.osBytes(entry.path), entry.pair.map(PathText.osBytes), Int64(pid), start])
            }
        }
        return DeviceOnlyJournal(database: database, call: call)
    }

    /// Marks the folders this call made.
    func markMade(_ folders: [String]) throws {
        guard !folders.isEmpty else { return }
        try database.transaction {
            for folder in folders {
                try database.run("UPDATE coven_device_only_made SET made = 1 WHERE call = ?1 AND kind = 'folder' AND path = ?2", [call, PathText.osBytes(folder)])
            }
        }
    }

    /// Marks the call committed (inside the switch's transaction).
    func markCommitted() throws {
        try database.run("UPDATE coven_device_only_made SET committed = 1 WHERE call = ?1", [call])
    }

    /// Forgets the call once nothing it made is left to undo (inside the caller's transaction,
    /// if any).
    func forget() throws {
        try Self.forget(call: call, database: database)
    }

    /// Forgets the rows of `call`.
    private static func forget(call: String, database: Database) throws {
        try database.run("DELETE FROM coven_device_only_made WHERE call = ?1", [call])
    }

    /// Undoes what the call made (all of it before its switch committed, its temporaries
    /// after), then forgets the call.
    func cleanUp() throws {
        try Self.cleanUp(call: call, database: database)
    }

    /// Undoes what `call` made (see ``cleanUp()``), then forgets it.
    static func cleanUp(call: String, database: Database) throws {
        let rows = try database.query("SELECT seq, kind, path, pair, made, committed FROM coven_device_only_made WHERE call = ?1 ORDER BY seq", [call])
        let committed = rows.contains { $0.int("committed") == 1 }
        func path(_ value: SQLValue) -> String? { value.bytesValue.map(PathText.string(fromOSBytes:)) }
        func identity(_ path: String) -> (dev_t, ino_t, mode_t)? {
            var info = stat()
            return PathText.withCString(path) { lstat($0, &info) } == 0 ? (info.st_dev, info.st_ino, info.st_mode) : nil
        }
        var folders: Set<String> = []
        if !committed {
            // Copies first, while their temporaries still tell them apart from anyone else's.
            for row in rows where row.string("kind") == "file" {
                guard let final = path(row["path"]), let temporary = path(row["pair"]),
                      let ours = identity(temporary), let there = identity(final),
                      ours.0 == there.0, ours.1 == there.1 else { continue }
                _ = PathText.withCString(final) { unlink($0) }
                folders.insert((final as NSString).deletingLastPathComponent)
            }
        }
        for row in rows where row.string("kind") == "temporary" {
            guard let temporary = path(row["path"]), let info = identity(temporary), (info.2 & S_IFMT) == S_IFREG else { continue }
            _ = PathText.withCString(temporary) { unlink($0) }
            folders.insert((temporary as NSString).deletingLastPathComponent)
        }
        if !committed {
            // Innermost first; a folder someone put something in meanwhile is not empty, so it stays.
            for row in rows.reversed() where row.string("kind") == "folder" && row.int("made") == 1 {
                guard let folder = path(row["path"]), let info = identity(folder), (info.2 & S_IFMT) == S_IFDIR else { continue }
                if PathText.withCString(folder, { rmdir($0) }) == 0 {
                    folders.insert((folder as NSString).deletingLastPathComponent)
                }
            }
        }
        for folder in folders where identity(folder) != nil {
            try? AtomicFile.syncFolder(folder)
        }
        try forget(call: call, database: database)
    }

    /// At open: cleans up after every call whose process is gone (a crash or a kill).
    static func sweep(database: Database) {
        guard (try? database.hasTable("coven_device_only_made")) == true,
              let calls = try? database.query("SELECT DISTINCT call, pid, pid_start FROM coven_device_only_made") else { return }
        for row in calls {
            guard let call = row.string("call") else { continue }
            let pid = Int32(row.int("pid") ?? 0)
            if pid > 0, ProcessStart.isAlive(pid, start: row.string("pid_start") ?? "") { continue }
            try? cleanUp(call: call, database: database)
        }
    }
}

/// When a process started, so a reused pid is not taken for the process that wrote a journal.
enum ProcessStart {
    /// The start time of `pid` in clock ticks since boot (`/proc/PID/stat`, field 22), or nil.
    static func of(_ pid: Int32) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        // Fields after the command name, which may hold spaces and parentheses: state is field 3.
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? String(fields[19]) : nil
    }

    /// Whether `pid` runs and is the process that started at `start`.
    static func isAlive(_ pid: Int32, start: String) -> Bool {
        guard kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard !start.isEmpty, let now = of(pid) else { return true }
        return now == start
    }
}

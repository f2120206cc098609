import Foundation

extension Device {
    /// Deletes coven's copies that a committed transaction released (recorded as
    /// `release:<copy>` in `coven_meta`), then forgets them. Runs after each such commit and at
    /// every open, so a crash in between only delays the deletion.
    func removeReleasedCopies() {
        guard !readOnly, let rows = try? database.query("SELECT key, value FROM coven_meta WHERE key LIKE 'release:%'") else { return }
        for row in rows {
            guard let copy = row.string("value"), let key = row.string("key") else { continue }
            // Still named by local bytes or a staged file (a copy can be shared): keep it.
            let used = (try? database.scalar("SELECT (SELECT count(*) FROM coven_local WHERE copy = ?1) + (SELECT count(*) FROM coven_staged WHERE copy = ?1)", [copy]).intValue) ?? 1
            if used == 0, !copy.contains("..") {
                let path = paths.folder + "/" + copy
                if unlink(path) != 0 && errno != ENOENT { continue }
            }
            try? database.run("DELETE FROM coven_meta WHERE key = ?1", [key])
        }
    }

    /// Crash recovery at open: temporary files of dead processes, and copies that no staged
    /// file or local record names (a crash between writing a copy and recording it).
    func sweepAfterCrash() {
        guard !readOnly else { return }
        // Only while no other process changes the device: a stage in another process renames
        // its copy into place and then records it under the lock, and its copy must not be
        // taken for a crash's leftover in between. A busy device is swept by a later open.
        guard let lock = try? DeviceLock(path: paths.lock, wait: false) else { return }
        defer { _ = lock }
        removeReleasedCopies()
        // The file cache: partials untouched for seven days, files no entry names (Read/FileCache.swift).
        removeStalePartials()
        // make-device-only calls a crash or kill stopped before their switch.
        DeviceOnlyJournal.sweep(database: database)
        // Every copy a record names, read once: a device holding many app files on this device
        // only must not pay one query per copy at every open.
        guard let named = try? Set(database.query("SELECT copy FROM coven_local WHERE copy IS NOT NULL UNION SELECT copy FROM coven_staged WHERE copy IS NOT NULL").compactMap { $0.string("copy") }) else { return }
        for folder in [paths.copies, paths.temporary] {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { continue }
            for name in names {
                let path = folder + "/" + name
                if let range = name.range(of: ".tmp.") {
                    // <name>.tmp.<pid>: the writer's pid; gone means the file is garbage.
                    if let pid = Int32(name[range.upperBound...]), pid > 0, kill(pid, 0) == 0 || errno == EPERM { continue }
                    unlink(path)
                    continue
                }
                guard folder == paths.copies else { continue }
                if !named.contains("copies/" + name) { unlink(path) }
            }
        }
    }
}

import Foundation

/// What a crash, a kill or a commit leaves of coven's own copies (`copies/`), the staging
/// feature's sweep: copies a committed transaction released, and copies a writer that died
/// linked but never recorded. The released ones go after each commit that releases copies and
/// at every open (Open/CrashSweeps.swift), so a crash in between only delays the deletion.
///
/// ```swift
/// CopySweep(device).removeReleased()     // after a commit that released copies
/// ```
struct CopySweep {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    /// The journal of copies released by committed transactions, not deleted yet
    /// (`coven_released_copies`, whose one writer this is).
    private var released: Journal { Journal(database: device.database, table: "coven_released_copies") }

    /// Notes that `copy` is to be deleted once the caller's transaction commits (a copy no
    /// local bytes name any more).
    func release(_ copy: String) throws {
        try released.set(copy, copy)
    }

    /// Deletes coven's copies that a committed transaction released (``release(_:)``), then
    /// forgets them. Runs after each such commit and at
    /// every open, so a crash in between only delays the deletion.
    ///
    /// Read a page at a time (a write releasing 100,000 copies holds none of their names at once).
    func removeReleased() {
        guard !device.readOnly else { return }
        var after: String?
        while let rows = try? released.page(after: after, limit: 500), let last = rows.last?.key {
            after = last
            for (key, copy) in rows {
                // Still named by local bytes or a staged file (a copy can be shared): keep it.
                let used = (try? device.database.scalar("SELECT (SELECT count(*) FROM coven_local WHERE copy = ?1) + (SELECT count(*) FROM coven_staged WHERE copy = ?1)", [copy]).intValue) ?? 1
                if used == 0, !copy.contains("..") {
                    let path = device.paths.folder + "/" + copy
                    if unlink(path) != 0 && errno != ENOENT { continue }
                }
                try? released.set(key, nil)
            }
            if rows.count < 500 { return }
        }
    }

    /// Removes the temporary files of dead writers in tmp/, and the copy each linked if no
    /// staged file or local record names it (a crash between writing a copy and recording it).
    /// Called under the device lock.
    func removeDeadWriters() {
        // Temporary files of dead writers. A staging writes its copy's bytes to
        // tmp/<id>.tmp.<pid>, links them at copies/<id>, records the copy and only then removes
        // the temporary name, so a copy that a crash left unrecorded always has its temporary
        // name here too: the sweep lists tmp/ (empty but for crashes and live writers), never
        // copies/, and an open costs the same with a hundred thousand copies.
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: device.paths.temporary) else { return }
        for name in names {
            guard let range = name.range(of: ".tmp.") else { continue }
            // The writer's pid: alive (or not ours to signal) means it is still writing.
            if let pid = Int32(name[range.upperBound...]), pid > 0, kill(pid, 0) == 0 || errno == EPERM { continue }
            let copy = "copies/" + name[..<range.lowerBound]
            let named = (try? device.database.scalar(
                "SELECT EXISTS (SELECT 1 FROM coven_local WHERE copy = ?1) OR EXISTS (SELECT 1 FROM coven_staged WHERE copy = ?1)",
                [copy]).intValue) ?? 1
            if named == 0, !copy.contains("/.."), !name.hasPrefix(".") {
                let path = device.paths.folder + "/" + copy
                // Only the copy linked from this very temporary file: the same inode.
                var held = stat(), linked = stat()
                if stat(device.paths.temporary + "/" + name, &held) == 0, stat(path, &linked) == 0,
                   held.st_dev == linked.st_dev, held.st_ino == linked.st_ino {
                    unlink(path)
                }
            }
            unlink(device.paths.temporary + "/" + name)
        }
    }
}

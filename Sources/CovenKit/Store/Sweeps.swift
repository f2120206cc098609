import Foundation

/// What a crash, a kill or a commit leaves to delete on this device, swept at every open and
/// after commits that release copies: released copies, temporary files of dead writers,
/// snapshots' temporaries, make-device-only calls stopped half-way, stale cache partials.
///
/// ```swift
/// Sweeps(device).afterCrash()          // Device.open does this
/// ```
struct Sweeps {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }
    /// Deletes coven's copies that a committed transaction released (recorded as
    /// `release:<copy>` in `coven_meta`), then forgets them. Runs after each such commit and at
    /// every open, so a crash in between only delays the deletion.
    ///
    /// Read a page at a time (a write releasing 100,000 copies holds none of their names at once).
    func removeReleasedCopies() {
        guard !device.readOnly else { return }
        var after = "release:"
        while let rows = try? device.database.query("SELECT key, value FROM coven_meta WHERE key LIKE 'release:%' AND key > ?1 ORDER BY key LIMIT 500", [after]),
              let last = rows.last?.string("key") {
            after = last
            for row in rows {
                guard let copy = row.string("value"), let key = row.string("key") else { continue }
                // Still named by local bytes or a staged file (a copy can be shared): keep it.
                let used = (try? device.database.scalar("SELECT (SELECT count(*) FROM coven_local WHERE copy = ?1) + (SELECT count(*) FROM coven_staged WHERE copy = ?1)", [copy]).intValue) ?? 1
                if used == 0, !copy.contains("..") {
                    let path = device.paths.folder + "/" + copy
                    if unlink(path) != 0 && errno != ENOENT { continue }
                }
                try? device.settings.remove(key)
            }
            if rows.count < 500 { return }
        }
    }

    /// For a read-only open (`coven sql`, `coven file-status`): a make-device-only call a kill
    /// stopped left copies in the person's folder, which the next command that opens the device
    /// removes, whatever it is. Looked for on this connection (one query, usually of an empty
    /// table); cleaned through a writable connection of its own, under the device lock, when
    /// the database can be written at all.
    func sweepDeviceOnlyLeftovers() {
        guard (try? device.database.hasTable("coven_device_only_made")) == true,
              let count = try? device.database.scalar("SELECT count(*) FROM coven_device_only_made").intValue, count > 0,
              let lock = try? DeviceLock(path: device.paths.lock, wait: false) else { return }
        defer { _ = lock }
        guard let writable = try? Database(path: device.paths.database), !writable.isReadOnly else { return }
        DeviceOnlyJournal.sweep(database: writable)
    }

    /// The name a snapshot's temporary files start with, followed by the pid of the process
    /// writing them and a dash.
    static let snapshotTemporaryPrefix = "snapshot-"

    /// Whether tmp/ holds a snapshot's temporary files (one listing, of a folder empty but for
    /// crashes and live writers).
    private func hasSnapshotTemporaries() -> Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: device.paths.temporary)) ?? []).contains { $0.hasPrefix(Self.snapshotTemporaryPrefix) }
    }

    /// Removes the temporary files of snapshots whose process is gone (a kill -9 or a crash
    /// leaves a whole copy of the database there). Called under the device lock, which a
    /// snapshot holds for as long as it writes them, so none is in use; the writer's pid in the
    /// name is checked too (a live one keeps its files).
    private func removeDeadSnapshotTemporaries() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: device.paths.temporary) else { return }
        for name in names where name.hasPrefix(Self.snapshotTemporaryPrefix) {
            let rest = name.dropFirst(Self.snapshotTemporaryPrefix.count)
            if let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]), pid > 0, pid != getpid(),
               kill(pid, 0) == 0 || errno == EPERM { continue }
            unlink(device.paths.temporary + "/" + name)
        }
    }

    /// Crash recovery at open: temporary files of dead processes, and copies that no staged
    /// file or local record names (a crash between writing a copy and recording it).
    func afterCrash() {
        guard !device.readOnly else {
            sweepDeviceOnlyLeftovers()
            if hasSnapshotTemporaries(), let lock = try? DeviceLock(path: device.paths.lock, wait: false) {
                defer { _ = lock }
                removeDeadSnapshotTemporaries()
            }
            return
        }
        // Only while no other process changes the device: a stage in another process links
        // its copy into place and then records it under the lock, and its copy must not be
        // taken for a crash's leftover in between. A busy device is swept by a later open.
        guard let lock = try? DeviceLock(path: device.paths.lock, wait: false) else { return }
        defer { _ = lock }
        removeReleasedCopies()
        // The file cache: partials untouched for seven days, files no entry names (Read/FileCache.swift).
        Cache(device).removeStalePartials()
        // make-device-only calls a crash or kill stopped before their switch.
        DeviceOnlyJournal.sweep(database: device.database)
        // The database copies and sealed packs of snapshots a kill stopped.
        removeDeadSnapshotTemporaries()
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

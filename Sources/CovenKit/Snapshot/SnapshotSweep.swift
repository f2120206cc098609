import Foundation

/// What a snapshot a crash or a kill stopped leaves in tmp/ (a whole copy of the database, sealed
/// packs), the snapshot feature's sweep at open (Open/CrashSweeps.swift).
struct SnapshotSweep {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    /// The name a snapshot's temporary files start with, followed by the pid of the process
    /// writing them and a dash.
    static let temporaryPrefix = "snapshot-"

    /// Whether tmp/ holds a snapshot's temporary files (one listing, of a folder empty but for
    /// crashes and live writers).
    func hasTemporaries() -> Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: device.paths.temporary)) ?? []).contains { $0.hasPrefix(Self.temporaryPrefix) }
    }

    /// Removes the temporary files of snapshots whose process is gone (a kill -9 or a crash
    /// leaves a whole copy of the database there). Called under the device lock, which a
    /// snapshot holds for as long as it writes them, so none is in use; the writer's pid in the
    /// name is checked too (a live one keeps its files).
    func removeDeadTemporaries() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: device.paths.temporary) else { return }
        for name in names where name.hasPrefix(Self.temporaryPrefix) {
            let rest = name.dropFirst(Self.temporaryPrefix.count)
            if let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]), pid > 0, pid != getpid(),
               kill(pid, 0) == 0 || errno == EPERM { continue }
            unlink(device.paths.temporary + "/" + name)
        }
    }
}

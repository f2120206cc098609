import Foundation

/// What a make-device-only call a crash or a kill stopped leaves (copies in the person's
/// folder, its journal), the device-only feature's sweep at open (Open/CrashSweeps.swift).
struct DeviceOnlySweep {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    /// Under the device lock, on a writable open: the calls the journal names whose process is
    /// gone are undone (``DeviceOnlyJournal/sweep(database:)``).
    func sweep() {
        DeviceOnlyJournal.sweep(database: device.database)
    }

    /// For a read-only open (`coven sql`, `coven file-status`): a make-device-only call a kill
    /// stopped left copies in the person's folder, which the next command that opens the device
    /// removes, whatever it is. Looked for on this connection (one query, usually of an empty
    /// table); cleaned through a writable connection of its own, under the device lock, when
    /// the database can be written at all.
    func sweepReadOnly() {
        guard (try? device.database.hasTable("coven_device_only_made")) == true,
              let count = try? device.database.scalar("SELECT count(*) FROM coven_device_only_made").intValue, count > 0,
              let lock = try? DeviceLock(path: device.paths.lock, wait: false) else { return }
        defer { _ = lock }
        guard let writable = try? Database(path: device.paths.database), !writable.isReadOnly else { return }
        DeviceOnlyJournal.sweep(database: writable)
    }
}

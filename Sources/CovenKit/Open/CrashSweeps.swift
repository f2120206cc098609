import Foundation

/// Crash recovery when a device opens: each feature's sweep of what a crash, a kill or a commit
/// left, composed here, above the features, so the kernel (Store's ``Device``) knows none of
/// them. ``Device/open(paths:readOnly:)`` runs it after the kernel's open.
///
/// Writable opens sweep only while no other process changes the device (a stage in another
/// process links its copy into place and then records it under the lock, and its copy must not
/// be taken for a crash's leftover in between): a busy device is swept by a later open.
/// Read-only opens sweep what a reader may: a make-device-only call's leftovers (through a
/// connection of their own) and dead snapshots' temporaries.
struct CrashSweeps {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    func run() {
        guard !device.readOnly else {
            DeviceOnlySweep(device).sweepReadOnly()
            let snapshots = SnapshotSweep(device)
            if snapshots.hasTemporaries(), let lock = try? DeviceLock(path: device.paths.lock, wait: false) {
                defer { _ = lock }
                snapshots.removeDeadTemporaries()
            }
            return
        }
        guard let lock = try? DeviceLock(path: device.paths.lock, wait: false) else { return }
        defer { _ = lock }
        // Copies released by commits a crash kept from deleting them (Files/CopySweep.swift).
        CopySweep(device).removeReleased()
        // The file cache: partials untouched for seven days, files no entry names (Read/FileCache.swift).
        Cache(device).removeStalePartials()
        // make-device-only calls a crash or kill stopped before their switch.
        DeviceOnlySweep(device).sweep()
        // The database copies and sealed packs of snapshots a kill stopped.
        SnapshotSweep(device).removeDeadTemporaries()
        // Temporary files of dead writers, and the copies they linked but never recorded.
        CopySweep(device).removeDeadWriters()
    }
}

extension Device {
    /// Opens the device at `paths` for use: the kernel's open (``openKernel(paths:readOnly:)``:
    /// schema, views, functions, checks), then every feature's crash sweep (``CrashSweeps``).
    /// Commands and tests open a device this way.
    ///
    /// - Throws: as ``openKernel(paths:readOnly:)``.
    public static func open(paths: DevicePaths, readOnly: Bool = false) throws -> Device {
        let device = try openKernel(paths: paths, readOnly: readOnly)
        CrashSweeps(device).run()
        return device
    }
}

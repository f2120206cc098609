import Foundation

/// `coven gc`: one pass of deleting stored bytes nothing can still point at, under the device
/// lock (the pass itself is ``Collector``'s).
///
/// ```swift
/// let report = try GarbageCollection(device).collectGarbage()
/// ```
public struct GarbageCollection {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }
    /// Deletes the stored objects nothing can still point at (DESIGN.md "Deleting stored
    /// bytes"), under the device lock: syncs first (pulls only, with `dryRun`); then settles the
    /// candidates, deletes change objects every live device has applied that the newest retained
    /// snapshot covers, and snapshots past the newest two. With `goneDevices`, also ends the
    /// unfinished uploads of devices gone for good and deletes what no record names in their
    /// folders (one listing each).
    ///
    /// A quiet pass lists no files: it reads the candidates, the devices' frontiers and one
    /// listing of `snapshots/`.
    ///
    /// - Throws: `.storage` when storage cannot be reached or refuses a listing (deletes that
    ///   fail one by one are reported in the result, never taken as done); the errors of sync.
    ///
    /// - Parameter confirmed: called for each object as soon as its delete is confirmed (and
    ///   recorded here), `gone` true when storage said it was not there: a caller prints it
    ///   then, so a run killed later leaves a record of what went.
    public func collectGarbage(dryRun: Bool = false, goneDevices: Bool = false, wait: Bool = true, stop: Stop = Stop(),
                               confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) throws -> GCReport {
        let lock = try device.lock(wait: wait)
        defer { _ = lock }
        return try collectGarbage(provider: try device.connectStorage(), dryRun: dryRun, goneDevices: goneDevices, stop: stop, confirmed: confirmed)
    }

    /// ``collectGarbage(dryRun:goneDevices:wait:stop:confirmed:)`` through `provider`, under
    /// the caller's lock.
    func collectGarbage(provider: StorageProvider, dryRun: Bool, goneDevices: Bool, stop: Stop,
                        confirmed: ((_ deleted: GCReport.Deleted, _ gone: Bool) -> Void)? = nil) throws -> GCReport {
        // A missing or damaged store key stops gc before anything else.
        _ = try device.keys.storeKey()
        var report = GCReport()
        report.dryRun = dryRun
        // One listing of devices/ serves the whole pass.
        report.pulled = try StoreSync(device, storage: provider).syncLocked(push: !dryRun, pull: true, stop: stop).pulled.changes
        try stop.check("gc")
        var collector = Collector(device: device, provider: provider, dryRun: dryRun, confirmed: confirmed)
        // Rows past the window that keep no bytes leave the trash (those whose bytes this pass
        // frees stay until the next, so undelete can say so).
        if !dryRun { try device.database.transaction { try Trash(device).expire() } }
        try collector.prepare()
        try collector.collectFiles(into: &report)
        try collector.collectLeftovers(into: &report, age: Collector.leftoverAge)
        if goneDevices { try collector.collectGoneDevices(into: &report, stop: stop) }
        try collector.collectChanges(into: &report)
        try collector.collectSnapshots(into: &report)
        return report
    }
}

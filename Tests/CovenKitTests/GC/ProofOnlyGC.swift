@testable import CovenKit
import Foundation

/// gc of `device` as its proof alone decides: the tests of that proof (which objects may go,
/// and when every device has seen a delete) empty the trash first, so the retention window
/// (issue 37, TrashTests) does not keep the bytes they judge.
@discardableResult
func collectGarbageByProof(_ device: Device, dryRun: Bool = false, goneDevices: Bool = false) throws -> GCReport {
    try Trash(device).empty(before: nil)
    return try GarbageCollection(device).collectGarbage(dryRun: dryRun, goneDevices: goneDevices)
}

/// ``GarbageCollection/collectGarbage(provider:dryRun:goneDevices:stop:confirmed:)`` under the caller's
/// lock, the trash emptied first.
func collectGarbageByProof(_ device: Device, provider: StorageProvider, dryRun: Bool, goneDevices: Bool, stop: Stop) throws -> GCReport {
    _ = try device.database.transaction { try Trash(device).empty(inTransactionBefore: nil) }
    return try GarbageCollection(device).collectGarbage(provider: provider, dryRun: dryRun, goneDevices: goneDevices, stop: stop)
}

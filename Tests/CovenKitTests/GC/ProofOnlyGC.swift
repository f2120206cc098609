@testable import CovenKit
import Foundation

/// gc as its proof alone decides: the tests of that proof (which objects may go, and when
/// every device has seen a delete) empty the trash first, so the retention window (issue 37,
/// TrashTests) does not keep the bytes they judge.
extension Device {
    @discardableResult
    func collectGarbageByProof(dryRun: Bool = false, goneDevices: Bool = false) throws -> GCReport {
        try Trash(self).empty(before: nil)
        return try collectGarbage(dryRun: dryRun, goneDevices: goneDevices)
    }

    /// ``collectGarbage(provider:dryRun:goneDevices:stop:confirmed:)`` under the caller's lock,
    /// the trash emptied first.
    func collectGarbageByProof(provider: StorageProvider, dryRun: Bool, goneDevices: Bool, stop: Stop) throws -> GCReport {
        try database.transaction { try Trash(self).empty(inTransactionBefore: nil) }
        return try collectGarbage(provider: provider, dryRun: dryRun, goneDevices: goneDevices, stop: stop)
    }
}

import Foundation

/// This device's own published changes, as storage holds them, against what its database says
/// it published: a database restored from a backup (or copied) is behind its own history in
/// storage. Before anything new is published, the device applies its own changes past its
/// published seq (it signed them; they are checked with its registered key) and goes on after
/// them, so only what it never published is gone; the writes of its outbox that those changes
/// hold are not sent again.
struct OwnHistory {
    let device: Device
    private var database: Database { device.database }

    /// Applies the changes of this device that storage holds past its published seq.
    ///
    /// - Returns: the seqs applied (none for a device whose database is up to date: one GET).
    /// - Throws: `.integrity` for an own change that fails its checks (naming it); `.storage`.
    func catchUp(provider: StorageProvider, storeKey: FileKey) throws -> [Int64] {
        var seq = (try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [device.deviceID]).intValue ?? 0) + 1
        guard let sealed = try provider.getObject(ChangeObject.path(device: device.deviceID, seq: UInt64(seq))) else { return [] }
        let publicKey = try device.signingKey().publicKey
        var applier = ChangeApplier(device: device)
        var applied: [Int64] = []
        var next: [UInt8]? = sealed
        while let bytes = next {
            let path = ChangeObject.path(device: device.deviceID, seq: UInt64(seq))
            let change: ChangeObject
            do {
                change = try ChangeObject.open(bytes, path: path, storeKey: storeKey, publicKey: publicKey, storeID: device.storeID)
            } catch var error as CovenError where error.code == .integrity || error.code == .decoding {
                error.details["object"] = path
                error.message = "this device's own change '\(path)', which its database does not hold, fails its checks: " + error.message
                error.hint = "this database is older than what this device published (restored from a backup, or copied); make a new device with 'coven join' and retire this one"
                throw error
            }
            _ = try applier.apply(change, path: path)
            let stamps = String(decoding: try JSONSerialization.data(withJSONObject: Array(Set(change.entries.map(\.stamp))).sorted()), as: UTF8.self)
            try database.transaction { try Outbox(database: database).remove(stamped: stamps) }
            applied.append(seq)
            seq += 1
            next = try provider.getObject(ChangeObject.path(device: device.deviceID, seq: UInt64(seq)))
        }
        return applied
    }
}

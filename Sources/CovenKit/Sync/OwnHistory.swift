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
    /// - Returns: the seqs applied (none for a device whose database is up to date: one
    ///   listing).
    /// - Throws: `.deviceConflict` when an own change past the published seq is missing or
    ///   fails its checks (this database cannot go on after it; naming the object); `.storage`.
    func catchUp(provider: StorageProvider, keys: Keyring) throws -> [Int64] {
        let published = try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [device.deviceID]).intValue ?? 0
        let prefix = "changes/\(device.deviceID)/"
        var seqs: [Int64] = []
        // From the latest published on: storage must still hold it (gc keeps the latest change
        // of every live device), and nobody else can tell that it lost it.
        var after = ChangeObject.path(device: device.deviceID, seq: UInt64(max(0, published - 1)))
        while true {
            let page = try provider.list(prefix: prefix, after: after, limit: 1000)
            seqs += page.compactMap { ChangeObject.parsePath($0.key).flatMap { $0.device == device.deviceID ? Int64($0.seq) : nil } }
            guard page.count == 1000, let last = page.last else { break }
            after = last.key
        }
        if published > 0 {
            if seqs.first == published {
                seqs.removeFirst()
            } else {
                // Lost at the tail: published again from what this device holds.
                try ChangeDamage(device: device).noteReport(seq: published)
            }
        }
        guard !seqs.isEmpty else { return [] }
        _ = try keys.signingKey()
        var applier = ChangeApplier(device: device)
        var applied: [Int64] = []
        var expected = published + 1
        for seq in seqs {
            let path = ChangeObject.path(device: device.deviceID, seq: UInt64(expected))
            let hint = "this database is older than what this device published (restored from a backup, or copied), and storage no longer holds all of it: "
                + "make a new device with 'coven join' and remove this one ('coven device remove \(device.deviceID)' on another device)"
            guard seq == expected, let bytes = try provider.getObject(path) else {
                throw CovenError(.deviceConflict, "this device's own change '\(path)', which its database does not hold, is missing from storage",
                                 hint: hint, details: ["object": path, "device": device.deviceID, "reason": "own_change_lost"])
            }
            let change: ChangeObject
            do {
                change = try keys.open(change: bytes, path: path, publisher: device.deviceID, storeID: device.storeID)
            } catch let error as CovenError where error.code == .integrity || error.code == .decoding {
                throw CovenError(.deviceConflict, "this device's own change '\(path)', which its database does not hold, fails its checks: \(error.message)",
                                 hint: hint, cause: error.description, details: ["object": path, "device": device.deviceID, "reason": "own_change_lost"])
            }
            _ = try applier.apply(change, path: path)
            let stamps = String(decoding: try JSONSerialization.data(withJSONObject: Array(Set(change.entries.map(\.stamp))).sorted()), as: UTF8.self)
            try database.transaction { try Outbox(database: database).remove(stamped: stamps) }
            applied.append(seq)
            expected += 1
        }
        return applied
    }
}

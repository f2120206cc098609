import Foundation

/// This device's own published changes, as storage holds them, against what its database says
/// it published: a database restored from a backup (or copied) is behind its own history in
/// storage. Before anything new is published, the device applies its own changes past its
/// published seq (it signed them; they are checked with its registered key) and goes on after
/// them, so only what it never published is gone; the writes of its outbox that those changes
/// hold are not sent again.
///
/// They are applied in the order they were written in: an own change written after applying
/// other devices' changes (its frontier says which) comes after those, which the database put
/// back may not hold yet. Applied first, it would meet rows and file records it was written
/// over missing (a row naming a cover it had pulled taken out, the older version winning here
/// and gc deleting the bytes the winner names elsewhere), so the others' changes it follows
/// are pulled first (``StoreSync/pull(stop:learned:progress:)``); theirs that
/// follow own changes not caught up yet wait for them there.
struct OwnHistory {
    let device: Device
    private var database: Database { device.database }
    private var keys: Keyring { device.keys }

    /// Applies the changes of this device that storage holds past its published seq.
    ///
    /// - Returns: the seqs applied (none for a device whose database is up to date: one
    ///   listing).
    /// - Throws: `.deviceConflict` when an own change past the published seq is missing or
    ///   fails its checks (this database cannot go on after it; naming the object); `.storage`.
    ///
    /// - Parameter pullOthers: applies the other devices' changes that can be applied now.
    func catchUp(provider: StorageProvider, pullOthers: () throws -> Void) throws -> [Int64] {
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
            if try follows(change) { try pullOthers() }
            _ = try applier.apply(change, path: path)
            // Where this device holds the bytes of the files the change placed on it.
            try OwnNotes(device: device).restore(seq: seq, provider: provider)
            let stamps = String(decoding: try JSONSerialization.data(withJSONObject: Array(Set(change.entries.map(\.stamp))).sorted()), as: UTF8.self)
            try database.transaction { try Outbox(database: database).remove(stamped: stamps) }
            applied.append(seq)
            expected += 1
        }
        return applied
    }

    /// Whether `change` was written after another device's change this database does not hold.
    private func follows(_ change: ChangeObject) throws -> Bool {
        for (other, seq) in change.frontier where other != device.deviceID {
            let applied = try database.scalar("SELECT applied_seq FROM coven_device_registry WHERE device = ?1", [other]).intValue ?? 0
            if applied < Int64(seq) { return true }
        }
        return false
    }
}

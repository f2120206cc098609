import Foundation

/// The published changes' part of `coven fsck`: every device's changes present with no gap,
/// signed and sealed for their path, opened the one way pull opens them
/// (``Keyring/open(change:path:publisher:storeID:)``: format 1 under the store key, format 2
/// under the store audience's generations); this device's own damaged ones republished.
extension Fsck {
    // MARK: Changes

    /// Under a time limit: when the least recently verified stored object was verified (0 when
    /// one never was); changes verified since are not read again this run.
    var changesDueBefore: Double? {
        guard options.timeLimit != nil || options.maxObjects != nil else { return nil }
        if let dueCache { return dueCache }
        let oldest = (try? device.database.scalar("""
            SELECT min(coalesce(v.verified_at, 0)) FROM coven_files AS f
            LEFT JOIN coven_fsck_verified AS v ON v.key = f.object WHERE f.place = 'stored'
            """)).flatMap(Self.seconds) ?? 0
        dueCache = oldest
        return oldest
    }

    /// A time of `coven_fsck_verified` (REAL), or nil for NULL.
    static func seconds(_ value: SQLValue) -> Double? {
        switch value {
        case .real(let seconds): return seconds
        case .integer(let seconds): return Double(seconds)
        default: return nil
        }
    }

    /// The seqs of `other`'s changes storage holds, in order, listed a page at a time.
    private func listedChanges(of other: String, provider: StorageProvider) throws -> [Int64] {
        let prefix = "changes/\(other)/"
        var seqs: [Int64] = []
        var after = prefix
        while true {
            let page = try provider.list(prefix: prefix, after: after, limit: Self.pageSize)
            report.listings += 1
            seqs += page.compactMap { ChangeObject.parsePath($0.key).flatMap { $0.device == other ? Int64($0.seq) : nil } }
            guard page.count == Self.pageSize, let last = page.last else { break }
            after = last.key
        }
        return seqs.sorted()
    }

    func checkChanges(provider: StorageProvider) throws {
        let keys = device.keys
        tell("changes")
        let devices = try device.database.query("SELECT device, applied_seq, gone FROM coven_device_registry ORDER BY device")
        for row in devices {
            guard let other = row.string("device") else { continue }
            let applied = row.int("applied_seq") ?? 0
            let gone = row.int("gone") == 1
            let seqs = try listedChanges(of: other, provider: provider)
            try forgetUnlisted(subject: "change", prefix: "changes/\(other)/", listed: Set(seqs.map { ChangeObject.path(device: other, seq: UInt64($0)) }))
            var missing: [Int64] = []
            for (low, high) in zip(seqs, seqs.dropFirst()) where high > low + 1 {
                missing += Array((low + 1)..<high)
            }
            // gc keeps the latest change of every live device: storage holds up to what was
            // applied (published, for this device) here.
            if !gone, applied > (seqs.last ?? 0) {
                missing += Array(((seqs.last ?? 0) + 1)...applied)
            }
            for seq in missing {
                let path = ChangeObject.path(device: other, seq: UInt64(seq))
                add(FsckProblem(subject: .change, kind: .missing, key: path,
                                message: "change \(seq) of device \(other) is missing from storage", files: []))
                if other == device.deviceID { ownDamaged.append(seq) }
            }
            guard !options.fast else { continue }
            do {
                _ = try other == device.deviceID ? keys.signingKey().publicKey : keys.publicKey(of: other)
            } catch let error as CovenError where error.code == .integrity {
                continue  // a device that never registered a key published nothing this device can check
            }
            for seq in seqs {
                try checkStop()
                if pastDeadline { report.complete = false; break }
                let path = ChangeObject.path(device: other, seq: UInt64(seq))
                // Under a time limit, a change is read when it was verified no later than the
                // least recently verified stored object: the stalest first, whatever the kind,
                // so neither starves the other.
                // A change an earlier run found damaged is read again every run (few, small).
                if let due = changesDueBefore, !isKnownDamaged(path),
                   let at = Self.seconds(try device.database.scalar("SELECT verified_at FROM coven_fsck_verified WHERE key = ?1", [path])),
                   at > due { continue }
                checkedAgain(path)
                var result = "ok"
                do {
                    guard let bytes = try provider.getObject(path) else {
                        throw CovenError(.missing, "gone while checked", details: ["key": path])
                    }
                    let change = try keys.open(change: bytes, path: path, publisher: other, storeID: device.storeID)
                    if other == device.deviceID, let why = try ownDifference(change, seq: seq) {
                        result = "differs"
                        add(FsckProblem(subject: .change, kind: .differs, key: path,
                                        message: "this device's change \(seq) is not what it recorded publishing: \(why)", files: []))
                    }
                } catch let error as CovenError where error.code == .keyUnavailable {
                    // Signed by its device, sealed under a generation this device does not hold
                    // (not received yet, or its member was removed before it): nothing to judge.
                    continue
                } catch let error as CovenError where [.integrity, .decoding, .missing, .updateRequired].contains(error.code) {
                    result = error.code == .missing ? "missing" : "damaged"
                    add(FsckProblem(subject: .change, kind: error.code == .missing ? .missing : .damaged, key: path,
                                    message: "change \(seq) of device \(other) fails its checks: \(error.message)", files: []))
                    if other == device.deviceID { ownDamaged.append(seq) }
                }
                report.changesChecked += 1
                pending.append(.init(key: path, kind: "change", at: Date().timeIntervalSince1970, bytes: 0, result: result))
                if pending.count >= Self.batchSize {
                    try ledger.record(pending)
                    pending.removeAll()
                }
            }
            try ledger.record(pending)
            pending.removeAll()
        }
    }

    /// How one of this device's own changes differs from what `coven_sync_log` recorded of its
    /// publishing (the frontier it carried, its newest stamp), or nil when it does not (or
    /// nothing was recorded: a database older than the change, which sync catches up with).
    private func ownDifference(_ change: ChangeObject, seq: Int64) throws -> String? {
        guard let row = try device.database.queryOne("SELECT max_stamp, frontier FROM coven_sync_log WHERE device = ?1 AND seq = ?2",
                                                     [device.deviceID, seq]) else { return nil }
        let recorded = Frontier.parse(row.string("frontier") ?? "{}").filter { $0.value > 0 }
        let carried = change.frontier.mapValues { Int64($0) }.filter { $0.value > 0 }
        if recorded != carried { return "it carries another frontier" }
        let newest = row.string("max_stamp") ?? ""
        if let late = change.entries.first(where: { $0.stamp > newest }) {
            return "it holds a write stamped \(late.stamp), after the newest recorded (\(newest))"
        }
        return nil
    }

    /// Publishes this device's damaged or missing changes again, through ``ChangeDamage``.
    func repairChanges(provider: StorageProvider) throws {
        let keys = device.keys
        guard !ownDamaged.isEmpty else { return }
        tell("repair")
        let damage = ChangeDamage(device: device)
        for seq in ownDamaged { try damage.noteReport(seq: seq) }
        let (republished, _) = try damage.republish(provider: provider)
        for seq in republished {
            let path = ChangeObject.path(device: device.deviceID, seq: UInt64(seq))
            // Checked again before it counts as mended.
            guard let bytes = try provider.getObject(path),
                  (try? keys.open(change: bytes, path: path, publisher: device.deviceID, storeID: device.storeID)) != nil
            else { continue }
            for index in report.problems.indices where report.problems[index].subject == .change && report.problems[index].key == path {
                report.problems[index].mended = true
                report.problems[index].mendedFrom = "republished"
            }
            try ledger.record([.init(key: path, kind: "change", at: Date().timeIntervalSince1970, bytes: 0, result: "ok")])
        }
    }
}

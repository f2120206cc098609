import Foundation

// MARK: - Damage an earlier run found

/// A run under a time limit verifies only some objects: the damage an earlier run found in the
/// others still stands until a run finds them whole or mends them. Without this, the runs
/// between two checks of a damaged object exit 0 while `coven_fsck_verified` says it is damaged,
/// and a cron line that mails on failure stays quiet about bytes that are gone. So a run starts
/// from what the ledger knows (``FsckLedger/knownDamage()``), crosses off what it checks again
/// (whatever it finds then is its own finding), forgets what storage no longer holds at all (a
/// change or snapshot gc deleted), and reports the rest as problems of its own: counted in the
/// exit status, listed as lost when no local source is left, and mended by `--repair`.
extension Fsck {
    /// Loads the damage earlier runs found, at the start of a run.
    func loadKnownDamage() throws {
        knownDamage = [:]
        for damage in try ledger.knownDamage() { knownDamage[damage.key] = damage }
    }

    /// `key` was checked by this run: its earlier finding gives way to this run's.
    func checkedAgain(_ key: String) {
        knownDamage.removeValue(forKey: key)
    }

    /// Whether an earlier run found `key` damaged and this run has not checked it yet.
    func isKnownDamaged(_ key: String) -> Bool {
        knownDamage[key] != nil
    }

    /// Forgets the known damage of `subject` under `prefix` that a whole listing of `prefix`
    /// did not see: deleted since (gc), nothing to mend or report.
    func forgetUnlisted(subject: String, prefix: String, listed: Set<String>) throws {
        let gone = knownDamage.values.filter { $0.subject == subject && $0.key.hasPrefix(prefix) && !listed.contains($0.key) }.map(\.key)
        guard !gone.isEmpty else { return }
        try ledger.forget(gone)
        for key in gone { knownDamage.removeValue(forKey: key) }
    }

    /// Adds the known damage this run did not check again to its problems (this device's own
    /// changes to those `--repair` publishes again).
    func reportKnownDamage() {
        let named = Set(report.problems.map(\.key))
        for damage in knownDamage.values.sorted(by: { $0.key < $1.key }) where !named.contains(damage.key) {
            let subject = FsckProblem.Subject(rawValue: damage.subject) ?? .object
            let kind = FsckProblem.Kind(rawValue: damage.result) ?? .damaged
            add(FsckProblem(subject: subject, kind: kind, key: damage.key,
                            message: "found \(damage.result) by the run of \(Timestamp.iso8601(damage.foundAt)), not verified again since", files: []))
            if subject == .change, let (publisher, seq) = ChangeObject.parsePath(damage.key), publisher == device.deviceID {
                ownDamaged.append(Int64(seq))
            }
        }
    }
}

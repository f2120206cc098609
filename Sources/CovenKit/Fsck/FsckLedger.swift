import Foundation

/// The one writer of `coven_fsck_verified`: when each stored object (and change, snapshot, cache
/// entry, local copy) was last verified by `coven fsck` on this device, and with what result, so
/// that a run with a time limit takes what was verified longest ago first and the next run goes
/// on where a killed one stopped (Fsck/Fsck.swift).
struct FsckLedger {
    let database: Database

    // Its table, coven_fsck_verified, is made by schema step 11 (Store/Schema.swift).

    /// One verification to record.
    struct Entry {
        var key: String
        var kind: String
        var at: Double
        var bytes: Int64
        var result: String
    }

    /// Records a batch of verifications in one transaction (a run killed later keeps them).
    func record(_ entries: [Entry]) throws {
        guard !entries.isEmpty else { return }
        try database.transaction {
            for entry in entries {
                try database.run("""
                    INSERT INTO coven_fsck_verified (key, kind, verified_at, bytes, result) VALUES (?1, ?2, ?3, ?4, ?5)
                    ON CONFLICT (key) DO UPDATE SET kind = excluded.kind, verified_at = excluded.verified_at,
                        bytes = excluded.bytes, result = excluded.result
                    """, [entry.key, entry.kind, entry.at, entry.bytes, entry.result])
            }
        }
    }

    /// Damage a run found and no run has found whole since: the last verification of a thing
    /// this device still checks (a stored object its records name, a change, a snapshot)
    /// whose result is not `ok`, oldest first.
    func knownDamage() throws -> [FsckKnownDamage] {
        try database.query("""
            SELECT key, kind, verified_at, result FROM coven_fsck_verified
            WHERE result <> 'ok' AND kind IN ('object', 'change', 'snapshot') ORDER BY verified_at, key
            """).compactMap { row in
            guard let key = row.string("key"), let kind = row.string("kind"), let result = row.string("result"),
                  let at = Fsck.seconds(row["verified_at"]) else { return nil }
            return FsckKnownDamage(key: key, subject: kind, result: result, foundAt: Date(timeIntervalSince1970: at))
        }
    }

    /// Forgets the verifications of `keys` (things storage no longer holds).
    func forget(_ keys: [String]) throws {
        try database.transaction {
            for key in keys { try database.run("DELETE FROM coven_fsck_verified WHERE key = ?1", [key]) }
        }
    }

    /// Forgets the verifications of objects no file record names any more (one statement).
    func forgetUnnamedObjects() throws {
        try database.run("""
            DELETE FROM coven_fsck_verified WHERE kind = 'object'
              AND NOT EXISTS (SELECT 1 FROM coven_files AS f WHERE f.object = coven_fsck_verified.key AND f.place = 'stored')
            """)
    }
}

/// Damage `coven fsck` found and no run has found whole since (``FsckLedger/knownDamage()``):
/// it counts in every run's exit status, and in `coven status`, until a run finds the thing
/// whole or mends it.
public struct FsckKnownDamage: Sendable, Equatable {
    /// The storage key.
    public var key: String
    /// `object`, `change` or `snapshot`.
    public var subject: String
    /// What was found: `damaged`, `missing`, `size`, `hash` or `differs`.
    public var result: String
    /// When the run that found it verified it.
    public var foundAt: Date
}

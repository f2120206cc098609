import Foundation

/// The one writer of `coven_fsck_verified`: when each stored object (and change, snapshot, cache
/// entry, local copy) was last verified by `coven fsck` on this device, and with what result, so
/// that a run with a time limit takes what was verified longest ago first and the next run goes
/// on where a killed one stopped (Fsck/Fsck.swift).
struct FsckLedger {
    let database: Database

    /// Schema step 11: the table and its index (the least recently verified first).
    static let table = """
    CREATE TABLE coven_fsck_verified (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('object', 'change', 'snapshot', 'cache', 'local')),
        verified_at REAL NOT NULL,
        bytes INTEGER NOT NULL DEFAULT 0,
        result TEXT NOT NULL
    ) STRICT;
    CREATE INDEX coven_fsck_verified_at ON coven_fsck_verified (kind, verified_at);
    """

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

    /// Forgets the verifications of objects no file record names any more (one statement).
    func forgetUnnamedObjects() throws {
        try database.run("""
            DELETE FROM coven_fsck_verified WHERE kind = 'object'
              AND NOT EXISTS (SELECT 1 FROM coven_files AS f WHERE f.object = coven_fsck_verified.key AND f.place = 'stored')
            """)
    }
}

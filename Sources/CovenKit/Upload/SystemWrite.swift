import Foundation

extension Device {
    /// Runs one write of coven's own to `coven_files` (a file switching to stored), recorded for
    /// publishing exactly like an app write: stamped with the hybrid clock and its changeset
    /// appended to `coven_outbox`.
    ///
    /// Call inside a transaction: the caller's state changes and the recorded write commit
    /// together. `body` gets the write's clock stamp for the rows' `_updated_at`.
    ///
    /// - Returns: what `body` returns.
    /// - Throws: what `body` throws; `.sql` when SQLite fails.
    func systemWrite<T>(_ body: (_ stamp: String) throws -> T) throws -> T {
        precondition(database.inTransaction, "internal error: a system write runs inside a transaction")
        let stamp = try HybridClock.next(device: self)
        let session = try Session(database: database, tables: ["coven_files"])
        let result = try body(stamp)
        let changeset = try session.changeset()
        if !changeset.isEmpty {
            try database.run(
                "INSERT INTO coven_outbox (hlc, changeset, waits_for, created_at) VALUES (?1, ?2, '[]', ?3)",
                [stamp, changeset, Timestamp.iso8601(Date())])
        }
        return result
    }
}

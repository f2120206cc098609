import Foundation

/// Gives the free pages of a device's database back to the file system. A publish deletes
/// what it sent from `coven_outbox` and `coven_push`, and SQLite keeps those pages in the file
/// for later writes: 300,000 rows published leave ~96 MB free. After a sync, once the free
/// pages pass ``threshold``, they are given back: `PRAGMA incremental_vacuum` on a database
/// with `auto_vacuum = INCREMENTAL` (every device made since), or, once, a `VACUUM` that turns
/// an older device's database to it (when at least a quarter of the file is free, so a large
/// database is not rewritten for little); then a checkpoint that truncates the file.
struct FreePages {
    let database: Database

    /// Free bytes below which nothing is done.
    static let threshold: Int64 = 1 << 20

    /// Sets `auto_vacuum = INCREMENTAL` on a database that has no table yet.
    static func prepare(_ database: Database) throws {
        try database.execute("PRAGMA auto_vacuum = INCREMENTAL")
    }

    /// Gives free pages back when there are enough of them; returns the bytes given back
    /// (0 when nothing was done). Outside any transaction, under the device lock.
    @discardableResult
    func reclaim() throws -> Int64 {
        guard !database.inTransaction, !database.isReadOnly else { return 0 }
        let pageSize = try database.scalar("PRAGMA page_size").intValue ?? 4096
        let free = try database.scalar("PRAGMA freelist_count").intValue ?? 0
        guard free * pageSize >= Self.threshold else { return 0 }
        if try database.scalar("PRAGMA auto_vacuum").intValue == 2 {
            try database.execute("PRAGMA incremental_vacuum")
        } else {
            let pages = try database.scalar("PRAGMA page_count").intValue ?? 0
            guard free * 4 >= pages else { return 0 }
            try database.execute("PRAGMA auto_vacuum = INCREMENTAL")
            try database.execute("VACUUM")
        }
        try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return free * pageSize
    }
}

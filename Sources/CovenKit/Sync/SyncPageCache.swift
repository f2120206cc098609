import Foundation

/// A larger SQLite page cache for the length of a sync. Each change frozen or applied is one
/// transaction that deletes or writes thousands of rows (a 4 MiB change of 100-byte rows is
/// some 40,000 of them, with their indexes); with SQLite's default cache of 2 MiB the pages a
/// transaction changed no longer fit and are spilled to the WAL before the commit, then many
/// are written again at the commit (measured: a third of a pull's SQLite time in
/// `sqlite3PcacheFetchStress` and its writes). The cache grows only as pages are used and is
/// set back, its pages freed, when the sync ends; durability is the commit's, unchanged.
struct SyncPageCache {
    /// The cache a sync uses: 8 MiB (negative: KiB, as `PRAGMA cache_size` takes it).
    static let kibibytes = 8 << 10

    let database: Database
    private let before: Int64

    init(database: Database) throws {
        self.database = database
        before = try database.scalar("PRAGMA cache_size").intValue ?? -2000
        try database.execute("PRAGMA cache_size = -\(Self.kibibytes)")
    }

    /// Sets the cache back to what it was (its pages beyond that are freed).
    func restore() {
        try? database.execute("PRAGMA cache_size = \(before)")
    }
}

import Foundation

/// A larger SQLite page cache for the length of a sync or a write: the transactions that change
/// thousands of rows with their indexes. A change frozen or applied by a sync deletes or writes
/// thousands of rows (a 4 MiB change of 100-byte rows is some 40,000 of them), and a
/// `write --each` of a library's files puts a file record, its local bytes and its upload in
/// one transaction per file of the input. With SQLite's default cache of 2 MiB the pages a
/// transaction changed no longer fit and are spilled to the WAL before the commit, then many
/// are written again at the commit (measured: a third of a pull's SQLite time in
/// `sqlite3PcacheFetchStress` and its writes; a tenth of a `write --each` of 10,000 files).
/// The cache grows only as pages are used and is set back, its pages freed, when the work
/// ends; durability is the commit's, unchanged.
struct PageCache {
    /// The cache used: 8 MiB (negative: KiB, as `PRAGMA cache_size` takes it). 32 MiB made a
    /// write of 10,000 files no faster and cost 16 MiB more.
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

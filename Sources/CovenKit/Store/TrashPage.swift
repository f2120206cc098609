import Foundation

/// A page of the trash: the last images of rows one change deleted in one audience (and, for an
/// owner-only table, of one owner), compressed together into one row of `coven_trash_pages`
/// (Trash/Trash.swift, its one writer). The bytes are a count, then each trashed row as one upsert entry (section 9.1's
/// encoding: its table, id, the delete's stamp, its stored columns and values) followed by the
/// row whose delete took it along (table and id, empty for none) and the files it named (a
/// count, then each file's id and size), the whole through zstd.
///
/// The failure story: a row per trashed row, each with its own image, key and index entries,
/// made a pull of 100,000 deletes write 88 MiB more than without the trash and take 1.4 times
/// as long, the images' bytes dominating (measured in plain SQL: 0.40 s without them, 0.80 s
/// with). The rule: a change's deleted rows share pages of about ``limit`` bytes before
/// compression, written once each when full or when the change ends; a row finds its page
/// through its tombstone (`coven_tombstones.trash`), so no row of the trash is written per row
/// but the tombstone every delete writes anyway.
struct TrashPage {
    /// One trashed row as its page holds it.
    struct Entry {
        var table: String
        var id: String
        /// The stamp of the delete that trashed it.
        var stamp: String
        var columns: [String]
        var values: [SQLValue]
        var parentTable: String?
        var parentID: String?
        /// The files it named: each one's id and size.
        var files: [(id: String, size: Int64)]
    }

    /// The bytes of entries past which a page is written and a new one begun: large enough for
    /// zstd to find the repeats of a table's rows, small enough to decode for one row.
    static let limit = 128 * 1024

    /// The most bytes a page decodes to: its limit and one row past it (a row of SQLite's
    /// largest, 1 GB, alone in its page).
    static let maximumDecoded = 1_000_000_000 + limit

    /// The zstd level a page is written at: the fastest, as a pull writes pages inline.
    static let level = 1

    /// Appends `entry` to `bytes` (a page's encoded entries, without the count).
    static func append(_ entry: Entry, to bytes: inout [UInt8]) {
        RowEntryCodec.encode(RowEntry(kind: .upsert, table: entry.table, id: entry.id, stamp: entry.stamp, columns: entry.columns, values: entry.values),
                             into: &bytes)
        RowEntryCodec.writeString(entry.parentTable ?? "", into: &bytes)
        RowEntryCodec.writeString(entry.parentID ?? "", into: &bytes)
        RowEntryCodec.writeVarint(UInt64(entry.files.count), into: &bytes)
        for file in entry.files {
            RowEntryCodec.writeString(file.id, into: &bytes)
            RowEntryCodec.writeVarint(UInt64(max(file.size, 0)), into: &bytes)
        }
    }

    /// The stored bytes of a page of `count` entries encoded in `bytes`.
    static func seal(count: Int, bytes: [UInt8]) throws -> [UInt8] {
        var whole: [UInt8] = []
        whole.reserveCapacity(bytes.count + 10)
        RowEntryCodec.writeVarint(UInt64(count), into: &whole)
        whole.append(contentsOf: bytes)
        return try Zstd.compress(whole, level: level)
    }

    /// The entries of a stored page, in the order they were written.
    ///
    /// - Throws: `.decoding` when the bytes are not a page.
    static func open(_ stored: [UInt8]) throws -> [Entry] {
        guard !stored.isEmpty else { return [] }
        var reader = ByteReader(try Zstd.decompress(stored, maximumSize: maximumDecoded, sized: true))
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw ByteReader.failure("trash page count past the end") }
        var entries: [Entry] = []
        entries.reserveCapacity(Int(count))
        for _ in 0..<count {
            let row = try RowEntryCodec.decodeEntry(from: &reader)
            guard row.kind == .upsert else { throw ByteReader.failure("a trash page holds an entry that is not an image") }
            let parentTable = try reader.string()
            let parentID = try reader.string()
            let fileCount = try reader.varint()
            guard fileCount <= UInt64(reader.remaining) else { throw ByteReader.failure("trash page file count past the end") }
            var files: [(id: String, size: Int64)] = []
            for _ in 0..<fileCount {
                let id = try reader.string()
                let size = try reader.varint()
                guard size <= UInt64(Int64.max) else { throw ByteReader.failure("trash page file size too large") }
                files.append((id, Int64(size)))
            }
            entries.append(Entry(table: row.table, id: row.id, stamp: row.stamp, columns: row.columns, values: row.values,
                                 parentTable: parentTable.isEmpty ? nil : parentTable, parentID: parentID.isEmpty ? nil : parentID, files: files))
        }
        guard reader.isAtEnd else { throw ByteReader.failure("trailing bytes after a trash page's entries") }
        return entries
    }
}

/// Decoded pages of the trash, a few at a time: the one reader of pages for the trash's
/// listing and undelete. A reader walking rows in an order of its own (newest first, then by
/// table, page and id; a change's rows page by page) finds them in the few pages it holds.
final class TrashPageCache {
    private struct Decoded {
        var page: Int64
        var entries: [TrashPage.Entry]
        var index: [String: Int]
    }
    private let keep: Int
    private var pages: [Decoded] = []
    private let select: Statement

    init(database: Database, keep: Int = 8) throws {
        self.keep = keep
        select = try database.prepare("SELECT entries FROM coven_trash_pages WHERE page = ?1")
    }

    /// The entries of page `page`, in the order they were written (none for a page not there).
    func entries(page: Int64) throws -> [TrashPage.Entry] { try decoded(page).entries }

    /// The entry of row `id` of `table` in page `page`, nil when the page does not hold it.
    func entry(page: Int64, table: String, id: String) throws -> TrashPage.Entry? {
        let found = try decoded(page)
        return found.index[table + "\u{0}" + id].map { found.entries[$0] }
    }

    /// Page `page` decoded, from those kept or read now (the page read longest ago let go).
    private func decoded(_ page: Int64) throws -> Decoded {
        if let at = pages.firstIndex(where: { $0.page == page }) {
            let found = pages.remove(at: at)
            pages.insert(found, at: 0)
            return found
        }
        select.reset()
        try select.bind([page])
        let stored = try select.next()?[0].bytesValue ?? []
        select.reset()
        let entries = try TrashPage.open(stored)
        var index: [String: Int] = [:]
        for (at, entry) in entries.enumerated() { index[entry.table + "\u{0}" + entry.id] = at }
        let found = Decoded(page: page, entries: entries, index: index)
        pages.insert(found, at: 0)
        if pages.count > keep { pages.removeLast() }
        return found
    }
}

extension TrashPage {
    /// Schema step 24: the trash in pages. Makes `coven_trash_pages` and the tombstones' link
    /// to them, moves every row of step 23's `coven_trash` into pages (the rows of one change,
    /// audience and owner together, this device's unpublished deletes by their write's stamp)
    /// and links each row's tombstone to its page, then drops `coven_trash`. Runs inside the
    /// migration's transaction; reads the old rows a statement step at a time.
    static func migrate(_ database: Database) throws {
        try database.execute("""
            CREATE TABLE coven_trash_pages (
                page     INTEGER PRIMARY KEY,
                device   TEXT NOT NULL,
                seq      INTEGER,
                stamp    TEXT NOT NULL,
                audience TEXT NOT NULL DEFAULT 'store',
                owner    TEXT,
                rows     INTEGER NOT NULL DEFAULT 0,
                entries  BLOB NOT NULL DEFAULT x''
            ) STRICT;
            CREATE INDEX coven_trash_pages_change ON coven_trash_pages (device, seq);
            ALTER TABLE coven_tombstones ADD COLUMN trash INTEGER;
            """)
        let rows = try database.prepare("""
            SELECT tbl, id, image, stamp, device, seq, audience, owner, parent_tbl, parent_id, files FROM coven_trash
            ORDER BY device, seq, CASE WHEN seq IS NULL THEN stamp END, audience, owner, rowid
            """)
        let link = try database.prepare("""
            INSERT INTO coven_tombstones (tbl, id, stamp, audience, trash) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (tbl, id) DO UPDATE SET trash = excluded.trash
            """)
        var group: [SQLValue] = []
        var page: Int64?
        var count = 0
        var bytes: [UInt8] = []
        var newest = ""
        func write() throws {
            guard let page, count > 0 else { return }
            try database.run("UPDATE coven_trash_pages SET stamp = ?1, rows = ?2, entries = ?3 WHERE page = ?4",
                             [newest, count, SQLValue.blob(try seal(count: count, bytes: bytes)), page])
        }
        while let row = try rows.next() {
            let key = [row[4], row[5], row[5] == .null ? row[3] : .null, row[6], row[7]]
            if key != group || bytes.count >= limit {
                try write()
                group = key
                page = try database.scalar("""
                    INSERT INTO coven_trash_pages (device, seq, stamp, audience, owner) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING page
                    """, [row[4], row[5], row[3], row[6], row[7]]).intValue
                count = 0
                bytes = []
                newest = ""
            }
            let table = row[0].textValue ?? ""
            let id = row[1].textValue ?? ""
            let stamp = row[3].textValue ?? ""
            let image = try RowEntryCodec.decode(row[2].bytesValue ?? []).first
            var files: [(id: String, size: Int64)] = []
            if let text = row[10].textValue, text != "[]",
               let list = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] {
                files = list.compactMap { item in
                    guard let id = item["id"] as? String else { return nil }
                    return (id, (item["size"] as? NSNumber)?.int64Value ?? 0)
                }
            }
            append(Entry(table: table, id: id, stamp: stamp, columns: image?.columns ?? [], values: image?.values ?? [],
                         parentTable: row[8].textValue, parentID: row[9].textValue, files: files), to: &bytes)
            count += 1
            if stamp > newest { newest = stamp }
            link.reset()
            try link.bind([row[0], row[1], row[3], row[6], page.map { SQLValue.integer($0) } ?? .null])
            try link.runToEnd()
        }
        try write()
        try database.execute("DROP TABLE coven_trash")
    }
}

/// Seals full trash pages on a thread of its own while the caller goes on recording: a pull
/// applying deletes keeps one core busy, and zstd over a change's images (about 60 ms for
/// 100,000 rows) runs beside it on the other. The caller writes each sealed page
/// (``sealed()``, ``finish()``) on its own connection; at most ``inFlight`` pages wait.
final class TrashPageSealer: @unchecked Sendable {
    /// A sealed page, ready to be written: its row, count, newest stamp and stored bytes.
    struct Sealed: Sendable {
        var page: Int64
        var count: Int
        var stamp: String
        var bytes: [UInt8]
    }

    /// Pages handed over and not yet taken back past which ``submit(page:count:stamp:bytes:)``
    /// waits: a bound on the memory they hold.
    static let inFlight = 8

    private let queue = DispatchQueue(label: "coven.trash.seal")
    private let lock = NSLock()
    private var done: [Result<Sealed, any Error>] = []
    private var pending = 0
    private let room = DispatchSemaphore(value: inFlight)

    /// Hands page `page` (`count` entries encoded in `bytes`, the newest stamp `stamp`) over
    /// to be sealed.
    func submit(page: Int64, count: Int, stamp: String, bytes: [UInt8]) {
        room.wait()
        lock.withLock { pending += 1 }
        queue.async { [self] in
            let result = Result { Sealed(page: page, count: count, stamp: stamp, bytes: try TrashPage.seal(count: count, bytes: bytes)) }
            lock.withLock {
                done.append(result)
                pending -= 1
            }
            room.signal()
        }
    }

    /// The pages sealed since the last call.
    ///
    /// - Throws: the error sealing one of them threw.
    func sealed() throws -> [Sealed] {
        let results = lock.withLock {
            defer { done.removeAll() }
            return done
        }
        return try results.map { try $0.get() }
    }

    /// Waits for every page handed over, and returns those not yet taken.
    func finish() throws -> [Sealed] {
        queue.sync {}
        return try sealed()
    }

    /// Waits for the pages in flight and forgets them (a change that failed).
    func discard() {
        queue.sync {}
        lock.withLock { done.removeAll() }
    }
}

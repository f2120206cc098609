import Foundation

extension Trash {
    /// Who deleted the rows of a page, and in which change (``seqSQL``).
    struct PageOrigin {
        var device: String
        var deviceName: String?
        var member: String?
        var seq: Int64?
        var audience: String
        var owner: String?
    }

    /// The origins of pages, each read once (a few thousand kept).
    final class Origins {
        private let select: Statement
        private var known: [Int64: PageOrigin] = [:]

        init(_ database: Database) throws {
            select = try database.prepare("""
                SELECT p.device, r.name, r.member, \(Trash.seqSQL), p.audience, p.owner
                FROM coven_trash_pages p LEFT JOIN coven_device_registry r ON r.device = p.device WHERE p.page = ?1
                """)
        }

        func of(_ page: Int64) throws -> PageOrigin? {
            if let origin = known[page] { return origin }
            select.reset()
            try select.bind([page])
            defer { select.reset() }
            guard let row = try select.next() else { return nil }
            let origin = PageOrigin(device: row[0].textValue ?? "", deviceName: row[1].textValue, member: row[2].textValue, seq: row[3].intValue,
                                    audience: row[4].textValue ?? RowAudiences.store, owner: row[5].textValue)
            if known.count >= 4096 { known.removeAll() }
            known[page] = origin
            return origin
        }
    }
}

/// The trash's rows as ``Undelete`` reads them: a row through its tombstone's page, the rows
/// of the change that deleted it (its pages') whose parent it is, and what this device may see.
final class TrashRows {
    let device: Device
    var database: Database { device.database }
    /// The audiences this device's member writes in, and the member (nil: a store without).
    let writable: Set<String>
    let me: String?
    private let pages: TrashPageCache
    private let origins: Trash.Origins
    /// The rows deleted with each parent, by change (its pages'): read once per change.
    private var children: [String: [String: [(String, String)]]] = [:]

    init(_ device: Device) throws {
        self.device = device
        writable = try Circles(device).writableAudiences()
        me = try Members(device).memberID()
        pages = try TrashPageCache(database: device.database)
        origins = try Trash.Origins(device.database)
    }

    /// Whether this device may see rows of `audience` (and of an owner-only table, `owner`).
    func sees(audience: String, owner: String?) -> Bool { writable.contains(audience) && (owner == nil || owner == me) }

    /// Row `id` of `table` as the trash holds it: its page, that page's origin and its entry;
    /// nil when it is not in the trash.
    func row(table: String, id: String) throws -> (page: Int64, origin: Trash.PageOrigin, entry: TrashPage.Entry)? {
        guard let page = try database.queryOneCached("SELECT trash FROM coven_tombstones WHERE tbl = ?1 AND id = ?2", [table, id])?[0].intValue,
              let origin = try origins.of(page), let entry = try pages.entry(page: page, table: table, id: id) else { return nil }
        return (page, origin, entry)
    }

    /// The entries of page `page` whose rows are still in the trash (their tombstones name it),
    /// in the order the page holds them.
    func linked(page: Int64) throws -> [TrashPage.Entry] {
        try pages.entries(page: page).filter { entry in
            try database.queryOneCached("SELECT trash FROM coven_tombstones WHERE tbl = ?1 AND id = ?2", [entry.table, entry.id])?[0].intValue == page
        }
    }

    /// The rows in the trash deleted with row `id` of `table` (in page `page`), by the same
    /// change: the rows of that change's pages whose parent it is.
    func children(of table: String, id: String, page: Int64) throws -> [(String, String)] {
        guard let change = try database.queryOne("SELECT device, seq, stamp FROM coven_trash_pages WHERE page = ?1", [page]) else { return [] }
        // A change: a pulled one by its seq, this device's unpublished write by its stamp.
        let key = (change[0].textValue ?? "") + "\u{0}" + (change[1].intValue.map(String.init) ?? "write " + (change[2].textValue ?? ""))
        if children[key] == nil {
            var found: [String: [(String, String)]] = [:]
            let group = try database.query("""
                SELECT page FROM coven_trash_pages WHERE device = ?1 AND (seq = ?2 OR (seq IS NULL AND ?2 IS NULL AND stamp = ?3)) ORDER BY page
                """, [change[0], change[1], change[2]])
            for member in group {
                guard let number = member[0].intValue else { continue }
                for entry in try linked(page: number) {
                    guard let parentTable = entry.parentTable, let parentID = entry.parentID else { continue }
                    found[parentTable + "\u{0}" + parentID, default: []].append((entry.table, entry.id))
                }
            }
            for (parent, rows) in found { found[parent] = rows.sorted { ($0.0, $0.1) < ($1.0, $1.1) } }
            children[key] = found
        }
        return children[key]?[table + "\u{0}" + id] ?? []
    }
}

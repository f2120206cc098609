import Foundation

/// The file cache's budget (spec/keep-files-on-a-device.md "Choose how much disk files take").
public enum CacheBudget {
    /// The default: the larger of 2 GiB and a tenth of the volume, held to what leaves a
    /// twentieth of the volume free.
    public static func defaultBudget(folder: String, currentlyUsed: Int64 = 0) -> Int64 {
        var info = statvfs()
        guard statvfs(folder, &info) == 0 else { return 2 << 30 }
        let volume = Int64(info.f_blocks) * Int64(info.f_frsize)
        let free = Int64(info.f_bavail) * Int64(info.f_frsize)
        let wanted = max(Int64(2) << 30, volume / 10)
        // What the cache may hold while leaving a twentieth of the volume free.
        let ceiling = max(0, free + currentlyUsed - volume / 20)
        return min(wanted, ceiling)
    }
}

extension Cache {
    /// The bytes every cache entry holds (kept files and partials too), from the total the
    /// schema's triggers keep.
    func cacheBytes() throws -> Int64 {
        try device.database.scalar("SELECT bytes FROM coven_cache_total WHERE id = 1").intValue ?? 0
    }

    /// The budget in force: the stored choice, or the default (nil means keep-all).
    public func cacheBudget() throws -> (bytes: Int64?, isDefault: Bool) {
        switch try device.setting("cache_budget") {
        case nil, "default"?:
            return (CacheBudget.defaultBudget(folder: device.paths.folder, currentlyUsed: try cacheBytes()), true)
        case "keep-all"?:
            return (nil, false)
        case let value?:
            return (Int64(value), false)
        }
    }

    /// The bytes the budget covers (every entry but kept files') and the bytes of partials.
    public func cacheUsage() throws -> (used: Int64, partial: Int64) {
        let used = try device.database.scalar("""
            SELECT coalesce(sum(c.bytes), 0) FROM coven_cache c
            WHERE c.object NOT IN (SELECT f.object FROM coven_files f WHERE \(Self.keptFile))
            """, [try keptNamespaces()]).intValue ?? 0
        let partial = try device.database.scalar("SELECT coalesce(sum(c.bytes), 0) FROM coven_cache c WHERE c.complete = 0", []).intValue ?? 0
        return (used, partial)
    }

    /// The cache's summary for status.
    public func cacheSummary() throws -> CacheSummary {
        let budget = try cacheBudget()
        let (used, partial) = try cacheUsage()
        // One query over the kept files, each with its cache entry and its last fetch failure,
        // grouped by why it is not held (NULL: held), so status costs one pass in SQLite
        // whatever the number of kept files. The reasons are documented in docs/json.md
        // ("file_cache").
        let groups = try device.database.query("""
            WITH kept AS (
                SELECT f.size AS size, f.place AS at, f.device AS device, f.object AS object
                FROM coven_files f
                WHERE \(Self.keptFile)
            ), looked AS (
                SELECT k.size, coalesce(c.bytes, 0) AS cached, coalesce(c.complete, 0) AS state, failed.value AS failure,
                       (k.at = ?3 AND k.device = ?2) AS here, k.at AS at
                FROM kept k
                LEFT JOIN coven_cache c ON c.object = k.object
                LEFT JOIN coven_fetch_failures failed ON failed.key = k.object
            )
            SELECT CASE
                     WHEN here OR state >= 1 THEN NULL
                     WHEN at = ?3 THEN 'device_only_elsewhere'
                     WHEN failure IS NOT NULL THEN failure
                     WHEN cached > 0 THEN 'partial'
                     ELSE 'not_fetched'
                   END AS reason,
                   count(*) AS count, coalesce(sum(size), 0) AS bytes,
                   coalesce(sum(CASE WHEN here THEN size ELSE cached END), 0) AS held_bytes
            FROM looked GROUP BY reason ORDER BY reason
            """, [try keptNamespaces(), device.deviceID, Coordinates.Place.device.rawValue])
        var heldCount: Int64 = 0
        var heldBytes: Int64 = 0
        var notHeld: [CacheSummary.NotHeld] = []
        for group in groups {
            // Held files count their bytes; the others, the bytes of their partials.
            heldBytes += group.int("held_bytes") ?? 0
            guard let reason = group.string("reason") else {
                heldCount += group.int("count") ?? 0
                continue
            }
            notHeld.append(CacheSummary.NotHeld(reason: reason, count: group.int("count") ?? 0, bytes: group.int("bytes") ?? 0, unstated: 0))
        }
        return CacheSummary(budget: budget.bytes, budgetIsDefault: budget.isDefault, used: used, partial: partial,
                            heldCount: heldCount, heldBytes: heldBytes, notHeld: notHeld)
    }
}

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

extension Device {
    /// The bytes every cache entry holds (kept files and partials too), from the total the
    /// schema's triggers keep.
    func cacheBytes() throws -> Int64 {
        try database.scalar("SELECT bytes FROM coven_cache_total WHERE id = 1").intValue ?? 0
    }

    /// The budget in force: the stored choice, or the default (nil means keep-all).
    public func cacheBudget() throws -> (bytes: Int64?, isDefault: Bool) {
        switch try setting("cache_budget") {
        case nil, "default"?:
            return (CacheBudget.defaultBudget(folder: paths.folder, currentlyUsed: try cacheBytes()), true)
        case "keep-all"?:
            return (nil, false)
        case let value?:
            return (Int64(value), false)
        }
    }

    /// The cache's summary for status.
    public func cacheSummary() throws -> CacheSummary {
        let budget = try cacheBudget()
        let kept = "(c.object IN (SELECT json_extract(f.coordinates, '$.object') FROM coven_files f WHERE f.id IN (SELECT file FROM coven_pins) OR f.namespace IN (SELECT value FROM json_each(?1))))"
        let keptNamespaces = String(decoding: try JSONSerialization.data(withJSONObject: manifest.namespaces.filter(\.kept).map(\.name)), as: UTF8.self)
        let used = try database.scalar("SELECT coalesce(sum(c.bytes), 0) FROM coven_cache c WHERE NOT \(kept)", [keptNamespaces]).intValue ?? 0
        let partial = try database.scalar("SELECT coalesce(sum(c.bytes), 0) FROM coven_cache c WHERE c.complete = 0", []).intValue ?? 0
        // One query over the kept files, each with its cache entry and its last fetch failure,
        // so status costs one pass whatever the number of kept files.
        let keptFiles = """
            SELECT f.size, json_extract(f.coordinates, '$.at') AS at, json_extract(f.coordinates, '$.device') AS device,
                   c.bytes AS cached_bytes, c.complete AS complete, m.value AS failure
            FROM coven_files f
            LEFT JOIN coven_cache c ON c.object = json_extract(f.coordinates, '$.object')
            LEFT JOIN coven_meta m ON m.key = 'fetch_failed:' || json_extract(f.coordinates, '$.object')
            WHERE f.id IN (SELECT file FROM coven_pins) OR f.namespace IN (SELECT value FROM json_each(?1))
            """
        var heldCount: Int64 = 0
        var heldBytes: Int64 = 0
        var reasons: [String: CacheSummary.NotHeld] = [:]
        for row in try database.query(keptFiles, [keptNamespaces]) {
            let size = row.int("size") ?? 0
            let cachedBytes = row.int("cached_bytes") ?? 0
            let isHere = row.string("at") == "device" && row.string("device") == deviceID
            if isHere || (row.int("complete") ?? 0) >= 1 {
                heldCount += 1
                heldBytes += isHere ? size : cachedBytes
                continue
            }
            // The reasons are documented in docs/json.md ("file_cache").
            let reason: String
            heldBytes += cachedBytes
            if row.string("at") == "device" {
                reason = "device_only_elsewhere"
            } else if let failure = row.string("failure") {
                reason = failure
            } else if cachedBytes > 0 {
                reason = "partial"
            } else {
                reason = "not_fetched"
            }
            var group = reasons[reason] ?? CacheSummary.NotHeld(reason: reason, count: 0, bytes: 0, unstated: 0)
            group.count += 1
            group.bytes += size
            reasons[reason] = group
        }
        return CacheSummary(budget: budget.bytes, budgetIsDefault: budget.isDefault, used: used, partial: partial,
                            heldCount: heldCount, heldBytes: heldBytes, notHeld: reasons.values.sorted { $0.reason < $1.reason })
    }
}

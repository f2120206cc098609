import Foundation

/// One feature's journal: keys, each with a text value, in a table of the feature's own
/// (`key TEXT PRIMARY KEY, value TEXT NOT NULL`, schema step 22), written only by the feature's
/// owner type, which names its table here. What lived in `coven_meta` under a prefix before
/// (`release:<copy>`, `fetch_failed:<object>`, …) lives in these, so that `coven_meta` holds the
/// device's settings only and each piece of state has one owner.
///
/// ```swift
/// let failures = Journal(database: device.database, table: "coven_fetch_failures")
/// try failures.set(object, "missing")       // nil removes
/// try failures.value(object)                // "missing"
/// ```
///
/// Every method runs inside the caller's transaction (or is one statement).
struct Journal {
    let database: Database
    /// The journal's table: one of ``tables``.
    let table: String

    /// The journals schema step 22 made (Store/Schema.swift).
    static let tables: Set<String> = [
        "coven_released_copies", "coven_made_copies", "coven_checked", "coven_uncache", "coven_fetch_failures",
        "coven_clock_ahead", "coven_gc_floors", "coven_sync_flags",
    ]

    init(database: Database, table: String) {
        precondition(Self.tables.contains(table), "internal error: no journal '\(table)'")
        self.database = database
        self.table = table
    }

    /// The value of `key`, or nil when the journal holds none.
    func value(_ key: String) throws -> String? {
        let statement = try database.cached("SELECT value FROM \(table) WHERE key = ?1")
        try statement.bind([key])
        defer { statement.reset() }
        return try statement.next()?[0].textValue
    }

    /// Sets `key` to `value`, replacing what it held; nil removes it.
    func set(_ key: String, _ value: String?) throws {
        if let value {
            let statement = try database.cached("INSERT INTO \(table) (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
            try statement.bind([key, value])
            try statement.runToEnd()
        } else {
            let statement = try database.cached("DELETE FROM \(table) WHERE key = ?1")
            try statement.bind([key])
            try statement.runToEnd()
        }
    }

    /// Up to `limit` entries after `key` (from the first when nil), in key order: a journal of
    /// any size read a page at a time.
    func page(after key: String?, limit: Int) throws -> [(key: String, value: String)] {
        try database.query("SELECT key, value FROM \(table) WHERE key > ?1 ORDER BY key LIMIT ?2", [key ?? "", limit]).map {
            ($0.string("key") ?? "", $0.string("value") ?? "")
        }
    }

    /// Every key (for the journals that hold a few: failures, clocks ahead).
    func keys() throws -> Set<String> {
        Set(try database.query("SELECT key FROM \(table)").compactMap { $0.string("key") })
    }

    /// Whether the journal holds nothing.
    func isEmpty() throws -> Bool {
        try database.scalar("SELECT NOT EXISTS (SELECT 1 FROM \(table))").intValue == 1
    }
}

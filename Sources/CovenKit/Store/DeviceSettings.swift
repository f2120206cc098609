import Foundation

/// The one writer of `coven_meta`: this device's settings and its own single values (the ids,
/// the storage and the manifest, the member, the cache budget, pause and network settings, the
/// hybrid clock's last stamp, the views' digest, when the cache and gc last swept). Journals
/// (work left for after a commit, proofs, failures) and sync's flags are not settings: each is
/// a table of its owner's (``Journal``, ``SyncFlags``). ``Device/setting(_:)`` and
/// ``Device/setSetting(_:_:)`` call it, and so does the build of a new device's database;
/// nothing else runs its SQL.
///
/// Every method runs inside the caller's transaction (or is one statement).
struct DeviceSettings {
    let database: Database

    /// The value of `key`, or nil when it is not set.
    func value(_ key: String) throws -> String? {
        try database.scalar("SELECT value FROM coven_meta WHERE key = ?1", [key]).textValue
    }

    /// Sets `key` to `value`, replacing what it held; nil removes it.
    func set(_ key: String, _ value: String?) throws {
        if let value {
            try database.run("INSERT INTO coven_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])
        } else {
            try remove(key)
        }
    }

    /// Records `key` in a database being built, where it is not set yet (a key already there
    /// fails the build).
    func add(_ key: String, _ value: String) throws {
        try database.run("INSERT INTO coven_meta (key, value) VALUES (?1, ?2)", [key, value])
    }

    /// Removes `key`; nothing when it is not set.
    func remove(_ key: String) throws {
        try database.run("DELETE FROM coven_meta WHERE key = ?1", [key])
    }
}

extension Device {
    /// The owner of this device's settings.
    var settings: DeviceSettings { DeviceSettings(database: database) }
}

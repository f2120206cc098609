import Foundation

/// The one writer of `coven_store_settings`: values that hold for the whole store (the trash's
/// retention window), set by an admin and published like a row.
///
/// The failure story: a window set on one device only would keep bytes there while another
/// device's gc, with its own window, frees them; and a member who is no admin could shorten
/// everyone's window. The rule: a setting is a row of `coven_store_settings` (`id`, `value`,
/// `_updated_at`) written by a recorded write (``set(_:_:)``), so it travels in the store's
/// section of a change as any row does, merged by last writer wins, and a device joining later
/// finds it in the snapshot. A device applies a setting only from a device of an admin of the
/// store's generation the change was sealed under (``mayWrite(device:generation:)``); on a
/// store without members any device may set it. Where it does not apply: a value a device
/// reads is the newest it applied, so two devices may differ until both pulled.
///
/// ```swift
/// let days = try StoreSettings(device).value(StoreSettings.trashRetention)
/// ```
public struct StoreSettings {
    /// The table, and the name its entries travel under in changes.
    static let table = "coven_store_settings"

    /// The trash's retention window, in seconds (``Trash/retention()``).
    public static let trashRetention = "trash_retention"


    let device: Device
    var database: Database { device.database }

    /// The settings of `device`'s store, as it knows them.
    public init(_ device: Device) { self.device = device }

    /// The value of setting `key`, nil when it was never set.
    public func value(_ key: String) throws -> String? {
        try database.scalar("SELECT value FROM coven_store_settings WHERE id = ?1", [key]).textValue
    }

    /// Sets `key` to `value` as a recorded write of this device, published at the next sync.
    ///
    /// - Throws: `.notAdmin` when this device's member is not an admin of the store.
    public func set(_ key: String, _ value: String) throws {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        try refuseUnlessAdmin()
        try database.transaction {
            try device.recordWrite { write in
                try database.run("""
                    INSERT INTO coven_store_settings (id, value, _updated_at) VALUES (?1, ?2, ?3)
                    ON CONFLICT (id) DO UPDATE SET value = excluded.value, _updated_at = excluded._updated_at
                    """, [key, value, write.stamp])
            }
        }
    }

    /// Refuses a device whose member is not an admin of the store (on a store of members).
    ///
    /// - Throws: `.notAdmin`.
    func refuseUnlessAdmin() throws {
        guard try device.keys.storeGeneration() != nil else { return }
        let own = try Members(device).memberID()
        let role = try database.scalar("""
            SELECT role FROM coven_audience_rosters WHERE audience = ?1 AND member = ?2 ORDER BY generation DESC LIMIT 1
            """, [RowAudiences.store, own ?? ""]).textValue
        guard role == "owner" || role == "admin" else {
            throw CovenError(.notAdmin, "the store's settings are an admin's, and this device's member is not an admin",
                             hint: "ask an admin of the store ('coven members' lists them)")
        }
    }

    /// Whether a change of `writer` sealed under the store's generation `generation` may write
    /// a setting: its member is an admin on that generation's roster (any device, on a store
    /// without members).
    func mayWrite(device writer: String, generation: UInt64) throws -> Bool {
        guard try device.keys.storeGeneration() != nil else { return true }
        let role = try database.scalar("""
            SELECT r.role FROM coven_device_registry d JOIN coven_audience_rosters r ON r.member = d.member
            WHERE d.device = ?1 AND r.audience = ?2 AND r.generation = ?3
            """, [writer, RowAudiences.store, Int64(generation)]).textValue
        return role == "owner" || role == "admin"
    }

    /// Copies the settings into `schema`'s table (a snapshot).
    func copyForSnapshot(into schema: String) throws {
        try database.execute("INSERT INTO \(schema).coven_store_settings (id, value, _updated_at) SELECT id, value, _updated_at FROM main.coven_store_settings")
    }
}

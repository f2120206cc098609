import CSQLite
import Foundation

// MARK: - The device

/// One working copy of a store on this machine: its database and the folder beside it.
///
/// Not Sendable: a `Device` owns a SQLite connection and is confined to the task that opened it.
/// Parts that run on other threads (upload jobs) open their own connection with
/// ``openConnection()``.
public final class Device {
    /// Where the database and its folder are.
    public let paths: DevicePaths
    /// The connection.
    public let database: Database
    /// The store's random id.
    public let storeID: String
    /// This device's random id.
    public let deviceID: String
    /// This device's name (the host name unless `--name` was given).
    public let deviceName: String
    /// Where the store lives.
    public let storage: StorageLocation
    /// The manifest the device was created or last migrated with.
    public private(set) var manifest: Manifest
    /// Whether the connection only reads.
    public let readOnly: Bool
    /// Where storage settings (`AWS_*`) are read by sync: the process environment unless set.
    public var storageEnvironment: [String: String]?
    /// The keys this device holds (the store key, its signing key, the other devices' public
    /// keys), read when first needed: the one owner of key material.
    public private(set) lazy var keys = Keyring(paths: paths, database: database, deviceID: deviceID)

    /// A provider for this device's storage, for sync.
    func connectStorage() throws -> StorageProvider {
        try StorageConnector(location: storage, environment: storageEnvironment).connect()
    }

    /// The format of store.json and of everything coven writes to storage.
    public static let storeFormat = 1

    private init(paths: DevicePaths, database: Database, readOnly: Bool) throws {
        self.paths = paths
        self.database = database
        self.readOnly = readOnly
        func meta(_ key: String) throws -> String {
            guard let value = try database.scalar("SELECT value FROM coven_meta WHERE key = ?1", [key]).textValue else {
                throw CovenError(.noDevice, "'\(paths.database)' is not a coven device database", cause: "no \(key)")
            }
            return value
        }
        guard try database.hasTable("coven_meta") else {
            throw CovenError(.noDevice, "'\(paths.database)' is not a coven device database")
        }
        storeID = try meta("store_id")
        deviceID = try meta("device_id")
        deviceName = try meta("device_name")
        storage = try StorageLocation(parsing: try meta("storage"))
        manifest = try Manifest(json: Data(try meta("manifest").utf8))
    }

    // MARK: Opening

    /// The kernel's open: opens the device at `paths`, migrates and checks its schema and
    /// installs coven's views and functions. A device a person uses is opened with
    /// ``open(paths:readOnly:)`` (Open/), which sweeps what crashes left after this.
    ///
    /// - Throws: `.noDevice` when there is none; `.schema` when a synced table breaks a rule;
    ///   `.updateRequired` when a newer coven wrote it.
    public static func openKernel(paths: DevicePaths, readOnly: Bool = false) throws -> Device {
        var info = stat()
        guard stat(paths.database, &info) == 0 else {
            throw CovenError(.noDevice, "no coven device at '\(paths.database)'", hint: "run 'coven init --storage URL --manifest FILE', or pass --db")
        }
        guard (info.st_mode & S_IFMT) != S_IFDIR else {
            throw CovenError(.noDevice, "'\(paths.database)' is a folder, not a coven device database", hint: "pass the database file with --db", details: ["path": paths.database])
        }
        // A FIFO or a device node is no database, and opening one could wait forever.
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw CovenError(.noDevice, "'\(paths.database)' is not a coven device database", hint: "pass the database file with --db", cause: "not a regular file", details: ["path": paths.database])
        }
        // SQLite's temporary files (a long batch's statement journal, a sort's runs) hold the
        // device's rows: in its own folder, not /var/tmp.
        Database.keepTemporaryFiles(in: paths)
        let database = try Database(path: paths.database, readOnly: readOnly)
        let device: Device
        do {
            // A write-protected database opens read-only: treated as such, so no read fails on
            // bookkeeping it cannot write.
            let readOnly = readOnly || database.isReadOnly
            try configure(database, readOnly: readOnly)
            try migrateSchema(paths: paths, database: database, readOnly: readOnly)
            device = try Device(paths: paths, database: database, readOnly: readOnly)
        } catch let error as CovenError where error.sqlitePrimaryCode == SQLITE_NOTADB {
            throw CovenError(.noDevice, "'\(paths.database)' is not a coven device database", hint: "pass the --db of a device coven made", cause: error.message, details: ["path": paths.database])
        }
        if !device.readOnly {
            // The views change only with coven: recreate them when their text differs from what
            // the device last ran (a schema write at every open would queue each command behind
            // any write in progress, and invalidate every other connection's statements).
            let digest = SHA256.digest(Array(Schema.views.utf8)).hex
            if try database.scalar("SELECT value FROM coven_meta WHERE key = 'views_sha256'").textValue != digest {
                try database.transaction {
                    try database.execute(Schema.views)
                    try device.setSetting("views_sha256", digest)
                }
            }
        }
        try SQLFunctions.install(on: device)
        try SchemaCheck(database: database, manifest: device.manifest).run()
        return device
    }

    /// Applies coven's schema steps the device lacks (Schema.steps). A read-only open of a device
    /// that needs them migrates it through a connection of its own first, under the device's
    /// database lock, so a read never runs against an old schema.
    ///
    /// - Throws: `.updateRequired` when a newer coven wrote the database; `.sql` or `.io` when
    ///   the migration cannot be written.
    static func migrateSchema(paths: DevicePaths, database: Database, readOnly: Bool) throws {
        guard try database.hasTable("coven_meta") else { return } // not a device: the init below says so
        let version = try database.scalar("PRAGMA user_version").intValue ?? 0
        if version > Schema.version {
            throw CovenError(.updateRequired, "the device database was written by a newer coven", hint: "update coven", details: ["schema": String(version)])
        }
        guard version < Schema.version else { return }
        if readOnly {
            let writer = try Database(path: paths.database)
            try configure(writer, readOnly: false)
            try Schema.migrate(writer, from: try writer.scalar("PRAGMA user_version").intValue ?? 0)
            try writer.execute(Schema.views)
            return
        }
        // Another process may have migrated between the read above and the transaction.
        try Schema.migrate(database, from: version)
        _ = try? database.transaction { try database.execute(Schema.views) }
    }

    /// Another connection to the same device, for a thread of its own.
    public func openConnection() throws -> Device {
        try Device.openKernel(paths: paths, readOnly: readOnly)
    }

    static func configure(_ database: Database, readOnly: Bool) throws {
        if !readOnly {
            try database.execute("PRAGMA journal_mode = WAL")
        }
        // FULL: a commit is on disk when it returns, so a state change survives power loss.
        try database.execute("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON")
        if readOnly { try database.execute("PRAGMA query_only = ON") }
    }

    // MARK: Creating

    /// The store's manifest, sealed under the store key: what `coven join` starts a device
    /// with, replaced by `coven migrate`.
    public static let manifestKey = "manifest"

    // MARK: The device registry

    /// The storage key of a device's registry entry: `devices/<device>` (DESIGN "Storage layout").
    public static func registryEntryKey(_ device: String) -> String { "devices/" + device }

    /// `devices/<id>.gone`: the mark of a device removed for good.
    static let goneSuffix = ".gone"

    /// The schema this device writes under: its migration count and their digest.
    var schemaVersion: (count: Int, digest: String) {
        (manifest.migrations.count, SHA256.digest(Array(manifest.migrations.joined(separator: "\u{0}").utf8)).hex)
    }

    // MARK: State

    /// A value of this device's settings (`coven_meta`, owned by ``DeviceSettings``).
    public func setting(_ key: String) throws -> String? {
        try settings.value(key)
    }

    /// Sets a value of this device's settings, nil removing it (inside the caller's
    /// transaction, if any).
    public func setSetting(_ key: String, _ value: String?) throws {
        try settings.set(key, value)
    }

    /// Takes the device lock, which every mutating command holds while it runs.
    public func lock(wait: Bool) throws -> DeviceLock {
        try DeviceLock(path: paths.lock, wait: wait)
    }

    /// Applies the manifest's new migrations and records it; refuses a changed old migration.
    ///
    /// - Returns: the positions (0-based) of the migrations applied now.
    /// - Throws: `.migration` when an applied migration changed or is missing; `.sql` when one
    ///   fails (nothing is applied then); `.schema` when the result breaks a synced-table rule.
    @discardableResult
    public func migrate(to newManifest: Manifest) throws -> [Int] {
        let recorded = try database.query("SELECT position, sha256 FROM coven_migrations ORDER BY position").map { ($0.int("position") ?? 0, $0.string("sha256") ?? "") }
        let applied: [Int] = try database.transaction {
            let positions = try Migrations.apply(newManifest.migrations, to: database, recorded: recorded)
            try SchemaCheck(database: database, manifest: newManifest).run()
            try setSetting("manifest", try newManifest.canonicalJSON())
            return positions
        }
        manifest = newManifest
        return applied
    }
}

// MARK: - Migrations

enum Migrations {
    /// Runs the migrations not yet recorded, in order, inside the caller's transaction.
    static func apply(_ migrations: [String], to database: Database, recorded: [(Int64, String)]) throws -> [Int] {
        if recorded.count > migrations.count {
            throw CovenError(.migration, "the manifest has \(migrations.count.counted("migration")) but the device applied \(recorded.count)", hint: "migrations are only ever added at the end")
        }
        for (position, sha) in recorded {
            let expected = SHA256.digest(Array(migrations[Int(position)].utf8)).hex
            if expected != sha {
                throw CovenError(.migration, "migrations[\(position)] changed since it was applied", hint: "add a new migration at the end instead of editing an old one", details: ["position": String(position)])
            }
        }
        var applied: [Int] = []
        for position in recorded.count..<migrations.count {
            let sql = migrations[position]
            try Migrations.run(sql, position: position, on: database)
            try database.run("INSERT INTO coven_migrations (position, sha256, applied_at) VALUES (?1, ?2, ?3)", [position, SHA256.digest(Array(sql.utf8)).hex, Timestamp.iso8601(Date())])
            applied.append(position)
        }
        return applied
    }
}

extension Manifest {
    /// The manifest as a document of the public shape (docs/manifest.md), keys sorted: what
    /// the device stores and what ``init(json:)`` reads back.
    public func canonicalJSON() throws -> String {
        let namespaces: [[String: Any]] = namespaces.map { namespace in
            var object: [String: Any] = ["name": namespace.name, "kind": namespace.kind.rawValue, "kept": namespace.kept]
            if let budget = namespace.budget { object["budget"] = budget }
            return object
        }
        let tables: [[String: Any]] = tables.map { table in
            var object: [String: Any] = ["name": table.name, "identity": table.identity.rawValue]
            if let column = table.audienceColumn { object["audience_column"] = column }
            if let column = table.audienceFrom { object["audience_from"] = column }
            if let column = table.ownerColumn {
                object["owner_only"] = true
                object["owner_column"] = column
            }
            switch table.gate {
            case .none: break
            case .gatedBy(let column): object["gated_by"] = column
            case .gatedByDescendants: object["gated_by_descendants"] = true
            case .remoteRoot: object["remote_root"] = true
            }
            if !table.files.isEmpty {
                object["files"] = table.files.map { file -> [String: Any] in
                    var column: [String: Any] = ["column": file.column, "bound": file.bound, "write_once": file.writeOnce]
                    if file.bound { column["bound_limit"] = file.boundLimit }
                    return column
                }
            }
            return object
        }
        let data = try JSONSerialization.data(withJSONObject: ["namespaces": namespaces, "tables": tables, "migrations": migrations], options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

// MARK: - Time

/// Times as coven writes them.
public enum Timestamp {
    /// `2026-11-29T11:27:37.123Z`: UTC, to the millisecond (rounded down). Written digit by
    /// digit (`String(format:)` took 5 µs, paid by every file a batch stages).
    public static func iso8601(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        var text: [UInt8] = []
        text.reserveCapacity(24)
        func append(_ value: Int, width: Int, then separator: Character?) {
            let digits = String(value).utf8
            if value >= 0, digits.count < width { text.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width - digits.count)) }
            text.append(contentsOf: digits)
            if let separator { text.append(separator.asciiValue ?? 0) }
        }
        append(Int(parts.tm_year) + 1900, width: 4, then: "-")
        append(Int(parts.tm_mon) + 1, width: 2, then: "-")
        append(Int(parts.tm_mday), width: 2, then: "T")
        append(Int(parts.tm_hour), width: 2, then: ":")
        append(Int(parts.tm_min), width: 2, then: ":")
        append(Int(parts.tm_sec), width: 2, then: ".")
        append(Int(millis - seconds * 1000), width: 3, then: "Z")
        return String(decoding: text, as: UTF8.self)
    }
}

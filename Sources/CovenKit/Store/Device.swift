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
    /// For a device `join` made now: the snapshot it started from and those it passed over.
    public internal(set) var joinedFrom: SnapshotJoin?

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

    /// Opens the device at `paths`, checks its schema and installs coven's views and functions.
    ///
    /// - Throws: `.noDevice` when there is none; `.schema` when a synced table breaks a rule;
    ///   `.updateRequired` when a newer coven wrote it.
    public static func open(paths: DevicePaths, readOnly: Bool = false) throws -> Device {
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
        device.sweepAfterCrash()
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
        try Device.open(paths: paths, readOnly: readOnly)
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

    /// Creates a store at `storage` and this device, its first.
    ///
    /// The database is built under a temporary name and renamed into place last, so a crash
    /// leaves no half device; the store's `store.json` is written only if none is there.
    ///
    /// - Parameters:
    ///   - paths: where the device goes.
    ///   - storage: the store's location.
    ///   - manifest: what the store declares.
    ///   - name: this device's name; the host name when nil.
    ///   - provider: a provider connected to `storage`.
    /// - Throws: `.alreadyExists` when a device is at `paths` or a store at `storage`;
    ///   `.manifest`, `.migration`, `.schema` for a manifest whose migrations fail its own
    ///   rules; `.storage` when storage cannot be written.
    public static func create(
        paths: DevicePaths, storage: StorageLocation, manifest: Manifest, name: String?, provider: StorageProvider
    ) throws -> Device {
        let fm = FileManager.default
        try refuseExisting(paths)
        if let name { try DeviceNameText.check(name) }
        if try provider.head("store.json") != nil {
            throw CovenError(.alreadyExists, "a store already exists at '\(storage)'", hint: "join it from another device's snapshot, or use another storage URL")
        }
        let parent = (paths.database as NSString).deletingLastPathComponent
        // The folders above the database that this call makes, removed again on failure.
        var madeFolders: [String] = []
        var ancestor = parent
        while !ancestor.isEmpty, ancestor != "/", !fm.fileExists(atPath: ancestor) {
            madeFolders.append(ancestor)
            ancestor = (ancestor as NSString).deletingLastPathComponent
        }
        var created = false
        // Until the device is in place, a failure removes everything this call made.
        defer {
            if !created {
                try? fm.removeItem(atPath: paths.folder)
                for folder in madeFolders { rmdir(folder) } // innermost first; only if empty
            }
        }
        try makeFolder(parent, mode: 0o700)
        try makeFolder(paths.folder, mode: 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] {
            try makeFolder(folder, mode: 0o700)
        }
        let lock = try DeviceLock(path: paths.lock, wait: false)
        defer { _ = lock }

        let storeID = Identifier.uuid4()
        let deviceID = Identifier.uuid4()
        let deviceName = name ?? ProcessInfo.processInfo.hostName
        let now = Timestamp.iso8601(Date())

        defer { for suffix in ["", "-wal", "-shm"] { unlink(building(paths) + suffix) } }
        let signingKey = try DeviceSigningKey()
        let storeKey = FileKey()
        let keyCheck = try storeKey.withUnsafeBytes { try Keyring.storeKeyCheck(Array($0)) }
        try buildDatabase(paths: paths, storeID: storeID, deviceID: deviceID, deviceName: deviceName, storage: storage, manifest: manifest,
                          joinedAt: now, publicKey: signingKey.publicKey, storeKeyCheck: keyCheck)

        try storeKey.withUnsafeBytes { try AtomicFile.write(paths.storeKey, bytes: Array($0), mode: 0o600) }

        let storeJSON = try JSONSerialization.data(withJSONObject: [
            "coven_store": storeFormat, "id": storeID, "created_at": now,
        ], options: [.sortedKeys])
        // The storage objects this call made, removed again if a later step fails, so a failed
        // init leaves neither a store nor a device behind.
        var stored: [String] = []
        defer {
            if !created { for key in stored.reversed() { try? provider.delete(key) } }
        }
        guard try provider.putIfAbsent("store.json", data: [UInt8](storeJSON) + [10]) else {
            throw CovenError(.alreadyExists, "a store already exists at '\(storage)'", hint: "join it from another device's snapshot, or use another storage URL")
        }
        stored.append("store.json")
        try signingKey.write(to: paths.signingKey)
        let entry = registryEntryKey(deviceID)
        let keys = Keyring(storeKey: storeKey, signingKey: signingKey)
        let sealed = try DeviceEntry(device: deviceID, name: deviceName, joinedAt: now, publicKey: signingKey.publicKey).seal(keys: keys)
        guard try provider.putIfAbsent(entry, data: sealed) else {
            throw CovenError(.alreadyExists, "the device registry of '\(storage)' already has an entry '\(entry)'")
        }
        stored.append(entry)
        try publishManifest(manifest, provider: provider, keys: keys, replace: false)
        stored.append(manifestKey)
        guard rename(building(paths), paths.database) == 0 else {
            throw CovenError.posix("rename database into", path: paths.database)
        }
        try AtomicFile.syncFolder(parent)
        created = true
        return try open(paths: paths)
    }

    /// Where ``buildDatabase`` builds a device's database before it is renamed into place.
    static func building(_ paths: DevicePaths) -> String { paths.database + ".init" }

    /// Builds a device's database aside (``building(_:)``): coven's schema, its settings, its
    /// registry entry and the manifest's migrations. The caller renames it into place last.
    static func buildDatabase(paths: DevicePaths, storeID: String, deviceID: String, deviceName: String, storage: StorageLocation,
                              manifest: Manifest, joinedAt now: String, publicKey: DevicePublicKey, storeKeyCheck: String,
                              fromSnapshot snapshot: SnapshotManifest? = nil) throws {
        let building = building(paths)
        // A snapshot's database, unpacked there, is the start; otherwise an empty one.
        if snapshot == nil { for suffix in ["", "-wal", "-shm"] { unlink(building + suffix) } }
        do {
            let database = try Database(path: building, create: true)
            chmod(building, 0o600)
            if snapshot == nil { try FreePages.prepare(database) }
            try configure(database, readOnly: false)
            let version = try database.scalar("PRAGMA user_version").intValue ?? 0
            guard version <= Schema.version else {
                throw CovenError(.updateRequired, "the snapshot's database was written by a newer coven", hint: "update coven")
            }
            try Schema.migrate(database, from: version)
            let manifestJSON = try manifest.canonicalJSON()
            let recorded = try database.query("SELECT position, sha256 FROM coven_migrations ORDER BY position").map { ($0.int("position") ?? 0, $0.string("sha256") ?? "") }
            let settings = DeviceSettings(database: database)
            try database.transaction {
                if let snapshot, !snapshot.hlc.isEmpty {
                    // The receive rule of the hybrid clock, as for every applied change.
                    try settings.add("hlc", HybridClock.receive(snapshot.hlc).stamp)
                }
                if let snapshot, snapshot.seq > 0 || snapshot.frontier.contains(where: { $0.value > 0 }) {
                    // What the snapshot holds is applied here: the first sync publishes that
                    // frontier, which gc on the others waits for, even before this device writes.
                    try settings.add(StoreSync.frontierDueSetting, "1")
                }
                for (key, value) in [
                    ("store_id", storeID), ("device_id", deviceID), ("device_name", deviceName),
                    ("storage", storage.description), ("manifest", manifestJSON), ("created_at", now),
                    ("format", String(storeFormat)), (Keyring.storeKeyCheckSetting, storeKeyCheck),
                ] {
                    try settings.add(key, value)
                }
                try SyncState(database: database).learnDevice(deviceID, name: deviceName, joinedAt: now, publicKey: publicKey.hex)
                _ = try Migrations.apply(manifest.migrations, to: database, recorded: recorded)
                // Every row a snapshot holds was published: its peers hold it (an unshare here
                // retracts it, where it is).
                if snapshot != nil {
                    try PublishedRows(database: database).markEveryRowHeld(RowAudiences(graph: SchemaGraph(manifest: manifest, database: database), database: database))
                }
            }
            try SchemaCheck(database: database, manifest: manifest).run()
            // Checkpoint so the renamed file holds everything without its WAL.
            try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        } catch {
            // A build that fails leaves nothing behind.
            for suffix in ["", "-wal", "-shm"] { unlink(building + suffix) }
            throw error
        }
    }

    /// The store's manifest, sealed under the store key: what `coven join` starts a device
    /// with, replaced by `coven migrate`.
    public static let manifestKey = "manifest"

    /// Stores the manifest sealed at ``manifestKey`` (put-if-absent at init).
    static func publishManifest(_ manifest: Manifest, provider: StorageProvider, keys: Keyring, replace: Bool) throws {
        let sealed = try keys.seal(Array(try manifest.canonicalJSON().utf8))
        if replace {
            try provider.put(manifestKey, data: sealed)
        } else {
            guard try provider.putIfAbsent(manifestKey, data: sealed) else {
                throw CovenError(.alreadyExists, "the store already has a manifest at '\(manifestKey)'")
            }
        }
    }

    // MARK: The device registry

    /// The storage key of a device's registry entry: `devices/<device>` (DESIGN "Storage layout").
    public static func registryEntryKey(_ device: String) -> String { "devices/" + device }

    /// `devices/<id>.gone`: the mark of a device removed for good.
    static let goneSuffix = ".gone"

    /// The schema this device writes under: its migration count and their digest.
    var schemaVersion: (count: Int, digest: String) {
        (manifest.migrations.count, SHA256.digest(Array(manifest.migrations.joined(separator: "\u{0}").utf8)).hex)
    }

    /// Whether a bound reference's upload is done (its object no longer waits in the queue).
    func isUploaded(_ object: String) throws -> Bool {
        try database.scalar("SELECT count(*) FROM coven_upload_queue WHERE object = ?1 AND state <> \(UploadState.retired.sql)", [object]).intValue ?? 0 == 0
    }

    /// Creates a store at `storage` and this device, connecting to the storage itself: a
    /// `file://` directory is made when missing, and removed again (when still empty) if the
    /// call fails, so a refused or failed `coven init` leaves nothing behind.
    ///
    /// - Throws: as ``create(paths:storage:manifest:name:provider:)``, and `.storage` when the
    ///   storage cannot be reached.
    public static func create(paths: DevicePaths, storage: StorageLocation, manifest: Manifest, name: String?) throws -> Device {
        try refuseExisting(paths)
        var madeStorage: [String] = []
        if case .file(let directory) = storage {
            var folder = directory
            while !folder.isEmpty, folder != "/", !FileManager.default.fileExists(atPath: folder) {
                madeStorage.append(folder)
                folder = (folder as NSString).deletingLastPathComponent
            }
        }
        do {
            let provider = try StorageConnector(location: storage).connect(create: true)
            return try create(paths: paths, storage: storage, manifest: manifest, name: name, provider: provider)
        } catch {
            for folder in madeStorage { rmdir(folder) }
            throw error
        }
    }

    /// Refuses a device database or device folder already at `paths`, saying what is there.
    ///
    /// - Throws: `.alreadyExists` when a coven device is at `paths` (or what is left of one,
    ///   its folder); `.exists` when something else is at the database's path: a folder, an
    ///   empty file, a file that is not a coven device database, a link or a special file.
    static func refuseExisting(_ paths: DevicePaths) throws {
        var info = stat()
        if lstat(paths.database, &info) == 0 {
            let path = paths.database
            func other(_ what: String, hint: String = "pass another --db, or move it away") -> CovenError {
                CovenError(.exists, "'\(path)' is \(what), not a coven device database", hint: hint, details: ["path": path])
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: throw other("a folder", hint: "pass the path of a database file to create with --db, such as '\(path)/device.db'")
            case S_IFLNK: throw other("a symbolic link")
            case S_IFREG: break
            default: throw other("a special file (a FIFO, a socket or a device)")
            }
            if info.st_size == 0 { throw other("an empty file") }
            guard isCovenDatabase(path) else {
                throw other(hasSQLiteHeader(path) ? "an SQLite database of something else" : "a file")
            }
            throw CovenError(.alreadyExists, "a coven device already exists at '\(path)'", hint: "pass another --db", details: ["path": path])
        }
        if lstat(paths.folder, &info) == 0 {
            throw CovenError(.alreadyExists, "'\(paths.folder)' already exists", hint: "pass another --db, or remove what is left of an earlier device there", details: ["path": paths.folder])
        }
    }

    /// Whether the file at `path` starts with SQLite's header, "SQLite format 3" and a NUL.
    static func hasSQLiteHeader(_ path: String) -> Bool {
        let fd = Glibc.open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 16)
        guard pread(fd, &header, 16, 0) == 16 else { return false }
        return header == Array("SQLite format 3".utf8) + [0]
    }

    /// Whether the file at `path` is an SQLite database holding coven's own table (read
    /// without changing it; a database that cannot be read counts as one, so it is never taken
    /// for something else).
    static func isCovenDatabase(_ path: String) -> Bool {
        guard hasSQLiteHeader(path) else { return false }
        guard let database = try? Database(path: path, readOnly: true) else { return true }
        return (try? database.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'coven_meta'").intValue ?? 0) != 0
    }

    static func makeFolder(_ path: String, mode: mode_t) throws {
        if mkdir(path, mode) != 0 && errno != EEXIST {
            // Create parents as needed.
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: Int(mode)])
            } catch {
                throw CovenError.posix("create folder", path: path)
            }
        }
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
    /// `2026-11-29T11:27:37.123Z`.
    public static func iso8601(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var time = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&time, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(millis % 1000))
    }
}

import CLinux
import Foundation

/// Making a store and its first device (`coven init`), beside joining one: the database built
/// under a temporary name and renamed into place, the folders, the store's objects.
extension DeviceSetup {
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
        try AtomicFile.makeFolder(parent, mode: 0o700)
        try AtomicFile.makeFolder(paths.folder, mode: 0o700)
        for folder in [paths.copies, paths.cache, paths.partial, paths.temporary] {
            try AtomicFile.makeFolder(folder, mode: 0o700)
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
            "coven_store": Device.storeFormat, "id": storeID, "created_at": now,
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
        let entry = Device.registryEntryKey(deviceID)
        let keys = Keyring(storeKey: storeKey, signingKey: signingKey)
        let sealed = try DeviceEntry(device: deviceID, name: deviceName, joinedAt: now, publicKey: signingKey.publicKey).seal(keys: keys)
        guard try provider.putIfAbsent(entry, data: sealed) else {
            throw CovenError(.alreadyExists, "the device registry of '\(storage)' already has an entry '\(entry)'")
        }
        stored.append(entry)
        try publishManifest(manifest, provider: provider, keys: keys, replace: false)
        stored.append(Device.manifestKey)
        guard rename(building(paths), paths.database) == 0 else {
            throw CovenError.posix("rename database into", path: paths.database)
        }
        try AtomicFile.syncFolder(parent)
        created = true
        return try Device.openKernel(paths: paths)
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
            try Device.configure(database, readOnly: false)
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
                    try SyncFlags(database: database).markFrontierDue()
                }
                for (key, value) in [
                    ("store_id", storeID), ("device_id", deviceID), ("device_name", deviceName),
                    ("storage", storage.description), ("manifest", manifestJSON), ("created_at", now),
                    ("format", String(Device.storeFormat)), (Keyring.storeKeyCheckSetting, storeKeyCheck),
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

    /// Stores the manifest sealed at ``Device.manifestKey`` (put-if-absent at init).
    static func publishManifest(_ manifest: Manifest, provider: StorageProvider, keys: Keyring, replace: Bool) throws {
        let sealed = try keys.seal(Array(try manifest.canonicalJSON().utf8))
        if replace {
            try provider.put(Device.manifestKey, data: sealed)
        } else {
            guard try provider.putIfAbsent(Device.manifestKey, data: sealed) else {
                throw CovenError(.alreadyExists, "the store already has a manifest at '\(Device.manifestKey)'")
            }
        }
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

}

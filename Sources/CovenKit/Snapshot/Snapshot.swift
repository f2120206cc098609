import Foundation

// MARK: - The snapshot manifest

/// What a snapshot says about itself: its first tar entry, `manifest.json` (docs/format.md,
/// section 8).
public struct SnapshotManifest: Sendable, Equatable {
    /// The format of the snapshot object; this code writes and reads 1.
    public static let format = 1

    public var store: String
    /// The device that made it, and its published seq the rows hold everything up to.
    public var device: String
    public var seq: Int64
    /// For every other device, the highest seq of it applied there with nothing missing below.
    public var frontier: [String: Int64]
    /// coven's own schema version (`PRAGMA user_version` of the database inside).
    public var covenSchema: Int64
    /// The manifest migrations the database inside was built by: their count and digest.
    public var migrations: Int
    public var migrationsDigest: String
    /// The newest stamp of the device's clock when it was made.
    public var hlc: String
    public var createdAt: String
    /// Rows of synced tables (coven_files included), and stored objects they name (listed in
    /// the `objects` entry).
    public var rows: Int64
    public var objects: Int64
    /// The audience it holds: `store` for the snapshot's own object, a circle's id for one of
    /// its parts (``SnapshotParts``), sealed under that circle's key of `generation`.
    public var audience: String = RowAudiences.store
    public var generation: UInt64?
    /// The generation of the store's key the maker held (a part's rows are judged as a change
    /// sealed under it would be).
    public var storeGeneration: UInt64?
    /// The store part's list of the circles' parts: circle → generation of its key.
    public var parts: [String: UInt64] = [:]

    /// How much of the store's history it holds: its seq and every seq of its frontier.
    public var coverage: Int64 { seq + frontier.values.reduce(0, +) }

    func json() throws -> [UInt8] {
        var object: [String: Any] = [
            "coven_snapshot": Self.format, "store": store, "device": device, "seq": seq,
            "frontier": frontier.mapValues { NSNumber(value: $0) },
            "schema": ["coven": covenSchema, "migrations": migrations, "digest": migrationsDigest] as [String: Any],
            "hlc": hlc, "created_at": createdAt, "rows": rows, "objects": objects,
        ]
        if audience != RowAudiences.store { object["audience"] = audience }
        if let generation { object["generation"] = NSNumber(value: generation) }
        if let storeGeneration { object["store_generation"] = NSNumber(value: storeGeneration) }
        if !parts.isEmpty { object["parts"] = parts.mapValues { NSNumber(value: $0) } }
        return [UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    /// Reads `manifest.json`.
    ///
    /// - Throws: `.updateRequired` for a snapshot format newer than 1; `.decoding` otherwise.
    init(json bytes: [UInt8], key: String) throws {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            throw CovenError(.decoding, "snapshot '\(key)' has no readable manifest", details: ["object": key])
        }
        let format = (object["coven_snapshot"] as? NSNumber)?.intValue ?? 0
        if format > Self.format {
            throw CovenError(.updateRequired, "snapshot '\(key)' has format \(format), newer than this coven reads", hint: "update coven", details: ["object": key])
        }
        guard format == Self.format, let store = object["store"] as? String, let device = object["device"] as? String,
              let seq = (object["seq"] as? NSNumber)?.int64Value, let schema = object["schema"] as? [String: Any],
              let coven = (schema["coven"] as? NSNumber)?.int64Value, let migrations = (schema["migrations"] as? NSNumber)?.intValue,
              let digest = schema["digest"] as? String
        else {
            throw CovenError(.decoding, "snapshot '\(key)' has a manifest of another shape", details: ["object": key])
        }
        self.store = store
        self.device = device
        self.seq = seq
        frontier = ((object["frontier"] as? [String: Any]) ?? [:]).compactMapValues { ($0 as? NSNumber)?.int64Value }
        covenSchema = coven
        self.migrations = migrations
        migrationsDigest = digest
        hlc = object["hlc"] as? String ?? ""
        createdAt = object["created_at"] as? String ?? ""
        rows = (object["rows"] as? NSNumber)?.int64Value ?? 0
        objects = (object["objects"] as? NSNumber)?.int64Value ?? 0
        audience = object["audience"] as? String ?? RowAudiences.store
        generation = (object["generation"] as? NSNumber)?.uint64Value
        storeGeneration = (object["store_generation"] as? NSNumber)?.uint64Value
        parts = ((object["parts"] as? [String: Any]) ?? [:]).compactMapValues { ($0 as? NSNumber)?.uint64Value }
    }

    init(store: String, device: String, seq: Int64, frontier: [String: Int64], covenSchema: Int64, migrations: Int, migrationsDigest: String,
         hlc: String, createdAt: String, rows: Int64, objects: Int64) {
        self.store = store
        self.device = device
        self.seq = seq
        self.frontier = frontier
        self.covenSchema = covenSchema
        self.migrations = migrations
        self.migrationsDigest = migrationsDigest
        self.hlc = hlc
        self.createdAt = createdAt
        self.rows = rows
        self.objects = objects
    }
}

/// What `coven snapshot` did.
public struct SnapshotReport: Sendable, Equatable {
    /// The push made first.
    public var pushed = PushReport()
    /// Where the snapshot is stored (`snapshots/<device>-<seq>`) and its size.
    public var key = ""
    public var bytes: Int64 = 0
    /// What it holds.
    public var manifest: SnapshotManifest
    /// Its circles' parts (``SnapshotParts``): storage key → rows, bytes.
    public var parts: [SnapshotPart] = []
}

/// One circle's part of a snapshot, as made.
public struct SnapshotPart: Sendable, Equatable {
    public var circle: String
    public var generation: UInt64
    public var key: String
    public var rows: Int64
    public var objects: Int64
    public var bytes: Int64
}

/// The names and pieces of snapshot objects.
public enum Snapshot {
    /// `snapshots/<device>-<seq>`, seq zero-padded to 16 digits like a change's.
    public static func path(device: String, seq: Int64) -> String {
        let digits = String(seq)
        return "snapshots/\(device)-" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// The device and seq of a snapshot's storage key, or nil for another name.
    static func parse(_ key: String) -> (device: String, seq: Int64)? {
        guard key.hasPrefix("snapshots/") else { return nil }
        let name = key.dropFirst("snapshots/".count)
        guard name.count > 17, let dash = name.lastIndex(of: "-") else { return nil }
        let digits = name[name.index(after: dash)...]
        guard digits.count == 16, digits.allSatisfy(\.isASCII), let seq = Int64(digits) else { return nil }
        let device = String(name[..<dash])
        guard Identifier.isCanonicalUUID(device) else { return nil }
        return (device, seq)
    }

    /// The tar entries, in order.
    static let manifestEntry = "manifest.json"
    static let objectsEntry = "objects"
    static let databaseEntry = "snapshot.db"
    /// The schema the snapshot's database is attached as while it is filled or read.
    static let schemaName = "coven_snapshot"
    /// Bytes of one part when a snapshot is sent in parts, and the most sent in one request.
    static let partSize: Int64 = 8 << 20
}

// MARK: - Making a snapshot

/// `coven snapshot`: the store's rows as this device holds them (a part per audience it may
/// read), packed as a sealed tar + zstd archive and put to `snapshots/`, so a new device starts
/// from it and gc may delete the changes it covers.
///
/// ```swift
/// let report = try Snapshots(device).snapshot()
/// ```
public struct Snapshots {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }

    // What a snapshot reads of its device.
    private var database: Database { device.database }
    private var paths: DevicePaths { device.paths }
    private var manifest: Manifest { device.manifest }
    private var keys: Keyring { device.keys }
    private var storeID: String { device.storeID }
    private var deviceID: String { device.deviceID }
    private var fileRecords: FileRecords { device.fileRecords }
    private var schemaVersion: (count: Int, digest: String) { device.schemaVersion }
    private func connectStorage() throws -> StorageProvider { try device.connectStorage() }
    private func lock(wait: Bool) throws -> DeviceLock { try device.lock(wait: wait) }

    /// The rows of `table` a snapshot keeps: an SQL condition over `main.<table>`, the same
    /// kept rule the push filter uses (``RowAudiences``), so a snapshot holds exactly the rows
    /// this device's changes would have given a peer, and no private one; and the store's rows
    /// only (a snapshot is sealed under the store's key): a circle's rows and file records are
    /// read from the changes that hold them, which stay (``CircleSections``).
    func snapshotCondition(table: String) throws -> String {
        let audiences = try RowAudiences(device: device)
        try audiences.checkKeptTable(table)
        let alias = RowCapture.quote(table)
        let kept = audiences.keptCondition(table: table, alias: alias)
        if table == "coven_files" { return "(\(kept)) AND \(alias).audience = 'store'" }
        guard audiences.placesAudience(table) else { return kept }
        return "(\(kept)) AND (\(audiences.audienceExpression(table: table, alias: alias))) = 'store'"
    }

    /// Publishes a bootstrap snapshot (DESIGN.md "Snapshots"): pushes first, then, in one read
    /// transaction, copies the kept rows of every synced table, `coven_files`, the tombstones,
    /// the sync log and the device registry (the seqs applied per device) into a fresh database
    /// built by coven's schema steps and the manifest's migrations; packs it with its manifest
    /// as tar + zstd, sealed under the store key bound to its path, chunk by chunk into a
    /// temporary file; and stores it at `snapshots/<device>-<seq>` in parts. Nothing is held
    /// whole in memory.
    ///
    /// - Throws: `.invalidState` when writes are still unpublished after the push (held by
    ///   bound uploads): a snapshot holds only published writes; as ``push(provider:keys:stop:)``;
    ///   `.noRoom`/`.io` for the temporary files; `.storage`.
    public func snapshot(stop: Stop = Stop()) throws -> SnapshotReport {
        let lock = try self.lock(wait: true)
        defer { _ = lock }
        let provider = try connectStorage()
        _ = try keys.storeKey()
        try DeviceRegistry(device).refresh(provider: provider)
        let sync = StoreSync(device, storage: provider)
        try sync.ensureSigningKey()
        let pushed = try sync.push(stop: stop)
        try stop.check("the snapshot")

        // tmp/snapshot-<pid>-<name>.*: a kill leaves them to the next open's sweep.
        let base = paths.temporary + "/" + SnapshotSweep.temporaryPrefix + String(getpid()) + "-" + Identifier.objectName()
        let databasePath = base + ".db", sealedPath = base + ".sealed"
        defer { for path in [databasePath, databasePath + "-journal", sealedPath] { unlink(path) } }
        // The circles' parts: their rows copied in the same read transaction into one more
        // database, then split a circle a database.
        let parts = SnapshotParts(device: device)
        let circles = try parts.circlesToWrite()
        let partsPath = base + ".parts.db"
        func partPath(_ circle: String) -> String { base + "." + circle + ".db" }
        defer {
            for path in [partsPath] + circles.map({ partPath($0.audience) }) { for suffix in ["", "-journal"] { unlink(path + suffix) } }
        }
        try Self.buildSnapshotDatabase(at: databasePath, manifest: manifest)
        if !circles.isEmpty {
            _ = try Database(path: partsPath, create: true)
            chmod(partsPath, 0o600)
        }
        var snapshotManifest = try fillSnapshotDatabase(databasePath, parts: circles.isEmpty ? nil : (partsPath, circles.map(\.audience)))
        try stop.check("the snapshot")
        let partRows = try parts.split(partsPath, circles: circles.map(\.audience), tables: manifest.tables.map(\.name), path: partPath)
        snapshotManifest.parts = Dictionary(uniqueKeysWithValues: circles.map { ($0.audience, $0.generation) })
        snapshotManifest.storeGeneration = try keys.storeGeneration()
        let objectKey = Snapshot.path(device: deviceID, seq: snapshotManifest.seq)
        let size = try Self.packSnapshot(database: databasePath, manifest: &snapshotManifest, into: sealedPath, key: objectKey, stop: stop) { sink in
            try self.keys.sealer(boundTo: objectKey, sink: sink)
        }
        // The store's part first: a part is found through it (gc deletes a part whose store
        // part is gone).
        try Self.upload(sealedPath, size: size, to: objectKey, provider: provider, stop: stop)
        var report = SnapshotReport(pushed: pushed, key: objectKey, bytes: size, manifest: snapshotManifest)
        for circle in circles {
            try stop.check("the snapshot")
            guard let key = try keys.key(audience: circle.audience, generation: circle.generation) else { continue }
            var partManifest = snapshotManifest
            partManifest.audience = circle.audience
            partManifest.generation = circle.generation
            partManifest.parts = [:]
            partManifest.rows = partRows[circle.audience] ?? 0
            let partKey = SnapshotParts.path(device: deviceID, seq: snapshotManifest.seq, audience: circle.audience)
            unlink(sealedPath)
            let partSize = try Self.packSnapshot(database: partPath(circle.audience), manifest: &partManifest, into: sealedPath, key: partKey, stop: stop) { sink in
                try StoreSealer.StreamWriter(storeKey: key, boundTo: partKey, sink: sink)
            }
            try Self.upload(sealedPath, size: partSize, to: partKey, provider: provider, stop: stop)
            report.parts.append(SnapshotPart(circle: circle.audience, generation: circle.generation, key: partKey, rows: partManifest.rows, objects: partManifest.objects, bytes: partSize))
        }
        return report
    }

    /// A fresh database built by coven's schema steps and `manifest`'s migrations, unjournaled
    /// (it is a temporary file, discarded on failure).
    static func buildSnapshotDatabase(at path: String, manifest: Manifest) throws {
        let database = try Database(path: path, create: true)
        chmod(path, 0o600)
        try FreePages.prepare(database)  // a device that joins from it gives free pages back
        try database.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA foreign_keys = ON")
        try Schema.migrate(database, from: 0)
        try database.transaction { _ = try Migrations.apply(manifest.migrations, to: database, recorded: []) }
    }

    /// Copies what a snapshot holds into the database at `path`, in one read transaction of
    /// this device's database, and returns the snapshot's manifest (objects not yet counted).
    private func fillSnapshotDatabase(_ path: String, parts: (path: String, circles: [String])?) throws -> SnapshotManifest {
        let schema = Snapshot.schemaName
        try database.run("ATTACH DATABASE ?1 AS \(schema)", [path])
        defer { try? database.execute("DETACH DATABASE \(schema)") }
        try database.execute("PRAGMA \(schema).journal_mode = OFF; PRAGMA \(schema).synchronous = OFF")
        if let parts {
            try database.run("ATTACH DATABASE ?1 AS coven_parts", [parts.path])
            try database.execute("PRAGMA coven_parts.journal_mode = OFF; PRAGMA coven_parts.synchronous = OFF")
        }
        defer { if parts != nil { try? database.execute("DETACH DATABASE coven_parts") } }
        // One transaction: it reads main as of one moment and writes only the snapshot.
        try database.execute("BEGIN")
        do {
            try database.execute("PRAGMA defer_foreign_keys = ON")
            let unpublished = (try database.scalar("SELECT count(*) FROM main.coven_outbox").intValue ?? 0)
                + (try database.scalar("SELECT count(*) FROM main.coven_push").intValue ?? 0)
            guard unpublished == 0 else {
                throw CovenError(.invalidState, "\(unpublished.counted("write")) of this device \(unpublished == 1 ? "is" : "are") not published yet (held by bound uploads)",
                                 hint: "a snapshot holds published writes only: run 'coven upload-worker --once', then 'coven snapshot'",
                                 details: ["unpublished": String(unpublished)])
            }
            var rows: Int64 = 0
            for table in manifest.tables.map(\.name) {
                rows += try copyRows(table, into: schema, condition: try snapshotCondition(table: table))
            }
            rows += try fileRecords.copyForSnapshot(into: schema, condition: try snapshotCondition(table: "coven_files"))
            let sync = SyncState(database: database)
            try sync.copyForSnapshot(into: schema, tables: manifest.tables.map(\.name) + ["coven_files"])
            try CircleSections(database: database).copyForSnapshot(into: schema)
            // The trash and the store's settings, which a joining device learns here
            // (docs/format.md, "Snapshots").
            try Trash(device).copyForSnapshot(into: schema)
            try StoreSettings(device).copyForSnapshot(into: schema)
            if let parts {
                try SnapshotParts(device: device).fill("coven_parts", circles: parts.circles, tables: manifest.tables.map(\.name))
            }
            let seq = try database.scalar("SELECT applied_seq FROM main.coven_device_registry WHERE device = ?1", [deviceID]).intValue ?? 0
            let version = schemaVersion
            let result = SnapshotManifest(
                store: storeID, device: deviceID, seq: seq, frontier: try StoreSync(device).ownFrontier(), covenSchema: Schema.version,
                migrations: version.count, migrationsDigest: version.digest, hlc: try device.setting("hlc") ?? "",
                createdAt: Timestamp.iso8601(Date()), rows: rows, objects: 0)
            try database.execute("COMMIT")
            return result
        } catch {
            if database.inTransaction { try? database.execute("ROLLBACK") }
            throw error
        }
    }

    /// Copies the rows of synced table `table` that meet `condition` into `schema`'s copy of
    /// it; returns how many. (Its stored columns: generated ones are computed there.)
    private func copyRows(_ table: String, into schema: String, condition: String) throws -> Int64 {
        let names = try database.storedColumns(table)
        let columns = names.map(RowCapture.quote).joined(separator: ", ")
        let quoted = RowCapture.quote(table)
        try database.execute("INSERT INTO \(schema).\(quoted) (\(columns)) SELECT \(columns) FROM main.\(quoted) WHERE \(condition)")
        return try database.scalar("SELECT changes()").intValue ?? 0
    }

    /// Packs the snapshot database with its manifest and object list as tar + zstd, sealed
    /// under the store key bound to `key`, into the file at `path`; returns its size.
    private static func packSnapshot(database path: String, manifest: inout SnapshotManifest, into sealedPath: String, key: String, stop: Stop,
                                     sealer makeSealer: (@escaping (UnsafeRawBufferPointer) throws -> Void) throws -> StoreSealer.StreamWriter) throws -> Int64 {
        // The stored objects the snapshot names, one storage key a line: counted first (the
        // tar header needs the size), then written.
        let snapshotDatabase = try Database(path: path, readOnly: true)
        let objectsSQL = "SELECT DISTINCT object FROM coven_files WHERE place = \(Coordinates.Place.stored.sql) AND object IS NOT NULL ORDER BY object"
        var objectBytes: Int64 = 0
        var objects: Int64 = 0
        let counting = try snapshotDatabase.prepare(objectsSQL)
        while let row = try counting.next() {
            objectBytes += Int64((row["object"].textValue ?? "").utf8.count + 1)
            objects += 1
        }
        manifest.objects = objects

        let fd = Glibc.open(sealedPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CovenError.posix("create", path: sealedPath) }
        defer { close(fd) }
        let sealer = try makeSealer { bytes in
            try AtomicFile.writeAll(fd, bytes, path: sealedPath)
        }
        let archive = try ArchiveWriter { bytes in try sealer.write(bytes) }
        let manifestJSON = try manifest.json()
        try archive.beginEntry(name: Snapshot.manifestEntry, size: Int64(manifestJSON.count))
        try archive.write(manifestJSON)
        try archive.beginEntry(name: Snapshot.objectsEntry, size: objectBytes)
        let listing = try snapshotDatabase.prepare(objectsSQL)
        var line: [UInt8] = []
        while let row = try listing.next() {
            line.removeAll(keepingCapacity: true)
            line.append(contentsOf: (row["object"].textValue ?? "").utf8)
            line.append(10)
            try archive.write(line)
        }
        let source = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard source >= 0 else { throw CovenError.posix("open", path: path) }
        defer { close(source) }
        var info = stat()
        guard fstat(source, &info) == 0 else { throw CovenError.posix("read", path: path) }
        try archive.beginEntry(name: Snapshot.databaseEntry, size: Int64(info.st_size))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var left = Int64(info.st_size)
        while left > 0 {
            try stop.check("the snapshot")
            let count = read(source, buffer.baseAddress, min(buffer.count, Int(left)))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw CovenError.posix("read", path: path) }
            try archive.write(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            left -= Int64(count)
        }
        try archive.finish()
        try sealer.finish()
        guard fsync(fd) == 0 else { throw CovenError.posix("sync", path: sealedPath) }
        return sealer.objectCount
    }

    /// Stores the file at `path` at `key`: in one request when it is small, else in parts read
    /// from the file one at a time.
    static func upload(_ path: String, size: Int64, to key: String, provider: StorageProvider, stop: Stop) throws {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CovenError.posix("open", path: path) }
        defer { close(fd) }
        let partSize = max(Snapshot.partSize, provider.minimumPartSize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(min(max(size, 1), partSize)), alignment: 16)
        defer { buffer.deallocate() }
        guard let base = buffer.baseAddress else { throw CovenError(.internal, "no buffer for a snapshot's parts") }
        func readPart(at offset: Int64, count: Int) throws -> UnsafeRawBufferPointer {
            var got = 0
            while got < count {
                let n = pread(fd, base + got, count - got, off_t(offset) + off_t(got))
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw CovenError.posix("read", path: path) }
                got += n
            }
            return UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        }
        if size <= partSize {
            try provider.put(key, data: Array(try readPart(at: 0, count: Int(size))))
            return
        }
        let uploadID = try provider.createMultipart(key, totalSize: size, partSize: partSize)
        do {
            var parts: [UploadedPart] = []
            var offset: Int64 = 0
            while offset < size {
                try stop.check("the snapshot")
                let count = Int(min(partSize, size - offset))
                parts.append(try provider.uploadPart(key, uploadID: uploadID, number: parts.count + 1, offset: offset, data: try readPart(at: offset, count: count)))
                offset += Int64(count)
            }
            try provider.completeMultipart(key, uploadID: uploadID, parts: parts)
        } catch {
            try? provider.abortMultipart(key, uploadID: uploadID)
            throw error
        }
    }
}

import Foundation

/// A snapshot's **parts, one per circle** (docs/format.md 8.1): `snapshots/<device>-<seq>.<circle>`,
/// beside the store's part `snapshots/<device>-<seq>`, each holding the rows, file records and
/// tombstones of one circle as of the same moment, sealed under that circle's key (the newest
/// generation the snapshotting device holds). The store's part lists them in its manifest
/// (`parts`: circle → generation); a part's own manifest names its audience and generation.
///
/// - A device writes a part for each circle its member is in, whose every section it has
///   opened (else the part would miss rows): nothing of a circle reaches the store's part.
/// - A device that has sections of a circle it could not open, and holds that circle's key now
///   (it joined from a snapshot, or its member was added to the circle), reads the newest part
///   of that circle first (``reopen(provider:authorizer:stop:)``): its rows are applied
///   by last writer wins as a change of the snapshotting device would be, and the sections
///   the part covers count as opened. Only the sections past it are fetched from changes.
struct SnapshotParts {
    let device: Device
    private var keys: Keyring { device.keys }
    var database: Database { device.database }

    /// `snapshots/<device>-<seq>.<circle>`.
    static func path(device: String, seq: Int64, audience: String) -> String {
        Snapshot.path(device: device, seq: seq) + "." + audience
    }

    /// The snapshot key, device, seq and circle of a part's storage key, or nil for another name.
    static func parse(_ key: String) -> (snapshot: String, device: String, seq: Int64, audience: String)? {
        guard let dot = key.lastIndex(of: ".") else { return nil }
        let snapshot = String(key[..<dot])
        let audience = String(key[key.index(after: dot)...])
        guard Identifier.isCanonicalUUID(audience), let (device, seq) = Snapshot.parse(snapshot) else { return nil }
        return (snapshot, device, seq, audience)
    }

    // MARK: Making parts

    /// The circles a snapshot made now gets a part of, with the generation each is sealed
    /// under: those this device's member is in, whose every section here was opened.
    func circlesToWrite() throws -> [(audience: String, generation: UInt64)] {
        var result: [(String, UInt64)] = []
        for row in try database.query("""
            SELECT c.audience FROM coven_circles c WHERE c.member = 1 AND c.opened > 0
              AND NOT EXISTS (SELECT 1 FROM coven_change_sections s WHERE s.audience = c.audience AND s.opened = 0)
            ORDER BY c.audience
            """) {
            guard let audience = row.string("audience"), let generation = try device.keys.newestGeneration(audience: audience) else { continue }
            result.append((audience, generation))
        }
        return result
    }

    /// Copies the kept rows of `circles`, their file records and tombstones into the empty
    /// database attached as `schema` (tables without constraints: a circle's row may name a
    /// row of the store), and which circle each row is of into its `coven_part_rows`, inside
    /// the caller's read transaction (the store part's): one image of one moment.
    func fill(_ schema: String, circles: [String], tables: [String]) throws {
        guard !circles.isEmpty else { return }
        let audiences = try RowAudiences(device: device)
        let list = circles.map { "'\($0)'" }.joined(separator: ", ")  // canonical UUIDs
        try database.execute("CREATE TABLE \(schema).coven_part_rows (tbl TEXT NOT NULL, id TEXT NOT NULL, audience TEXT NOT NULL)")
        func copy(_ table: String, audience: String) throws {
            let alias = RowCapture.quote(table)
            let condition = "(\(audiences.keptCondition(table: table, alias: alias))) AND (\(audience)) IN (\(list))"
            let names = try database.storedColumns(table)
            let columns = names.map { "\(alias).\(RowCapture.quote($0))" }.joined(separator: ", ")
            try database.execute("CREATE TABLE \(schema).\(alias) AS SELECT \(columns) FROM main.\(alias) WHERE \(condition)")
            try database.run("""
                INSERT INTO \(schema).coven_part_rows (tbl, id, audience)
                SELECT ?1, \(alias).id, \(audience) FROM main.\(alias) WHERE \(condition)
                """, [table])
        }
        for table in tables where audiences.placesAudience(table) {
            try copy(table, audience: audiences.audienceExpression(table: table, alias: RowCapture.quote(table)))
        }
        try copy("coven_files", audience: "\"coven_files\".audience")
        try database.execute("CREATE TABLE \(schema).coven_tombstones AS SELECT tbl, id, stamp, audience FROM main.coven_tombstones WHERE private = 0 AND audience IN (\(list))")
    }

    /// Splits the circles' rows copied by ``fill(_:circles:tables:)`` into the database at
    /// `all` into one database per circle, built by ``Device/buildSnapshotDatabase(at:manifest:)``
    /// at `path(circle)` and filled on a connection of its own (foreign keys not enforced: a
    /// part's rows may name the store's); returns each one's row count.
    func split(_ all: String, circles: [String], tables: [String], path: (String) -> String) throws -> [String: Int64] {
        guard !circles.isEmpty else { return [:] }
        let audiences = try RowAudiences(device: device)
        var counts: [String: Int64] = [:]
        for circle in circles {
            try Snapshots.buildSnapshotDatabase(at: path(circle), manifest: device.manifest)
            let part = try Database(path: path(circle))
            try part.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA foreign_keys = OFF")
            try part.run("ATTACH DATABASE ?1 AS coven_parts", [all])
            var rows: Int64 = 0
            try part.transaction {
                for table in tables.filter({ audiences.placesAudience($0) }) + ["coven_files"] {
                    let quoted = RowCapture.quote(table)
                    let names = try part.query("SELECT name FROM pragma_table_info(?1, 'coven_parts')", [table]).compactMap { $0.string("name") }
                    guard !names.isEmpty else { continue }
                    let columns = names.map(RowCapture.quote).joined(separator: ", ")
                    try part.run("""
                        INSERT INTO main.\(quoted) (\(columns)) SELECT \(columns) FROM coven_parts.\(quoted) t
                        WHERE EXISTS (SELECT 1 FROM coven_parts.coven_part_rows r WHERE r.tbl = ?1 AND r.id = t.id AND r.audience = ?2)
                        """, [table, circle])
                    rows += try part.scalar("SELECT changes()").intValue ?? 0
                }
                try Tombstones(database: part).adopt(from: "coven_parts", audience: circle)
            }
            try part.execute("DETACH DATABASE coven_parts")
            counts[circle] = rows
        }
        return counts
    }

    // MARK: Reading parts

    /// What reading parts did.
    struct Reopened: Equatable {
        /// Parts read, entries applied from them, and sections they covered.
        var parts = 0
        var entries = 0
        var sections = 0
        /// Parts that could not be used: by key, why (the sections they cover are fetched from
        /// the changes instead).
        var unavailable: [String: String] = [:]
    }

    /// For each circle with sections this device could not open and whose key it holds now,
    /// applies the newest part of that circle it can open (one listing of `snapshots/`) and
    /// marks the sections that part covers opened.
    func reopen(provider: StorageProvider, authorizer: any ChangeAuthorizer, stop: Stop) throws -> Reopened {
        var result = Reopened()
        // Circles with a section this device can open now (a key of its generation held).
        var waiting: Set<String> = []
        for row in try database.query("SELECT DISTINCT audience, generation FROM coven_change_sections WHERE opened = 0") {
            guard let audience = row.string("audience"), !waiting.contains(audience),
                  try keys.key(audience: audience, generation: UInt64(row.int("generation") ?? 0)) != nil else { continue }
            waiting.insert(audience)
        }
        guard !waiting.isEmpty else { return result }
        var byCircle: [String: [ObjectInfo]] = [:]
        for info in try provider.list(prefix: "snapshots/") {
            guard let part = Self.parse(info.key), waiting.contains(part.audience) else { continue }
            byCircle[part.audience, default: []].append(info)
        }
        for circle in byCircle.keys.sorted() {
            // The newest first: the one covering most history.
            var candidates: [(info: ObjectInfo, manifest: SnapshotManifest, key: FileKey)] = []
            for info in byCircle[circle] ?? [] {
                do {
                    let (manifest, key) = try peek(provider: provider, info: info, circle: circle)
                    candidates.append((info, manifest, key))
                } catch let error as CovenError where error.code == .keyUnavailable {
                    continue  // sealed under a generation this member never held
                } catch let error as CovenError where error.storageFailure == nil {
                    result.unavailable[info.key] = error.message
                }
            }
            candidates.sort { ($0.manifest.coverage, $0.info.key) > ($1.manifest.coverage, $1.info.key) }
            for candidate in candidates {
                try stop.check("the sync")
                do {
                    let applied = try apply(candidate.info, manifest: candidate.manifest, key: candidate.key, provider: provider, authorizer: authorizer)
                    result.parts += 1
                    result.entries += applied.entries
                    result.sections += applied.sections
                    break
                } catch let error as CovenError where [.integrity, .decoding, .missing, .updateRequired].contains(error.code) {
                    result.unavailable[candidate.info.key] = error.message
                }
            }
        }
        return result
    }

    /// The manifest of part `info` of `circle`, and the key that opens it, from its first
    /// chunk. - Throws: `.keyUnavailable` when this device holds no key of its generation.
    private func peek(provider: StorageProvider, info: ObjectInfo, circle: String) throws -> (SnapshotManifest, FileKey) {
        let first = try DeviceSetup.firstChunk(provider: provider, info: info)
        // Which generation: the part's own manifest says, inside; try the keys held, newest first.
        let generations = try keys.generations(audience: circle)
        for generation in generations {
            guard let key = try keys.key(audience: circle, generation: generation),
                  let manifest = try DeviceSetup.manifest(inFirstChunk: first, info: info, keys: keys, key: key) else { continue }
            guard let part = Self.parse(info.key), manifest.audience == circle, manifest.device == part.device, manifest.seq == part.seq,
                  manifest.store == device.storeID, manifest.generation == generation else {
                throw CovenError(.integrity, "snapshot part '\(info.key)' says it is another part", details: ["object": info.key])
            }
            guard manifest.covenSchema <= Schema.version, manifest.migrations <= device.schemaVersion.count else {
                throw CovenError(.updateRequired, "snapshot part '\(info.key)' was made under a newer schema", hint: "update coven", details: ["object": info.key])
            }
            return (manifest, key)
        }
        throw CovenError(.keyUnavailable, "snapshot part '\(info.key)' opens under no key of circle '\(circle)' this device holds", details: ["object": info.key])
    }

    /// Downloads part `info`, applies its rows, file records and tombstones as entries of a
    /// change of the snapshotting device (a batch per transaction), then marks the sections of
    /// the circle it covers opened.
    private func apply(_ info: ObjectInfo, manifest: SnapshotManifest, key: FileKey, provider: StorageProvider,
                       authorizer: any ChangeAuthorizer) throws -> (entries: Int, sections: Int) {
        let base = device.paths.temporary + "/" + SnapshotSweep.temporaryPrefix + String(getpid()) + "-" + Identifier.objectName()
        let path = base + ".part.db"
        defer { for suffix in ["", "-journal", "-wal", "-shm"] { unlink(path + suffix) } }
        try DeviceSetup.unpackSnapshot(provider: provider, key: info.key, expected: manifest, keys: keys, opening: key, into: path, temporary: device.paths.temporary)
        let part = try Database(path: path, readOnly: true)
        var applier = ChangeApplier(device: device, authorizer: authorizer)
        let circle = manifest.audience
        var entries = 0
        var batch: [RowEntry] = []
        func flush() throws {
            guard !batch.isEmpty else { return }
            var change = ChangeObject(storeID: device.storeID, device: manifest.device, seq: UInt64(manifest.seq), schema: .init(migrations: manifest.migrations, digest: manifest.migrationsDigest),
                                      frontier: manifest.frontier.mapValues { UInt64(max(0, $0)) }, sections: [ChangeSection(audience: circle, entries: batch, generation: manifest.generation)])
            change.generation = manifest.storeGeneration ?? 1
            try applier.apply(change, path: info.key, as: .snapshotPart)
            entries += batch.count
            batch.removeAll(keepingCapacity: true)
        }
        // File records first, then the tables in the manifest's order (parents before children),
        // then the tombstones.
        for table in ["coven_files"] + device.manifest.tables.map(\.name) {
            let names = try part.storedColumns(table)
            guard !names.isEmpty else { continue }
            let statement = try part.prepare("SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM \(RowCapture.quote(table))")
            while let row = try statement.next() {
                guard let id = row["id"].textValue, let stamp = row["_updated_at"].textValue else { continue }
                batch.append(RowEntry(kind: .upsert, table: table, id: id, stamp: stamp, columns: names, values: row.values))
                if batch.count >= 1000 { try flush() }
            }
        }
        let tombstones = try part.prepare("SELECT tbl, id, stamp FROM coven_tombstones WHERE audience = ?1")
        try tombstones.bind([circle])
        while let row = try tombstones.next() {
            guard let table = row["tbl"].textValue, let id = row["id"].textValue, let stamp = row["stamp"].textValue else { continue }
            batch.append(RowEntry(kind: .delete, table: table, id: id, stamp: stamp))
            if batch.count >= 1000 { try flush() }
        }
        try flush()
        // The sections the part covers are read now.
        var coverage = manifest.frontier
        coverage[manifest.device] = max(coverage[manifest.device] ?? 0, manifest.seq)
        let covered = try CircleSections(database: database).markOpened(audience: circle, through: coverage)
        return (entries, covered)
    }
}

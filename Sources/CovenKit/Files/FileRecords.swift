import Foundation

/// The local bytes of an object as `coven_local` records them: the person's original (`path`)
/// or coven's own copy of app bytes (`copy`), with what identifies them.
struct LocalBytes {
    var object: String
    var kind: FileKind
    var path: [UInt8]?
    var copy: String?
    var size: Int64
    var modifiedSeconds: Int64?
    var modifiedNanos: Int64?
    var changeStamp: String?
    var contentHash: [UInt8]
    /// The SHA-256 of each 64 KiB chunk, back to back; empty when not recorded yet.
    var chunkHashes: [UInt8]
}

/// The one writer of `coven_files` (the synced file records), `coven_local` (this device's bytes
/// of an object) and `coven_pins` (files kept offline by the person). Other code calls it,
/// never their SQL, so every side effect of a record's change happens in one place: the
/// records a recorded write changes are captured by ``RecordedWrite`` whatever calls this.
///
/// Every method runs inside the caller's transaction.
final class FileRecords {
    let device: Device
    var database: Database { device.database }
    /// Copies to remove once the applying transaction commits (``applyRemote(_:)``).
    var removals: [LosingCopy] = []

    init(device: Device) { self.device = device }

    // MARK: coven_files

    /// A new record (a write putting a file).
    func insert(id: String, audience: String, namespace: String, size: Int64, hash: String?, coordinates: Coordinates, stamp: String) throws {
        try database.runCached("""
            INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
            """, [id, audience, namespace, size, hash, coordinates.json, stamp])
    }

    /// The new records of a write's puts, in one statement, in the order the write made them:
    /// a staged file's in the store's audience (until a row names it) at its new coordinates,
    /// a new record over an existing file's bytes with that file's audience, hash and
    /// coordinates.
    func insertPuts(_ puts: PutIntents, stamp: String) throws {
        try database.run("""
            INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            SELECT file, coalesce(record_audience, 'store'), namespace, size, record_hash, coordinates, ?1
            FROM \(PutIntents.table) ORDER BY seq
            """, [stamp])
    }

    /// A new file takes the audience of the first row naming it.
    func setAudience(_ id: String, _ audience: String) throws {
        try database.run("UPDATE coven_files SET audience = ?1 WHERE id = ?2", [audience, id])
    }

    /// A file's new place: its coordinates (and content hash, once stored) with the write's
    /// stamp.
    ///
    /// A switch of a stored record to device-only makes its object a gc candidate of this
    /// write, even while another record names it: a device that has not applied the switch may
    /// name the object again through this record, whoever deletes the other (gc judges an
    /// object by every delete of a record that named it).
    func setCoordinates(_ id: String, _ coordinates: Coordinates, hash: String? = nil, stamp: String) throws {
        if coordinates.at == .device {
            let wasStored = try database.scalar("SELECT place = \(Coordinates.Place.stored.sql) FROM coven_files WHERE id = ?1", [id]).intValue == 1
            try database.run("UPDATE coven_files SET coordinates = ?2, _updated_at = ?3 WHERE id = ?1", [id, coordinates.json, stamp])
            if try wasStored || !isStored(object: coordinates.object) {
                try device.candidates.add(object: coordinates.object, stamp: stamp, why: .deviceOnly, file: id)
            }
            return
        }
        if let hash {
            try database.run("UPDATE coven_files SET coordinates = ?2, hash = ?3, _updated_at = ?4 WHERE id = ?1", [id, coordinates.json, hash, stamp])
        } else {
            try database.run("UPDATE coven_files SET coordinates = ?2, _updated_at = ?3 WHERE id = ?1", [id, coordinates.json, stamp])
        }
    }

    /// Deletes a record no row names any more, and its pin, keeping its image (see
    /// ``bringBack(_:)``). A delete by this device's write
    /// `stamp` of a stored record, or one that leaves no stored record naming the object, makes
    /// the object a gc candidate of the write (see ``setCoordinates(_:_:hash:stamp:)``).
    func delete(_ id: String, stamp: String?) throws {
        let row = try database.query("SELECT object, place FROM coven_files WHERE id = ?1", [id]).first
        let object = row?.string("object")
        let wasStored = row?.string("place") == Coordinates.Place.stored.rawValue
        try database.run("""
            INSERT OR REPLACE INTO coven_deleted_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            SELECT id, audience, namespace, size, hash, coordinates, _updated_at FROM coven_files WHERE id = ?1
            """, [id])
        try database.run("DELETE FROM coven_files WHERE id = ?1", [id])
        try database.run("DELETE FROM coven_pins WHERE file = ?1", [id])
        if let stamp, let object, try wasStored || !isStored(object: object) {
            try device.candidates.add(object: object, stamp: stamp, why: .deleted, file: id)
        }
    }

    // MARK: The register of a file's place (docs/coven-sync.md, "File records")
    //
    // A file record is a register of where the file's bytes are (stored, or on one device
    // only), merged on every device by last writer wins whether or not a row names it now:
    // `coven_files` holds the records rows name (live), `coven_deleted_files` the image of
    // every other record this device knows, until gc frees its bytes. A write of the record
    // (an upload's switch to stored, make-device-only) updates whichever holds it, so a record
    // that comes back, in any order, comes back with the newest place any device published.
    // Whether it is live is derived: a record lives while a row names it (``settle(_:ended:)``),
    // and a delete of a record is no more than a hint to look. So no write of where bytes are
    // is ever dropped because the record was deleted, taken out, or not held yet.

    /// The stamp of what this device knows of record `id`, and whether a row names it (live);
    /// nil when it knows nothing of it (or gc freed its bytes).
    func register(_ id: String) throws -> (stamp: String, live: Bool)? {
        if let stamp = try database.scalar("SELECT _updated_at FROM coven_files WHERE id = ?1", [id]).textValue { return (stamp, true) }
        return try database.scalar("SELECT _updated_at FROM coven_deleted_files WHERE id = ?1", [id]).textValue.map { ($0, false) }
    }

    /// Brings deleted record `id` back as its image holds it (a row names it again); false when
    /// no image is kept (gc freed its bytes) or it is here.
    ///
    /// A record coming back is not published: every device brings it back from its own image
    /// when the row naming it arrives, so no older image here overwrites a newer place that
    /// another device holds.
    func bringBack(_ id: String) throws -> Bool {
        let capture = try RowCapture.of(database)
        let capturing = capture.active
        capture.active = false
        defer { capture.active = capturing }
        try database.run("""
            INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            SELECT id, audience, namespace, size, hash, coordinates, _updated_at FROM coven_deleted_files WHERE id = ?1
            ON CONFLICT (id) DO NOTHING
            """, [id])
        guard database.changes > 0 else { return false }
        try database.run("DELETE FROM coven_deleted_files WHERE id = ?1", [id])
        return true
    }

    /// The image of a record no row names, if this device keeps one.
    func image(_ id: String) throws -> FileRecord? {
        try database.queryOne("SELECT * FROM coven_deleted_files WHERE id = ?1", [id]).map(FileRecord.init(row:))
    }

    /// Drops the images of deleted records naming `object`, and this device's bytes of it (gc
    /// deleted it: no record naming it can come back).
    func forgetDeleted(object: String) throws {
        try database.run("DELETE FROM coven_deleted_files WHERE object = ?1", [object])
        if try ids(object: object).isEmpty, try !device.uploadQueue.contains(object) {
            try forgetLocalBytes(object: object)
        }
    }

    /// What ended a record here: the delete's device, change (nil for this device's own
    /// write not published yet) and stamp.
    typealias End = (device: String, seq: Int64?, stamp: String)

    /// Ends record `id` when no row names it (a change deleted it, wrote it, or took out a row
    /// naming it): its image is kept (``bringBack(_:)``), its tombstone takes the newer of the
    /// two stamps, and its object becomes a gc candidate of `ended`. This device's bytes of it
    /// and an upload of it under way stay until gc deletes the object: a row that wins over the
    /// delete later brings the record back with its bytes, and an upload that finishes meanwhile
    /// updates the image (``switchToStored(objects:stamp:)``).
    ///
    /// - Returns: the object whose cached bytes go after the commit, if the record went.
    func endIfUnnamed(_ id: String, ended: End) throws -> String? {
        guard let record = try device.fileRecord(id), try !isNamed(id),
              let stamp = try register(id)?.stamp else { return nil }
        try delete(id, stamp: nil)
        try Tombstones(database: database).set(table: "coven_files", id: id, stamp: max(stamp, ended.stamp), audience: record.audience)
        let object = record.coordinates.object
        if ended.device == device.deviceID {
            try device.candidates.add(object: object, stamp: ended.stamp, why: .deleted, file: id)
        } else if let seq = ended.seq {
            try device.candidates.addElsewhere(object: object, device: ended.device, seq: seq, stamp: ended.stamp, file: id)
        }
        try SyncFlags(database: database).markFrontierDue()
        return object
    }

    /// Ends the records of `ids` that no row names, as of this device's write `stamp`
    /// (``delete(_:stamp:)``): a write that stopped naming them. Their bytes here and their
    /// uploads stay until gc deletes the object (a concurrent write elsewhere may still bring a
    /// record back).
    func release(_ ids: [String], stamp: String) throws {
        for id in try unnamed(ids) where try device.fileRecord(id) != nil {
            try delete(id, stamp: stamp)
        }
    }

    /// Those of `ids` that no row of a synced table names, in their order: one query per file
    /// column for each 500 ids (a pull of a library settles 100,000 records).
    func unnamed(_ ids: [String]) throws -> [String] {
        var left: [String] = []
        for start in stride(from: 0, to: ids.count, by: 500) {
            let batch = Array(ids[start..<min(start + 500, ids.count)])
            let json = RecordedChanges.json(ids: batch)
            var named: Set<String> = []
            for table in device.manifest.tables {
                for column in table.files {
                    let c = RowCapture.quote(column.column)
                    let statement = try database.cached("SELECT DISTINCT \(c) FROM main.\(RowCapture.quote(table.name)) WHERE \(c) IN (SELECT value FROM json_each(?1))")
                    try statement.bind([json])
                    while let row = try statement.next() { if let id = row[0].textValue { named.insert(id) } }
                    statement.reset()
                }
            }
            left += batch.filter { !named.contains($0) }
        }
        return left
    }

    /// Whether a row of a synced table names record `id`.
    func isNamed(_ id: String) throws -> Bool {
        for table in device.manifest.tables {
            for column in table.files {
                let named = try database.scalar("SELECT EXISTS (SELECT 1 FROM main.\(RowCapture.quote(table.name)) WHERE \(RowCapture.quote(column.column)) = ?1)", [id])
                if named.intValue == 1 { return true }
            }
        }
        return false
    }

    /// Whether a record here names `object` as stored.
    func isStored(object: String) throws -> Bool {
        try database.scalar("SELECT count(*) FROM coven_files WHERE object = ?1 AND place = \(Coordinates.Place.stored.sql)", [object]).intValue ?? 0 > 0
    }

    /// The record ids naming `object`.
    func ids(object: String) throws -> [String] {
        try database.query("SELECT id FROM coven_files WHERE object = ?1 ORDER BY id", [object]).compactMap { $0.string("id") }
    }

    /// The record ids naming each of `objects` (as ``ids(object:)``), in one query: an object
    /// no record names is absent.
    func ids(objects: [String]) throws -> [String: [String]] {
        let list = RecordedChanges.json(ids: objects)
        var ids: [String: [String]] = [:]
        for row in try database.query("""
            SELECT object, id FROM coven_files WHERE object IN (SELECT value FROM json_each(?1)) ORDER BY object, id
            """, [list]) {
            guard let object = row.string("object"), let id = row.string("id") else { continue }
            ids[object, default: []].append(id)
        }
        return ids
    }

    /// The coordinates of a record naming `object` (they all hold its key), or nil when none
    /// does.
    func coordinates(object: String) throws -> Coordinates? {
        try coordinatesText(objects: [object])[object].map(Coordinates.init(json:))
    }

    /// The text of the coordinates of a record naming each of `objects`, by object: a record's,
    /// else (no record names it) an image's; in a query for the batch (and one for the images
    /// of those no record names); an object nothing names is absent.
    func coordinatesText(objects: [String]) throws -> [String: String] {
        var found: [String: String] = [:]
        for row in try database.query("SELECT object, coordinates FROM coven_files WHERE object IN (SELECT value FROM json_each(?1))",
                                      [RecordedChanges.json(ids: objects)]) {
            if let object = row.string("object"), found[object] == nil { found[object] = row.string("coordinates") }
        }
        let missing = objects.filter { found[$0] == nil }
        guard !missing.isEmpty else { return found }
        for row in try database.query("SELECT object, coordinates FROM coven_deleted_files WHERE object IN (SELECT value FROM json_each(?1))",
                                      [RecordedChanges.json(ids: missing)]) {
            if let object = row.string("object"), found[object] == nil { found[object] = row.string("coordinates") }
        }
        return found
    }

    /// Switches every record of this device naming one of `objects` to stored, with the content
    /// hash of this device's bytes: the images of records no row names here too (an upload
    /// that finished after its file's row was deleted), so a row that brings one back brings it
    /// back stored, on every device (the recorded write publishes an image's switch as the
    /// record's: ``RowCapture``). One statement switches the records of a page of objects,
    /// one their images.
    func switchToStored(objects: [String], stamp: String) throws {
        let list = RecordedChanges.json(ids: objects)
        let device = Coordinates.Place.device.sql
        // One statement for the page (each record's new text made by coven_stored_coordinates):
        // as setCoordinates(_:_:hash:stamp:) sets a stored place.
        try database.run("""
            UPDATE coven_files SET coordinates = coven_stored_coordinates(coordinates),
                hash = coalesce((SELECT lower(hex(l.content_hash)) FROM coven_local l WHERE l.object = coven_files.object), hash),
                _updated_at = ?3
            WHERE object IN (SELECT value FROM json_each(?1)) AND place = \(device) AND device = ?2
            """, [list, self.device.deviceID, stamp])
        try database.run("""
            UPDATE coven_deleted_files SET coordinates = coven_stored_coordinates(coordinates),
                hash = coalesce((SELECT lower(hex(l.content_hash)) FROM coven_local l WHERE l.object = coven_deleted_files.object), hash),
                _updated_at = ?3
            WHERE object IN (SELECT value FROM json_each(?1))
              AND json_extract(coordinates, '$.at') = \(device) AND json_extract(coordinates, '$.device') = ?2
            """, [list, self.device.deviceID, stamp])
    }

    /// Stamps a record afresh for its re-emit to peers that were told to delete it (the push's
    /// gate filter, Sync/GateFilter.swift): nothing else of it changes.
    func restamp(_ id: String, stamp: String) throws {
        try database.run("UPDATE coven_files SET _updated_at = ?2 WHERE id = ?1", [id, stamp])
    }

    /// Applies another device's image of a record (sync), newer than what this device knows
    /// (``register(_:)``): upserted as it is where this device holds it, the image of a record
    /// no row names here included (it stays so: ``settle``). A switch to device-only elsewhere
    /// drops this device's pin of it.
    ///
    /// - Returns: the object whose cached bytes go after the commit (the file is now on another
    ///   device only), if any.
    func applyRemote(_ entry: RowEntry, by writer: String, seq: Int64) throws -> String? {
        let before = try device.fileRecord(entry.id)
        if before == nil, try image(entry.id) != nil {
            let statement = try database.cached(RowEntry.upsertSQL(table: "coven_deleted_files", columns: entry.columns))
            try statement.bind(entry.values)
            try statement.runToEnd()
            return nil
        }
        let statement = try database.cached(RowEntry.upsertSQL(table: "coven_files", columns: entry.columns))
        try statement.bind(entry.values)
        try statement.runToEnd()
        guard let json = entry.value("coordinates")?.textValue, let coordinates = try? Coordinates(json: json),
              coordinates.at == .device else { return nil }
        if let before, before.coordinates.at == .stored {
            try device.candidates.addElsewhere(object: before.coordinates.object, device: writer, seq: seq, stamp: entry.stamp, file: entry.id)
            // gc on the writer waits until this device publishes a frontier over the switch.
            try SyncFlags(database: database).markFrontierDue()
        }
        guard coordinates.device != device.deviceID else { return nil }
        _ = try unpin(entry.id)
        // Two devices made the file device-only at once and the other's write won: the copy
        // make-device-only left here goes (after the commit, and only while it is as coven
        // left it), and this device holds the file's bytes no more.
        if let before, before.coordinates.at == .device, before.coordinates.device == device.deviceID,
           let note = try madeCopy(object: before.coordinates.object) {
            let local = try database.queryOne("SELECT * FROM coven_local WHERE object = ?1 AND kind = 'user'", [before.coordinates.object])
            try madeCopies.set(before.coordinates.object, nil)
            try database.run("DELETE FROM coven_local WHERE object = ?1", [before.coordinates.object])
            if let local, local.bytes("path") == note.path {
                removals.append(LosingCopy(path: note.path, folders: note.folders, size: local.int("size") ?? -1,
                                           modifiedSeconds: local.int("modified_seconds") ?? -1, modifiedNanos: local.int("modified_nanos") ?? -1))
            }
        }
        return coordinates.object
    }

    // MARK: Copies make-device-only made

    /// The copies make-device-only made, by object (`coven_made_copies`, whose one writer this is).
    private var madeCopies: Journal { Journal(database: database, table: "coven_made_copies") }

    /// A copy make-device-only made of a stored file, and the folders it made for it.
    struct MadeCopy { var path: [UInt8]; var folders: [[UInt8]] }

    /// A copy to remove after the commit: make-device-only's copy of a file another device's
    /// make-device-only won, with what it looked like when coven left it.
    struct LosingCopy {
        var path: [UInt8]
        var folders: [[UInt8]]
        var size: Int64
        var modifiedSeconds: Int64
        var modifiedNanos: Int64

        /// Removes the copy if it is still as coven left it (same size and modification time),
        /// then the folders made for it, innermost first, each only if empty. A copy the person
        /// changed stays.
        func remove() {
            var info = stat()
            let path = PathText.string(fromOSBytes: self.path)
            guard PathText.withCString(path, { lstat($0, &info) }) == 0, (info.st_mode & S_IFMT) == S_IFREG,
                  Int64(info.st_size) == size, Int64(info.st_mtim.tv_sec) == modifiedSeconds, Int64(info.st_mtim.tv_nsec) == modifiedNanos else { return }
            _ = PathText.withCString(path) { unlink($0) }
            for folder in folders.reversed() { _ = PathText.withCString(PathText.string(fromOSBytes: folder)) { rmdir($0) } }
        }
    }

    /// Notes the copy make-device-only made (inside its switch's write).
    func noteMadeCopy(object: String, path: [UInt8], folders: [[UInt8]]) throws {
        // The JSON JSONSerialization wrote with sorted keys (hex needs no escaping), without it:
        // make-device-only notes a copy per file, and it cost more than the rest of the switch.
        let json = #"{"folders":["# + folders.map { "\"" + $0.hex + "\"" }.joined(separator: ",") + #"],"path":""# + path.hex + #""}"#
        try madeCopies.set(object, json)
    }

    func madeCopy(object: String) throws -> MadeCopy? {
        guard let text = try madeCopies.value(object),
              let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              let path = (object["path"] as? String).flatMap({ [UInt8](hex: $0) }) else { return nil }
        return MadeCopy(path: path, folders: (object["folders"] as? [String] ?? []).compactMap { [UInt8](hex: $0) })
    }

    // MARK: coven_local

    /// Records this device's bytes of an object (a write putting a staged file, or
    /// make-device-only's copy becoming the file's original here), replacing what was recorded.
    func recordLocal(_ bytes: LocalBytes) throws {
        try database.runCached("""
            INSERT INTO coven_local (object, kind, path, copy, size, modified_seconds, modified_nanos, change_stamp, content_hash, chunk_hashes)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
            ON CONFLICT (object) DO UPDATE SET kind = excluded.kind, path = excluded.path, copy = excluded.copy, size = excluded.size,
                modified_seconds = excluded.modified_seconds, modified_nanos = excluded.modified_nanos,
                change_stamp = excluded.change_stamp, content_hash = excluded.content_hash, chunk_hashes = excluded.chunk_hashes
            """, [bytes.object, bytes.kind.rawValue, bytes.path, bytes.copy, bytes.size, bytes.modifiedSeconds, bytes.modifiedNanos,
                  bytes.changeStamp, bytes.contentHash, bytes.chunkHashes])
    }

    /// Records this device's bytes of every staged file a write put (``recordLocal(_:)`` of
    /// each, in one statement): the original's path or coven's copy, as it was staged.
    func recordLocalBytesOfPuts(_ puts: PutIntents) throws {
        try database.run("""
            INSERT INTO coven_local (object, kind, path, copy, size, modified_seconds, modified_nanos, change_stamp, content_hash, chunk_hashes)
            SELECT p.object, p.kind, s.path, s.copy, p.size, s.modified_seconds, s.modified_nanos, s.change_stamp, s.content_hash, s.chunk_hashes
            FROM \(PutIntents.table) p JOIN coven_staged s ON s.id = p.staged WHERE true ORDER BY p.seq
            ON CONFLICT (object) DO UPDATE SET kind = excluded.kind, path = excluded.path, copy = excluded.copy, size = excluded.size,
                modified_seconds = excluded.modified_seconds, modified_nanos = excluded.modified_nanos,
                change_stamp = excluded.change_stamp, content_hash = excluded.content_hash, chunk_hashes = excluded.chunk_hashes
            """)
    }

    /// Records chunk hashes derived from bytes that matched `contentHash`: only into the row
    /// those bytes were checked against (still without hashes, same content).
    func recordChunkHashes(object: String, chunkHashes: [UInt8], contentHash: [UInt8]) throws {
        try database.run(
            "UPDATE coven_local SET chunk_hashes = ?2 WHERE object = ?1 AND length(chunk_hashes) = 0 AND content_hash = ?3",
            [object, chunkHashes, contentHash])
    }

    /// Records the change time an original settled at (make-device-only's copy, once its
    /// temporary name is gone).
    func recordChangeStamp(object: String, path: [UInt8], changeStamp: String) throws {
        try database.run("UPDATE coven_local SET change_stamp = ?1 WHERE object = ?2 AND kind = 'user' AND path = ?3",
                         [changeStamp, object, path])
    }

    /// Drops this device's record of an object's local bytes; coven's own copy is deleted
    /// after the transaction commits (a crash before that leaves a copy no row names, which
    /// the next open removes).
    func forgetLocalBytes(object: String) throws {
        try forgetLocalBytes(objects: [object])
    }

    /// Drops this device's record of the local bytes of `objects` (a page of them), releasing
    /// coven's copies of app bytes.
    func forgetLocalBytes(objects: [String]) throws {
        let list = RecordedChanges.json(ids: objects)
        for row in try database.query("SELECT copy FROM coven_local WHERE object IN (SELECT value FROM json_each(?1)) AND kind = 'app' AND copy IS NOT NULL", [list]) {
            if let copy = row.string("copy") { try CopySweep(device).release(copy) }
        }
        try database.run("DELETE FROM coven_local WHERE object IN (SELECT value FROM json_each(?1))", [list])
    }

    // MARK: coven_pins

    /// Keeps a file offline; false when it already was.
    func pin(_ id: String) throws -> Bool {
        try database.run("INSERT INTO coven_pins (file, pinned_at) VALUES (?1, ?2) ON CONFLICT (file) DO NOTHING", [id, Timestamp.iso8601(Date())])
        return database.changes > 0
    }

    /// Stops keeping a file offline; false when it was not.
    func unpin(_ id: String) throws -> Bool {
        try database.run("DELETE FROM coven_pins WHERE file = ?1", [id])
        return database.changes > 0
    }
}

extension Device {
    /// The owner of this device's file records, local bytes and pins.
    var fileRecords: FileRecords { FileRecords(device: self) }
}

extension FileRecords {
    /// Copies the records meeting `condition` into `schema`'s `coven_files` (a snapshot), and
    /// the images of deleted records whose delete peers were told of (a device joining from
    /// the snapshot brings one back as every other device does) of `audiences`; returns how
    /// many records.
    func copyForSnapshot(into schema: String, condition: String, audiences: [String] = [RowAudiences.store]) throws -> Int64 {
        try database.execute("""
            INSERT INTO \(schema).coven_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            SELECT id, audience, namespace, size, hash, coordinates, _updated_at FROM main.coven_files WHERE \(condition)
            """)
        let copied = try database.scalar("SELECT changes()").intValue ?? 0
        try database.run("""
            INSERT INTO \(schema).coven_deleted_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            SELECT d.id, d.audience, d.namespace, d.size, d.hash, d.coordinates, d._updated_at FROM main.coven_deleted_files AS d
            WHERE EXISTS (SELECT 1 FROM main.coven_tombstones AS t WHERE t.tbl = 'coven_files' AND t.id = d.id AND t.private = 0)
              AND d.audience IN (SELECT value FROM json_each(?1))
            """, [RecordedChanges.json(ids: audiences)])
        return copied
    }
}

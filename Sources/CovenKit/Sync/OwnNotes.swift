import Foundation

/// What this device alone knows of the files its published changes place on it: for each
/// object a change of it says is on this device only, where its bytes are here (the person's
/// original, or coven's copy) and whether its upload was queued. Stored beside the change at
/// `notes/<device>/<seq>`, sealed under a key only this device holds (derived from its signing
/// key), so no other device, member or storage operator reads a path.
///
/// Why: a device put back from a backup catches up its own published changes (``OwnHistory``),
/// and those say a file is on this device only, but its database no longer records the bytes:
/// a make-device-only copy still in its folder, an original whose upload was queued after the
/// backup. Without the notes the file reads nowhere, although its bytes are right there. With
/// them the catch-up records the bytes again (only while the file at the path is the one noted:
/// same size and modification time) and queues the upload again; what is truly gone stays
/// named (`status` counts it missing, `fsck` reports it).
///
/// Written before the change it goes with (a plain put: a change frozen again after a crash
/// writes its notes again); gc deletes them with the change.
struct OwnNotes {
    let device: Device
    private var keys: Keyring { device.keys }
    private var database: Database { device.database }

    static func path(device: String, seq: Int64) -> String {
        "notes/\(device)/" + String(format: "%016lld", seq)
    }

    /// One object's note.
    struct Note: Codable, Equatable {
        var object: String
        var kind: String
        /// The original's path (hex of its bytes), or coven's copy's name.
        var path: String?
        var copy: String?
        var size: Int64
        var seconds: Int64?
        var nanos: Int64?
        var changeStamp: String?
        var contentHash: String
        /// Whether its upload was queued.
        var upload: Bool
        /// The copy make-device-only made of it, and the folders it made for it (hex).
        var made: String?
        var madeFolders: [String]?
    }

    /// The sealed notes of the objects `entries` place on this device only, nil when none does.
    func seal(entries: [RowEntry], seq: Int64) throws -> [UInt8]? {
        var objects: [String] = []
        var seen: Set<String> = []
        for entry in entries where entry.table == "coven_files" && entry.kind == .upsert {
            guard let json = entry.value("coordinates")?.textValue, json.contains(device.deviceID),
                  let coordinates = try? Coordinates(json: json), coordinates.at == .device, coordinates.device == device.deviceID,
                  seen.insert(coordinates.object).inserted else { continue }
            objects.append(coordinates.object)
        }
        var notes: [Note] = []
        // A batch of objects a query (a change of an import places thousands on this device
        // until their uploads finish).
        for start in stride(from: 0, to: objects.count, by: 500) {
            let json = RecordedChanges.json(ids: Array(objects[start..<min(start + 500, objects.count)]))
            let queued = Set(try database.query("SELECT object FROM coven_upload_queue WHERE object IN (SELECT value FROM json_each(?1))", [json])
                .compactMap { $0.string("object") })
            for local in try database.query("SELECT * FROM coven_local WHERE object IN (SELECT value FROM json_each(?1)) ORDER BY object", [json]) {
                guard let object = local.string("object") else { continue }
                let made = local.string("kind") == FileKind.user.rawValue ? try device.fileRecords.madeCopy(object: object) : nil
                notes.append(Note(object: object, kind: local.string("kind") ?? "user", path: local.bytes("path")?.hex, copy: local.string("copy"),
                                  size: local.int("size") ?? 0, seconds: local.int("modified_seconds"), nanos: local.int("modified_nanos"),
                                  changeStamp: local.string("change_stamp"), contentHash: (local.bytes("content_hash") ?? []).hex,
                                  upload: queued.contains(object), made: made?.path.hex, madeFolders: made?.folders.map(\.hex)))
            }
        }
        guard !notes.isEmpty else { return nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let plaintext = Array(try encoder.encode(notes))
        let nonce = SecureRandom.bytes(ChaChaPoly.nonceSize)
        return nonce + (try ChaChaPoly.seal(plaintext, key: try key(), nonce: nonce, aad: aad(seq: seq)))
    }

    /// Records again, after own change `seq` was caught up, the bytes its notes name that this
    /// database does not record and that are still as noted, and queues their uploads again.
    ///
    /// - Returns: how many objects' bytes were recorded again.
    @discardableResult
    func restore(seq: Int64, provider: StorageProvider) throws -> Int {
        guard let sealed = try provider.getObject(Self.path(device: device.deviceID, seq: seq)), sealed.count > ChaChaPoly.nonceSize else { return 0 }
        let nonce = Array(sealed.prefix(ChaChaPoly.nonceSize))
        let notes: [Note]
        do {
            let plaintext = try ChaChaPoly.open(Array(sealed.dropFirst(ChaChaPoly.nonceSize)), key: try key(), nonce: nonce, aad: aad(seq: seq))
            notes = try JSONDecoder().decode([Note].self, from: Data(plaintext))
        } catch {
            return 0  // damaged notes recover nothing; the files stay named missing
        }
        var restored = 0
        try database.transaction {
            for note in notes where try placedHere(note.object) {
                if try database.scalar("SELECT count(*) FROM coven_local WHERE object = ?1", [note.object]).intValue ?? 0 == 0 {
                    guard let bytes = try stillThere(note) else { continue }
                    try device.fileRecords.recordLocal(bytes)
                    restored += 1
                    if let made = note.made.flatMap({ [UInt8](hex: $0) }) {
                        try device.fileRecords.noteMadeCopy(object: note.object, path: made, folders: (note.madeFolders ?? []).compactMap { [UInt8](hex: $0) })
                    }
                }
                if note.upload, try !device.uploadQueue.contains(note.object) {
                    try device.uploadQueue.enqueue(note.object, move: nil, bytesTotal: ObjectLayout.encryptedSize(plaintextSize: note.size))
                }
            }
        }
        return restored
    }

    /// Whether a record here (or the image of one no row names) says `object` is on this device
    /// only.
    private func placedHere(_ object: String) throws -> Bool {
        try database.scalar("""
            SELECT EXISTS (SELECT 1 FROM coven_files WHERE object = ?1 AND place = \(Coordinates.Place.device.sql) AND device = ?2)
                OR EXISTS (SELECT 1 FROM coven_deleted_files WHERE object = ?1 AND json_extract(coordinates, '$.at') = \(Coordinates.Place.device.sql)
                           AND json_extract(coordinates, '$.device') = ?2)
            """, [object, device.deviceID]).intValue == 1
    }

    /// The local bytes a note names, when the file there is still the one noted (same size and
    /// modification time; coven's copy: same size).
    private func stillThere(_ note: Note) throws -> LocalBytes? {
        guard let kind = FileKind(rawValue: note.kind), let hash = [UInt8](hex: note.contentHash) else { return nil }
        var info = stat()
        let path: [UInt8]? = note.path.flatMap { [UInt8](hex: $0) }
        let onDisk: String
        if let path {
            onDisk = PathText.string(fromOSBytes: path)
        } else if let copy = note.copy {
            onDisk = device.paths.folder + "/" + copy
        } else {
            return nil
        }
        guard PathText.withCString(onDisk, { lstat($0, &info) }) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int64(info.st_size) == note.size else { return nil }
        if path != nil, Int64(info.st_mtim.tv_sec) != note.seconds || Int64(info.st_mtim.tv_nsec) != note.nanos { return nil }
        return LocalBytes(object: note.object, kind: kind, path: path, copy: note.copy, size: note.size, modifiedSeconds: note.seconds,
                          modifiedNanos: note.nanos, changeStamp: note.changeStamp, contentHash: hash, chunkHashes: [])
    }

    private func key() throws -> [UInt8] {
        try keys.signingKey().withSeed { seed in
            try HKDF.derive(ikm: Array(seed), salt: Array(device.storeID.utf8), info: Array("coven own notes v1".utf8))
        }
    }

    private func aad(seq: Int64) -> [UInt8] { Array(Self.path(device: device.deviceID, seq: seq).utf8) }
}

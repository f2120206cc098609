import CovenKit
import Foundation

/// TEST FIXTURE, standing in for the upload worker until it lands: makes a file *stored* the
/// way the worker will. The lead switches the read tests to the real worker later.
///
/// ``store(_:file:)`` takes a file on this device only whose bytes are here (coven's copy or
/// the person's original), seals them with ``ObjectSealer`` under a new random ``FileKey``, puts
/// the object at its `files/<device>/<name>` through the device's provider, and switches the
/// record to `{"at":"stored","object":…,"key":…}` with its content SHA-256 as `hash`; the upload
/// queue entry and the local bytes record go, as after a successful upload.
public enum StoredFiles {
    /// Stages `bytes` as app bytes of `namespace` and writes one row of `table` (columns `id`,
    /// `file`) referencing it; returns the file id, still on this device only.
    public static func stageApp(_ device: Device, bytes: [UInt8], namespace: String, table: String, place: Place = .cloud) throws -> String {
        let folder = try TestPaths.temporaryDirectory("stored-files")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let source = folder + "/bytes"
        guard FileManager.default.createFile(atPath: source, contents: Data(bytes)) else {
            throw CovenError(.io, "cannot write '\(source)'")
        }
        let fd = open(source, O_RDONLY)
        guard fd >= 0 else { throw CovenError.posix("open", path: source) }
        defer { close(fd) }
        let staged = try device.stageAppBytes(from: fd, sourceName: source, namespace: namespace, place: place)
        return try write(device, staged: staged.id, function: "coven_put_staged('\(staged.id)')", table: table)
    }

    /// Prepares the person's original at `path` in `namespace` and writes one row of `table`
    /// referencing it; returns the file id, still on this device only.
    public static func stageUser(_ device: Device, path: String, namespace: String, table: String, place: Place = .cloud) throws -> String {
        let staged = try device.prepareUserFile(path: path, namespace: namespace, place: place)
        return try write(device, staged: staged.id, function: "coven_put_user_file('\(staged.id)')", table: table)
    }

    private static func write(_ device: Device, staged: String, function: String, table: String) throws -> String {
        let result = try device.write(sql: "INSERT INTO \(table) (id, file, _updated_at) VALUES (coven_uuid7(), \(function), coven_stamp())")
        guard let file = result.staged[staged] ?? result.files.first else {
            throw CovenError(.internal, "the write made no file")
        }
        return file
    }

    /// Makes a file stored as the upload worker will. Returns the object key.
    @discardableResult
    public static func store(_ device: Device, file id: String) throws -> String {
        guard let record = try device.fileRecord(id) else { throw CovenError(.fileAbsent, "no file '\(id)'") }
        let object = record.coordinates.object
        guard let local = try device.database.queryOne("SELECT * FROM coven_local WHERE object = ?1", [object]) else {
            throw CovenError(.missing, "no local bytes of '\(id)'")
        }
        let path: String
        if local.string("kind") == "user" {
            path = String(decoding: local.bytes("path") ?? [], as: UTF8.self)
        } else {
            path = device.paths.folder + "/" + (local.string("copy") ?? "")
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw CovenError(.io, "cannot read '\(path)'") }
        let plaintext = [UInt8](data)
        let key = FileKey()
        let sealer = try ObjectSealer(key: key)
        var sealed = sealer.header()
        var body = [UInt8](repeating: 0, count: Int(ObjectLayout.encryptedSize(plaintextSize: Int64(plaintext.count)) - ObjectLayout.headerSize))
        try plaintext.withUnsafeBytes { p in
            try body.withUnsafeMutableBytes { out in
                _ = try sealer.sealChunks(firstChunk: 0, plaintext: p, totalPlaintextSize: Int64(plaintext.count), into: out)
            }
        }
        sealed += body
        let provider = try StorageConnector(location: device.storage).connect()
        try provider.put(object, data: sealed)
        let coordinates = Coordinates(at: .stored, device: nil, object: object, key: key.hex)
        let hash = SHA256.digest(plaintext).hex
        try device.database.transaction {
            try device.database.run("UPDATE coven_files SET coordinates = ?2, hash = ?3 WHERE id = ?1", [id, coordinates.json, hash])
            try device.database.run("DELETE FROM coven_upload_queue WHERE object = ?1", [object])
            try device.database.run("DELETE FROM coven_local WHERE object = ?1", [object])
            if let copy = local.string("copy") {
                try device.setSetting("release:" + copy, copy)
            }
        }
        return object
    }
}

import CovenKit
import Foundation

// MARK: - TEST FIXTURE: stored files without the upload worker

/// **Test fixture, not the upload path.** Makes a file *stored* the way the upload worker will:
/// seals its bytes with ``ObjectSealer`` under a random ``FileKey``, puts the object at
/// `files/<device>/<name>` and writes its `coven_files` record as `{"at":"stored",…}` with its
/// content hash. make-device-only's tests need stored files before the worker exists; once it
/// lands, tests can stage for the cloud and run `coven upload-worker --once` instead, and this
/// fixture can go.
public enum StoredFixture {
    /// Stores `bytes` as a new file of `namespace` and returns its id.
    ///
    /// - Parameters:
    ///   - device: the device whose record it is (the object goes under its folder).
    ///   - provider: storage of the device's store (a file:// or S3 provider on its location).
    ///   - namespace: a declared namespace.
    ///   - bytes: the file's bytes.
    ///   - hash: the content hash to record; the bytes' own when nil (a wrong one tests
    ///     `integrity`).
    public static func storeFile(
        device: Device, provider: any StorageProvider, namespace: String, bytes: [UInt8], hash: String? = nil
    ) throws -> String {
        let key = FileKey()
        let sealer = try ObjectSealer(key: key)
        var object = sealer.header()
        let size = Int64(bytes.count)
        let run = 16 * 65536
        var output = [UInt8](repeating: 0, count: run + 16 * 16)
        var offset = 0
        repeat {
            let end = min(bytes.count, offset + run)
            let count = try bytes[offset..<end].withUnsafeBytes { plain in
                try output.withUnsafeMutableBytes { out in
                    try sealer.sealChunks(firstChunk: Int64(offset / 65536), plaintext: plain, totalPlaintextSize: size, into: out)
                }
            }
            object.append(contentsOf: output[0..<count])
            offset = end
        } while offset < bytes.count
        let name = Identifier.objectName()
        let objectKey = "files/\(device.deviceID)/\(name)"
        try provider.put(objectKey, data: object)
        let id = Identifier.uuid7()
        let coordinates = Coordinates(at: .stored, device: nil, object: objectKey, key: key.hex)
        try device.database.run("""
            INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at)
            VALUES (?1, 'store', ?2, ?3, ?4, ?5, ?6)
            """, [id, namespace, size, hash ?? SHA256.digest(bytes).hex, coordinates.json, Timestamp.iso8601(Date())])
        return id
    }
}

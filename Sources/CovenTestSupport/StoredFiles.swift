import CovenKit
import Foundation

/// Files for tests: staged and referenced by one write each (still on this device only), then
/// stored by the real upload worker.
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
        let staged = try Staging(device).stageAppBytes(from: fd, sourceName: source, namespace: namespace, place: place)
        return try write(device, staged: staged.id, function: "coven_put_staged('\(staged.id)')", table: table)
    }

    /// Prepares the person's original at `path` in `namespace` and writes one row of `table`
    /// referencing it; returns the file id, still on this device only.
    public static func stageUser(_ device: Device, path: String, namespace: String, table: String, place: Place = .cloud) throws -> String {
        let staged = try Staging(device).prepareUserFile(path: path, namespace: namespace, place: place)
        return try write(device, staged: staged.id, function: "coven_put_user_file('\(staged.id)')", table: table)
    }

    /// A device at `paths` on `storage` whose manifest has one app namespace and one table of
    /// files (`id`, `file`), both named `table`, kept offline when `kept`: the device the
    /// CLI's kill, signal and full-disk tests hold files of. `provider` defaults to a
    /// connection to `storage`.
    public static func oneTableDevice(paths: DevicePaths, storage: StorageLocation, name: String, table: String = "blobs", kept: Bool = false,
                                      provider: (any StorageProvider)? = nil) throws -> Device {
        let manifest = """
        { "namespaces": [ { "name": "\(table)", "kind": "app"\(kept ? #", "kept": true"# : "") } ],
          "tables": [ { "name": "\(table)", "identity": "uuid", "files": [ { "column": "file" } ] } ],
          "migrations": [ "CREATE TABLE \(table) (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
        """
        return try DeviceSetup.create(paths: paths, storage: storage, manifest: try Manifest(json: Data(manifest.utf8)), name: name,
                                 provider: try provider ?? StorageConnector(location: storage).connect())
    }

    private static func write(_ device: Device, staged: String, function: String, table: String) throws -> String {
        let result = try device.write(sql: "INSERT INTO \(table) (id, file, _updated_at) VALUES (coven_uuid7(), \(function), coven_stamp())")
        guard let file = result.staged[staged] ?? result.files.first else {
            throw CovenError(.internal, "the write made no file")
        }
        return file
    }

    /// Stores the file with the real upload worker (`UploadWorker.run`, `--once`): it drains
    /// the device's queue, so every file queued then is stored too, through the device's
    /// storage with its `storageEnvironment` (credentials of a test S3 server). Returns the
    /// object key.
    ///
    /// - Throws: what the worker throws; `.internal` when the file is not stored afterwards.
    @discardableResult
    public static func store(_ device: Device, file id: String) throws -> String {
        let connector = StorageConnector(location: device.storage, environment: device.storageEnvironment)
        let summary = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]),
                                           connect: { try connector.connect() })
        guard let record = try device.fileRecord(id), record.coordinates.at == .stored else {
            throw CovenError(.internal, "the upload worker did not store '\(id)'", cause: "\(summary)")
        }
        return record.coordinates.object
    }
}

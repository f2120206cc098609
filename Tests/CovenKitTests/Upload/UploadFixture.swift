@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A device on a real SQLite file with a store on `file://` (or a given location), and helpers
/// to stage files, write rows, run the worker and read stored objects back.
final class UploadFixture {
    static let manifest = """
    { "namespaces": [ { "name": "originals", "kind": "user", "budget": "1GiB" },
                      { "name": "thumbs", "kind": "app", "budget": "1GiB" } ],
      "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] },
                  { "name": "thumbnails", "identity": "uuid", "files": [ { "column": "file", "bound": true } ] } ],
      "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT",
                      "CREATE TABLE thumbnails (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
    """

    let directory: String
    let paths: DevicePaths
    let device: Device
    let location: StorageLocation
    let environment: [String: String]

    /// - Parameters:
    ///   - location: the store; `file://<dir>/store` when nil.
    ///   - environment: the S3 credentials for an `s3://` location.
    init(location: StorageLocation? = nil, environment: [String: String] = [:]) throws {
        directory = try TestPaths.temporaryDirectory("upload")
        paths = DevicePaths(database: directory + "/device.db")
        let location = location ?? .file(directory: directory + "/store")
        self.location = location
        self.environment = environment
        let provider: any StorageProvider
        switch location {
        case .file: provider = try StorageConnector(location: location).connect(create: true)
        case .s3: provider = try S3Storage(location: location, options: StorageOptions(environment: [:]), environment: environment)
        }
        device = try TestStores.create(paths: paths, storage: location, manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "test", provider: provider,
                                       environment: environment.isEmpty ? nil : environment)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// Deterministic bytes, different per seed.
    static func bytes(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
        var state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        return (0..<count).map { _ in
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
    }

    /// Writes an original at `name` in the fixture's folder; returns its path.
    @discardableResult
    func original(_ name: String, _ bytes: [UInt8]) throws -> String {
        let path = directory + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Prepares an original and puts it in a new `notes` row; returns the file id.
    func addOriginal(_ name: String, _ bytes: [UInt8]) throws -> String {
        let path = try original(name, bytes)
        let staged = try Staging(device).prepareUserFile(path: path, namespace: "originals", place: .cloud)
        return try write("INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('\(staged.id)'), '')").files[0]
    }

    /// Stages app bytes for the cloud; returns the staged id.
    func stageApp(_ bytes: [UInt8]) throws -> String {
        let path = directory + "/app-" + UUID().uuidString
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        return try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: "thumbs", place: .cloud).id
    }

    @discardableResult
    func write(_ sql: String) throws -> WriteResult {
        try device.write(sql: sql)
    }

    /// Runs the worker in this process with quick retries.
    @discardableResult
    func run(jobs: Int = 2, once: Bool = true, settings extra: [String: String] = [:], storageOptions: StorageOptions? = nil,
             pageSize: Int? = nil) throws -> UploadRunSummary {
        var values = ["COVEN_UPLOAD_BACKOFF": "0.05", "COVEN_UPLOAD_BACKOFF_MAX": "0.2"]
        values.merge(extra) { _, new in new }
        let location = self.location
        let environment = self.environment
        let options = storageOptions ?? Self.quickOptions
        var settings = UploadSettings(environment: values)
        if let pageSize { settings.pageSize = pageSize }
        return try UploadWorker.run(paths: paths, jobs: jobs, once: once, settings: settings,
                                    storageOptions: options, connect: {
            switch location {
            case .file: return try StorageConnector(location: location, options: options).connect()
            case .s3: return try S3Storage(location: location, options: options, environment: environment)
            }
        })
    }

    static var quickOptions: StorageOptions {
        var options = StorageOptions(environment: [:])
        options.requestRetries = 0
        options.controlTimeout = 5
        options.bytesTimeout = 5
        options.connectTimeout = 2
        return options
    }

    func provider() throws -> any StorageProvider {
        switch location {
        case .file: return try StorageConnector(location: location).connect()
        case .s3: return try S3Storage(location: location, options: StorageOptions(environment: [:]), environment: environment)
        }
    }

    func record(_ file: String) throws -> FileRecord {
        try XCTUnwrap(try device.fileRecord(file))
    }

    /// The stored object of `file`, opened with its key (ObjectReader): its plaintext.
    func storedPlaintext(_ file: String) throws -> [UInt8] {
        let record = try record(file)
        let reader = try ObjectReader(key: try FileKey(hex: record.coordinates.key), plaintextSize: record.size)
        var plain: [UInt8] = []
        try provider().get(record.coordinates.object, range: nil) { bytes in
            try reader.feed(bytes) { plain.append(contentsOf: $0) }
        }
        try reader.finish { plain.append(contentsOf: $0) }
        return plain
    }

    func scalar(_ sql: String, _ parameters: [SQLBindable] = []) throws -> SQLValue {
        try device.database.scalar(sql, parameters)
    }

    func count(_ sql: String, _ parameters: [SQLBindable] = []) throws -> Int64 {
        try scalar(sql, parameters).intValue ?? -1
    }

    /// Files under the store's folder (file:// only), relative, sorted.
    func storeFiles() -> [String] {
        guard case .file(let root) = location,
              let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        var files: [String] = []
        while let name = enumerator.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: root + "/" + name, isDirectory: &isDirectory), !isDirectory.boolValue { files.append(name) }
        }
        return files.sorted()
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A device on a file:// store with an app namespace, a user namespace and a kept one, each
/// with a table referencing files; removed after the test.
class ReadTestCase: XCTestCase {
    var folder = ""
    var store = ""
    var device: Device!

    static let manifest = """
    {
      "namespaces": [
        { "name": "blobs", "kind": "app" },
        { "name": "originals", "kind": "user" },
        { "name": "keep", "kind": "app", "kept": true }
      ],
      "tables": [
        { "name": "blobs", "identity": "uuid", "files": [ { "column": "file" } ] },
        { "name": "originals", "identity": "uuid", "files": [ { "column": "file" } ] },
        { "name": "keep", "identity": "uuid", "files": [ { "column": "file" } ] }
      ],
      "migrations": [
        "CREATE TABLE blobs (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT",
        "CREATE TABLE originals (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT",
        "CREATE TABLE keep (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT"
      ]
    }
    """

    override func setUpWithError() throws {
        folder = try TestPaths.temporaryDirectory("read")
        store = folder + "/store"
        device = try makeDevice(storage: .file(directory: store))
    }

    override func tearDownWithError() throws {
        device = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    func makeDevice(storage: StorageLocation, manifest: String = ReadTestCase.manifest, name: String = "device.db") throws -> Device {
        let provider: StorageProvider
        if case .file(let directory) = storage {
            provider = try FileStorage(directory: directory, create: true)
        } else {
            provider = try StorageConnector(location: storage).connect()
        }
        return try TestStores.create(
            paths: DevicePaths(database: folder + "/" + name), storage: storage,
            manifest: try Manifest(json: Data(manifest.utf8)), name: "test", provider: provider)
    }

    /// Deterministic bytes.
    func pattern(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
        var state = 0x9E37_79B9_7F4A_7C15 &* (seed &+ 1)
        return (0..<count).map { _ in
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
    }

    /// A stored app file of `bytes`; returns its id.
    func storedFile(_ bytes: [UInt8], namespace: String = "blobs") throws -> String {
        let id = try StoredFiles.stageApp(device, bytes: bytes, namespace: namespace, table: namespace)
        try StoredFiles.store(device, file: id)
        return id
    }

    /// Reads a range into memory.
    func read(_ id: String, _ range: ReadRange = .whole, on device: Device? = nil) throws -> ([UInt8], ReadReport) {
        var out: [UInt8] = []
        let report = try Reader(device ?? self.device).readFile(id, range: range) { out.append(contentsOf: $0) }
        return (out, report)
    }

    /// Asserts that `body` throws a CovenError with `code`.
    func assertCode<T>(_ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> T) {
        do {
            _ = try body()
            XCTFail("expected \(code.rawValue)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.asCovenError.code, code, "\(error)", file: file, line: line)
        }
    }

    /// The cache entry row of a file.
    func cacheRow(_ id: String) throws -> Row? {
        let record = try device.requireFile(id)
        return try device.database.queryOne("SELECT * FROM coven_cache WHERE object = ?1", [record.coordinates.object])
    }
}


@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A new device on file:// storage in a temporary folder, with a user namespace `music`, an app
/// namespace `covers` and a table `tracks` whose `file` column references files.
final class DeviceTestFixture {
    let root: String
    let device: Device
    let provider: any StorageProvider

    static let manifest = """
    {"namespaces": [{"name": "music", "kind": "user", "budget": "1GiB"}, {"name": "covers", "kind": "app", "budget": "1MiB"}],
     "tables": [{"name": "tracks", "identity": "uuid", "files": [{"column": "file"}]}],
     "migrations": ["CREATE TABLE tracks (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT"]}
    """

    init(_ label: String) throws {
        root = try TestPaths.temporaryDirectory(label)
        let location = try StorageLocation(parsing: "file://" + root + "/store")
        provider = try StorageConnector(location: location).connect(create: true)
        device = try TestStores.create(paths: DevicePaths(database: root + "/device.db"), storage: location,
                                   manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "test", provider: provider)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    /// Writes `bytes` to `root/name` and returns the path.
    @discardableResult
    func writeFile(_ name: String, _ bytes: [UInt8]) throws -> String {
        let path = root + "/" + name
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { throw CovenError(.io, "cannot write \(path)") }
        return path
    }

    /// Stages a person's original and puts it in a new row; returns the file id.
    func userFile(_ name: String, _ bytes: [UInt8], place: Place) throws -> String {
        let path = try writeFile(name, bytes)
        let prepared = try Staging(device).prepareUserFile(path: path, namespace: "music", place: place)
        let result = try device.write(sql: "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file(:p), '')", parameters: ["p": .text(prepared.id)])
        return result.files[0]
    }

    /// Stages app bytes and puts them in a new row; returns the file id.
    func appFile(_ bytes: [UInt8], place: Place) throws -> String {
        let path = try writeFile("app-" + UUID().uuidString, bytes)
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        let staged = try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: "covers", place: place)
        let result = try device.write(sql: "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_staged(:s), '')", parameters: ["s": .text(staged.id)])
        return result.files[0]
    }

    /// A stored file referenced by a new row, stored the real way: staged for the cloud (a
    /// person's original for a user namespace, app bytes otherwise) and sent by the upload
    /// worker (``StoredFiles``); returns its id. A `hash` given replaces the record's content
    /// hash afterwards (a wrong one tests `integrity`).
    func storedFile(_ bytes: [UInt8], namespace: String = "music", hash: String? = nil) throws -> String {
        let id: String
        if device.manifest.namespace(namespace)?.kind == .user {
            let path = try writeFile("originals/" + UUID().uuidString, bytes)
            id = try StoredFiles.stageUser(device, path: path, namespace: namespace, table: "tracks")
        } else {
            id = try StoredFiles.stageApp(device, bytes: bytes, namespace: namespace, table: "tracks")
        }
        try StoredFiles.store(device, file: id)
        if let hash { try device.database.run("UPDATE coven_files SET hash = ?1 WHERE id = ?2", [hash, id]) }
        return id
    }

    func scalar(_ sql: String, _ parameters: [SQLBindable] = []) throws -> SQLValue {
        try device.database.scalar(sql, parameters)
    }

    /// Deterministic bytes.
    static func bytes(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
        var state = UInt32(seed) &* 2_654_435_761 &+ 1
        return (0..<count).map { _ in
            state = state &* 1_664_525 &+ 1_013_904_223
            return UInt8(truncatingIfNeeded: state >> 24)
        }
    }
}

/// Asserts that `body` throws a ``CovenError`` with `code`, and returns it.
@discardableResult
func assertCovenError<T>(_ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> T) -> CovenError? {
    do {
        _ = try body()
        XCTFail("expected \(code.rawValue), got success", file: file, line: line)
    } catch let error as CovenError {
        XCTAssertEqual(error.code, code, error.description, file: file, line: line)
        return error
    } catch {
        XCTFail("expected \(code.rawValue), got \(error)", file: file, line: line)
    }
    return nil
}

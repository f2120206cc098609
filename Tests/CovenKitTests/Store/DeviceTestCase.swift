import CovenKit
@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A test case with a fresh temporary folder, a music-library manifest and helpers to make a
/// device in it (real SQLite, a real `file://` store, real files).
class DeviceTestCase: XCTestCase {
    /// The case's folder, removed afterwards.
    var work = ""
    /// The S3 server the case's store is on (one per class, a prefix per test, through
    /// ``S3ClassServers``); nil: a `file://` store in the case's folder.
    class var s3Server: S3TestServer.Kind? { nil }
    /// The kind of store ``makeDevice(_:name:)`` makes: the one `coven init` makes (members)
    /// unless a class names the other.
    class var storeKind: TestStoreKind { .members }
    private static var classKey: String { String(describing: self) }
    /// The store of this test on S3, and the credentials of its server.
    private(set) var s3: (location: StorageLocation, environment: [String: String])?

    override class func setUp() {
        super.setUp()
        if let kind = s3Server { S3ClassServers.start(kind, for: classKey) }
    }

    override class func tearDown() {
        if s3Server != nil { S3ClassServers.stop(for: classKey) }
        super.tearDown()
    }

    override func setUpWithError() throws {
        work = FileManager.default.temporaryDirectory.appendingPathComponent("coven-test-\(UUID().uuidString.prefix(8))")
            .resolvingSymlinksInPath().path
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        guard Self.s3Server != nil else { return }
        let (server, bucket) = try S3ClassServers.server(for: Self.classKey)
        s3 = (server.location(bucket: bucket, prefix: "t-" + UUID().uuidString.lowercased().prefix(8)), server.environment)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// albums (audience column), tracks (write-once file, audience from the album), covers
    /// (bound file of at most 16 bytes), settings (shared-key, a trailing file column).
    static let albumManifest = """
        {
          "namespaces": [
            { "name": "music", "kind": "user", "budget": "2GiB", "kept": true },
            { "name": "covers", "kind": "app", "budget": 268435456 }
          ],
          "tables": [
            { "name": "albums", "identity": "uuid", "audience_column": "audience" },
            { "name": "tracks", "identity": "uuid", "audience_from": "album_id",
              "files": [ { "column": "file", "write_once": true } ] },
            { "name": "covers", "identity": "uuid", "audience_from": "album_id",
              "files": [ { "column": "file", "bound": true, "bound_limit": 16 } ] },
            { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, audience TEXT NOT NULL DEFAULT 'store', _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), title TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE covers (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    static let album = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f40"

    func manifest(_ json: String = DeviceTestCase.albumManifest) throws -> Manifest {
        try Manifest(json: Data(json.utf8))
    }

    var paths: DevicePaths { DevicePaths(database: work + "/dev/device.db") }
    var storeFolder: String { work + "/store" }

    /// Creates the store (on S3 when the class names a server) and the device of this case.
    @discardableResult
    func makeDevice(_ json: String = DeviceTestCase.albumManifest, name: String = "test") throws -> Device {
        try makeDevice(json, name: name, kind: Self.storeKind)
    }

    /// Creates the store of `kind` (on S3 when the class names a server) and the device of this
    /// case.
    @discardableResult
    func makeDevice(_ json: String = DeviceTestCase.albumManifest, name: String = "test", kind: TestStoreKind) throws -> Device {
        guard let s3 else { return try TestStores.create(paths: paths, storage: .file(directory: storeFolder), manifest: try manifest(json), name: name, kind: kind) }
        let provider = try StorageConnector(location: s3.location, environment: s3.environment).connect()
        return try TestStores.create(paths: paths, storage: s3.location, manifest: try manifest(json), name: name, provider: provider,
                                     environment: s3.environment, kind: kind)
    }

    /// The store's first device and `count - 1` more, named d0, d1, ….
    func makeDevices(_ count: Int) throws -> [Device] {
        let first = try makeDevice(name: "d0")
        return try [first] + (1..<count).map { try join("d\($0)", from: first) }
    }

    /// Another device of the store `device` is in, in the case's folder under `name`: of
    /// `device`'s member in a store of members.
    /// `started` is told the snapshot the join started from (``DeviceSetup/join(paths:storage:storeKey:name:environment:started:)``).
    func join(_ name: String, from device: Device, started: (SnapshotJoin) -> Void = { _ in }) throws -> Device {
        try TestStores.join(paths: DevicePaths(database: work + "/\(name)/device.db"), from: device, name: name, environment: s3?.environment, started: started)
    }

    /// A device of the store `device` is in, for the member whose identity is `identity`.
    func join(_ name: String, from device: Device, identity: MemberIdentity, started: (SnapshotJoin) -> Void = { _ in }) throws -> Device {
        try DeviceSetup.join(paths: DevicePaths(database: work + "/\(name)/device.db"), storage: device.storage, identity: identity, name: name,
                        environment: s3?.environment, started: started)
    }

    /// The identity of the member `device` belongs to: in a store ``makeDevice(_:name:)`` made,
    /// the store's first member (``TestStores/owner``), as `coven init` makes it.
    func ownerIdentity(_ device: Device) throws -> MemberIdentity {
        try XCTUnwrap(try TestStores.identity(of: device), "a store without members")
    }

    /// A circle of `device`'s member (made the store's first member, alice, when the store has
    /// none yet) and `members`: its id.
    func makeCircle(_ device: Device, name: String = "couple", members: [String] = []) throws -> String {
        if try Members(device).memberID() == nil { try Members(device).establish(name: "alice") }
        return try Circles(device).create(name: name, members: members).circle.id
    }

    /// Writes `bytes` to `name` under the case's folder and returns its path.
    @discardableResult
    func file(_ name: String, _ bytes: [UInt8]) throws -> String {
        let path = work + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    func file(_ name: String, _ text: String) throws -> String { try file(name, Array(text.utf8)) }

    /// Stages app bytes from a file.
    func stageApp(_ device: Device, _ path: String, namespace: String = "covers", place: Place = .cloud) throws -> StagedFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CovenError.posix("open", path: path) }
        defer { close(fd) }
        return try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: namespace, place: place)
    }

    /// Stages `text` as app bytes.
    func stageApp(_ device: Device, text: String, namespace: String = "covers", place: Place = .cloud) throws -> StagedFile {
        try stageApp(device, try file("app-\(UUID().uuidString.prefix(8)).bin", text), namespace: namespace, place: place)
    }

    /// One integer from SQL.
    func count(_ device: Device, _ sql: String, _ parameters: [SQLBindable] = []) throws -> Int64 {
        try device.database.scalar(sql, parameters).intValue ?? -1
    }

    /// Asserts that `body` throws a ``CovenError`` with `code`, and returns it.
    @discardableResult
    func assertCovenError<T>(_ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> T) -> CovenError? {
        do {
            _ = try body()
            XCTFail("expected \(code.rawValue), got success", file: file, line: line)
            return nil
        } catch let error as CovenError {
            XCTAssertEqual(error.code, code, error.description, file: file, line: line)
            return error
        } catch {
            XCTFail("expected \(code.rawValue), got \(error)", file: file, line: line)
            return nil
        }
    }

    /// The built `coven` binary (next to the test bundle, or `.build/debug/coven`).
    func covenBinary() throws -> String {
        if let path = ProcessInfo.processInfo.environment["COVEN_BIN"], !path.isEmpty { return path }
        var candidates: [String] = []
        if let test = CommandLine.arguments.first {
            candidates.append(URL(fileURLWithPath: test).deletingLastPathComponent().appendingPathComponent("coven").path)
        }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(repository.appendingPathComponent(".build/debug/coven").path)
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw XCTSkip("no coven binary (run 'swift build' first)")
    }

    /// Runs the real coven on this case's device; returns status, stdout and stderr.
    func coven(_ arguments: [String], stdin: String? = nil, timeout: TimeInterval = 60) throws -> (status: Int32, stdout: String, stderr: String) {
        let out = work + "/.out-\(UUID().uuidString.prefix(8))"
        let err = out + ".err"
        defer { unlink(out); unlink(err) }
        var environment = ProcessInfo.processInfo.environment
        environment["COVEN_DB"] = paths.database
        environment["NO_COLOR"] = "1"
        let result = try Spawn.run(try covenBinary(), arguments, environment: environment, directory: work,
                                   stdin: stdin, stdout: out, stderr: err, timeout: timeout)
        XCTAssertFalse(result.timedOut, "coven \(arguments) timed out")
        let text = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return (result.status, text(out), text(err))
    }
}

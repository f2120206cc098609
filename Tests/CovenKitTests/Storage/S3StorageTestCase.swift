@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The loopback S3 servers of test classes: one server and one bucket per class, started in
/// the class's `setUp()` and stopped in its `tearDown()`.
///
/// `COVEN_SKIP_S3=1` skips them; otherwise a server that fails to start fails every test of
/// its class.
enum S3ClassServers {
    nonisolated(unsafe) private static var servers: [String: (server: S3TestServer, bucket: String)] = [:]
    nonisolated(unsafe) private static var failures: [String: String] = [:]

    static var skipped: Bool { ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" }

    /// Starts `kind` with a fresh bucket for the class named `key`.
    static func start(_ kind: S3TestServer.Kind, for key: String) {
        guard !skipped else { return }
        do {
            let server = try S3TestServer.start(kind)
            let bucket = "coven-test-" + UUID().uuidString.lowercased().prefix(8)
            try server.makeBucket(bucket)
            servers[key] = (server, bucket)
        } catch {
            failures[key] = "cannot start the \(kind.rawValue) S3 server: \(error.asCovenError)"
        }
    }

    static func stop(for key: String) {
        servers.removeValue(forKey: key)?.server.stop()
    }

    /// The class's server and bucket, for a test: skips it with `COVEN_SKIP_S3=1`, fails it
    /// when the server did not start.
    static func server(for key: String) throws -> (server: S3TestServer, bucket: String) {
        if skipped { throw XCTSkip("COVEN_SKIP_S3=1") }
        guard let found = servers[key] else {
            let reason = failures[key] ?? "the S3 server did not start"
            XCTFail(reason)
            throw CovenError(.internal, reason)
        }
        return found
    }
}

/// The base of the S3 integration tests: one loopback server and one bucket per test class
/// (``S3ClassServers``).
class S3StorageTestCase: XCTestCase {
    /// Which server the subclass runs against.
    class var serverKind: S3TestServer.Kind { .moto }

    private static var classKey: String { String(describing: self) }

    override class func setUp() {
        super.setUp()
        S3ClassServers.start(serverKind, for: classKey)
    }

    override class func tearDown() {
        S3ClassServers.stop(for: classKey)
        super.tearDown()
    }

    /// This class's server.
    var server: S3TestServer!
    /// This class's bucket.
    var bucket = ""
    /// A prefix of this test's own, so tests never see each other's keys.
    var prefix = ""

    override func setUpWithError() throws {
        (server, bucket) = try S3ClassServers.server(for: Self.classKey)
        prefix = "t-" + UUID().uuidString.lowercased().prefix(8)
    }

    /// Options for tests: the defaults without the environment's overrides.
    func testOptions(retries: Int = 3, bytesTimeout: Double = 120) -> StorageOptions {
        var options = StorageOptions(environment: [:])
        options.requestRetries = retries
        options.bytesTimeout = bytesTimeout
        options.controlTimeout = 30
        return options
    }

    /// A provider for this test's prefix.
    func makeStorage(options: StorageOptions? = nil, endpoint: String? = nil, secret: String? = nil) throws -> S3Storage {
        let storage = try server.storage(
            bucket: bucket, prefix: prefix, options: options ?? testOptions(), endpoint: endpoint, secretAccessKey: secret)
        // Retry quickly in tests.
        return storage
    }

    /// Deterministic bytes, different per seed.
    func pattern(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            var state = 0x9E37_79B9_7F4A_7C15 &* UInt64(seed &+ 1)
            for index in words.indices {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                words[index] = state
            }
        }
        return bytes
    }

    /// Reads a whole object or range into memory.
    func read(_ storage: StorageProvider, _ key: String, _ range: Range<Int64>? = nil) throws -> [UInt8] {
        var out: [UInt8] = []
        try storage.get(key, range: range) { out.append(contentsOf: $0) }
        return out
    }

    func assertStorageError(
        _ expression: @autoclosure () throws -> Any?, code: ErrorCode = .storage, failure: StorageFailure?,
        file: StaticString = #filePath, line: UInt = #line, _ check: ((CovenError) -> Void)? = nil
    ) {
        XCTAssertThrowsError(try expression(), file: file, line: line) { error in
            let error = error.asCovenError
            XCTAssertEqual(error.code, code, "\(error)", file: file, line: line)
            if let failure { XCTAssertEqual(error.storageFailure, failure, "\(error)", file: file, line: line) }
            check?(error)
        }
    }

    // MARK: - Checks shared by every server

    func checkObjectsRoundTrip() throws {
        let storage = try makeStorage()
        let data = pattern(100_000)
        try storage.put("files/dev/a", data: data)
        XCTAssertEqual(try read(storage, "files/dev/a"), data)
        XCTAssertEqual(try storage.head("files/dev/a"), ObjectInfo(key: "files/dev/a", size: 100_000))

        var total: Int64?
        var got: [UInt8] = []
        total = try storage.get("files/dev/a", range: 1000..<2000) { got.append(contentsOf: $0) }
        XCTAssertEqual(got, Array(data[1000..<2000]))
        XCTAssertEqual(total, 100_000)
        XCTAssertEqual(try read(storage, "files/dev/a", 99_990..<200_000), Array(data[99_990...]), "clipped to the end")
        XCTAssertEqual(try read(storage, "files/dev/a", 5..<5), [])
        assertStorageError(try self.read(storage, "files/dev/a", 100_000..<100_010), code: .rangeOutOfBounds, failure: nil)
        assertStorageError(try self.read(storage, "files/dev/a", 200_000..<200_000), code: .rangeOutOfBounds, failure: nil)

        try storage.put("store.json", data: [])
        XCTAssertEqual(try read(storage, "store.json"), [])
        XCTAssertEqual(try storage.head("store.json")?.size, 0)

        XCTAssertNil(try storage.head("files/dev/none"))
        assertStorageError(try self.read(storage, "files/dev/none"), code: .missing, failure: nil) { error in
            XCTAssertEqual(error.details["key"], "files/dev/none")
        }
        try storage.delete("files/dev/a")
        XCTAssertNil(try storage.head("files/dev/a"))
        try storage.delete("files/dev/a")
    }

    func checkAwkwardKeys() throws {
        let storage = try makeStorage()
        let keys = [
            "files/dev/with space", "files/dev/plus+sign", "files/dev/unicodé/ключ", "files/dev/percent%41",
            "files/dev/eq=amp&q?hash#", "files/dev/tilde~star*(paren)'quote", "files/dev/trailing space ",
        ]
        for (index, key) in keys.enumerated() {
            try storage.put(key, data: pattern(100 + index, seed: UInt8(index)))
        }
        for (index, key) in keys.enumerated() {
            XCTAssertEqual(try read(storage, key), pattern(100 + index, seed: UInt8(index)), key)
            XCTAssertEqual(try storage.head(key)?.size, Int64(100 + index), key)
            XCTAssertEqual(try read(storage, key, 1..<3), Array(pattern(100 + index, seed: UInt8(index))[1..<3]), key)
        }
        let listed = try storage.list(prefix: "files/dev/")
        XCTAssertEqual(listed.map(\.key), keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        XCTAssertEqual(try storage.list(prefix: "files/dev/unicodé/").map(\.key), ["files/dev/unicodé/ключ"])
        XCTAssertEqual(try storage.list(prefix: "files/dev/with ").map(\.key), ["files/dev/with space"])
        for key in keys { try storage.delete(key) }
        XCTAssertEqual(try storage.list(prefix: "files/").count, 0)
    }

    func checkListPaging() throws {
        let storage = try makeStorage()
        storage.listPageSize = 4
        let keys = (0..<23).map { String(format: "changes/dev/%04d", $0) } + ["changes/other/0001", "files/x"]
        for key in keys { try storage.put(key, data: Array(key.utf8)) }
        let listed = try storage.list(prefix: "changes/dev/")
        XCTAssertEqual(listed.map(\.key), Array(keys[0..<23]))
        XCTAssertEqual(listed.first?.size, Int64("changes/dev/0000".utf8.count))
        XCTAssertEqual(try storage.list(prefix: "").count, keys.count)
        XCTAssertEqual(try storage.list(prefix: "changes/").count, 24)
        // Another store in the same bucket is invisible.
        let neighbour = try server.storage(bucket: bucket, prefix: prefix + "-other", options: testOptions())
        XCTAssertEqual(try neighbour.list(prefix: "").count, 0)
        XCTAssertNil(try neighbour.head("files/x"))
    }

    func checkPutIfAbsent() throws {
        let storage = try makeStorage()
        XCTAssertTrue(try storage.putIfAbsent("devices/d1", data: [1, 2, 3]))
        XCTAssertFalse(try storage.putIfAbsent("devices/d1", data: [9]))
        let other = try makeStorage()
        XCTAssertFalse(try other.putIfAbsent("devices/d1", data: [8]))
        XCTAssertEqual(try read(storage, "devices/d1"), [1, 2, 3])
    }

    func checkMultipartResumeAndComplete() throws {
        let mib = 1024 * 1024
        let data = pattern(11 * mib, seed: 3)
        let key = "files/dev/multipart object"
        var first: S3Storage? = try makeStorage()
        guard let uploader = first else { return }
        let partSize = Int(uploader.minimumPartSize)
        let id = try uploader.createMultipart(key, totalSize: Int64(data.count), partSize: Int64(partSize))
        let part1 = try data[0..<partSize].withUnsafeBytes {
            try uploader.uploadPart(key, uploadID: id, number: 1, offset: 0, data: $0)
        }
        let part3 = try data[(2 * partSize)...].withUnsafeBytes {
            try uploader.uploadPart(key, uploadID: id, number: 3, offset: Int64(2 * partSize), data: $0)
        }
        first = nil  // "crash": a new instance resumes from what the server confirms

        let resumed = try makeStorage()
        resumed.partsPageSize = 1
        let confirmed = try resumed.listParts(key, uploadID: id)
        XCTAssertEqual(confirmed.map(\.number), [1, 3])
        XCTAssertEqual(confirmed.map(\.size), [Int64(partSize), Int64(data.count - 2 * partSize)])
        XCTAssertEqual(confirmed.map(\.etag), [part1.etag, part3.etag])
        let part2 = try data[partSize..<(2 * partSize)].withUnsafeBytes {
            try resumed.uploadPart(key, uploadID: id, number: 2, offset: Int64(partSize), data: $0)
        }
        XCTAssertNil(try resumed.head(key))
        try resumed.completeMultipart(key, uploadID: id, parts: confirmed + [part2])
        XCTAssertEqual(try resumed.head(key)?.size, Int64(data.count))
        let back = try read(resumed, key)
        XCTAssertEqual(back.count, data.count)
        XCTAssertTrue(back == data, "the completed object differs")
        XCTAssertEqual(try read(resumed, key, Int64(partSize - 3)..<Int64(partSize + 3)), Array(data[(partSize - 3)..<(partSize + 3)]))
        assertStorageError(try resumed.listParts(key, uploadID: id), code: .missing, failure: nil)
    }

    func checkMultipartAbort() throws {
        let storage = try makeStorage()
        let key = "files/dev/abandoned"
        XCTAssertEqual(try storage.uploadsInProgress(key), [])
        let id = try storage.createMultipart(key, totalSize: 10, partSize: 10)
        // Another key that the first is a prefix of is not one of its uploads.
        let longer = try storage.createMultipart(key + "-2", totalSize: 10, partSize: 10)
        _ = try pattern(10).withUnsafeBytes { try storage.uploadPart(key, uploadID: id, number: 1, offset: 0, data: $0) }
        XCTAssertEqual(try storage.uploadsInProgress(key), [id], "the upload a lost answer would leave is found by its key")
        try storage.abortMultipart(key, uploadID: id)
        XCTAssertEqual(try storage.uploadsInProgress(key), [])
        XCTAssertEqual(try storage.uploadsInProgress(key + "-2"), [longer])
        try storage.abortMultipart(key + "-2", uploadID: longer)
        assertStorageError(try storage.listParts(key, uploadID: id), code: .missing, failure: nil)
        assertStorageError(
            try self.pattern(10).withUnsafeBytes { try storage.uploadPart(key, uploadID: id, number: 2, offset: 0, data: $0) },
            code: .missing, failure: nil)
        try storage.abortMultipart(key, uploadID: id)
        XCTAssertNil(try storage.head(key))
    }

    func checkWrongSecretIsDeniedNeverAbsent() throws {
        let good = try makeStorage()
        try good.put("files/dev/a", data: [1])
        let bad = try makeStorage(options: testOptions(retries: 0), secret: "not-the-secret")
        for operation: () throws -> Any? in [
            { try bad.head("files/dev/a") }, { try bad.head("files/dev/none") }, { try self.read(bad, "files/dev/a") },
            { try bad.list(prefix: "") }, { try bad.put("files/dev/b", data: [2]) }, { try bad.delete("files/dev/a") },
        ] {
            assertStorageError(try operation(), failure: .denied) { error in
                XCTAssertEqual(error.details["status"], "403")
                XCTAssertNotNil(error.hint)
            }
        }
        XCTAssertEqual(try good.head("files/dev/a")?.size, 1)
    }

    func checkMissingBucketIsAnError() throws {
        let storage = try server.storage(bucket: "coven-no-such-bucket", options: testOptions())
        assertStorageError(try storage.head("files/x"), failure: .provider)
        assertStorageError(try self.read(storage, "files/x"), failure: .provider)
        assertStorageError(try storage.list(prefix: ""), failure: .provider)
    }

    /// Times a 64 MiB upload in 8 MiB parts and a whole GET, and prints the rates.
    func checkThroughput() throws {
        let mib = 1024 * 1024
        let partSize = 8 * mib
        let data = pattern(64 * mib, seed: 7)
        let storage = try makeStorage()
        let key = "files/dev/throughput"
        var clock = ContinuousClock.now
        let id = try storage.createMultipart(key, totalSize: Int64(data.count), partSize: Int64(partSize))
        var parts: [UploadedPart] = []
        try data.withUnsafeBytes { raw in
            for index in 0..<(data.count / partSize) {
                let slice = UnsafeRawBufferPointer(rebasing: raw[(index * partSize)..<((index + 1) * partSize)])
                parts.append(try storage.uploadPart(key, uploadID: id, number: index + 1, offset: Int64(index * partSize), data: slice))
            }
        }
        try storage.completeMultipart(key, uploadID: id, parts: parts)
        let put = ContinuousClock.now - clock
        clock = ContinuousClock.now
        var received = 0
        try storage.get(key, range: nil) { received += $0.count }
        let get = ContinuousClock.now - clock
        XCTAssertEqual(received, data.count)
        let hash = try SHA256()
        try storage.get(key, range: nil) { hash.update($0) }
        XCTAssertEqual(hash.finish(), SHA256.digest(data))
        func rate(_ duration: Duration) -> String {
            let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
            return String(format: "%.2f s, %.0f MiB/s", seconds, 64 / seconds)
        }
        print("storage throughput (\(Self.serverKind.rawValue)): 64 MiB multipart PUT (8 x 8 MiB) \(rate(put)); GET \(rate(get))")
        try storage.delete(key)
    }
}

/// The S3 checks against `start-s3-server` (moto behind the SigV4-checking launcher).
final class MotoS3StorageTests: S3StorageTestCase {
    override class var serverKind: S3TestServer.Kind { .moto }

    func testObjectsRoundTrip() throws { try checkObjectsRoundTrip() }
    func testAwkwardKeys() throws { try checkAwkwardKeys() }
    func testListPaging() throws { try checkListPaging() }
    func testPutIfAbsent() throws { try checkPutIfAbsent() }
    func testMultipartResumeAndComplete() throws { try checkMultipartResumeAndComplete() }
    func testMultipartAbort() throws { try checkMultipartAbort() }
    func testWrongSecretIsDeniedNeverAbsent() throws { try checkWrongSecretIsDeniedNeverAbsent() }
    func testMissingBucketIsAnError() throws { try checkMissingBucketIsAnError() }
    func testThroughput64MiB() throws { try checkThroughput() }
}

/// The same checks against `start-seaweedfs-server` (SeaweedFS `weed mini`).
final class SeaweedFSS3StorageTests: S3StorageTestCase {
    override class var serverKind: S3TestServer.Kind { .seaweedfs }

    func testObjectsRoundTrip() throws { try checkObjectsRoundTrip() }
    func testAwkwardKeys() throws { try checkAwkwardKeys() }
    func testListPaging() throws { try checkListPaging() }
    func testPutIfAbsent() throws { try checkPutIfAbsent() }
    func testMultipartResumeAndComplete() throws { try checkMultipartResumeAndComplete() }
    func testMultipartAbort() throws { try checkMultipartAbort() }
    func testWrongSecretIsDeniedNeverAbsent() throws { try checkWrongSecretIsDeniedNeverAbsent() }
    func testMissingBucketIsAnError() throws { try checkMissingBucketIsAnError() }
    func testThroughput64MiB() throws { try checkThroughput() }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Reads and fetch-kept against the loopback S3 server (moto) through the fault proxy, which
/// counts the body bytes it forwards and injects 503s and servers that ignore Range.
final class ReadS3Tests: ReadTestCase {
    nonisolated(unsafe) private static var server: S3TestServer?
    nonisolated(unsafe) private static var failure: String?
    var proxy: FaultProxy!
    let chunk = Int(ObjectLayout.chunkSize)
    /// The variables this test sets, with their values before it, restored afterwards (another
    /// test's S3TestServer.start would otherwise reuse this class's server once it is gone).
    var savedEnvironment: [(String, String?)] = []

    override class func setUp() {
        super.setUp()
        guard ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] != "1" else { return }
        do {
            server = try S3TestServer.start(.moto)
        } catch {
            failure = "cannot start the moto S3 server: \(error.asCovenError)"
        }
    }

    override class func tearDown() {
        server?.stop()
        server = nil
        super.tearDown()
    }

    override func setUpWithError() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        guard let server = Self.server else {
            XCTFail(Self.failure ?? "no S3 server")
            throw CovenError(.internal, Self.failure ?? "no S3 server")
        }
        let variables = server.environment.merging(["COVEN_STORAGE_RETRIES": "1"]) { a, _ in a }
        savedEnvironment = variables.keys.map { ($0, ProcessInfo.processInfo.environment[$0]) }
        for (name, value) in variables { setenv(name, value, 1) }
        folder = try TestPaths.temporaryDirectory("read-s3")
        let bucket = "coven-read-" + UUID().uuidString.lowercased().prefix(8)
        try server.makeBucket(bucket)
        proxy = try FaultProxy(upstream: server.endpoint)
        device = try makeDevice(storage: .s3(bucket: bucket, prefix: "store", endpoint: proxy.endpoint, region: server.region, pathStyle: true))
    }

    override func tearDownWithError() throws {
        proxy?.stop()
        for (name, value) in savedEnvironment {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
        try super.tearDownWithError()
    }

    func bodyBytes() -> Int { proxy.stats()["body_bytes"] ?? 0 }

    /// fetch-kept keeps each worker's storage connection from file to file: 24 small kept files
    /// fetched by two workers open a connection or two each, not one per file. (Before, each
    /// file's read made its own curl handle, and a connection with it: 24 or more.)
    func testFetchKeptKeepsEachWorkersConnectionFromFileToFile() throws {
        for index in 0..<24 { _ = try storedFile(pattern(1000 + index, seed: UInt64(index)), namespace: "keep") }
        let before = proxy.stats()["connections"] ?? 0
        let result = try KeptFiles(device).fetchKept(parallel: 2)
        XCTAssertEqual(result.fetched.count, 24)
        let opened = (proxy.stats()["connections"] ?? 0) - before
        XCTAssertGreaterThan(opened, 0)
        XCTAssertLessThanOrEqual(opened, 4, "a connection per worker, not one per file")
    }

    /// make-device-only keeps each worker's storage connection from file to file, as fetch-kept.
    func testMakeDeviceOnlyKeepsEachWorkersConnectionFromFileToFile() throws {
        var requests: [DeviceOnlyRequest] = []
        for index in 0..<24 {
            let path = folder + "/original-\(index)"
            try Data(pattern(1000 + index, seed: UInt64(100 + index))).write(to: URL(fileURLWithPath: path))
            let id = try StoredFiles.stageUser(device, path: path, namespace: "originals", table: "originals")
            try StoredFiles.store(device, file: id)
            requests.append(DeviceOnlyRequest(file: id, names: ["f\(index)"], input: "argument \(index + 1)"))
        }
        let back = folder + "/back"
        try FileManager.default.createDirectory(atPath: back, withIntermediateDirectories: true)
        let before = proxy.stats()["connections"] ?? 0
        let copies = try DeviceOnlyMaker(device).makeDeviceOnly(folder: back, requests: requests, parallel: 2)
        XCTAssertEqual(copies.count, 24)
        let opened = (proxy.stats()["connections"] ?? 0) - before
        XCTAssertGreaterThan(opened, 0)
        XCTAssertLessThanOrEqual(opened, 4, "a connection per worker, not one per file")
    }

    func testSmallRangeTransfersOnlyItsChunks() throws {
        let bytes = pattern(30 * chunk + 17)
        let id = try storedFile(bytes)
        let before = bodyBytes()
        let offset = 11 * chunk + 100
        let (got, report) = try read(id, ReadRange(offset: Int64(offset), length: Int64(2 * chunk)))
        XCTAssertTrue(got == Array(bytes[offset..<(offset + 2 * chunk)]))
        XCTAssertEqual(bodyBytes() - before, 3 * Int(ObjectLayout.sealedChunkSize), "chunks 11, 12 and 13, counted at the proxy")
        XCTAssertEqual(report.bytesFetched, 3 * ObjectLayout.sealedChunkSize)
        // Read again: from the cache, nothing crosses the proxy.
        let again = bodyBytes()
        XCTAssertEqual(try read(id, ReadRange(offset: Int64(offset), length: 10)).1.source, .cache)
        XCTAssertEqual(bodyBytes(), again)
    }

    func testPartialResumesWithRangeAndSurvivesAServerIgnoringRange() throws {
        let bytes = pattern(20 * chunk + 3)
        let id = try storedFile(bytes)
        _ = try read(id, ReadRange(offset: 0, length: Int64(4 * chunk)))
        let before = bodyBytes()
        // Resume: only the missing chunks cross, with Range requests.
        let (path, report) = try Reader(device).holdFile(id)
        XCTAssertEqual(bodyBytes() - before, Int(ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) - ObjectLayout.headerSize - 4 * ObjectLayout.sealedChunkSize))
        XCTAssertEqual(report.requests, 2, "chunks 4-19 and 20: at most 1 MiB per request")
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
        // A server that answers 200 with the whole object: the bytes before the range are
        // dropped and the read is still exact.
        try Cache(device).clearCache()
        _ = try read(id, ReadRange(offset: 0, length: 10))
        try proxy.inject(#"{"mode": "ignore_range", "count": -1}"#)
        let whole = bodyBytes()
        let (tail, tailReport) = try read(id, ReadRange(offset: Int64(18 * chunk), length: Int64(2 * chunk + 3)))
        XCTAssertTrue(tail == Array(bytes[(18 * chunk)...]))
        XCTAssertEqual(tailReport.bytesFetched, 2 * ObjectLayout.sealedChunkSize + 3 + ObjectLayout.tagSize)
        XCTAssertGreaterThan(bodyBytes() - whole, Int(ObjectLayout.encryptedSize(plaintextSize: Int64(18 * chunk))), "the proxy sent the whole object")
        XCTAssertGreaterThanOrEqual(proxy.stats()["ignore_range"] ?? 0, 1)
        let (all, _) = try read(id)
        XCTAssertTrue(all == bytes)
    }

    func testAShortButSelfConsistent206IsRetriedAndNeverIntegrity() throws {
        let bytes = pattern(20 * chunk + 3)
        let id = try storedFile(bytes)
        let offset = 3 * chunk + 10
        // Once: the answer covers part of the range, its headers agreeing; the retry asks for
        // the rest and the read is exact.
        try proxy.inject(#"{"mode": "short_range", "after_bytes": 70000, "method": "GET", "path": "/files/", "count": 1}"#)
        let (got, _) = try read(id, ReadRange(offset: Int64(offset), length: Int64(5 * chunk)))
        XCTAssertTrue(got == Array(bytes[offset..<(offset + 5 * chunk)]))
        XCTAssertEqual(proxy.stats()["short_range"], 1)
        // Every time: a storage fault after the retries, never integrity (the object is intact).
        try Cache(device).clearCache()
        try proxy.inject(#"{"mode": "short_range", "after_bytes": 70000, "method": "GET", "path": "/files/", "count": -1}"#)
        do {
            _ = try read(id, ReadRange(offset: Int64(offset), length: Int64(5 * chunk)))
            XCTFail("expected storage")
        } catch {
            let error = error.asCovenError
            XCTAssertEqual(error.code, .storage, "\(error)")
            XCTAssertTrue(error.message.hasPrefix("storage answered short to get '"), error.message)
            XCTAssertTrue(error.cause?.hasPrefix("HTTP 206 ended at byte") ?? false, error.cause ?? "")
        }
        XCTAssertEqual(proxy.stats()["short_range"], 3, "the first answer and one retry (COVEN_STORAGE_RETRIES=1)")
        // A body cut short of its Content-Length: retried too, and storage when it persists.
        try proxy.inject(#"{"mode": "reset", "after_bytes": 70000, "method": "GET", "path": "/files/", "count": -1}"#)
        assertCode(.storage) { try read(id, ReadRange(offset: Int64(offset), length: Int64(5 * chunk))) }
        try proxy.clear()
        XCTAssertTrue(try read(id).0 == bytes, "the object was intact all along")
    }

    func testAnObjectWithBytesAppendedIsDamage() throws {
        let bytes = pattern(4 * chunk + 3)
        let id = try storedFile(bytes)
        let object = try device.requireFile(id).coordinates.object
        let provider = try StorageConnector(location: device.storage).connect()
        var sealed: [UInt8] = []
        try provider.get(object, range: nil) { sealed.append(contentsOf: $0) }
        try provider.put(object, data: sealed + [0, 0, 0, 0])
        // The range read learns the object's size from Content-Range.
        assertCode(.integrity) { try read(id, ReadRange(offset: Int64(chunk), length: 100)) }
        assertCode(.integrity) { try read(id) }
    }

    func testFetchKeptWaitsOutAShortRetryAfter() throws {
        let a = try storedFile(pattern(10), namespace: "keep")
        let b = try storedFile(pattern(chunk), namespace: "keep")
        try proxy.inject(#"{"mode": "status", "status": 503, "retry_after": 45, "method": "GET", "count": 1}"#)
        var slept: [Double] = []
        // One file at a time: the wait asked for is waited out once, then the fetch goes on.
        let result = try KeptFiles(device).fetchKept(parallel: 1, sleep: { slept.append($0) })
        XCTAssertEqual(result.stop, .done)
        XCTAssertEqual(slept, [45])
        XCTAssertEqual(result.waited, [45])
        XCTAssertEqual(result.fetched.map(\.file), [a, b])
    }

    func testFetchKeptFetchesSeveralFilesAtOnce() throws {
        var files: [String] = []
        for index in 0..<6 { files.append(try storedFile(pattern(1000 + index), namespace: "keep")) }
        // The first file's GET goes unanswered for 10 s: one fetch at a time would hold every
        // other file behind it. (The others get 9.5 s: a clean clone's busy machine took over
        // 3.5 s for them.)
        try proxy.inject(#"{"mode": "stall", "seconds": 10, "method": "GET", "path": "/files/", "before": true, "count": 1}"#)
        let paths = device.paths
        let done = DispatchSemaphore(value: 0)
        let outcome = FetchOutcome()
        Thread.detachNewThread {
            outcome.set(Result { try KeptFiles(Device.open(paths: paths)).fetchKept() })
            done.signal()
        }
        let deadline = Date().addingTimeInterval(9.5)
        var complete: Int64 = 0
        while Date() < deadline {
            complete = try device.database.scalar("SELECT count(*) FROM coven_cache WHERE complete > 0").intValue ?? 0
            if complete >= 5 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertEqual(complete, 5, "the other files were fetched while the first one's request hung")
        // One request stalled, no more (the proxy once faulted two or three of the GETs arriving
        // together, each holding its file back as long: the test's flakiness; FaultProxyTests).
        let requests = proxy.requests()
        XCTAssertEqual(requests.filter { $0.hasSuffix(" stall") }.count, 1, requests.joined(separator: "\n"))
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        let result = try XCTUnwrap(outcome.value).get()
        XCTAssertEqual(result.stop, .done)
        XCTAssertEqual(result.fetched.map(\.file), files, "listed smallest first")
    }

    func testFetchKeptStopsWhenTheServerAsksForALongerWait() throws {
        _ = try storedFile(pattern(10), namespace: "keep")
        _ = try storedFile(pattern(chunk), namespace: "keep")
        try proxy.inject(#"{"mode": "status", "status": 503, "retry_after": 120, "method": "GET", "count": -1}"#)
        var slept: [Double] = []
        let result = try KeptFiles(device).fetchKept(sleep: { slept.append($0) })
        XCTAssertEqual(result.stop, .throttled)
        XCTAssertEqual(result.stopError?.retryAfter, 120)
        XCTAssertEqual(slept, [])
        XCTAssertEqual(result.fetched.count, 0)
        XCTAssertEqual(result.remaining, 2)
    }

    func testUnreachableStorageFailsPromptly() throws {
        let id = try storedFile(pattern(3 * chunk), namespace: "keep")
        _ = try read(id, ReadRange(offset: 0, length: 1))
        // Point the device at a closed port.
        guard case .s3(let bucket, let prefix, _, let region, let style) = device.storage else { return XCTFail("not s3") }
        let closed = StorageLocation.s3(bucket: bucket, prefix: prefix, endpoint: "http://127.0.0.1:1", region: region, pathStyle: style)
        try device.database.run("UPDATE coven_meta SET value = ?1 WHERE key = 'storage'", [closed.description])
        let paths = device.paths
        device = nil
        device = try Device.open(paths: paths)
        XCTAssertEqual(try read(id, ReadRange(offset: 0, length: 1)).0.count, 1, "cached chunks still read")
        let started = Date()
        do {
            _ = try read(id, ReadRange(offset: Int64(2 * chunk), length: 1))
            XCTFail("expected storage")
        } catch {
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertEqual(error.asCovenError.storageFailure, .network)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.stop, .offline)
    }
}

/// The result of a fetch-kept run on another thread. @unchecked: under `lock`.
private final class FetchOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<FetchKeptResult, Error>?
    func set(_ value: Result<FetchKeptResult, Error>) { lock.lock(); result = value; lock.unlock() }
    var value: Result<FetchKeptResult, Error>? { lock.lock(); defer { lock.unlock() }; return result }
}

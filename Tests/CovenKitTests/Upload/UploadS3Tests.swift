@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The upload worker against the loopback moto server, through the fault-injecting proxy.
final class UploadS3Tests: S3StorageTestCase {
    override class func setUp() {
        // moto's own setting: parts of 64 KiB so multipart uploads stay small in tests.
        setenv("S3_UPLOAD_PART_MIN_SIZE", "65536", 1)
        super.setUp()
    }

    var proxy: FaultProxy!

    override func setUpWithError() throws {
        try super.setUpWithError()
        proxy = try FaultProxy(upstream: server.endpoint)
    }

    override func tearDown() {
        proxy?.stop()
        super.tearDown()
    }

    func makeFixture() throws -> UploadFixture {
        try UploadFixture(
            location: .s3(bucket: bucket, prefix: prefix, endpoint: proxy.endpoint, region: server.region, pathStyle: true),
            environment: server.environment)
    }

    let multipart = ["COVEN_UPLOAD_PART_SIZE": "65536", "COVEN_UPLOAD_SINGLE_LIMIT": "100000"]

    /// Requests for `object` that reached the provider (not injected faults), by method.
    func forwarded(_ object: String, method: String) -> [String] {
        proxy.requests().filter { $0.hasPrefix(method + " ") && $0.contains(object) && $0.hasSuffix(" forwarded") }
    }

    func testMultipartAndSingleUploadsEndToEnd() throws {
        let fixture = try makeFixture()
        let big = UploadFixture.bytes(300_000, seed: 21)
        let file = try fixture.addOriginal("big.bin", big)
        let small = try fixture.addOriginal("small.bin", UploadFixture.bytes(10, seed: 22))
        let summary = try fixture.run(settings: multipart)
        XCTAssertTrue(summary.complete)
        XCTAssertEqual(try fixture.storedPlaintext(file), big)
        XCTAssertEqual(try fixture.storedPlaintext(small), UploadFixture.bytes(10, seed: 22))
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file, environment: server.environment), .available)
        let object = try fixture.record(file).coordinates.object
        // Five parts of whole sealed chunks, each sent once.
        let parts = forwarded(object, method: "PUT")
        XCTAssertEqual(parts.count, 5, parts.joined(separator: "\n"))
        for number in 1...5 { XCTAssertEqual(parts.filter { $0.contains("partNumber=\(number)&") }.count, 1) }
    }

    func testServerErrorIsRetried() throws {
        let fixture = try makeFixture()
        let file = try fixture.addOriginal("a.bin", UploadFixture.bytes(1000))
        try proxy.inject(#"{"mode": "status", "status": 500, "method": "PUT", "count": 1}"#)
        let summary = try fixture.run()
        XCTAssertEqual(summary.retried, 1)
        XCTAssertEqual(summary.stored, 1)
        XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(1000))
    }

    /// One PUT of a batch of small files fails: the batch's other files are stored and recorded
    /// with it, each sent once; the failed one is retried later in the run, and sent once more.
    func testOneFailedPutOfABatchIsRetriedAloneTheOthersAreStoredOnce() throws {
        let fixture = try makeFixture()
        var files: [String] = []
        for index in 0..<10 {
            files.append(try fixture.addOriginal("b\(index).bin", UploadFixture.bytes(2000 + index, seed: UInt8(index + 30))))
        }
        try proxy.inject(#"{"mode": "status", "status": 500, "method": "PUT", "path": "/files/", "skip": 3, "count": 1}"#)
        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 10)
        XCTAssertEqual(summary.retried, 1)
        XCTAssertTrue(summary.complete)
        let puts = proxy.requests().filter { $0.hasPrefix("PUT ") && $0.contains("/files/") }
        XCTAssertEqual(puts.filter { $0.hasSuffix(" forwarded") }.count, 10, puts.joined(separator: "\n"))
        XCTAssertEqual(puts.count, 11, "one PUT failed, and only it was sent again")
        for (index, file) in files.enumerated() {
            XCTAssertEqual(forwarded(try fixture.record(file).coordinates.object, method: "PUT").count, 1)
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(2000 + index, seed: UInt8(index + 30)))
        }
    }

    /// An import's upload costs one request a small file, and nothing else (bench-import's moto
    /// set counts the same from the server's log).
    func testSmallFilesCostOneRequestEach() throws {
        let fixture = try makeFixture()
        for index in 0..<20 {
            _ = try fixture.addOriginal("s\(index).bin", UploadFixture.bytes(4096 + index, seed: UInt8(index + 60)))
        }
        let before = proxy.requests().count
        let summary = try fixture.run(jobs: 1)
        XCTAssertEqual(summary.stored, 20)
        let sent = Array(proxy.requests().dropFirst(before))
        XCTAssertEqual(sent.count, 20, sent.joined(separator: "\n"))
        XCTAssertEqual(sent.filter { $0.hasPrefix("PUT ") && $0.contains("/files/") }.count, 20, sent.joined(separator: "\n"))
    }

    func testSlowDownWithRetryAfterIsWaitedFor() throws {
        let fixture = try makeFixture()
        _ = try fixture.addOriginal("a.bin", UploadFixture.bytes(1000))
        try proxy.inject(#"{"mode": "status", "status": 503, "retry_after": 1, "method": "PUT", "count": 1}"#)
        let start = Date()
        let summary = try fixture.run()
        XCTAssertEqual(summary.stored, 1)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 1.0, "the retry waited for Retry-After")
        XCTAssertEqual(proxy.stats()["status"], 1)
    }

    func testConnectionResetIsRetriedAndResumesTheMultipartUpload() throws {
        let fixture = try makeFixture()
        let bytes = UploadFixture.bytes(300_000, seed: 23)
        let file = try fixture.addOriginal("a.bin", bytes)
        let object = try fixture.record(file).coordinates.object
        try proxy.inject(#"{"mode": "reset", "method": "PUT", "path": "partNumber=3&", "count": 2, "before": true}"#)
        let summary = try fixture.run(jobs: 1, settings: multipart)
        XCTAssertEqual(summary.retried, 1, proxy.requests().joined(separator: "\n"))
        XCTAssertEqual(summary.stored, 1)
        XCTAssertEqual(try fixture.storedPlaintext(file), bytes)
        // Parts 1 and 2 were confirmed before the resets and never sent again (curl itself retries a
        // reset on a reused connection once, so the fault holds for two requests).
        for number in [1, 2, 3, 4, 5] {
            XCTAssertEqual(forwarded(object, method: "PUT").filter { $0.contains("partNumber=\(number)&") }.count, 1, "part \(number)")
        }
        XCTAssertEqual(forwarded(object, method: "GET").filter { $0.contains("uploadId=") }.count, 1, "one ListParts to reconcile")
    }

    func testStallPastTheTimeoutFailsTheAttemptWhichIsRetried() throws {
        let fixture = try makeFixture()
        let file = try fixture.addOriginal("a.bin", UploadFixture.bytes(1000))
        try proxy.inject(#"{"mode": "stall", "seconds": 8, "method": "PUT", "count": 1, "before": true}"#)
        var options = UploadFixture.quickOptions
        options.controlTimeout = 1
        options.bytesTimeout = 1
        let start = Date()
        let summary = try fixture.run(storageOptions: options)
        XCTAssertEqual(summary.retried, 1)
        XCTAssertEqual(summary.stored, 1)
        XCTAssertLessThan(Date().timeIntervalSince(start), 7, "the stall ended the request at its timeout")
        XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
    }

    func testAttemptsBudgetFailsForGoodUntilRetry() throws {
        let fixture = try makeFixture()
        let file = try fixture.addOriginal("a.bin", UploadFixture.bytes(1000))
        try proxy.inject(#"{"mode": "status", "status": 500, "method": "PUT", "count": -1}"#)
        let summary = try fixture.run(settings: ["COVEN_UPLOAD_ATTEMPTS": "3"])
        XCTAssertEqual(summary.failed.map(\.files), [[file]])
        XCTAssertEqual(summary.failed.first?.code, .storage)
        XCTAssertEqual(proxy.stats()["status"], 3, "three attempts, then failed for good")
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_upload_queue").textValue, "failed")
        XCTAssertEqual(try DeviceStatus(of: fixture.device).uploads.failed, 1)
        // Failed for good because of the storage: a new run (maybe with another endpoint or new
        // credentials) tries it again with fresh attempts before it reports it.
        let again = try fixture.run(settings: ["COVEN_UPLOAD_ATTEMPTS": "3"])
        XCTAssertEqual(again.failed.count, 1)
        XCTAssertEqual(proxy.stats()["status"], 6, "three more attempts")
        // coven retry, with storage back.
        try proxy.clear()
        XCTAssertEqual(try Uploads(fixture.device).retryUploads(files: [file]), [file])
        XCTAssertTrue(try fixture.run().complete)
        XCTAssertEqual(try fixture.record(file).coordinates.at, .stored)
    }

    func testRetiredSessionStaysQueuedUntilItsAbortSucceeds() throws {
        let fixture = try makeFixture()
        let file = try fixture.addOriginal("a.bin", UploadFixture.bytes(300_000))
        let object = try fixture.record(file).coordinates.object
        let uploadID = try fixture.provider().createMultipart(object, totalSize: 300_080, partSize: 65552)
        try fixture.device.database.run("UPDATE coven_upload_queue SET upload_id = ?1, part_size = 65536", [uploadID])
        // Retired by an older coven (a record's end no longer retires its upload: FileRecords).
        try fixture.write("DELETE FROM notes")
        try fixture.device.database.run("UPDATE coven_upload_queue SET state = 'retired'")
        try proxy.inject(#"{"mode": "status", "status": 500, "method": "DELETE", "count": -1}"#)
        _ = try fixture.run()
        XCTAssertEqual(try fixture.scalar("SELECT state FROM coven_upload_queue").textValue, "retired")
        try proxy.clear()
        Thread.sleep(forTimeInterval: 0.3)
        let summary = try fixture.run()
        XCTAssertEqual(summary.dropped, 1)
        XCTAssertEqual(try fixture.count("SELECT count(*) FROM coven_upload_queue"), 0)
        XCTAssertThrowsError(try fixture.provider().listParts(object, uploadID: uploadID))
    }

    func testTwoRunsAtOnceNeverSendOneUploadTwice() throws {
        let fixture = try makeFixture()
        var files: [String] = []
        for index in 0..<6 { files.append(try fixture.addOriginal("p\(index)", UploadFixture.bytes(20_000, seed: UInt8(index + 30)))) }
        let paths = fixture.paths
        let location = fixture.location
        let environment = fixture.environment
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            _ = try? UploadWorker.run(paths: paths, jobs: 2, once: true, settings: UploadSettings(environment: [:]),
                                      storageOptions: UploadFixture.quickOptions,
                                      connect: { try S3Storage(location: location, options: UploadFixture.quickOptions, environment: environment) })
        }
        for (index, file) in files.enumerated() {
            let object = try fixture.record(file).coordinates.object
            XCTAssertEqual(forwarded(object, method: "PUT").count, 1, "file \(index) sent once")
            XCTAssertEqual(try fixture.storedPlaintext(file), UploadFixture.bytes(20_000, seed: UInt8(index + 30)))
        }
    }

    func testFileStatusJudgesStoredObjects() throws {
        let fixture = try makeFixture()
        let file = try fixture.addOriginal("a.bin", UploadFixture.bytes(1000))
        try fixture.run()
        let object = try fixture.record(file).coordinates.object
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file, environment: server.environment), .available)
        // No credentials: no storage set up.
        XCTAssertThrowsError(try Uploads(fixture.device).fileStatus(file, environment: [:])) { XCTAssertEqual($0.asCovenError.code, .noStorage) }
        // A network failure is an error, never absence.
        try proxy.inject(#"{"mode": "status", "status": 403, "method": "HEAD", "count": 1}"#)
        var options = StorageOptions(environment: [:])
        options.requestRetries = 0
        XCTAssertThrowsError(try Uploads(fixture.device).fileStatus(file, environment: server.environment, options: options)) { XCTAssertEqual($0.asCovenError.code, .storage) }
        // Another size is damage.
        try fixture.provider().put(object, data: [1, 2, 3])
        XCTAssertThrowsError(try Uploads(fixture.device).fileStatus(file, environment: server.environment)) { XCTAssertEqual($0.asCovenError.code, .integrity) }
        // Gone: lost.
        try fixture.provider().delete(object)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file, environment: server.environment), .missing(device: nil, reason: .lost))
    }
}

/// One end-to-end upload on SeaweedFS, a distributed object store with an S3 gateway.
final class UploadSeaweedFSTests: S3StorageTestCase {
    override class var serverKind: S3TestServer.Kind { .seaweedfs }

    func testMultipartUploadEndToEnd() throws {
        let fixture = try UploadFixture(location: server.location(bucket: bucket, prefix: prefix), environment: server.environment)
        // SeaweedFS holds every part but the last to S3's 5 MiB minimum.
        let bytes = UploadFixture.bytes(6 << 20, seed: 41)
        let file = try fixture.addOriginal("a.bin", bytes)
        let summary = try fixture.run(settings: ["COVEN_UPLOAD_PART_SIZE": String(5 << 20), "COVEN_UPLOAD_SINGLE_LIMIT": "100000"])
        XCTAssertTrue(summary.complete, "\(summary.failed)")
        XCTAssertEqual(try fixture.storedPlaintext(file), bytes)
        XCTAssertEqual(try Uploads(fixture.device).fileStatus(file, environment: server.environment), .available)
    }
}

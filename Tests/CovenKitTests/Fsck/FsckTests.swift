@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven fsck` on file://: stored objects flipped, cut, deleted and swapped; coverage across
/// runs; `--fast` makes listings only; a stopped run goes on where it stopped.
class FsckTestCase: DeviceTestCase {
    /// Stores `count` files of distinct sizes; returns (file id, object key) pairs.
    func storeFiles(_ device: Device, count: Int, size: Int = 70_000, step: Int = 1000) throws -> [(file: String, object: String)] {
        var files: [String] = []
        for n in 0..<count {
            let bytes = (0..<(size + n * step)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ n) }
            files.append(try StoredFiles.stageApp(device, bytes: bytes, namespace: "covers", table: "settings"))
        }
        _ = try StoredFiles.store(device, file: files[0])
        return try files.map { ($0, try XCTUnwrap(device.fileRecord($0)).coordinates.object) }
    }

    /// The path of a stored object on the file:// store (nil on S3).
    func objectPath(_ object: String) -> String? { s3 == nil ? storeFolder + "/" + object : nil }

    func provider(_ device: Device) throws -> StorageProvider {
        try StorageConnector(location: device.storage, environment: device.storageEnvironment).connect()
    }

    func read(_ device: Device, _ key: String) throws -> [UInt8] {
        try XCTUnwrap(try provider(device).getObject(key))
    }

    func fsck(_ device: Device, _ configure: (inout FsckOptions) -> Void = { _ in }, provider: StorageProvider? = nil, stop: Stop = Stop()) throws -> FsckReport {
        var options = FsckOptions()
        configure(&options)
        return try Fsck(device: device, options: options, stop: stop).run(provider: provider)
    }

}

class FsckTests: FsckTestCase {
    func testACleanStoreIsVerifiedWhole() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 3)
        let report = try fsck(device)
        XCTAssertEqual(report.problems, [])
        XCTAssertEqual(report.objectsChecked, 3)
        XCTAssertTrue(report.complete)
        XCTAssertEqual(report.neverVerified, 0)
        XCTAssertNotNil(report.oldestVerified)
        XCTAssertEqual(report.recentShare, 1)
        XCTAssertEqual(report.storedBytes, Int64(3 * 70_000 + 3000))
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_fsck_verified WHERE kind = 'object' AND result = 'ok'"), 3)
        XCTAssertEqual(report.unnamed, [])
        _ = stored
    }

    /// A flipped byte, a truncation, a deletion and a swap are each found and named, with the
    /// file and the rows that reference it.
    func testDamagedStoredObjectsAreFoundAndNamed() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 5)
        let p = try provider(device)
        var flipped = try read(device, stored[0].object)
        flipped[100] ^= 0x01
        try p.put(stored[0].object, data: flipped)
        let cut = try read(device, stored[1].object)
        try p.put(stored[1].object, data: Array(cut.dropLast(10)))
        try p.delete(stored[2].object)
        // Swap: the object of file 4 holds file 3's bytes (same size: made so below).
        try p.put(stored[4].object, data: try read(device, stored[3].object) + [])
        let report = try fsck(device)
        let byKey = Dictionary(uniqueKeysWithValues: report.problems.map { ($0.key, $0) })
        XCTAssertEqual(byKey[stored[0].object]?.kind, .damaged)
        XCTAssertEqual(byKey[stored[1].object]?.kind, .size)
        XCTAssertEqual(byKey[stored[2].object]?.kind, .missing)
        XCTAssertEqual(byKey[stored[4].object]?.kind, .size, "a swapped object of another size fails by its size")
        XCTAssertNil(byKey[stored[3].object])
        XCTAssertEqual(report.problems.count, 4)
        XCTAssertEqual(byKey[stored[0].object]?.files, [stored[0].file])
        let lost = try XCTUnwrap(report.lost.first { $0.file == stored[2].file })
        XCTAssertEqual(lost.rows.count, 1)
        XCTAssertTrue(lost.rows[0].hasPrefix("settings/"))
        XCTAssertEqual(report.lost.count, 4)
    }

    /// Two objects of one size swapped: each fails authentication under its own file's key.
    func testASwapOfObjectsOfOneSizeIsFound() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 2, step: 0)
        let p = try provider(device)
        let (a, b) = (try read(device, stored[0].object), try read(device, stored[1].object))
        try p.put(stored[0].object, data: b)
        try p.put(stored[1].object, data: a)
        let report = try fsck(device)
        XCTAssertEqual(Set(report.problems.map { "\($0.kind.rawValue) \($0.key)" }), ["damaged \(stored[0].object)", "damaged \(stored[1].object)"])
    }

    /// --fast finds the missing and the misshapen with listings alone: no object body is read.
    func testFastMakesOnlyListings() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 4)
        let p = try provider(device)
        try p.delete(stored[1].object)
        try p.put(stored[2].object, data: [1, 2, 3])
        var flipped = try read(device, stored[3].object)
        flipped[50] ^= 0xff
        try p.put(stored[3].object, data: flipped)
        let counting = CrashingStorage(p)
        let report = try fsck(device, { $0.fast = true }, provider: counting)
        XCTAssertEqual(Set(report.problems.map { "\($0.kind.rawValue) \($0.key)" }), ["missing \(stored[1].object)", "size \(stored[2].object)"])
        XCTAssertEqual(counting.requests.filter { !$0.hasPrefix("LIST ") }, [], "listings only")
        XCTAssertFalse(counting.requests.isEmpty)
        XCTAssertEqual(report.objectsChecked, 2, "two present at their size (a flipped byte is for the full check)")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_fsck_verified WHERE kind = 'object'"), 0, "a fast run verifies nothing")
    }

    /// Runs that verify two objects each take the never verified first, then the oldest: after
    /// three runs all six are verified, and the fourth takes the first run's again.
    func testCoverageAcrossRunsTakesTheOldestFirst() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 6)
        var seen: [Set<String>] = []
        for run in 0..<4 {
            let before = Date().timeIntervalSince1970
            let report = try fsck(device) { $0.maxObjects = 2 }
            XCTAssertEqual(report.objectsChecked, 2)
            XCTAssertEqual(report.complete, false)
            let verified = Set(try device.database.query("SELECT key FROM coven_fsck_verified WHERE kind = 'object' AND verified_at >= ?1", [before]).compactMap { $0.string("key") })
            XCTAssertEqual(verified.count, 2, "run \(run)")
            seen.append(verified)
            if run < 3 { XCTAssertEqual(report.neverVerified, 4 - 2 * run) }
            Thread.sleep(forTimeInterval: 0.01)
        }
        XCTAssertEqual(seen[0].union(seen[1]).union(seen[2]), Set(stored.map(\.object)))
        XCTAssertEqual(seen[3], seen[0], "the least recently verified go first")
        XCTAssertNotNil(try fsck(device) { $0.maxObjects = 0 }.oldestVerified)
    }

    /// An object nothing names is reported, not deleted; one a deleted record's image still
    /// names (gc's candidate) is not reported.
    func testUnnamedObjectsAreReportedNotDeleted() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 2)
        let stray = "files/\(device.deviceID)/strayobject"
        try provider(device).put(stray, data: [1, 2, 3])
        try device.write(sql: "DELETE FROM settings WHERE file = '\(stored[1].file)'")
        let report = try fsck(device)
        XCTAssertEqual(report.unnamed, [stray])
        XCTAssertEqual(report.problems, [])
        XCTAssertEqual(try read(device, stray), [1, 2, 3], "reported, not deleted")
        XCTAssertEqual(try fsck(device) { $0.fast = true }.unnamed, [], "a fast run reads no snapshot, so it names none")
    }

    /// A run whose time is up takes no more objects and says how many are left.
    func testATimeLimitStopsTakingObjects() throws {
        let device = try makeDevice()
        _ = try storeFiles(device, count: 3)
        let report = try fsck(device) { $0.timeLimit = 1e-9 }
        XCTAssertEqual(report.objectsChecked, 0)
        XCTAssertFalse(report.complete)
        XCTAssertEqual(report.remaining, 3)
        XCTAssertEqual(report.neverVerified, 3)
        XCTAssertNil(report.oldestVerified)
        XCTAssertEqual(report.recentShare, 0)
        XCTAssertEqual(try fsck(device) { $0.timeLimit = 3600 }.objectsChecked, 3)
    }

    /// Under a limit, changes are read again only once they are as stale as the stalest stored
    /// object: neither kind starves the other.
    func testChangesAndObjectsTakeTurnsByAge() throws {
        let device = try makeDevice()
        _ = try storeFiles(device, count: 4)
        _ = try StoreSync(device).sync()
        try device.write(sql: "INSERT INTO settings (id, value) VALUES ('k', 'v')")
        _ = try StoreSync(device).sync()
        let changes = try provider(device).list(prefix: "changes/\(device.deviceID)/").count
        XCTAssertGreaterThanOrEqual(changes, 2)
        var read: [Int] = []
        for _ in 0..<3 {
            read.append(try fsck(device) { $0.maxObjects = 2 }.changesChecked)
            Thread.sleep(forTimeInterval: 0.01)
        }
        XCTAssertEqual(read, [changes, 0, changes], "never verified, then fresher than an object never verified, then due again")
        XCTAssertEqual(try fsck(device).changesChecked, changes, "a run without a limit reads every change")
    }

    /// Issue 35 item 4: damage a run found counts in the runs under a limit that do not verify
    /// that object again (their exit status, `status`), until a run finds it whole.
    func testKnownDamageCountsInEveryRunUntilFoundWhole() throws {
        let device = try makeDevice()
        let stored = try storeFiles(device, count: 3)
        let p = try provider(device)
        let intact = try read(device, stored[0].object)
        var flipped = intact
        flipped[100] ^= 0x01
        try p.put(stored[0].object, data: flipped)
        XCTAssertEqual(try fsck(device).problems.map(\.key), [stored[0].object])
        // The damaged object verified last of the three, so a run of one object takes another.
        try device.database.run("UPDATE coven_fsck_verified SET verified_at = verified_at - 1 WHERE key <> ?1", [stored[0].object])
        for fast in [false, true] {
            let report = try fsck(device) { $0.maxObjects = 1; $0.fast = fast }
            XCTAssertEqual(report.problems.map(\.key), [stored[0].object], "fast: \(fast)")
            XCTAssertEqual(report.problems.first?.kind, .damaged)
            XCTAssertTrue(report.problems.first?.message.contains("not verified again since") ?? false)
            XCTAssertEqual(report.lost.map(\.file), [stored[0].file])
        }
        XCTAssertEqual(try FsckLedger(database: device.database).knownDamage().map(\.key), [stored[0].object])
        try p.put(stored[0].object, data: intact)
        XCTAssertEqual(try fsck(device).problems, [])
        XCTAssertEqual(try fsck(device) { $0.maxObjects = 1 }.problems, [])
        XCTAssertEqual(try FsckLedger(database: device.database).knownDamage(), [])
    }

    /// A run stopped part way keeps what it verified (committed batch by batch); the next takes
    /// the rest first.
    func testAStoppedRunResumesWhereItStopped() throws {
        let device = try makeDevice()
        _ = try storeFiles(device, count: 5)
        let polls = Polls()
        let stop = Stop(when: { polls.next() > 4 })
        XCTAssertThrowsError(try fsck(device, { $0.jobs = 1 }, stop: stop)) { error in
            XCTAssertEqual((error as? CovenError)?.code, .interrupted)
        }
        let first = try count(device, "SELECT count(*) FROM coven_fsck_verified WHERE kind = 'object'")
        XCTAssertGreaterThan(first, 0)
        XCTAssertLessThan(first, 5)
        // The next run takes the objects the stopped one did not reach first.
        let rest = try fsck(device) { $0.maxObjects = 5 - Int(first) }
        XCTAssertEqual(rest.objectsChecked, 5 - Int(first))
        XCTAssertEqual(rest.neverVerified, 0)
    }
}

/// Counts the polls of a stop.
final class Polls: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func next() -> Int { lock.withLock { count += 1; return count } }
}

/// The same on S3 (moto).
final class FsckS3Tests: FsckTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Declared here so Linux's test discovery finds them (inherited tests are not listed).
    override func testDamagedStoredObjectsAreFoundAndNamed() throws { try super.testDamagedStoredObjectsAreFoundAndNamed() }
    override func testFastMakesOnlyListings() throws { try super.testFastMakesOnlyListings() }
    override func testAStoppedRunResumesWhereItStopped() throws { try super.testAStoppedRunResumesWhereItStopped() }
}

/// file://'s paged listing of a folder (what `fsck --fast` pages through) gives the whole
/// listing's objects in key order, a page at a time, temporaries left out.
final class FileStoragePagingTests: XCTestCase {
    func testPagesOfAFolderAreTheWholeListingCut() throws {
        let folder = try TestPaths.temporaryDirectory("paging")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let storage = try StorageConnector(location: .file(directory: folder)).connect()
        for n in (0..<25).shuffled() { try storage.put(String(format: "files/dev/obj-%03d", n), data: [UInt8](repeating: 1, count: n)) }
        try storage.put("files/other/obj", data: [1])
        FileManager.default.createFile(atPath: folder + "/files/dev/.coven-tmp-x", contents: Data([1]))
        var pages: [[ObjectInfo]] = []
        var after = "files/dev/"
        while true {
            let page = try storage.list(prefix: "files/dev/", after: after, limit: 10)
            pages.append(page)
            guard page.count == 10, let last = page.last else { break }
            after = last.key
        }
        XCTAssertEqual(pages.map(\.count), [10, 10, 5])
        XCTAssertEqual(pages.flatMap { $0 }, try storage.list(prefix: "files/dev/"))
        XCTAssertEqual(try storage.list(prefix: "files/dev/obj-02", after: "files/dev/obj-020", limit: 3).map(\.key), ["files/dev/obj-021", "files/dev/obj-022", "files/dev/obj-023"])
        // A folder of folders: the whole listing, cut.
        XCTAssertEqual(try storage.list(prefix: "files/", after: "files/dev/obj-023", limit: 5).map(\.key), ["files/dev/obj-024", "files/other/obj"])
        XCTAssertEqual(try storage.list(prefix: "files/none/", after: "", limit: 5), [])
    }
}

/// The same checks on SeaweedFS, a real distributed object store with an S3 gateway.
final class FsckSeaweedFSTests: FsckTests {
    override class var s3Server: S3TestServer.Kind? { .seaweedfs }

    override func testDamagedStoredObjectsAreFoundAndNamed() throws { try super.testDamagedStoredObjectsAreFoundAndNamed() }
    override func testFastMakesOnlyListings() throws { try super.testFastMakesOnlyListings() }
}

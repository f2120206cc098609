@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

final class FileCacheTests: ReadTestCase {
    let chunk = Int(ObjectLayout.chunkSize)

    /// Fetches whole files and sets their read times (seconds since the epoch) in order.
    func cached(_ sizes: [Int], namespace: String = "blobs") throws -> [String] {
        var ids: [String] = []
        for (index, size) in sizes.enumerated() {
            let id = try storedFile(pattern(size, seed: UInt64(index)), namespace: namespace)
            _ = try Reader(device).holdFile(id)
            let object = try device.requireFile(id).coordinates.object
            try device.database.run("UPDATE coven_cache SET last_read = ?2 WHERE object = ?1", [object, Double(1000 + index)])
            ids.append(id)
        }
        return ids
    }

    func isCached(_ id: String) throws -> Bool { try cacheRow(id) != nil }

    func testTrimRemovesWhatWasReadLongestAgoFirst() throws {
        let ids = try cached([chunk, 2 * chunk, chunk, chunk])
        // Reading the first one again makes it the most recent.
        _ = try read(ids[0], ReadRange(offset: 0, length: 1))
        let removed = try Cache(device).setCacheBudget(String(2 * chunk))
        XCTAssertEqual(removed, Int64(3 * chunk), "ids[1] (read at 1001) then ids[2] (1002)")
        XCTAssertEqual(try ids.map(isCached), [true, false, false, true])
        XCTAssertEqual(try device.setting("cache_budget"), String(2 * chunk))
        XCTAssertEqual(try Cache(device).cacheBudget().bytes, Int64(2 * chunk))
        XCTAssertFalse(FileManager.default.fileExists(atPath: Cache(device).cachePaths(object: try device.requireFile(ids[1]).coordinates.object).data))
        // A later read fetches it again.
        XCTAssertEqual(try read(ids[1]).1.source, .storage)
    }

    func testPinsAndKeptNamespacesSurviveTrimsAndClear() throws {
        let ids = try cached([chunk, chunk, chunk])
        let kept = try cached([chunk], namespace: "keep")
        XCTAssertEqual(try KeptFiles(device).pin([ids[0]]), [ids[0]])
        XCTAssertEqual(try KeptFiles(device).pin([ids[0]]), [], "pinning twice changes nothing")
        XCTAssertEqual(try Cache(device).setCacheBudget("0"), Int64(2 * chunk))
        XCTAssertEqual(try ids.map(isCached), [true, false, false])
        XCTAssertTrue(try isCached(kept[0]))
        XCTAssertEqual(try Cache(device).cacheSummary().used, 0, "kept files are outside the budget")
        XCTAssertEqual(try Cache(device).clearCache(), 0)
        XCTAssertTrue(try isCached(ids[0]))
        XCTAssertEqual(try KeptFiles(device).unpin([ids[0]]), [ids[0]])
        XCTAssertEqual(try Cache(device).clearCache(), Int64(chunk))
        XCTAssertFalse(try isCached(ids[0]))
        XCTAssertTrue(try isCached(kept[0]), "a kept namespace stays kept")
        assertCode(.fileAbsent) { try KeptFiles(device).pin(["01234567-0123-4123-8123-0123456789ab"]) }
    }

    func testTheTotalTheTriggersKeepMatchesTheEntries() throws {
        func check(_ step: String) throws {
            let sum = try device.database.scalar("SELECT coalesce(sum(bytes), 0) FROM coven_cache").intValue
            XCTAssertEqual(try Cache(device).cacheBytes(), sum, step)
        }
        let ids = try cached([chunk, 2 * chunk, 3 * chunk])
        try check("after whole reads")
        let partial = try storedFile(pattern(5 * chunk + 3))
        _ = try read(partial, ReadRange(offset: Int64(chunk), length: 10))
        try check("after a partial read")
        _ = try Reader(device).holdFile(partial)
        try check("after the partial was completed")
        XCTAssertEqual(try Cache(device).cacheBytes(), Int64(6 * chunk + 5 * chunk + 3))
        _ = try Cache(device).setCacheBudget(String(6 * chunk))
        try check("after a trim")
        _ = try Cache(device).clearCache()
        try check("after clear")
        XCTAssertEqual(try Cache(device).cacheBytes(), 0)
        _ = try read(ids[1])
        XCTAssertEqual(try Cache(device).cacheBytes(), Int64(2 * chunk))
    }

    func testANamespaceBudgetTrimsThatNamespaceAloneAndKeptFilesOverTheBudgetTakeNothing() throws {
        let budgeted = ReadTestCase.manifest.replacingOccurrences(
            of: #"{ "name": "blobs", "kind": "app" }"#, with: #"{ "name": "blobs", "kind": "app", "budget": "\#(2 * chunk)" }"#)
        XCTAssertNotEqual(budgeted, ReadTestCase.manifest)
        device = try makeDevice(storage: .file(directory: folder + "/store2"), manifest: budgeted, name: "budgets.db")
        _ = try Cache(device).setCacheBudget("keep-all")
        // Kept files far over any budget: outside every budget, they make no read trim.
        let kept = try cached([6 * chunk], namespace: "keep")
        let blobs = try cached([chunk, chunk])
        XCTAssertEqual(try Cache(device).trimCache(), 0, "the namespace holds its budget; kept bytes do not count")
        XCTAssertEqual(try blobs.map(isCached), [true, true])
        // A third file read goes past the namespace's budget: the one read longest ago goes,
        // never the one just read.
        let third = try storedFile(pattern(chunk, seed: 9))
        _ = try read(third)
        XCTAssertEqual(try blobs.map(isCached), [false, true])
        XCTAssertTrue(try isCached(third))
        XCTAssertTrue(try isCached(kept[0]))
        // The device's budget then covers every entry but the kept ones.
        XCTAssertEqual(try Cache(device).setCacheBudget(String(chunk)), Int64(chunk))
        XCTAssertEqual(try blobs.map(isCached), [false, false], "read before the third")
        XCTAssertTrue(try isCached(third))
        XCTAssertTrue(try isCached(kept[0]))
    }

    func testKeepAllAndDefault() throws {
        _ = try cached([chunk, chunk])
        XCTAssertEqual(try Cache(device).setCacheBudget("keep-all"), 0)
        XCTAssertNil(try Cache(device).cacheBudget().bytes)
        XCTAssertEqual(try Cache(device).setCacheBudget("default"), 0)
        XCTAssertTrue(try Cache(device).cacheBudget().isDefault)
        XCTAssertGreaterThan(try Cache(device).cacheBudget().bytes ?? 0, 0)
        XCTAssertEqual(try Cache(device).setCacheBudget("1MiB"), 0)
        XCTAssertEqual(try Cache(device).cacheBudget().bytes, 1 << 20)
        assertCode(.usage) { try Cache(device).setCacheBudget("lots") }
    }

    func testClearLeavesFilesBeingRead() throws {
        let ids = try cached([chunk, chunk])
        let data = Cache(device).cachePaths(object: try device.requireFile(ids[0]).coordinates.object).data
        let fd = open(data, O_RDONLY)
        XCTAssertEqual(flock(fd, LOCK_SH), 0)
        XCTAssertEqual(try Cache(device).clearCache(), Int64(chunk))
        XCTAssertEqual(try ids.map(isCached), [true, false])
        close(fd)
        XCTAssertEqual(try Cache(device).clearCache(), Int64(chunk))
    }

    func testPartialsCountTowardTheBudgetAndAreTrimmed() throws {
        let id = try storedFile(pattern(10 * chunk))
        _ = try read(id, ReadRange(offset: 0, length: Int64(3 * chunk)))
        let summary = try Cache(device).cacheSummary()
        XCTAssertEqual(summary.partial, Int64(3 * chunk))
        XCTAssertEqual(summary.used, Int64(3 * chunk))
        XCTAssertEqual(try Cache(device).setCacheBudget(String(chunk)), Int64(3 * chunk))
        XCTAssertFalse(try isCached(id))
    }

    func testPartialIsNeverAnsweredAsTheFileAndResumes() throws {
        let bytes = pattern(6 * chunk + 9)
        let id = try storedFile(bytes)
        _ = try read(id, ReadRange(offset: Int64(chunk), length: Int64(2 * chunk)))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0)
        let (path, report) = try Reader(device).holdFile(id)
        // Only the missing chunks (0, 3, 4, 5, 6) were fetched, with the header: two ranged requests.
        XCTAssertEqual(report.requests, 2)
        XCTAssertEqual(report.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) - 2 * ObjectLayout.sealedChunkSize)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
    }

    func testSevenDayCleanupAtOpen() throws {
        let old = try storedFile(pattern(2 * chunk, seed: 1))
        let recent = try storedFile(pattern(2 * chunk, seed: 2))
        let keptOld = try storedFile(pattern(2 * chunk, seed: 3))
        let complete = try storedFile(pattern(chunk, seed: 4))
        for id in [old, recent, keptOld] { _ = try read(id, ReadRange(offset: 0, length: 10)) }
        _ = try Reader(device).holdFile(complete)
        try KeptFiles(device).pin([keptOld])
        func age(_ id: String, days: Double) throws {
            let data = Cache(device).cachePaths(object: try device.requireFile(id).coordinates.object).data
            let when = Date().timeIntervalSince1970 - days * 86400
            var times = [timeval(tv_sec: Int(when), tv_usec: 0), timeval(tv_sec: Int(when), tv_usec: 0)]
            XCTAssertEqual(utimes(data, &times), 0)
        }
        try age(old, days: 8)
        try age(recent, days: 6)
        try age(keptOld, days: 30)
        try age(complete, days: 30)
        let paths = device.paths
        device = nil
        let readOnly = try Device.open(paths: paths, readOnly: true)
        XCTAssertEqual(try readOnly.database.scalar("SELECT count(*) FROM coven_cache").intValue, 4, "a reader removes nothing")
        device = try Device.open(paths: paths)
        XCTAssertEqual(try [old, recent, keptOld, complete].map(isCached), [false, true, true, true])
        let oldData = Cache(device).cachePaths(object: try device.requireFile(old).coordinates.object).data
        XCTAssertFalse(FileManager.default.fileExists(atPath: oldData))
        XCTAssertFalse(FileManager.default.fileExists(atPath: oldData + ".tags"))
    }

    func testOrphanCacheFilesGoAtOpen() throws {
        let orphan = device.paths.cache + "/dev-orphan"
        FileManager.default.createFile(atPath: orphan, contents: Data([1, 2, 3]))
        var times = [timeval(tv_sec: 1000, tv_usec: 0), timeval(tv_sec: 1000, tv_usec: 0)]
        XCTAssertEqual(utimes(orphan, &times), 0)
        let fresh = device.paths.cache + "/dev-fresh"
        FileManager.default.createFile(atPath: fresh, contents: Data([1]))
        // A device swept an hour ago.
        try device.database.transaction { try device.setSetting("cache_swept_at", String(Int64(Date().timeIntervalSince1970 - 3600))) }
        let paths = device.paths
        device = nil
        device = try Device.open(paths: paths)
        XCTAssertTrue(FileManager.default.fileExists(atPath: orphan), "the folder is listed once a day, not at every open")
        let dayAgo = Int64(Date().timeIntervalSince1970 - Cache.cacheSweepInterval - 5)
        try device.database.run("UPDATE coven_meta SET value = ?1 WHERE key = 'cache_swept_at'", [dayAgo])
        device = nil
        device = try Device.open(paths: paths)
        XCTAssertFalse(FileManager.default.fileExists(atPath: orphan))
        XCTAssertTrue(FileManager.default.fileExists(atPath: fresh), "younger than a minute: maybe being made")
        XCTAssertGreaterThan(Int64(try device.setting("cache_swept_at") ?? "") ?? 0, dayAgo)
    }

    func testFilesOfAnEntryForgottenBeforeACrashGoAtOpenUnlessItWasMadeAgain() throws {
        let gone = try storedFile(pattern(2 * chunk, seed: 7))
        let again = try storedFile(pattern(2 * chunk, seed: 8))
        for id in [gone, again] { _ = try read(id) }
        // As if a trim died after its commit and before its unlinks: each row is gone, a note
        // names its files. The second entry is then read again before the next open.
        var files: [CacheEntryPaths] = []
        for id in [gone, again] {
            let object = try device.requireFile(id).coordinates.object
            files.append(Cache(device).cachePaths(object: object))
            try device.database.transaction {
                try device.database.run("DELETE FROM coven_cache WHERE object = ?1", [object])
                try Cache(device).uncacheNotes.set(object, object)
            }
            var times = [timeval(tv_sec: 1000, tv_usec: 0), timeval(tv_sec: 1000, tv_usec: 0)]
            XCTAssertEqual(utimes(files.last!.data, &times), 0)
        }
        _ = try read(again)
        let paths = device.paths
        device = nil
        device = try Device.open(paths: paths)
        XCTAssertFalse(FileManager.default.fileExists(atPath: files[0].data))
        XCTAssertFalse(FileManager.default.fileExists(atPath: files[0].tags))
        XCTAssertTrue(FileManager.default.fileExists(atPath: files[1].data), "made again: its files are the new entry's")
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_uncache").intValue, 0)
        XCTAssertEqual(try read(again).1.source, .cache)
    }

    func testARemovedEntryLeavesNoNote() throws {
        let id = try storedFile(pattern(chunk))
        _ = try read(id)
        XCTAssertGreaterThan(try Cache(device).clearCache(), 0)
        XCTAssertEqual(try device.database.scalar("SELECT count(*) FROM coven_uncache").intValue, 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: device.paths.cache), [])
    }

    func testStatusGroupsKeptFilesByReason() throws {
        let held = try cached([chunk], namespace: "keep")[0]
        let notFetched = try storedFile(pattern(3 * chunk), namespace: "keep")
        let partial = try storedFile(pattern(4 * chunk), namespace: "keep")
        _ = try read(partial, ReadRange(offset: 0, length: 5))
        let elsewhere = try storedFile(pattern(5), namespace: "keep")
        try device.database.run("UPDATE coven_files SET coordinates = ?2 WHERE id = ?1",
                                [elsewhere, #"{"at":"device","device":"11111111-1111-4111-8111-111111111111","object":"files/x/y","key":"00"}"#])
        let summary = try Cache(device).cacheSummary()
        XCTAssertEqual(summary.heldCount, 1)
        XCTAssertEqual(summary.heldBytes, Int64(chunk + chunk), "held files and partials' bytes")
        let groups = Dictionary(uniqueKeysWithValues: summary.notHeld.map { ($0.reason, ($0.count, $0.bytes)) })
        XCTAssertEqual(groups["not_fetched"]?.0, 1)
        XCTAssertEqual(groups["not_fetched"]?.1, Int64(3 * chunk))
        XCTAssertEqual(groups["partial"]?.1, Int64(4 * chunk))
        XCTAssertEqual(groups["device_only_elsewhere"]?.0, 1)
        _ = held
        _ = notFetched
    }
}

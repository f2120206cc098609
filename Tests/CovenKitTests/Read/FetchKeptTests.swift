@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

final class FetchKeptTests: ReadTestCase {
    let chunk = Int(ObjectLayout.chunkSize)

    func testFetchesSmallestFirstAndSkipsHeld() throws {
        let big = try storedFile(pattern(5 * chunk, seed: 1), namespace: "keep")
        let small = try storedFile(pattern(10, seed: 2), namespace: "keep")
        let middle = try storedFile(pattern(2 * chunk, seed: 3))
        let notKept = try storedFile(pattern(3, seed: 4))
        try KeptFiles(device).pin([middle])
        let held = try storedFile(pattern(chunk, seed: 5), namespace: "keep")
        _ = try Reader(device).holdFile(held)
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.stop, .done)
        XCTAssertEqual(result.fetched.map(\.file), [small, middle, big])
        XCTAssertEqual(result.alreadyHeld, 1)
        XCTAssertNil(try cacheRow(notKept))
        let summary = try Cache(device).cacheSummary()
        XCTAssertEqual(summary.heldCount, 4)
        XCTAssertEqual(summary.notHeld.count, 0)
        XCTAssertEqual(try KeptFiles(device).fetchKept().fetched.count, 0, "nothing left to fetch")
    }

    func testStopsOnceStorageCannotBeReached() throws {
        let first = try storedFile(pattern(10), namespace: "keep")
        _ = try storedFile(pattern(chunk), namespace: "keep")
        _ = try storedFile(pattern(2 * chunk), namespace: "keep")
        _ = first
        try FileManager.default.moveItem(atPath: store, toPath: store + ".away")
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.stop, .offline)
        XCTAssertEqual(result.stopError?.storageFailure, .network)
        XCTAssertEqual(result.fetched.count, 0)
        XCTAssertEqual(result.failed.count, 0, "the network is not a file's failure")
        XCTAssertEqual(result.remaining, 3)
    }

    func testPassesOverAFileThatFailsOtherwise() throws {
        let a = try storedFile(pattern(10, seed: 1), namespace: "keep")
        let broken = try storedFile(pattern(chunk, seed: 2), namespace: "keep")
        let c = try storedFile(pattern(2 * chunk, seed: 3), namespace: "keep")
        let gone = try storedFile(pattern(3 * chunk, seed: 4), namespace: "keep")
        let object = try device.requireFile(broken).coordinates.object
        let path = store + "/" + object
        var bytes = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
        bytes[20] ^= 1
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        unlink(store + "/" + (try device.requireFile(gone).coordinates.object))
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.stop, .done)
        XCTAssertEqual(result.fetched.map(\.file), [a, c])
        XCTAssertEqual(result.failed.map(\.file), [broken, gone])
        XCTAssertEqual(result.failed.map { $0.error?.code }, [.integrity, .missing])
        XCTAssertEqual(result.failed.last?.error?.details["file"], gone, "missing names the file and its device")
        XCTAssertEqual(result.failed.last?.error?.details["device"], device.deviceID)
        let reasons = Dictionary(uniqueKeysWithValues: try Cache(device).cacheSummary().notHeld.map { ($0.reason, $0.count) })
        XCTAssertEqual(reasons, ["failed": 1, "missing": 1])
    }

    /// Given `each`, fetch-kept hands over every file as it is recorded, in the order of the
    /// files (smallest first), failures among them, and keeps no list (100,000 files in a
    /// library): the counts and the bytes are the result's.
    func testEachTakesTheFilesInOrderAndNoListIsKept() throws {
        var expected: [String] = []
        for index in 0..<40 {
            expected.append(try storedFile(pattern(10 + index * 100, seed: UInt64(index)), namespace: "keep"))
        }
        let gone = expected[17]
        unlink(store + "/" + (try device.requireFile(gone).coordinates.object))
        var taken: [FetchKeptItem] = []
        let result = try KeptFiles(device).fetchKept(each: { taken.append($0) })
        XCTAssertEqual(taken.map(\.file), expected, "every file, smallest first, the failed one in its place")
        XCTAssertEqual(taken.filter { $0.error != nil }.map(\.file), [gone])
        XCTAssertEqual(taken[17].error?.code, .missing)
        XCTAssertEqual(result.fetched.count + result.failed.count, 0, "no list kept")
        XCTAssertEqual(result.fetchedCount, 39)
        XCTAssertEqual(result.failedCount, 1)
        XCTAssertEqual(result.fetchedBytes, (0..<40).filter { $0 != 17 }.reduce(Int64(0)) { $0 + Int64(10 + $1 * 100) })
        XCTAssertEqual(result.stop, .done)
        for id in expected where id != gone {
            XCTAssertEqual(try cacheRow(id)?.int("complete"), 2, "recorded held before it was handed over")
        }
    }

    /// A cache folder someone removed is made again by the fetch, which does not look for it
    /// before each file.
    func testACacheFolderRemovedIsMadeAgain() throws {
        let bytes = [pattern(10, seed: 1), pattern(2 * chunk, seed: 2)]
        let a = try storedFile(bytes[0], namespace: "keep")
        let b = try storedFile(bytes[1], namespace: "keep")
        try FileManager.default.removeItem(atPath: device.paths.cache)
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.fetched.map(\.file), [a, b])
        XCTAssertEqual(result.failed.count, 0)
        for (id, expected) in zip([a, b], bytes) {
            let (path, report) = try Reader(device).holdFile(id)
            XCTAssertEqual(report.source, .cache, "held from the cache the fetch made again")
            XCTAssertEqual(FileManager.default.contents(atPath: path).map { [UInt8]($0) }, expected)
        }
    }

    func testInterruptedKeepsWhatWasFetched() throws {
        let a = try storedFile(pattern(10, seed: 1), namespace: "keep")
        let b = try storedFile(pattern(40 * chunk, seed: 2), namespace: "keep")
        nonisolated(unsafe) var polls = 0
        // Stop inside the second file, after its first run of chunks. One file at a time: with
        // several at once, where the polls fall depends on the threads' timing.
        let result = try KeptFiles(device).fetchKept(stop: Stop(when: {
            polls += 1
            return polls > 4
        }), parallel: 1)
        XCTAssertEqual(result.stop, .interrupted)
        XCTAssertEqual(result.fetched.map(\.file), [a])
        XCTAssertEqual(try cacheRow(a)?.int("complete"), 2, "fetched whole and checked against its hash")
        let partial = try XCTUnwrap(try cacheRow(b))
        XCTAssertEqual(partial.int("complete"), 0)
        XCTAssertEqual(partial.int("bytes"), Int64(16 * chunk), "the run fetched before the stop stays as a partial")
        // The next run resumes it.
        let again = try KeptFiles(device).fetchKept()
        XCTAssertEqual(again.fetched.map(\.file), [b])
        XCTAssertEqual(again.fetched.first?.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(40 * chunk)) - 16 * ObjectLayout.sealedChunkSize - ObjectLayout.headerSize)
    }
}

/// fetch-kept and reads on a really full small filesystem: a 24 MiB tmpfs holding the device,
/// filled up by a file of its own once the test's files are stored.
final class NoRoomTests: ReadTestCase {
    var mountPoint = ""

    override func setUpWithError() throws {
        folder = try TestPaths.temporaryDirectory("read-noroom")
        store = folder + "/store"
        mountPoint = folder + "/small"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let mounted = try Spawn.run("/bin/mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", mountPoint], timeout: 30)
        guard mounted.status == 0 else {
            throw XCTSkip("cannot mount a tmpfs here (needs root): \(mounted)")
        }
        device = try makeDevice(storage: .file(directory: store), name: "small/device.db")
    }

    override func tearDownWithError() throws {
        device = nil
        _ = try? Spawn.run("/bin/umount", [mountPoint], timeout: 30)
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Opens the device again, as the next command would (its stored files' copies released).
    func reopen() throws {
        let paths = device.paths
        device = nil
        device = try Device.open(paths: paths)
    }

    /// Fills the small filesystem until `free` bytes are left.
    func fill(leaving free: Int64) throws {
        var info = statvfs()
        XCTAssertEqual(statvfs(mountPoint, &info), 0)
        let available = Int64(info.f_bavail) * Int64(info.f_frsize)
        let filler = mountPoint + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT, 0o600)
        defer { close(fd) }
        let block = [UInt8](repeating: 7, count: 1 << 16)
        var left = available - free
        while left > 0 {
            let n = block.withUnsafeBytes { write(fd, $0.baseAddress, Int(min(Int64(block.count), left))) }
            XCTAssertGreaterThan(n, 0)
            left -= Int64(n)
        }
    }

    func testFetchKeptStopsAtTheFirstFileWithNoRoom() throws {
        let chunk = Int(ObjectLayout.chunkSize)
        // Staged copies live beside the device too: store them, which releases the copies.
        let small = try storedFile(pattern(4 * chunk, seed: 1), namespace: "keep")
        let large = try storedFile(pattern(4 << 20, seed: 2), namespace: "keep")
        let larger = try storedFile(pattern(5 << 20, seed: 3), namespace: "keep")
        let paths = device.paths
        device = nil
        device = try Device.open(paths: paths)  // releases the staged copies
        try fill(leaving: 1 << 20)
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.stop, .noRoom)
        XCTAssertEqual(result.stopError?.code, .noRoom)
        XCTAssertEqual(result.fetched.map(\.file), [small])
        XCTAssertEqual(result.remaining, 2)
        // Files fetch several at once: the others in flight when the disk ran out may have met
        // it too (each is larger than the room left), or not have started.
        let reasons = Dictionary(uniqueKeysWithValues: try Cache(device).cacheSummary().notHeld.map { ($0.reason, $0.count) })
        XCTAssertGreaterThanOrEqual(reasons["too_large_for_disk"] ?? 0, 1)
        XCTAssertEqual((reasons["too_large_for_disk"] ?? 0) + (reasons["not_fetched"] ?? 0), 2)
        _ = (large, larger)
    }

    func testOnAFullDiskTheEntriesReadLongestAgoGiveWayKeptFilesNever() throws {
        let old = pattern(6 << 20, seed: 5)
        let new = pattern(4 << 20, seed: 7)
        let oldID = try storedFile(old)
        let keptID = try storedFile(pattern(3 << 20, seed: 6), namespace: "keep")
        let newID = try storedFile(new)
        try reopen()
        _ = try Cache(device).setCacheBudget("keep-all")
        _ = try Reader(device).holdFile(keptID)
        _ = try Reader(device).holdFile(oldID)
        try fill(leaving: 2 << 20)
        // `get` makes room before it fetches: the entry read longest ago that is not kept goes.
        let (path, _) = try Reader(device).holdFile(newID)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == new)
        XCTAssertNil(try cacheRow(oldID))
        XCTAssertNotNil(try cacheRow(keptID), "a kept file never gives way")
        // A read does too, and keeps all it fetches.
        let (got, report) = try read(oldID)
        XCTAssertTrue(got == old)
        XCTAssertFalse(report.notKept)
        XCTAssertEqual(try cacheRow(oldID)?.int("complete"), 4)
        XCTAssertNil(try cacheRow(newID))
        XCTAssertNotNil(try cacheRow(keptID))
        // With nothing left that may give way (the other file pinned now), a get is refused
        // before it fetches.
        try KeptFiles(device).pin([oldID])
        assertCode(.noRoom) { try Reader(device).holdFile(newID) }
        XCTAssertNotNil(try cacheRow(oldID))
        XCTAssertNotNil(try cacheRow(keptID))
    }

    func testAReadOnADiskWithNoRoomForItsRecordGoesOnWithoutTheCache() throws {
        let bytes = pattern(3 << 20, seed: 11)
        let id = try storedFile(bytes)
        try reopen()
        try fill(leaving: 0)
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes, "every byte, checked, in order")
        XCTAssertTrue(report.notKept)
        XCTAssertNil(try cacheRow(id))
        // A ranged read too.
        let (part, ranged) = try read(id, ReadRange(offset: 1_000_000, length: 70_000))
        XCTAssertTrue(part == Array(bytes[1_000_000..<1_070_000]))
        XCTAssertTrue(ranged.notKept)
        assertCode(.noRoom) { try Reader(device).holdFile(id) }
    }

    func testMakingRoomStopsOnceTheBytesRemovedCoverTheShortfall() throws {
        let ids = try [1, 2, 3].map { try storedFile(pattern(3 << 20, seed: UInt64($0))) }
        let new = pattern(2 << 20, seed: 9)
        let newID = try storedFile(new)
        try reopen()
        _ = try Cache(device).setCacheBudget("keep-all")
        for id in ids { _ = try Reader(device).holdFile(id) }
        // A program holds the first file open (a path `coven get` printed): removing it frees
        // no blocks until it closes.
        let held = open(Cache(device).cachePaths(object: try device.requireFile(ids[0]).coordinates.object).data, O_RDONLY)
        XCTAssertGreaterThanOrEqual(held, 0)
        defer { close(held) }
        try fill(leaving: 1 << 20)
        let (path, _) = try Reader(device).holdFile(newID)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == new)
        XCTAssertEqual(try ids.map { try cacheRow($0) != nil }, [false, false, true],
                       "the two read longest ago cover the shortfall; the third stays though the disk shows less free")
    }

    func testAReadThatFillsTheDiskGoesOnWithoutKeepingItsBytesAndAGetFailsWithNoRoom() throws {
        let bytes = pattern(4 << 20, seed: 4)
        let id = try storedFile(bytes)
        try reopen()
        try fill(leaving: 5 << 19)
        // A read does not check ahead: the cache writes hit ENOSPC part way, and the read goes
        // on, every byte checked, keeping what fitted.
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes, "every byte, in order")
        XCTAssertTrue(report.notKept)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0, "a partial: what fitted")
        let held = try cacheRow(id)?.int("bytes") ?? -1
        XCTAssertGreaterThan(held, 0)
        XCTAssertLessThan(held, Int64(bytes.count))
        // A read of what is held needs no room.
        XCTAssertFalse(try read(id, ReadRange(offset: 0, length: 10)).1.notKept)
        // `get` must keep the file whole: it refuses before fetching.
        assertCode(.noRoom) { try Reader(device).holdFile(id) }
        // With room again, it fetches only what is missing.
        XCTAssertEqual(unlink(mountPoint + "/filler"), 0)
        let (path, fetched) = try Reader(device).holdFile(id)
        XCTAssertEqual(fetched.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count))
            - ObjectLayout.headerSize * (held > 0 ? 1 : 0) - held / Int64(ObjectLayout.chunkSize) * ObjectLayout.sealedChunkSize)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
        XCTAssertFalse(fetched.notKept)
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The read pipeline's threads and the cache states they leave: fetched runs written by the
/// producer and recorded by the reader, cached runs checked in two halves at once, and entries a
/// read completes without syncing (`complete` 3 and 4), which `get` reads through and syncs.
final class ReadPipelineTests: ReadTestCase {
    let chunk = Int(ObjectLayout.chunkSize)
    let run = Int(StoredRead.runChunks) * Int(ObjectLayout.chunkSize)

    func object(_ id: String) throws -> String { try device.requireFile(id).coordinates.object }

    /// Flips one byte of the cached plaintext at `offset` (a chunk whose bytes a power cut lost).
    func corruptCachedData(_ id: String, at offset: Int) throws {
        let fd = open(Cache(device).cachePaths(object: try object(id)).data, O_RDWR)
        defer { close(fd) }
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, off_t(offset)), 1)
        byte ^= 0x5A
        XCTAssertEqual(pwrite(fd, &byte, 1, off_t(offset)), 1)
    }

    /// Overwrites the cached tag of `chunk` with zeros.
    func corruptCachedTag(_ id: String, chunk index: Int) throws {
        let fd = open(Cache(device).cachePaths(object: try object(id)).tags, O_RDWR)
        defer { close(fd) }
        let zeros = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, 16, off_t(index * 16)) }, 16)
    }

    func testAReadLeavesTheEntryWholeUnsyncedAndGetSyncsItWithoutFetching() throws {
        let bytes = pattern(20 * chunk + 5)
        let id = try storedFile(bytes)
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.source, .storage)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4, "every chunk held and hash-checked, not synced")
        XCTAssertEqual(try cacheRow(id)?.int("bytes"), Int64(bytes.count))
        // A whole entry is no partial.
        XCTAssertEqual(try Cache(device).cacheSummary().partial, 0)
        XCTAssertEqual(try Cache(device).cacheSummary().used, Int64(bytes.count))
        // get reads it through (every tag checked), syncs it and hands it out; nothing is fetched.
        let (path, held) = try Reader(device).holdFile(id)
        XCTAssertEqual(held.bytesFetched, 0)
        XCTAssertEqual(held.requests, 0)
        XCTAssertEqual(held.source, .cache)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 2, "synced now, and still hash-checked")
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
        // A complete entry is handed out at once, and reads leave it complete.
        XCTAssertEqual(try Reader(device).holdFile(id).path, path)
        XCTAssertTrue(try read(id).0 == bytes)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 2, "a read never downgrades a synced entry")
    }

    func testGetOfAWholeEntryRefetchesAChunkItLostNeverHandsItOut() throws {
        let bytes = pattern(3 * run + 777)
        let id = try storedFile(bytes)
        _ = try read(id)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        // As if a power cut lost the (unsynced) bytes of chunk 21 and the tag of chunk 40.
        try corruptCachedData(id, at: 21 * chunk + 100)
        try corruptCachedTag(id, chunk: 40)
        let (path, report) = try Reader(device).holdFile(id)
        XCTAssertEqual(report.chunksRefetched, 2)
        XCTAssertEqual(report.bytesFetched, 2 * ObjectLayout.sealedChunkSize)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes, "the file handed out is the right one")
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 1, "synced; the refetch made it unverified")
        XCTAssertTrue(try read(id).0 == bytes)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 2, "the next whole read hashes it again")
    }

    func testCorruptChunksInEitherHalfOfARunAreRefetchedOnBothPaths() throws {
        // 33 chunks: runs 0-15, 16-31 and 32; each run of 16 is checked in halves of 8.
        let bytes = pattern(2 * run + 100)
        let id = try storedFile(bytes)
        _ = try read(id)
        // A verified entry read whole is not hashed: both halves are checked at once.
        for offset in [2 * chunk + 7, 13 * chunk, 28 * chunk + 65535, 32 * chunk + 99] {
            try corruptCachedData(id, at: offset)
        }
        try corruptCachedTag(id, chunk: 20)
        var (got, report) = try read(id)
        XCTAssertTrue(got == bytes, "no corrupted chunk goes out")
        XCTAssertEqual(report.chunksRefetched, 5)
        XCTAssertEqual(report.bytesFetched, 4 * ObjectLayout.sealedChunkSize + Int64(ObjectLayout.encryptedRange(chunk: 32, plaintextSize: Int64(bytes.count)).count))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 3, "unverified after the refetch, not synced")
        // An unverified entry read whole is hashed, and checked on one thread beside the hash.
        for offset in [9 * chunk + 1, 31 * chunk + 4] { try corruptCachedData(id, at: offset) }
        (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.chunksRefetched, 2)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        // A ranged read (no hash) checks both halves at once too.
        try corruptCachedData(id, at: 12 * chunk)
        (got, report) = try read(id, ReadRange(offset: Int64(chunk), length: Int64(run)))
        XCTAssertTrue(got == Array(bytes[chunk..<(chunk + run)]))
        XCTAssertEqual(report.chunksRefetched, 1)
        (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.chunksRefetched, 0, "every refetched chunk was written back")
        XCTAssertEqual(report.source, .cache)
    }

    func testCacheFilesCutShortAreFetchedAgainNeverServed() throws {
        let bytes = pattern(2 * run + 3 * chunk)
        let id = try storedFile(bytes)
        _ = try read(id)
        let files = Cache(device).cachePaths(object: try object(id))
        // The data file loses its last 3.5 chunks (a reader makes it whole again: zeros, which
        // fail their tags); the tags file loses all but the first 20 tags (those runs fail whole).
        XCTAssertEqual(truncate(files.data, off_t(bytes.count - 3 * chunk - chunk / 2)), 0)
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.chunksRefetched, 4)
        XCTAssertEqual(truncate(files.tags, 20 * 16), 0)
        let (again, second) = try read(id)
        XCTAssertTrue(again == bytes)
        XCTAssertEqual(second.chunksRefetched, 16 + 3, "runs 1 and 2 whole: their tags are short")
        XCTAssertEqual(try read(id).1.chunksRefetched, 0)
    }

    func testAWarmReadWhoseRefetchFailsOfflineStopsAtThatRunWithoutHanging() throws {
        let bytes = pattern(5 * run)
        let id = try storedFile(bytes)
        _ = try read(id)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        // Run 3 is the producer thread's, run 2 the reader's own. One holds a bad chunk and
        // storage is away: the read must stop there with the storage error, after the runs
        // before it and nothing of that run or later.
        for badRun in [3, 2] {
            try corruptCachedData(id, at: badRun * run + 5 * chunk)
            try FileManager.default.moveItem(atPath: store, toPath: store + ".away")
            var out: [UInt8] = []
            let started = Date()
            XCTAssertThrowsError(try Reader(device).readFile(id) { out.append(contentsOf: $0) }) { error in
                XCTAssertEqual(error.asCovenError.code, .storage)
                XCTAssertEqual(error.asCovenError.storageFailure, .network)
            }
            XCTAssertLessThan(Date().timeIntervalSince(started), 5)
            XCTAssertTrue(out == Array(bytes[0..<(badRun * run)]), "run \(badRun)")
            // Back online, the bad chunk is fetched again; the entry was never marked otherwise.
            try FileManager.default.moveItem(atPath: store + ".away", toPath: store)
            let (got, report) = try read(id)
            XCTAssertTrue(got == bytes)
            XCTAssertEqual(report.chunksRefetched, 1)
        }
    }

    func testAnInterruptedCheckedReadStopsBetweenRunsAndLeavesTheEntry() throws {
        let bytes = pattern(4 * run)
        let id = try storedFile(bytes)
        _ = try read(id)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        nonisolated(unsafe) var polls = 0
        var out: [UInt8] = []
        XCTAssertThrowsError(try Reader(device).readFile(id, stop: Stop(when: {
            polls += 1
            return polls > 2
        })) { out.append(contentsOf: $0) }) { error in
            XCTAssertEqual(error.asCovenError.code, .interrupted)
        }
        XCTAssertEqual(out.count, 2 * run, "the runs before the stop went out, in order, and nothing after")
        XCTAssertTrue(out == Array(bytes[0..<(2 * run)]))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4, "a stopped read changes nothing")
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.source, .cache)
    }

    func testAnInterruptedFetchRecordsOnlyTheRunsTheReaderTook() throws {
        let bytes = pattern(5 * run + 3)
        let id = try storedFile(bytes)
        nonisolated(unsafe) var polls = 0
        var out = 0
        XCTAssertThrowsError(try Reader(device).readFile(id, stop: Stop(when: {
            polls += 1
            return polls > 2
        })) { out += $0.count }) { error in
            XCTAssertEqual(error.asCovenError.code, .interrupted)
        }
        XCTAssertEqual(out, 2 * run)
        // The producer may have written runs ahead of the reader; only the two taken are recorded.
        let row = try XCTUnwrap(try cacheRow(id))
        XCTAssertEqual(row.int("complete"), 0)
        XCTAssertEqual(row.int("bytes"), Int64(2 * run))
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes)
        XCTAssertEqual(report.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count))
            - ObjectLayout.headerSize - 32 * ObjectLayout.sealedChunkSize, "the rest is fetched, the recorded runs are not")
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
    }

    func testAWholeEntryIsNeverRemovedAsAStalePartial() throws {
        let whole = try storedFile(pattern(2 * chunk, seed: 1))
        let partial = try storedFile(pattern(2 * chunk, seed: 2))
        _ = try read(whole)
        _ = try read(partial, ReadRange(offset: 0, length: 10))
        XCTAssertEqual(try cacheRow(whole)?.int("complete"), 4)
        XCTAssertEqual(try cacheRow(partial)?.int("complete"), 0)
        Cache(device).removeStalePartials(now: Date().addingTimeInterval(30 * 86400))
        XCTAssertNotNil(try cacheRow(whole), "a whole entry is no partial")
        XCTAssertNil(try cacheRow(partial), "an old partial goes")
    }

    /// A batch (fetch-kept, `get` of many) begins the rows of a window of files before its
    /// workers make their files: an open meanwhile (a worker's own) leaves a row begun now
    /// without files, and takes one begun longer ago than a partial lives. (Before, an entry
    /// without a data file counted as untouched since 1970: the open of a `get` of many's worker
    /// took the row of a file about to be fetched, and its files with it.)
    func testAnEntryBegunWithoutFilesIsNoStalePartialUntilItsLifetimeIsOver() throws {
        let id = try storedFile(pattern(2 * chunk, seed: 3))
        let object = try device.requireFile(id).coordinates.object
        try device.database.transaction { try Cache(device).beginCacheEntry(object, size: Int64(2 * chunk), chunks: [0]) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: Cache(device).cachePaths(object: object).data))
        Cache(device).removeStalePartials()
        XCTAssertNotNil(try cacheRow(id), "a row begun now stays")
        Cache(device).removeStalePartials(now: Date().addingTimeInterval(8 * 86400))
        XCTAssertNil(try cacheRow(id), "one begun eight days ago goes")
    }

    func testFetchKeptCountsAWholeKeptFileAsHeldInStatusAndSyncsIt() throws {
        let bytes = pattern(3 * chunk + 1)
        let id = try storedFile(bytes, namespace: "keep")
        _ = try read(id)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        let summary = try Cache(device).cacheSummary()
        XCTAssertEqual(summary.heldCount, 1, "every chunk is held")
        XCTAssertEqual(summary.partial, 0)
        XCTAssertEqual(summary.notHeld.count, 0)
        // fetch-kept makes it durable: read through, checked, synced; nothing fetched.
        let result = try KeptFiles(device).fetchKept()
        XCTAssertEqual(result.fetched.map(\.file), [id])
        XCTAssertEqual(result.fetched.first?.bytesFetched, 0)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 2)
        let again = try KeptFiles(device).fetchKept()
        XCTAssertEqual(again.fetched.count, 0)
        XCTAssertEqual(again.alreadyHeld, 1)
    }

    func testTwoReadersOfOneEntryAtOnceBothGetTheFile() throws {
        let bytes = pattern(3 * run + 17)
        let id = try storedFile(bytes)
        let other = try Device.open(paths: device.paths)
        // Each reader on its own thread with its own device (connection), as two processes.
        final class Reader: @unchecked Sendable {
            let device: Device
            let id: String
            var out: [UInt8] = []
            var error: Error?
            let done = DispatchSemaphore(value: 0)
            init(_ device: Device, _ id: String) {
                self.device = device
                self.id = id
            }
            func start() {
                Thread { [self] in
                    do { try CovenKit.Reader(device).readFile(id) { out.append(contentsOf: $0) } } catch { self.error = error }
                    done.signal()
                }.start()
            }
        }
        let readers = [Reader(device, id), Reader(other, id)]
        readers.forEach { $0.start() }
        for reader in readers {
            reader.done.wait()
            XCTAssertNil(reader.error)
            XCTAssertTrue(reader.out == bytes)
        }
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        XCTAssertTrue(try read(id).0 == bytes)
    }

    func testChunkBitmapSubsetDecidesWhatASyncCovered() {
        var synced = ChunkBitmap(count: 20)
        for chunk in [0, 3, 9, 19] as [Int64] { synced.insert(chunk) }
        var current = ChunkBitmap(count: 20)
        XCTAssertTrue(current.isSubset(of: synced))
        for chunk in [3, 19] as [Int64] { current.insert(chunk) }
        XCTAssertTrue(current.isSubset(of: synced))
        current.insert(10)
        XCTAssertFalse(current.isSubset(of: synced), "a chunk recorded after the sync is not covered")
        XCTAssertFalse(synced.isSubset(of: current))
    }
}

/// A provider that hands a FileStorage object's bytes to the sink in pieces of the given sizes,
/// in turn (so chunks and the header arrive split anywhere), and can add or drop bytes at the
/// end, as a faulty server would.
final class PiecewiseProvider: StorageProvider {
    let base: FileStorage
    let pieces: [Int]
    var extra = 0
    var drop = 0

    init(_ base: FileStorage, pieces: [Int]) {
        self.base = base
        self.pieces = pieces
    }

    var singleRequestLimit: Int64 { base.singleRequestLimit }
    var minimumPartSize: Int64 { base.minimumPartSize }
    func put(_ key: String, data: [UInt8]) throws { try base.put(key, data: data) }
    func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool { try base.putIfAbsent(key, data: data) }
    func head(_ key: String) throws -> ObjectInfo? { try base.head(key) }
    func delete(_ key: String) throws { try base.delete(key) }
    func list(prefix: String) throws -> [ObjectInfo] { try base.list(prefix: prefix) }
    func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String {
        try base.createMultipart(key, totalSize: totalSize, partSize: partSize)
    }
    func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart {
        try base.uploadPart(key, uploadID: uploadID, number: number, offset: offset, data: data)
    }
    func listParts(_ key: String, uploadID: String) throws -> [UploadedPart] { try base.listParts(key, uploadID: uploadID) }
    func uploadsInProgress(_ key: String) throws -> [String] { try base.uploadsInProgress(key) }
    func uploadsInProgress(prefix: String) throws -> [UploadInProgress] { try base.uploadsInProgress(prefix: prefix) }
    func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws {
        try base.completeMultipart(key, uploadID: uploadID, parts: parts)
    }
    func abortMultipart(_ key: String, uploadID: String) throws { try base.abortMultipart(key, uploadID: uploadID) }

    func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64? {
        var all: [UInt8] = []
        let size = try base.get(key, range: range) { all.append(contentsOf: $0) }
        all.removeLast(min(drop, all.count))
        all += [UInt8](repeating: 0xA5, count: extra)
        var position = 0
        var turn = 0
        while position < all.count {
            let count = min(pieces[turn % pieces.count], all.count - position)
            try all[position..<(position + count)].withUnsafeBytes { try sink($0) }
            position += count
            turn += 1
        }
        return size
    }
}

final class StreamedFetchTests: ReadTestCase {
    let chunk = Int(ObjectLayout.chunkSize)

    func fetch(_ id: String, _ run: Range<Int64>, pieces: [Int], extra: Int = 0, drop: Int = 0) throws -> RunBuffer {
        let record = try device.requireFile(id)
        let provider = PiecewiseProvider(try FileStorage(directory: store, create: false), pieces: pieces)
        provider.extra = extra
        provider.drop = drop
        let cipher = try ChunkCipher(key: try FileKey(hex: record.coordinates.key))
        let carry = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(ObjectLayout.sealedChunkSize), alignment: 64)
        defer { carry.deallocate() }
        let buffer = RunBuffer(chunks: StoredRead.runChunks)
        try Prefetcher.fetch(run, object: record.coordinates.object, size: record.size, provider: provider, cipher: cipher, carry: carry, into: buffer)
        return buffer
    }

    func testChunksAndTheHeaderSplitAnywhereOpenTheSame() throws {
        let bytes = pattern(5 * chunk + 321)
        let id = try storedFile(bytes)
        let size = Int64(bytes.count)
        for pieces in [[1], [3, 5], [7], [65551, 2], [65553], [65552 * 2 + 8], [1 << 20], [9, 65552, 100_000]] {
            for run in [0..<6, 0..<1, 2..<5, 5..<6] as [Range<Int64>] {
                let buffer = try fetch(id, run, pieces: pieces)
                defer { withExtendedLifetime(buffer) {} }
                let plain = ObjectLayout.plaintextRange(chunk: run.lowerBound, plaintextSize: size).lowerBound..<ObjectLayout.plaintextRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
                XCTAssertEqual(Array(buffer.plainBytes), Array(bytes[Int(plain.lowerBound)..<Int(plain.upperBound)]), "pieces \(pieces) run \(run)")
                XCTAssertEqual(buffer.chunks, run)
                let sealed = ObjectLayout.encryptedRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
                    - (run.lowerBound == 0 ? 0 : ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: size).lowerBound)
                XCTAssertEqual(buffer.transferred, sealed)
                XCTAssertEqual(buffer.tagBytes.count, run.count * 16)
            }
        }
    }

    func testAnObjectLongerOrShorterThanItsRecordIsIntegrity() throws {
        let bytes = pattern(3 * chunk + 10)
        let id = try storedFile(bytes)
        for (extra, drop) in [(1, 0), (70_000, 0), (0, 1), (0, 16), (0, 65552 + 10)] {
            for pieces in [[5], [1 << 20]] {
                do {
                    _ = try fetch(id, 0..<4, pieces: pieces, extra: extra, drop: drop)
                    XCTFail("extra \(extra) drop \(drop): no error")
                } catch {
                    let error = error.asCovenError
                    XCTAssertEqual(error.code, .integrity, "extra \(extra) drop \(drop): \(error)")
                    XCTAssertEqual(error.details["reason"], "length", "extra \(extra) drop \(drop)")
                }
            }
        }
    }

    func testANewerHeaderIsUpdateRequiredEvenSplit() throws {
        let bytes = pattern(chunk + 1)
        let id = try storedFile(bytes)
        let path = store + "/" + (try device.requireFile(id).coordinates.object)
        let fd = open(path, O_RDWR)
        var version: UInt8 = 0x7F
        XCTAssertEqual(pwrite(fd, &version, 1, 6), 1)
        close(fd)
        for pieces in [[1], [3], [1 << 20]] {
            XCTAssertThrowsError(try fetch(id, 0..<2, pieces: pieces)) { error in
                XCTAssertEqual(error.asCovenError.code, .updateRequired, "pieces \(pieces)")
            }
        }
        // A run that does not start at chunk 0 does not fetch the header.
        let tail = try fetch(id, 1..<2, pieces: [2])
        withExtendedLifetime(tail) { XCTAssertEqual(Array(tail.plainBytes), Array(bytes[chunk...])) }
    }
}

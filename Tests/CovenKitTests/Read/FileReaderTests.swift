@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

final class FileReaderTests: ReadTestCase {
    let chunk = Int(ObjectLayout.chunkSize)

    func testRangesAtChunkBoundaries() throws {
        let bytes = pattern(3 * chunk + 1234)
        let id = try storedFile(bytes)
        let size = Int64(bytes.count)
        let cases: [(Int64, Int64)] = [
            (0, 1), (0, Int64(chunk)), (Int64(chunk) - 1, 2), (Int64(chunk), 1), (Int64(chunk) + 1, 10),
            (Int64(chunk) - 1, Int64(chunk) + 2), (3 * Int64(chunk), 1234), (size - 1, 1), (size, 0), (5, 0),
        ]
        for (offset, length) in cases {
            let (got, _) = try read(id, ReadRange(offset: offset, length: length))
            XCTAssertEqual(got, Array(bytes[Int(offset)..<Int(offset + length)]), "offset \(offset) length \(length)")
        }
        let (whole, report) = try read(id)
        XCTAssertEqual(whole, bytes)
        XCTAssertEqual(report.source, .cache, "every chunk was cached by the ranged reads")
        let (tail, _) = try read(id, ReadRange(offset: Int64(chunk) + 7, length: nil))
        XCTAssertEqual(tail, Array(bytes[(chunk + 7)...]))
    }

    func testPastTheEndIsRangeOutOfBoundsNeverShort() throws {
        let bytes = pattern(chunk + 10)
        let id = try storedFile(bytes)
        let size = Int64(bytes.count)
        assertCode(.rangeOutOfBounds) { try read(id, ReadRange(offset: size - 5, length: 6)) }
        assertCode(.rangeOutOfBounds) { try read(id, ReadRange(offset: size + 1, length: nil)) }
        assertCode(.rangeOutOfBounds) { try read(id, ReadRange(offset: -1, length: 1)) }
        assertCode(.rangeOutOfBounds) { try read(id, ReadRange(offset: 0, length: Int64.max)) }
    }

    func testEmptyFile() throws {
        let id = try storedFile([])
        let (got, report) = try read(id)
        XCTAssertEqual(got, [])
        XCTAssertEqual(report.source, .storage, "the empty chunk is fetched and checked")
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4, "whole and hash-checked, not synced")
        XCTAssertEqual(try read(id).1.source, .cache)
        assertCode(.rangeOutOfBounds) { try read(id, ReadRange(offset: 0, length: 1)) }
        let held = try Reader(device).holdFile(id)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: held.path)[.size] as? Int, 0)
    }

    func testSmallRangeFetchesOnlyItsChunks() throws {
        let bytes = pattern(40 * chunk + 99)
        let id = try storedFile(bytes)
        let offset = Int64(17 * chunk + 500)
        let (got, report) = try read(id, ReadRange(offset: offset, length: 100_000))
        XCTAssertEqual(got, Array(bytes[Int(offset)..<Int(offset) + 100_000]))
        // 100,000 bytes from inside chunk 17 touch chunks 17...18: two sealed chunks, one request.
        XCTAssertEqual(report.bytesFetched, 2 * ObjectLayout.sealedChunkSize)
        XCTAssertEqual(report.requests, 1)
        XCTAssertEqual(try cacheRow(id)?.int("bytes"), Int64(2 * chunk))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0)
        // Whole read: neighbours go together up to 1 MiB per request, cached chunks are not fetched.
        let (whole, second) = try read(id)
        XCTAssertEqual(whole, bytes)
        XCTAssertEqual(second.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) - 2 * ObjectLayout.sealedChunkSize)
        XCTAssertEqual(second.requests, 4, "chunks 0-15, 16, 19-34, 35-40")
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4, "whole and hash-checked; a read does not sync")
    }

    func testCorruptedCachedChunkIsRefetchedNeverServed() throws {
        let bytes = pattern(3 * chunk)
        let id = try storedFile(bytes)
        _ = try read(id)
        let record = try device.requireFile(id)
        let data = Cache(device).cachePaths(object: record.coordinates.object).data
        // Flip one byte of chunk 1 in the cache.
        let fd = open(data, O_RDWR)
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, off_t(chunk + 10)), 1)
        byte ^= 0xFF
        XCTAssertEqual(pwrite(fd, &byte, 1, off_t(chunk + 10)), 1)
        close(fd)
        let (got, report) = try read(id, ReadRange(offset: Int64(chunk), length: 100))
        XCTAssertEqual(got, Array(bytes[chunk..<(chunk + 100)]))
        XCTAssertEqual(report.chunksRefetched, 1)
        XCTAssertEqual(report.bytesFetched, ObjectLayout.sealedChunkSize)
        XCTAssertEqual(try read(id).1.source, .cache, "the refetched chunk is cached again")
    }

    func testAVerifiedCompleteEntryStillChecksEveryChunk() throws {
        let bytes = pattern(20 * chunk + 5)
        let id = try storedFile(bytes)
        // Cached chunk by chunk, then read whole: hashed once, marked verified.
        _ = try read(id, ReadRange(offset: 0, length: Int64(bytes.count)))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4)
        let data = Cache(device).cachePaths(object: try device.requireFile(id).coordinates.object).data
        let fd = open(data, O_RDWR)
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, off_t(19 * chunk)), 1)
        byte ^= 0x40
        XCTAssertEqual(pwrite(fd, &byte, 1, off_t(19 * chunk)), 1)
        close(fd)
        let (got, report) = try read(id)
        XCTAssertTrue(got == bytes, "the corrupted chunk never goes out")
        XCTAssertEqual(report.chunksRefetched, 1)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 3, "a refetched chunk makes the entry unverified")
        XCTAssertTrue(try read(id).0 == bytes)
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 4, "the next whole read hashes it again")
    }

    func testCorruptedStoredObjectIsIntegrity() throws {
        let bytes = pattern(2 * chunk + 5)
        let id = try storedFile(bytes)
        let record = try device.requireFile(id)
        let path = store + "/" + record.coordinates.object
        let fd = open(path, O_RDWR)
        var byte: UInt8 = 0
        let at = off_t(ObjectLayout.encryptedRange(chunk: 1, plaintextSize: Int64(bytes.count)).lowerBound + 3)
        XCTAssertEqual(pread(fd, &byte, 1, at), 1)
        byte ^= 1
        XCTAssertEqual(pwrite(fd, &byte, 1, at), 1)
        close(fd)
        assertCode(.integrity) { try read(id, ReadRange(offset: Int64(chunk), length: 10)) }
        // Chunk 0 is fine and readable; nothing of chunk 1 was cached.
        XCTAssertEqual(try read(id, ReadRange(offset: 0, length: 10)).0, Array(bytes[0..<10]))
        assertCode(.integrity) { try read(id) }
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0)
        // A truncated object fails as integrity too, never as a short read.
        XCTAssertEqual(truncate(path, off_t(ObjectLayout.encryptedRange(chunk: 2, plaintextSize: Int64(bytes.count)).lowerBound + 4)), 0)
        assertCode(.integrity) { try read(id, ReadRange(offset: Int64(2 * chunk), length: 5)) }
    }

    func testAnObjectWithBytesAppendedIsDamageForEveryRead() throws {
        let bytes = pattern(3 * chunk + 5)
        let id = try storedFile(bytes)
        let record = try device.requireFile(id)
        let path = store + "/" + record.coordinates.object
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: path))
        handle.seekToEndOfFile()
        handle.write(Data([1, 2, 3]))
        try handle.close()
        // Every chunk still authenticates, but the object is not the size its record gives.
        for range in [ReadRange(offset: 0, length: 10), ReadRange(offset: Int64(chunk), length: 10), ReadRange(offset: Int64(3 * chunk), length: 5), .whole] {
            do {
                _ = try read(id, range)
                XCTFail("expected integrity for \(range)")
            } catch {
                let error = error.asCovenError
                XCTAssertEqual(error.code, .integrity, "\(error)")
                XCTAssertEqual(error.details["reason"], "length")
                XCTAssertTrue(error.message.contains("is \(ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) + 3) bytes, not"), error.message)
            }
        }
        XCTAssertEqual(try cacheRow(id)?.int("complete") ?? 0, 0, "nothing of a damaged object is cached as good")
    }

    func testWholeReadChecksTheRecordedHash() throws {
        let bytes = pattern(16 * chunk + 3)
        let id = try storedFile(bytes)
        try device.database.run("UPDATE coven_files SET hash = ?2 WHERE id = ?1", [id, String(repeating: "0", count: 64)])
        var out: [UInt8] = []
        assertCode(.integrity) { try Reader(device).readFile(id) { out.append(contentsOf: $0) } }
        XCTAssertTrue(out == Array(bytes[0..<(16 * chunk)]), "the last run's bytes never go out")
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0)
    }

    func testOfflineFailsPromptlyWithStorageNetwork() throws {
        let bytes = pattern(4 * chunk)
        let id = try storedFile(bytes)
        _ = try read(id, ReadRange(offset: 0, length: 10))
        try FileManager.default.moveItem(atPath: store, toPath: store + ".away")
        // The cached chunk still reads offline.
        XCTAssertEqual(try read(id, ReadRange(offset: 5, length: 10)).0, Array(bytes[5..<15]))
        let started = Date()
        do {
            _ = try read(id, ReadRange(offset: Int64(2 * chunk), length: 10))
            XCTFail("expected storage")
        } catch {
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertEqual(error.asCovenError.storageFailure, .network)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
    }

    func testDeviceOnlyElsewhere() throws {
        let id = try storedFile(pattern(10))
        let other = #"{"at":"device","device":"11111111-1111-4111-8111-111111111111","object":"files/x/y","key":"00"}"#
        try device.database.run("UPDATE coven_files SET coordinates = ?2 WHERE id = ?1", [id, other])
        assertCode(.deviceOnly) { try read(id) }
        assertCode(.fileAbsent) { try read("01234567-0123-4123-8123-0123456789ab") }
    }

    func testUserOriginalBeforeUploadAndAfterItChanged() throws {
        let path = folder + "/song.flac"
        let bytes = pattern(chunk + 77)
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let id = try StoredFiles.stageUser(device, path: path, namespace: "originals", table: "originals")
        let (got, report) = try read(id)
        XCTAssertEqual(got, bytes)
        XCTAssertEqual(report.source, .original)
        XCTAssertEqual(try read(id, ReadRange(offset: Int64(chunk), length: 77)).0, Array(bytes[chunk...]))
        XCTAssertEqual(try Reader(device).holdFile(id).path, path)
        // Changed (new size): refused before any byte.
        FileManager.default.createFile(atPath: path, contents: Data(bytes + [1]))
        var out: [UInt8] = []
        assertCode(.userFileChanged) { try Reader(device).readFile(id) { out.append(contentsOf: $0) } }
        XCTAssertEqual(out, [])
        unlink(path)
        assertCode(.userFileMissing) { try read(id) }
    }

    func testAppCopyBeforeUpload() throws {
        let bytes = pattern(2 * chunk)
        let id = try StoredFiles.stageApp(device, bytes: bytes, namespace: "blobs", table: "blobs")
        let (got, report) = try read(id, ReadRange(offset: 3, length: Int64(chunk)))
        XCTAssertEqual(got, Array(bytes[3..<(chunk + 3)]))
        XCTAssertEqual(report.source, .copy)
        XCTAssertTrue(try Reader(device).holdFile(id).path.hasPrefix(device.paths.copies))
    }

    func testGetHoldsTheWholeFileAndResumesAPartial() throws {
        let bytes = pattern(20 * chunk + 1)
        let id = try storedFile(bytes)
        _ = try read(id, ReadRange(offset: Int64(5 * chunk), length: Int64(3 * chunk)))
        XCTAssertEqual(try cacheRow(id)?.int("complete"), 0)
        let (path, report) = try Reader(device).holdFile(id)
        XCTAssertEqual(report.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(bytes.count)) - 3 * ObjectLayout.sealedChunkSize - ObjectLayout.headerSize + ObjectLayout.headerSize)
        XCTAssertEqual([UInt8](FileManager.default.contents(atPath: path) ?? Data()), bytes)
        XCTAssertEqual(try Reader(device).holdFile(id).report.source, .cache)
    }
}

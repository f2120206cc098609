@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

final class FileStorageTests: XCTestCase {
    private var root = ""
    private var storage: FileStorage!

    override func setUpWithError() throws {
        root = try TestPaths.temporaryDirectory("file-storage")
        storage = try FileStorage(directory: root)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func bytes(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    private func read(_ key: String, _ range: Range<Int64>? = nil, from provider: StorageProvider? = nil) throws -> (bytes: [UInt8], pieces: [Int], size: Int64?) {
        var out: [UInt8] = []
        var pieces: [Int] = []
        let size = try (provider ?? storage).get(key, range: range) { chunk in
            out.append(contentsOf: chunk)
            pieces.append(chunk.count)
        }
        return (out, pieces, size)
    }

    private func entries(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + folder)) ?? []).sorted()
    }

    // MARK: - Opening

    func testMissingDirectoryIsAnErrorUnlessCreated() throws {
        let missing = root + "/not/there"
        XCTAssertThrowsError(try FileStorage(directory: missing)) { error in
            XCTAssertEqual(error.asCovenError.storageFailure, .network)
        }
        let created = try StorageConnector(location: .file(directory: missing)).connect(create: true)
        XCTAssertTrue(created is FileStorage)
        var isDirectory: ObjCBool = false
        XCTAssertTrue(FileManager.default.fileExists(atPath: missing, isDirectory: &isDirectory) && isDirectory.boolValue)
    }

    func testVanishedRootIsNeverAbsence() throws {
        try storage.put("files/d/a", data: [1])
        try FileManager.default.removeItem(atPath: root)
        for operation in [{ _ = try self.storage.head("files/d/a") }, { _ = try self.read("files/d/a") }, { _ = try self.storage.list(prefix: "") }] {
            XCTAssertThrowsError(try operation()) { error in
                XCTAssertEqual(error.asCovenError.code, .storage)
                XCTAssertEqual(error.asCovenError.storageFailure, .network)
            }
        }
        XCTAssertThrowsError(try storage.put("files/d/b", data: [1]))
        XCTAssertFalse(FileManager.default.fileExists(atPath: root), "put must not recreate a vanished store directory")
    }

    // MARK: - Objects

    func testPutReplacesAtomicallyAndLeavesNoTemporaryFiles() throws {
        try storage.put("files/dev/a", data: bytes(1000))
        XCTAssertEqual(try read("files/dev/a").bytes, bytes(1000))
        try storage.put("files/dev/a", data: bytes(10, seed: 9))
        XCTAssertEqual(try read("files/dev/a").bytes, bytes(10, seed: 9))
        try storage.put("store.json", data: [])
        XCTAssertEqual(try storage.head("store.json"), ObjectInfo(key: "store.json", size: 0))
        XCTAssertEqual(entries("files/dev"), ["a"])
        XCTAssertEqual(entries(""), ["files", "store.json"])
    }

    /// A batch's objects go in whole, at their keys once makeDurable has synced their bytes (one
    /// sync of the filesystem) and renamed them, with no sync of their own; it syncs each of
    /// their folders once, and refuses a bad key as put does.
    func testPendingPutsAreWholeAndTheirFoldersSyncedOnceForTheBatch() throws {
        try storage.put("files/dev/first", data: bytes(5))
        try storage.put("files/other/first", data: bytes(5))
        let before = FileStorage.folderSyncs
        for index in 0..<10 { try storage.putPending("files/dev/o\(index)", data: bytes(100 + index, seed: UInt8(index))) }
        try storage.putPending("files/other/p", data: bytes(7))
        try storage.putPending("files/dev/o3", data: bytes(3, seed: 42))
        XCTAssertEqual(FileStorage.folderSyncs, before, "no folder sync yet")
        XCTAssertNil(try storage.head("files/dev/o9"), "not at its key before its bytes are synced")
        XCTAssertEqual(try storage.list(prefix: "files/dev/").map(\.key), ["files/dev/first"], "temporaries are never listed")
        try storage.makeDurable((0..<10).map { "files/dev/o\($0)" } + ["files/other/p", "files/dev/o3"])
        XCTAssertEqual(FileStorage.folderSyncs - before, 2, "one sync a folder")
        XCTAssertEqual(try read("files/dev/o9").bytes, bytes(109, seed: 9))
        XCTAssertEqual(try read("files/dev/o3").bytes, bytes(3, seed: 42))
        XCTAssertEqual(entries("files/dev").count, 11, "no temporary left: \(entries("files/dev"))")
        // A key that holds an object already: the new one replaces it whole, once durable.
        try storage.putPending("files/dev/first", data: bytes(9, seed: 7))
        XCTAssertEqual(try read("files/dev/first").bytes, bytes(5), "the old object until the batch is durable")
        try storage.makeDurable(["files/dev/first"])
        XCTAssertEqual(try read("files/dev/first").bytes, bytes(9, seed: 7))
        XCTAssertEqual(entries("files/dev").count, 11, "no temporary left: \(entries("files/dev"))")
        XCTAssertThrowsError(try storage.makeDurable(["files/../x"])) { XCTAssertEqual($0.asCovenError.code, .storage) }
        XCTAssertThrowsError(try storage.putPending("a/.coven-tmp-1", data: [1])) { XCTAssertEqual($0.asCovenError.code, .storage) }
    }

    func testRangesArePreadInPiecesAndClipped() throws {
        let size = 2 * FileStorage.readPiece + 500
        let data = bytes(size)
        try storage.put("big", data: data)

        let whole = try read("big")
        XCTAssertEqual(whole.bytes, data)
        XCTAssertEqual(whole.size, Int64(size))
        XCTAssertEqual(whole.pieces, [FileStorage.readPiece, FileStorage.readPiece, 500])

        let piece = Int64(FileStorage.readPiece)
        let cases: [(Range<Int64>, Range<Int>)] = [
            (0..<1, 0..<1),
            (piece - 1..<piece + 1, Int(piece) - 1..<Int(piece) + 1),
            (Int64(size) - 1..<Int64(size), size - 1..<size),
            (10..<Int64(size) + 1000, 10..<size),  // clipped to the end
        ]
        for (range, expected) in cases {
            let got = try read("big", range)
            XCTAssertEqual(got.bytes, Array(data[expected]), "range \(range)")
            XCTAssertEqual(got.size, Int64(size))
        }
        XCTAssertEqual(try read("big", Int64(size)..<Int64(size)).bytes, [], "an empty range at the end is fine")
        for start in [Int64(size), Int64(size) + 1] {
            XCTAssertThrowsError(try read("big", start..<start + 10)) { error in
                XCTAssertEqual(error.asCovenError.code, .rangeOutOfBounds)
                XCTAssertEqual(error.asCovenError.details["key"], "big")
            }
        }
        try storage.put("empty", data: [])
        XCTAssertEqual(try read("empty").bytes, [])
        XCTAssertThrowsError(try read("empty", 0..<1)) { XCTAssertEqual($0.asCovenError.code, .rangeOutOfBounds) }
    }

    func testSinkErrorsStopTheRead() throws {
        try storage.put("big", data: bytes(3 * FileStorage.readPiece))
        struct Stop: Error {}
        var calls = 0
        XCTAssertThrowsError(try storage.get("big", range: nil) { _ in
            calls += 1
            throw Stop()
        }) { XCTAssertTrue($0 is Stop) }
        XCTAssertEqual(calls, 1)
    }

    func testMissingIsOnlyENOENT() throws {
        XCTAssertNil(try storage.head("files/dev/none"))
        XCTAssertThrowsError(try read("files/dev/none")) { error in
            XCTAssertEqual(error.asCovenError.code, .missing)
            XCTAssertEqual(error.asCovenError.details["key"], "files/dev/none")
        }
        // A folder is not an object.
        try storage.put("files/dev/a", data: [1])
        XCTAssertNil(try storage.head("files/dev"))
        // ENOTDIR (a file where a folder should be) is an error, never absence.
        XCTAssertThrowsError(try storage.head("files/dev/a/b")) { error in
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertEqual(error.asCovenError.storageFailure, .provider)
            XCTAssertEqual(error.asCovenError.cause, String(cString: strerror(ENOTDIR)))
        }
        XCTAssertThrowsError(try read("files/dev/a/b")) { XCTAssertEqual($0.asCovenError.code, .storage) }
    }

    func testDeleteIsIdempotent() throws {
        try storage.put("changes/d/1", data: [1, 2])
        try storage.delete("changes/d/1")
        XCTAssertNil(try storage.head("changes/d/1"))
        try storage.delete("changes/d/1")
        try storage.delete("never/was")
    }

    func testInvalidKeysAreRefused() {
        for key in ["", "/abs", "a//b", "../up", "a/./b", "a/..", ".uploads/x", "a/.coven-tmp-1", "a/"] {
            XCTAssertThrowsError(try storage.put(key, data: [1]), "'\(key)'") { error in
                XCTAssertEqual(error.asCovenError.code, .storage)
            }
        }
    }

    /// The one-pass check of the keys coven names never lets through a key the full check
    /// refuses, and says yes to the keys coven makes.
    func testAPlainKeyIsAValidKey() {
        XCTAssertTrue(FileStorage.isPlainKey("files/0190a5c4-7b1e-7c3d-9f00-1234567890ab/4c2f9e8a71d34b5c9e0f1a2b3c4d5e6f"))
        XCTAssertTrue(FileStorage.isPlainKey("changes/device/00000000000000000001"))
        for key in ["", "/", "a/", "/a", "a//b", ".", "..", "a/.", "a/..", ".uploads/x", ".coven-tmp-1", "a/.coven-tmp-x", "a\0b", ".hidden/x"] {
            XCTAssertFalse(FileStorage.isPlainKey(key), key)
        }
        var random = SystemRandomNumberGenerator()
        let alphabet: [Character] = ["a", "b", ".", "/", "\0", "-", "c", "é"]
        for _ in 0..<20_000 {
            let key = String((0..<Int.random(in: 0...8, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
            if FileStorage.isPlainKey(key) {
                XCTAssertTrue(FileStorage.isValidKey(key), key)
            }
        }
    }

    func testListIsRecursiveSortedAndHidesInternals() throws {
        let keys = ["store.json", "files/b/2", "files/a/1", "files/a/10", "files/ab/3", "changes/a/0001", "snapshots/a-1"]
        for key in keys { try storage.put(key, data: Array(repeating: 7, count: key.count)) }
        _ = try storage.createMultipart("files/a/big", totalSize: 10, partSize: 5)
        _ = FileManager.default.createFile(atPath: root + "/files/a/.coven-tmp-deadbeef", contents: Data([1]))

        let all = try storage.list(prefix: "")
        XCTAssertEqual(all.map(\.key), keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        XCTAssertEqual(all.first { $0.key == "files/a/10" }?.size, 10)
        XCTAssertEqual(try storage.list(prefix: "files/").map(\.key), ["files/a/1", "files/a/10", "files/ab/3", "files/b/2"])
        XCTAssertEqual(try storage.list(prefix: "files/a").map(\.key), ["files/a/1", "files/a/10", "files/ab/3"])
        XCTAssertEqual(try storage.list(prefix: "files/a/").map(\.key), ["files/a/1", "files/a/10"])
        XCTAssertEqual(try storage.list(prefix: "files/a/1").map(\.key), ["files/a/1", "files/a/10"])
        XCTAssertEqual(try storage.list(prefix: "nothing/here/").map(\.key), [])
    }

    func testPutIfAbsentHasOneWinnerAcrossInstances() throws {
        let contenders = 8
        let results = Results()
        let directory = root
        DispatchQueue.concurrentPerform(iterations: contenders) { index in
            do {
                let mine = try FileStorage(directory: directory)
                let won = try mine.putIfAbsent("devices/registry", data: Array(repeating: UInt8(index), count: 4096))
                results.add(won ? index : -1)
            } catch {
                results.add(-2)
            }
        }
        let winners = results.values.filter { $0 >= 0 }
        XCTAssertEqual(winners.count, 1, "\(results.values)")
        XCTAssertFalse(results.values.contains(-2))
        let stored = try read("devices/registry").bytes
        XCTAssertEqual(stored, Array(repeating: UInt8(winners.first ?? 0), count: 4096))
        XCTAssertFalse(try storage.putIfAbsent("devices/registry", data: [1]))
        XCTAssertEqual(entries("devices"), ["registry"])
    }

    // MARK: - Multipart

    func testMultipartWritesInPlaceAndCompletes() throws {
        let data = bytes(25)
        let id = try storage.createMultipart("files/d/obj", totalSize: 25, partSize: 10)
        XCTAssertEqual(try storage.listParts("files/d/obj", uploadID: id), [])
        // Parts in any order, as parallel workers send them.
        let third = try data[20..<25].withUnsafeBytes { try storage.uploadPart("files/d/obj", uploadID: id, number: 3, offset: 20, data: $0) }
        let first = try data[0..<10].withUnsafeBytes { try storage.uploadPart("files/d/obj", uploadID: id, number: 1, offset: 0, data: $0) }
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("files/d/obj", uploadID: id, number: 2, offset: 10, data: $0) }
        XCTAssertEqual(first.etag.count, 32)
        XCTAssertEqual(try storage.listParts("files/d/obj", uploadID: id), [first, second, third])
        XCTAssertNil(try storage.head("files/d/obj"))
        try storage.completeMultipart("files/d/obj", uploadID: id, parts: [third, first, second])
        XCTAssertEqual(try read("files/d/obj").bytes, data)
        XCTAssertEqual(entries(".uploads"), [])
        // Completing again (a lost answer) succeeds; the upload itself is gone.
        try storage.completeMultipart("files/d/obj", uploadID: id, parts: [first, second, third])
        XCTAssertThrowsError(try storage.listParts("files/d/obj", uploadID: id)) { XCTAssertEqual($0.asCovenError.code, .missing) }
    }

    func testMultipartResumesFromConfirmedPartsAfterReopen() throws {
        let data = bytes(30)
        let id = try storage.createMultipart("files/d/obj", totalSize: 30, partSize: 10)
        _ = try data[0..<10].withUnsafeBytes { try storage.uploadPart("files/d/obj", uploadID: id, number: 1, offset: 0, data: $0) }
        _ = try data[20..<30].withUnsafeBytes { try storage.uploadPart("files/d/obj", uploadID: id, number: 3, offset: 20, data: $0) }
        // A temporary record left by a kill -9 mid-write is ignored.
        _ = FileManager.default.createFile(atPath: root + "/.uploads/\(id)/.coven-tmp-0011", contents: Data([1, 2]))

        storage = nil  // "crash"
        let reopened = try FileStorage(directory: root)
        let confirmed = try reopened.listParts("files/d/obj", uploadID: id)
        XCTAssertEqual(confirmed.map(\.number), [1, 3])
        let second = try data[10..<20].withUnsafeBytes { try reopened.uploadPart("files/d/obj", uploadID: id, number: 2, offset: 10, data: $0) }
        try reopened.completeMultipart("files/d/obj", uploadID: id, parts: confirmed + [second])
        XCTAssertEqual(try read("files/d/obj", from: reopened).bytes, data)
    }

    func testAnUploadWhoseIdWasLostIsFoundByItsKeyAndAborted() throws {
        XCTAssertEqual(try storage.uploadsInProgress("files/d/obj"), [])
        let id = try storage.createMultipart("files/d/obj", totalSize: 30, partSize: 10)
        let other = try storage.createMultipart("files/d/other", totalSize: 30, partSize: 10)
        XCTAssertEqual(entries(".uploads").sorted(), [id, other].sorted(), "no temporary folder once started")
        XCTAssertEqual(try storage.uploadsInProgress("files/d/obj"), [id])
        // What a kill -9 during a start leaves: the folder still under its temporary name, with
        // its info record (written first) and a data file.
        let half = "0123456789abcdef0123456789abcdef"
        try FileManager.default.copyItem(atPath: root + "/.uploads/" + id, toPath: root + "/.uploads/.coven-tmp-" + half)
        XCTAssertEqual(try storage.uploadsInProgress("files/d/obj"), [half, id].sorted())
        try storage.abortMultipart("files/d/obj", uploadID: half)
        try storage.abortMultipart("files/d/obj", uploadID: id)
        XCTAssertEqual(try storage.uploadsInProgress("files/d/obj"), [])
        XCTAssertEqual(entries(".uploads"), [other])
        XCTAssertThrowsError(try storage.uploadsInProgress("../x"))
    }

    func testCompleteRefusesGapsAndMismatches() throws {
        let data = bytes(20)
        let id = try storage.createMultipart("k", totalSize: 20, partSize: 10)
        let first = try data[0..<10].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first])) { error in
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertTrue(error.asCovenError.cause?.contains("10 of 20") == true, "\(error)")
        }
        let forged = UploadedPart(number: 2, etag: "0000", size: 10)
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first, forged]))
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [second]))
        XCTAssertThrowsError(try data[0..<10].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 3, offset: 15, data: $0) })
        XCTAssertThrowsError(try storage.listParts("other", uploadID: id))
        try storage.completeMultipart("k", uploadID: id, parts: [first, second])
        XCTAssertEqual(try read("k").bytes, data)
    }

    func testAbortRemovesTheUploadAndIsIdempotent() throws {
        let id = try storage.createMultipart("k", totalSize: 4, partSize: 4)
        _ = try ([1, 2, 3, 4] as [UInt8]).withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }
        try storage.abortMultipart("k", uploadID: id)
        XCTAssertEqual(entries(".uploads"), [])
        XCTAssertThrowsError(try storage.listParts("k", uploadID: id)) { XCTAssertEqual($0.asCovenError.code, .missing) }
        XCTAssertThrowsError(try ([1] as [UInt8]).withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }) {
            XCTAssertEqual($0.asCovenError.code, .missing)
        }
        try storage.abortMultipart("k", uploadID: id)
        try storage.abortMultipart("k", uploadID: "../../etc")
        XCTAssertNil(try storage.head("k"))
    }

    func testCompleteRefusesAPartWhoseTokenDoesNotMatch() throws {
        let data = bytes(20)
        let id = try storage.createMultipart("k", totalSize: 20, partSize: 10)
        let first = try data[0..<10].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        // Tokens are random, never a function of the bytes: the same bytes sent again get a new one.
        let again = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        XCTAssertNotEqual(again.etag, second.etag)
        XCTAssertEqual(again.etag.count, 32)
        XCTAssertEqual(try storage.listParts("k", uploadID: id), [first, again])
        // The caller's stale record of part 2 (same size, old token) is refused.
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first, second])) { error in
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertTrue(error.asCovenError.cause?.contains("part 2 does not match") == true, "\(error)")
        }
        XCTAssertNil(try storage.head("k"))
        try storage.completeMultipart("k", uploadID: id, parts: [first, again])
        XCTAssertEqual(try read("k").bytes, data)
    }

    func testCompleteDetectsDataCutShortAfterConfirmation() throws {
        let data = bytes(20)
        let id = try storage.createMultipart("k", totalSize: 20, partSize: 10)
        let first = try data[0..<10].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        XCTAssertEqual(truncate(root + "/.uploads/\(id)/data", 15), 0)
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first, second])) { error in
            XCTAssertEqual(error.asCovenError.code, .storage)
            XCTAssertTrue(error.asCovenError.cause?.contains("15 bytes, not 20") == true, "\(error)")
        }
        XCTAssertNil(try storage.head("k"))
        // Grown is refused too.
        XCTAssertEqual(truncate(root + "/.uploads/\(id)/data", 25), 0)
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first, second]))
        XCTAssertNil(try storage.head("k"))
    }

    func testATornOrForeignSlotIsNoPart() throws {
        let data = bytes(30)
        let id = try storage.createMultipart("k", totalSize: 30, partSize: 10)
        let first = try data[0..<10].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 1, offset: 0, data: $0) }
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        let third = try data[20..<30].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 3, offset: 20, data: $0) }
        let table = root + "/.uploads/\(id)/parts"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: table)))
        XCTAssertEqual(bytes.count, 3 * FileStorage.slotSize)
        // Slot 2 torn by a power loss (one byte of its size flipped): its check fails.
        bytes[FileStorage.slotSize + 16] ^= 0x40
        // Slot 3 holds a well-formed record of part 1: a slot only ever names its own part.
        bytes.replaceSubrange((2 * FileStorage.slotSize)..<(3 * FileStorage.slotSize), with: bytes[0..<FileStorage.slotSize])
        try Data(bytes).write(to: URL(fileURLWithPath: table))
        XCTAssertEqual(try storage.listParts("k", uploadID: id), [first])
        XCTAssertThrowsError(try storage.completeMultipart("k", uploadID: id, parts: [first, second, third])) { error in
            XCTAssertTrue(error.asCovenError.cause?.contains("part 2 was never confirmed") == true, "\(error)")
        }
        // Sent again, the parts complete the object.
        let second2 = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        let third2 = try data[20..<30].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 3, offset: 20, data: $0) }
        try storage.completeMultipart("k", uploadID: id, parts: [first, second2, third2])
        XCTAssertEqual(try read("k").bytes, data)
    }

    func testSlotRoundTripAndRefusals() {
        let record = FileStorage.PartRecord(number: 7, offset: 1 << 40, size: 8 << 20, etag: String(repeating: "a1", count: 16))
        guard let slot = FileStorage.slotBytes(record) else { return XCTFail("no slot") }
        XCTAssertEqual(slot.count, FileStorage.slotSize)
        XCTAssertEqual(FileStorage.record(slot: slot[...]), record)
        XCTAssertNil(FileStorage.record(slot: [UInt8](repeating: 0, count: FileStorage.slotSize)[...]))
        XCTAssertNil(FileStorage.record(slot: slot[0..<(FileStorage.slotSize - 1)]))
        // Tokens are 32 lowercase hex digits; anything else cannot be recorded.
        XCTAssertNil(FileStorage.slotBytes(FileStorage.PartRecord(number: 1, offset: 0, size: 1, etag: "0000")))
        XCTAssertNil(FileStorage.slotBytes(FileStorage.PartRecord(number: 1, offset: 0, size: 1, etag: String(repeating: "G", count: 32))))
        XCTAssertNil(FileStorage.slotBytes(FileStorage.PartRecord(number: 0, offset: 0, size: 1, etag: String(repeating: "0", count: 32))))
    }

    func testUploadFromAnOlderVersionResumesFromItsPartFiles() throws {
        let data = bytes(20)
        let id = try storage.createMultipart("k", totalSize: 20, partSize: 10)
        let folder = root + "/.uploads/\(id)"
        // What an older version left: no part table, a JSON record per confirmed part.
        XCTAssertEqual(unlink(folder + "/parts"), 0)
        let fd = open(folder + "/data", O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        _ = data[0..<10].withUnsafeBytes { pwrite(fd, $0.baseAddress, 10, 0) }
        close(fd)
        let legacy = #"{"number":1,"offset":0,"size":10,"etag":"0123456789abcdef0123456789abcdef"}"#
        XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/part-1", contents: Data(legacy.utf8)))
        let first = UploadedPart(number: 1, etag: "0123456789abcdef0123456789abcdef", size: 10)
        XCTAssertEqual(try storage.listParts("k", uploadID: id), [first])
        // A new part gets the table, made on demand; both kinds complete the object.
        let second = try data[10..<20].withUnsafeBytes { try storage.uploadPart("k", uploadID: id, number: 2, offset: 10, data: $0) }
        XCTAssertEqual(try storage.listParts("k", uploadID: id), [first, second])
        try storage.completeMultipart("k", uploadID: id, parts: [first, second])
        XCTAssertEqual(try read("k").bytes, data)
        XCTAssertEqual(entries(".uploads"), [])
    }

    func testEmptyMultipartObject() throws {
        let id = try storage.createMultipart("k", totalSize: 0, partSize: 4)
        try storage.completeMultipart("k", uploadID: id, parts: [])
        XCTAssertEqual(try storage.head("k")?.size, 0)
    }
}

/// Collects values from concurrent closures.
private final class Results: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [Int] = []
    func add(_ value: Int) { lock.withLock { stored.append(value) } }
    var values: [Int] { lock.withLock { stored } }
}

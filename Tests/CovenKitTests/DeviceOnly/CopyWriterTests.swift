@testable import CovenKit
import CLinux
import Foundation
import XCTest

/// The writer of make-device-only's copies: direct (O_DIRECT) and through the page cache, fed in
/// place through `room` or in pieces to copy, at the sizes around its sectors and block.
final class CopyWriterTests: XCTestCase {
    var folder = ""

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "coven-copywriter-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: folder) }

    static let block = CopyBlock.size
    static let sizes = [0, 1, 4095, 4096, 4097, 65536, 65536 + 100, block - 1, block, block + 1, 3 * block + 12345]

    /// Whether this folder's file system takes O_DIRECT at the open.
    func takesDirect() -> Bool {
        let probe = folder + "/probe"
        let fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | coven_o_direct(), 0o600)
        defer { unlink(probe) }
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    /// Writes `bytes` through a writer, as make-device-only does (64 KiB in place through
    /// `room`) or in pieces of `piece` bytes to copy; returns whether it was still direct before
    /// its finish.
    @discardableResult
    func write(_ bytes: [UInt8], to path: String, block: CopyBlock, direct: Bool, piece: Int?) throws -> Bool {
        let writer = try CopyWriter(creating: path, block: block, direct: direct)
        var offset = 0
        while offset < bytes.count {
            if piece == nil, let room = writer.room {
                let take = min(65536, bytes.count - offset)
                bytes.withUnsafeBytes { room.copyMemory(from: $0.baseAddress! + offset, byteCount: take) }
                try writer.append(UnsafeRawBufferPointer(start: room, count: take))
                offset += take
            } else {
                let take = min(piece ?? 65536, bytes.count - offset)
                try bytes.withUnsafeBytes { try writer.append(UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + take)])) }
                offset += take
            }
            XCTAssertEqual(writer.count, Int64(offset))
        }
        let wasDirect = writer.direct
        try writer.finish()
        return wasDirect
    }

    func testEverySizeDirectAndBufferedInPlaceAndCopied() throws {
        let direct = takesDirect()
        let block = CopyBlock()  // one block for every file, as a download thread uses it
        for size in Self.sizes {
            let bytes = DeviceTestFixture.bytes(size, seed: UInt8(truncatingIfNeeded: size))
            for (mode, piece) in [("in place", nil), ("pieces of 7", 7), ("pieces of 100000", 100_000)] as [(String, Int?)] {
                for wantDirect in [true, false] {
                    let path = folder + "/\(size)-\(piece ?? 0)-\(wantDirect)"
                    let wasDirect = try write(bytes, to: path, block: block, direct: wantDirect, piece: piece)
                    XCTAssertEqual(wasDirect, wantDirect && direct, "size \(size), \(mode)")
                    XCTAssertEqual(FileManager.default.contents(atPath: path), Data(bytes), "size \(size), \(mode), direct \(wantDirect)")
                }
            }
        }
    }

    func testTheDefaultIsDirectWhereTheFileSystemTakesIt() throws {
        let writer = try CopyWriter(creating: folder + "/default", block: CopyBlock())
        XCTAssertEqual(writer.direct, takesDirect())
        try writer.finish()
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/default"), Data())
    }

    func testRoomIsOnlyWhereAWholeChunkFits() throws {
        let block = CopyBlock()
        let writer = try CopyWriter(creating: folder + "/room", block: block)
        XCTAssertEqual(writer.room, block.pointer)
        // Seven chunks in: one chunk of room is left, at its place.
        let chunk = DeviceTestFixture.bytes(65536)
        for _ in 0..<7 { try chunk.withUnsafeBytes { try writer.append($0) } }
        XCTAssertEqual(writer.room, block.pointer + 7 * 65536)
        // One byte more and a whole chunk no longer fits before the block is written out.
        try [UInt8(9)].withUnsafeBytes { try writer.append($0) }
        XCTAssertNil(writer.room)
        try chunk.withUnsafeBytes { try writer.append($0) }
        // The block went out whole; what was left of the last append moved to its start.
        XCTAssertEqual(writer.count, Int64(8 * 65536 + 1))
        XCTAssertEqual(writer.room, block.pointer + 1)
        try writer.finish()
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/room"), Data(Array(repeating: chunk, count: 7).joined() + [9] + chunk))
    }

    func testAnExistingFileIsNeverReplaced() throws {
        let path = folder + "/taken"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("mine".utf8)))
        for direct in [true, false] {
            XCTAssertThrowsError(try CopyWriter(creating: path, block: CopyBlock(), direct: direct)) { error in
                XCTAssertEqual((error as? CovenError)?.code, .io)
            }
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("mine".utf8))
    }

    func testAMissingFolderIsAnIOErrorNamingThePath() throws {
        let path = folder + "/gone/file"
        XCTAssertThrowsError(try CopyWriter(creating: path, block: CopyBlock())) { error in
            XCTAssertEqual((error as? CovenError)?.code, .io)
            XCTAssertEqual((error as? CovenError)?.details["path"], path)
        }
    }
}

import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven cat` and `coven get` on a really full disk: a 24 MiB tmpfs holding the device (the
/// file:// store lies outside it), filled up once the file is stored.
final class FullDiskCLITests: XCTestCase {
    func testCatGoesOnWithAWarningAndGetFailsWithNoRoom() throws {
        let folder = try TestPaths.temporaryDirectory("full-disk-cli")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let small = folder + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        let mounted = try Spawn.run("/bin/mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", small], timeout: 30)
        guard mounted.status == 0 else { throw XCTSkip("cannot mount a tmpfs here (needs root): \(mounted)") }
        defer { _ = try? Spawn.run("/bin/umount", [small], timeout: 30) }

        let location = StorageLocation.file(directory: folder + "/store")
        let paths = DevicePaths(database: small + "/device.db")
        let bytes = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }
        let id: String
        do {
            let device = try StoredFiles.oneTableDevice(paths: paths, storage: location, name: "full", provider: try FileStorage(directory: folder + "/store", create: true))
            id = try StoredFiles.stageApp(device, bytes: bytes, namespace: "blobs", table: "blobs")
            try StoredFiles.store(device, file: id)
        }
        // Fill the tmpfs, leaving a little over two runs of the cache.
        var info = statvfs()
        XCTAssertEqual(statvfs(small, &info), 0)
        let filler = small + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT, 0o600)
        var left = Int64(info.f_bavail) * Int64(info.f_frsize) - (5 << 19)
        let block = [UInt8](repeating: 7, count: 1 << 16)
        while left > 0 {
            let n = block.withUnsafeBytes { write(fd, $0.baseAddress, Int(min(Int64(block.count), left))) }
            XCTAssertGreaterThan(n, 0)
            left -= Int64(n)
        }
        close(fd)

        let environment = ["COVEN_DB": paths.database, "PATH": "/usr/bin:/bin"]
        func coven(_ arguments: [String]) throws -> (status: Int32, out: [UInt8], err: String) {
            let child = try Spawn.start(try Repository.covenBinary(), arguments, environment: environment,
                                        stdout: folder + "/out", stderr: folder + "/err")
            let (status, timedOut) = Spawn.wait(child, timeout: 60)
            XCTAssertFalse(timedOut)
            return (status, [UInt8](FileManager.default.contents(atPath: folder + "/out") ?? Data()),
                    (try? String(contentsOfFile: folder + "/err", encoding: .utf8)) ?? "")
        }
        let cat = try coven(["cat", id])
        XCTAssertEqual(cat.status, 0, cat.err)
        XCTAssertTrue(cat.out == bytes, "every byte, checked, in order")
        XCTAssertTrue(cat.err.contains("warning: the disk is full: '\(id)' was read without keeping all of it in the cache"), cat.err)
        let get = try coven(["get", id])
        XCTAssertEqual(get.status, 7, get.err)  // no_room (docs/exit-codes.md)
        XCTAssertTrue(get.err.contains("no_room") || get.err.contains("no room"), get.err)
        XCTAssertTrue(get.out.isEmpty)
        // With room again, get fetches the rest and prints the path of the whole file.
        XCTAssertEqual(unlink(filler), 0)
        let again = try coven(["get", id])
        XCTAssertEqual(again.status, 0, again.err)
        let path = String(decoding: again.out, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue([UInt8](FileManager.default.contents(atPath: path) ?? Data()) == bytes)
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// What a write naming a deleted file record does, and what a restore of a lost file record
/// may do (issue 19, items A, C, D, E and 8), with three devices.
final class FileRecordRuleTests: DeviceTestCase {

    /// Three devices of a store with one stored track, synced everywhere.
    private func storedTrack() throws -> (a: Device, b: Device, c: Device, track: String) {
        let devices = try makeDevices(3)
        let a = devices[0], b = devices[1], c = devices[2]
        let song = try a.prepareUserFile(path: try file("song.flac", "the one song"), namespace: "music", place: .cloud)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_user_file('\(song.id)'))").files[0]
        try StoredFiles.store(a, file: track)
        for device in devices { _ = try device.sync() }
        return (a, b, c, track)
    }

    private func makeDeviceOnly(_ device: Device, _ track: String, folder name: String, as file: String) throws {
        let folder = work + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try device.makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: track, names: [file], input: "argument 1")])
    }

    private func syncAll(_ devices: [Device], rounds: Int = 2) throws {
        for _ in 0..<rounds { for device in devices { _ = try device.sync() } }
    }

    // MARK: A

    /// Item A: a restore of a losing make-device-only switch would name a copy that is gone
    /// (the loser's copy went when the winner's switch arrived): it is refused on the loser
    /// and on the winner, nothing changes, and the winner's copy stays the file's bytes.
    func testARestoreOfALosingDeviceOnlySwitchIsRefusedAndTheFileStaysReadable() throws {
        let (a, b, c, track) = try storedTrack()
        try makeDeviceOnly(b, track, folder: "BR", as: "b.flac")
        try makeDeviceOnly(c, track, folder: "CR", as: "c.flac")
        _ = try b.sync()
        _ = try c.sync()
        _ = try b.sync()
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/BR/b.flac"), "the loser's copy goes")
        for device in [b, c] {
            let lost = try XCTUnwrap(try device.lostValues().first { $0.table == "coven_files" && $0.rowID == track })
            let error = assertCovenError(.bytesAbsent) { try device.restoreLost(lost.id) }
            XCTAssertEqual(error?.details["file"], track)
            XCTAssertNil(try device.lostValues().first { $0.id == lost.id }?.restoredAt, "nothing changed")
            XCTAssertEqual(try device.fileRecord(track)?.coordinates.device, c.deviceID)
        }
        try syncAll([a, b, c])
        for device in [a, b, c] {
            XCTAssertEqual(try device.fileRecord(track)?.coordinates.device, c.deviceID)
        }
        XCTAssertEqual(try String(contentsOfFile: work + "/CR/c.flac", encoding: .utf8), "the one song")
    }

    // MARK: D

    /// Item D: b deletes a track whose file a still uploads; a's upload finishes before a
    /// hears of the delete, and its switch to stored arrives later than the delete. The record
    /// does not come back (no row names it) on any device, and the stored bytes go at gc once
    /// every device has the delete.
    func testASwitchOfARecordDeletedMeanwhileDoesNotBringItBackAndItsBytesGo() throws {
        let devices = try makeDevices(3)
        let a = devices[0], b = devices[1], c = devices[2]
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let song = try stageApp(a, try file("song.flac", "a song's bytes"))
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(song.id)'))").files[0]
        _ = try a.sync()
        _ = try b.sync()
        try b.write(sql: "DELETE FROM tracks")
        _ = try b.sync()
        let object = try StoredFiles.store(a, file: track)
        try syncAll(devices, rounds: 3)
        for device in devices {
            XCTAssertNil(try device.fileRecord(track), "no record on \(device.deviceName)")
            XCTAssertEqual(try count(device, "SELECT count(*) FROM tracks"), 0)
        }
        XCTAssertTrue(try a.connectStorage().head(object) != nil)
        let report = try a.collectGarbage()
        XCTAssertEqual(report.deleted.map(\.key), [object], "\(report.kept)")
        XCTAssertNil(try a.connectStorage().head(object))
    }
}

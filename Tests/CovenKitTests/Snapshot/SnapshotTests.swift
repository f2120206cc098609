@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven snapshot` and `coven join` from it, on file://.
final class SnapshotTests: DeviceTestCase {
    let track1 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f51"
    let track2 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f52"
    let album2 = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"


    /// Every synced table and coven_files, row by row (stored columns).
    func dump(_ device: Device) throws -> [String] {
        try ["albums", "tracks", "covers", "settings", "coven_files"].flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { row in
                table + ": " + zip(row.columns, row.values).map { "\($0)=\($1.textValue ?? $1.intValue.map(String.init) ?? "NULL")" }.joined(separator: " ")
            }
        }
    }

    var snapshotsFolder: String { storeFolder + "/snapshots" }
    func snapshotFiles() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: snapshotsFolder).sorted() }

    /// A store with two devices' writes: rows, an update, a delete (a tombstone), a file record
    /// stored and one device-only, and a concurrent edit with its lost value.
    func history() throws -> (a: Device, b: Device, full: Device) {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let full = try join("full", from: a)
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road'), ('\(album2)', 'Let It Be')")
        let song = try stageApp(a, try file("song.flac", "a song's bytes"), namespace: "covers")
        let track = try a.write(sql: "INSERT INTO tracks (id, album_id, title, file) VALUES ('\(track1)', '\(Self.album)', 'Come Together', coven_put_staged('\(song.id)'))").files[0]
        try StoredFiles.store(a, file: track)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        let other = try stageApp(b, try file("other.flac", "bytes on b only"), namespace: "covers")
        try b.write(sql: "INSERT INTO tracks (id, album_id, title, file) VALUES ('\(track2)', '\(album2)', 'Get Back', coven_put_staged('\(other.id)'))")
        try b.write(sql: "UPDATE albums SET title = 'from b' WHERE id = '\(Self.album)'")
        try a.write(sql: "UPDATE albums SET title = 'from a' WHERE id = '\(Self.album)'")
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('volume', '7')")
        try a.write(sql: "DELETE FROM settings WHERE id = 'volume'")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        return (a, b, full)
    }

    func testJoiningFromASnapshotEqualsApplyingEveryChangeAndSyncsOnAsAnyDevice() throws {
        let (a, b, full) = try history()
        let report = try Snapshots(a).snapshot()
        XCTAssertEqual(report.key, Snapshot.path(device: a.deviceID, seq: report.manifest.seq))
        XCTAssertTrue(report.key.hasSuffix(String(format: "-%016lld", report.manifest.seq)))
        XCTAssertEqual(report.manifest.frontier[b.deviceID], try StoreSync(a).devices().first { $0.id == b.deviceID }?.seq)
        XCTAssertEqual(report.manifest.objects, 1, "the stored object of track 1")
        // A write after the snapshot arrives by pull.
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f42', 'Help!')")
        _ = try StoreSync(a).sync()

        var started = SnapshotJoin()
        let joined = try join("joined", from: a, started: { started = $0 })
        XCTAssertEqual(started.key, report.key)
        XCTAssertEqual(started.skipped, [])
        let pulled = try StoreSync(joined).sync()
        XCTAssertEqual(pulled.pulled.applied[a.deviceID], [report.manifest.seq + 1], "only the change after the snapshot")
        XCTAssertNil(pulled.pulled.applied[b.deviceID])
        _ = try StoreSync(full).sync()
        XCTAssertEqual(try dump(joined), try dump(full))
        XCTAssertEqual(try dump(joined), try dump(a))
        XCTAssertEqual(try StoreSync(joined).devices().first { $0.id == a.deviceID }?.seq, try StoreSync(full).devices().first { $0.id == a.deviceID }?.seq)
        XCTAssertEqual(try count(joined, "SELECT count(*) FROM coven_tombstones WHERE tbl = 'settings'"), 1)

        // Concurrent edits between the snapshot-joined device and the full one: LWW and a lost
        // value on each, as between any two devices.
        try full.write(sql: "UPDATE albums SET title = 'from full' WHERE id = '\(album2)'")
        try joined.write(sql: "UPDATE albums SET title = 'from joined' WHERE id = '\(album2)'") // later: wins
        _ = try StoreSync(full).sync()
        _ = try StoreSync(joined).sync()
        _ = try StoreSync(full).sync()
        for device in [a, b] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try dump(joined), try dump(full))
        XCTAssertEqual(try dump(a), try dump(full))
        XCTAssertEqual(try joined.database.scalar("SELECT title FROM albums WHERE id = '\(album2)'").textValue, "from joined")
        for device in [joined, full] {
            XCTAssertEqual(try StoreSync(device).lostValues().filter { $0.rowID == album2 }.map { $0.values["title"] }, [.text("from full")])
        }
        // A write of the joined device older than a delete it never saw still loses: the
        // tombstone came with the snapshot.
        XCTAssertTrue(try StoreSync(joined).sync().quiet)
    }

    /// Snapshot whose bytes were altered, cut at a chunk boundary or mid-chunk: refused as
    /// integrity, join falls back to an older one, then to the changes.
    func testDamagedSnapshotsArePassedOverForOlderOnesThenTheChanges() throws {
        let a = try makeDevice(name: "a")
        let full = try join("full", from: a)
        // Rows that zstd cannot shrink much, so the snapshot is several chunks long.
        for n in 0..<3 {
            try a.write(sql: "INSERT INTO albums (id, title) VALUES ('0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4\(n)', hex(randomblob(60000)))")
        }
        let older = try Snapshots(a).snapshot()
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f49', 'later')")
        let newer = try Snapshots(a).snapshot()
        XCTAssertNotEqual(older.key, newer.key)
        XCTAssertGreaterThan(newer.bytes, Int64(StoreSealer.headerSize + 2 * ChunkRun.sealedChunkSize))
        _ = try StoreSync(full).sync()
        let newerPath = storeFolder + "/" + newer.key
        let olderPath = storeFolder + "/" + older.key

        // One byte altered in the middle of the newer one.
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: newerPath)))
        bytes[bytes.count / 2] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: newerPath))
        var firstStart = SnapshotJoin()
        let first = try join("first", from: a, started: { firstStart = $0 })
        XCTAssertEqual(firstStart.key, older.key)
        XCTAssertEqual(firstStart.skipped.map(\.key), [newer.key])
        XCTAssertEqual(firstStart.skipped.map(\.reason), ["integrity"])
        _ = try StoreSync(first).sync()
        XCTAssertEqual(try dump(first), try dump(full))

        // The newer cut after two whole chunks (its first chunk still opens), the older cut
        // mid-chunk: both refused, the changes give everything.
        bytes[bytes.count / 2] ^= 0x01
        try Data(bytes.prefix(StoreSealer.headerSize + 2 * ChunkRun.sealedChunkSize)).write(to: URL(fileURLWithPath: newerPath))
        let olderBytes = try Data(contentsOf: URL(fileURLWithPath: olderPath))
        try olderBytes.prefix(olderBytes.count - 100).write(to: URL(fileURLWithPath: olderPath))
        var secondStart = SnapshotJoin()
        let second = try join("second", from: a, started: { secondStart = $0 })
        XCTAssertNil(secondStart.key)
        XCTAssertEqual(Set(secondStart.skipped.map(\.key)), [newer.key, older.key])
        XCTAssertEqual(Set(secondStart.skipped.map(\.reason)), ["integrity"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/second/device.db.init"))
        let pulled = try StoreSync(second).sync()
        XCTAssertEqual(pulled.pulled.applied[a.deviceID]?.count, 2, "both changes, from seq 1")
        XCTAssertEqual(try dump(second), try dump(full))
    }

    /// A snapshot made under a newer schema than the store's manifest is skipped.
    func testASnapshotOfANewerSchemaIsSkipped() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'Abbey Road')")
        let old = try Snapshots(a).snapshot()
        // A migration the store's published manifest does not have yet.
        var json = try JSONSerialization.jsonObject(with: Data(Self.albumManifest.utf8)) as? [String: Any] ?? [:]
        json["migrations"] = (json["migrations"] as? [String] ?? []) + ["CREATE INDEX albums_title ON albums (title)"]
        try a.migrate(to: try Manifest(json: try JSONSerialization.data(withJSONObject: json)))
        try a.write(sql: "UPDATE albums SET title = 'Abbey Road (remastered)'")
        let newer = try Snapshots(a).snapshot()
        XCTAssertEqual(newer.manifest.migrations, 5)
        var joinedStart = SnapshotJoin()
        let joined = try join("joined", from: a, started: { joinedStart = $0 })
        XCTAssertEqual(joinedStart.key, old.key)
        XCTAssertEqual(joinedStart.skipped.map(\.reason), ["newer_schema"])
        XCTAssertEqual(try joined.database.scalar("SELECT title FROM albums").textValue, "Abbey Road")
        // The change after it needs the newer manifest too, as any change does.
        XCTAssertThrowsError(try StoreSync(joined).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .updateRequired) }
    }

    /// Writes a bound upload still holds are not in any change yet: no snapshot until they are.
    func testWritesHeldByABoundUploadRefuseASnapshot() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        let cover = try stageApp(a, text: "tiny")
        try a.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(cover.id)'))")
        XCTAssertThrowsError(try Snapshots(a).snapshot()) { XCTAssertEqual(($0 as? CovenError)?.code, .invalidState) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: snapshotsFolder + "/" + Snapshot.path(device: a.deviceID, seq: 1).dropFirst("snapshots/".count)))
    }

    /// A snapshot larger than one part goes up in parts and comes back whole, and its temporary
    /// files are gone afterwards.
    func testALargeSnapshotIsSentInPartsAndLeavesNoTemporaryFiles() throws {
        let a = try makeDevice(name: "a")
        try a.write(sql: """
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 1999)
            INSERT INTO albums (id, title, _updated_at)
            SELECT printf('0193a9b2-4c1e-7d3a-9f20-%012x', i), hex(randomblob(5000)), coven_stamp() FROM n
            """)
        let report = try Snapshots(a).snapshot()
        XCTAssertGreaterThan(report.bytes, Snapshot.partSize)
        XCTAssertEqual(report.manifest.rows, 2000)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: a.paths.temporary), [])
        var joinedStart = SnapshotJoin()
        let joined = try join("joined", from: a, started: { joinedStart = $0 })
        XCTAssertEqual(joinedStart.key, report.key)
        XCTAssertEqual(try count(joined, "SELECT count(*) FROM albums"), 2000)
        XCTAssertEqual(try dump(joined), try dump(a))
    }
}

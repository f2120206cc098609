@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A small deterministic generator (SplitMix64), so a failing run is replayed from its seed.
struct SeededRandom {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// Randomized convergence: three devices doing random inserts, updates, deletes (cascading
/// and orphaning), stages, syncs and the removal of a device (also right after a delete it
/// published and the remover applied) in random order, then syncing
/// until quiet, must hold the same rows of every synced table and of coven_files. The seed of
/// a failing run is printed;
/// `COVEN_SEED=N` replays one run, `COVEN_RUNS=N` sets how many.
final class ConvergenceModelTests: XCTestCase {
    static let manifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [
            { "name": "albums", "identity": "uuid" },
            { "name": "tracks", "identity": "uuid", "files": [ { "column": "file" } ] },
            { "name": "settings", "identity": "shared-key" }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, year INTEGER, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id) ON DELETE CASCADE, title TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    func testThreeDevicesConvergeOverManySeededRuns() throws {
        if let failure = SeededRuns.run("model", runs: 1000, base: 0xC0FE_0000, run) { XCTFail(failure) }
    }

    /// One run; the description of what diverged, or nil.
    func run(seed: UInt64, work: String) throws -> String? {
        var random = SeededRandom(state: seed)
        var devices = try SeededRuns.devices(3, in: work, manifest: Self.manifest)
        // A small pool of ids, so edits collide.
        let albums = (0..<4).map { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d%04x", $0) }
        let tracks = (0..<6).map { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2e%04x", $0) }
        let steps = 12 + random.below(12)
        for _ in 0..<steps {
            let device = devices[random.below(devices.count)]
            let album = albums[random.below(albums.count)]
            let track = tracks[random.below(tracks.count)]
            let value = "v\(random.below(1000))"
            var sql = ""
            switch random.below(10) {
            case 0, 1: sql = "INSERT INTO albums (id, title, year) VALUES ('\(album)', '\(value)', \(random.below(3000))) ON CONFLICT (id) DO UPDATE SET title = excluded.title"
            case 2: sql = "UPDATE albums SET year = \(random.below(3000)) WHERE id = '\(album)'"
            case 3: sql = "INSERT INTO tracks (id, album_id, title) SELECT '\(track)', '\(album)', '\(value)' WHERE EXISTS (SELECT 1 FROM albums WHERE id = '\(album)') ON CONFLICT (id) DO UPDATE SET title = excluded.title"
            case 4: sql = "UPDATE tracks SET title = '\(value)' WHERE id = '\(track)'"
            case 5: sql = "DELETE FROM albums WHERE id = '\(album)'"
            case 6: sql = "DELETE FROM tracks WHERE id = '\(track)'"
            case 7: sql = "INSERT INTO settings (id, value) VALUES ('k\(random.below(2))', '\(value)') ON CONFLICT (id) DO UPDATE SET value = excluded.value"
            case 8:
                // A staged file put in a track (device-only here, so no upload is needed).
                let path = work + "/f-\(random.next())"
                try Data("bytes \(value)".utf8).write(to: URL(fileURLWithPath: path))
                let fd = open(path, O_RDONLY)
                defer { close(fd) }
                let staged = try device.stageAppBytes(from: fd, sourceName: path, namespace: "covers", place: .deviceOnly)
                do {
                    try device.write(sql: "UPDATE tracks SET file = coven_put_staged('\(staged.id)') WHERE id = (SELECT id FROM tracks ORDER BY id LIMIT 1)")
                } catch let error as CovenError where error.code == .fileUnreferenced {
                    // No track here to name it: the staging stays unused.
                }
                continue
            default:
                if devices.count == 3, random.below(8) == 0 {
                    // d2 removed for good by another device: what of it some device applied,
                    // every device applies.
                    let gone = devices.remove(at: 2)
                    let remover = devices[random.below(2)]
                    if random.below(2) == 0 {
                        // A removal after a delete: all sync, d2 deletes an album they hold
                        // and publishes, the remover applies that (pulling only) and removes
                        // d2 before it publishes again.
                        for device in devices + [gone] { _ = try device.sync() }
                        try gone.write(sql: "DELETE FROM albums WHERE id = (SELECT id FROM albums ORDER BY id LIMIT 1)")
                        _ = try gone.sync()
                        _ = try remover.sync(push: false)
                    }
                    try remover.removeDevice(gone.deviceID)
                    continue
                }
                _ = try device.sync()
                continue
            }
            try device.write(sql: sql)
        }
        // Everyone syncs until nothing moves.
        for _ in 0..<4 {
            for device in devices { _ = try device.sync() }
        }
        let dumps = try devices.map(dump)
        for (index, other) in dumps.enumerated().dropFirst() where other != dumps[0] {
            let diff = zip(dumps[0], other).first { $0 != $1 }
            return "device d\(index) differs from d0 (\(dumps[0].count) vs \(other.count) rows), first difference: \(String(describing: diff))"
        }
        // No lost value is the row's value now.
        for (index, device) in devices.enumerated() {
            for lost in try device.lostValues() where lost.why == "concurrent" {
                let current = try device.database.scalar("SELECT _updated_at FROM \(lost.table) WHERE id = ?1", [lost.rowID]).textValue
                if current == lost.stamp { return "d\(index) keeps its current row \(lost.table)/\(lost.rowID) as a lost value" }
            }
        }
        return nil
    }

    func dump(_ device: Device) throws -> [String] {
        try ["albums", "tracks", "settings", "coven_files"].flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { row in
                table + ": " + zip(row.columns, row.values).map { "\($0)=\($1.textValue ?? "NULL")" }.joined(separator: " ")
            }
        }
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Randomized gc: three devices doing random stages, writes, deletes, coven_existing_file,
/// make-device-only (two devices at once too), lost-value restores (of a losing switch too),
/// moves and their cancels, uploads, syncs, snapshots, gc and a device removal. After every gc, every object a live device's stored record, lost value or upload
/// queue, or one of the newest two snapshots, names still exists; at the
/// end, once every device synced twice and ran gc (twice, with --gone-devices), nothing
/// unreferenced is left under files/. `COVEN_SEED=N` replays one run, `COVEN_RUNS=N` sets how
/// many (1,000 by default); a failure prints its seed.
final class GCModelTests: XCTestCase {
    static let manifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" }, { "name": "music", "kind": "user" } ],
          "tables": [ { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] } ],
          "migrations": [ "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
        }
        """

    func testNothingNamedIsEverDeletedAndNothingUnnamedIsLeftOverManySeededRuns() throws {
        // Runs are made on several cores at once: the count is kept under a lock.
        let deletedTotal = UncheckedSendable(NSMutableArray())
        let lock = NSLock()
        let failure = SeededRuns.run("gc-model", runs: 1000, base: 0x6C00_0000) { seed, work in
            let (failure, deleted) = try run(seed: seed, work: work)
            lock.withLock { deletedTotal.value.add(deleted) }
            return failure
        }
        if let failure {
            XCTFail(failure)
            return
        }
        if ProcessInfo.processInfo.environment["COVEN_SEED"] == nil { XCTAssertGreaterThan(deletedTotal.value.reduce(0) { $0 + (($1 as? Int) ?? 0) }, 0, "the runs deleted something") }
    }

    /// What live devices name: stored records (with `anyPlace`, every record: one on another
    /// device only names the object that device may move back to the cloud, or had moved before
    /// it was gone), restorable lost values' records, upload queues.
    func named(_ devices: [Device], anyPlace: Bool = false) throws -> Set<String> {
        var names: Set<String> = []
        for device in devices {
            for row in try device.database.query("SELECT object FROM coven_files" + (anyPlace ? "" : " WHERE place = 'stored'")) { names.insert(row.string("object") ?? "") }
            for row in try device.database.query("SELECT object FROM coven_upload_queue") { names.insert(row.string("object") ?? "") }
            for lost in try StoreSync(device).lostValues() where lost.restorable && lost.restoredAt == nil {
                if let file = lost.values["file"]?.textValue, let record = try device.fileRecord(file) { names.insert(record.coordinates.object) }
                for row in try device.database.query("SELECT object FROM coven_gc_candidates WHERE EXISTS (SELECT 1 FROM json_each(files) WHERE value = ?1)", [lost.values["file"]?.textValue ?? ""]) {
                    names.insert(row.string("object") ?? "")
                }
            }
        }
        return names
    }

    func run(seed: UInt64, work: String) throws -> (String?, Int) {
        var random = SeededRandom(state: seed)
        // In half the runs (drawn from a second stream), a store of members as `coven init`
        // makes it: d0 and d1 the owner's, d2 another member's, whose removal is the member's;
        // in the others the variant without members, three devices of one key.
        var extra = SeededRandom(state: seed ^ 0x5EED_3E3B_0000_0020)
        let members = extra.below(2) == 0
        var devices: [Device]
        if members {
            devices = try SeededRuns.devices(2, in: work, manifest: Self.manifest, kind: .members)
            let identity = try MemberIdentity()
            _ = try Members(devices[0]).add(name: "m1", recipient: identity.recipient.description, admin: false)
            devices.append(try DeviceSetup.join(paths: DevicePaths(database: work + "/d2/device.db"), storage: devices[0].storage, identity: identity, name: "d2"))
            _ = try StoreSync(devices[1]).sync()
        } else {
            devices = try SeededRuns.devices(3, in: work, manifest: Self.manifest, kind: .noMember)
        }
        let first = devices[0]
        let provider = try first.connectStorage()
        var live = devices
        var deleted = 0
        var originals: [String] = []
        func stored() throws -> Set<String> { Set(try provider.list(prefix: "files/").map(\.key)) }
        let keys = first.keys
        func check(_ when: String) throws -> String? {
            let present = try stored()
            // The newest two snapshots are retained: a device joining from one reads its files.
            // Ordered as a join picks them: coverage, then age.
            let snapshots = try provider.list(prefix: "snapshots/").map { info in
                (info, try DeviceSetup.peekManifest(provider: provider, info: info, keys: keys))
            }.sorted { ($0.1.coverage, $0.1.createdAt, $0.0.key) > ($1.1.coverage, $1.1.createdAt, $1.0.key) }.map(\.0)
            for info in snapshots.prefix(2) {
                let gone = try DeviceSetup.snapshotObjects(provider: provider, info: info, keys: keys).subtracting(present)
                if !gone.isEmpty { return "\(when): objects snapshot \(info.key) names are gone: \(gone.sorted())" }
            }
            let missing = try named(live).subtracting(present)
            // An upload not sent yet has nothing stored: only names whose bytes once existed count.
            let sent = try missing.filter { object in
                try live.contains { try $0.database.scalar("SELECT count(*) FROM coven_files WHERE object = ?1 AND place = 'stored'", [object]).intValue ?? 0 > 0 }
            }
            return sent.isEmpty ? nil : "\(when): named objects are gone: \(sent.sorted())"
        }
        // A replay (COVEN_SEED) prints each step.
        let tracing = ProcessInfo.processInfo.environment["COVEN_SEED"] != nil
        func trace(_ line: @autoclosure () -> String) { if tracing { print("gc-model: " + line()) } }
        let steps = 10 + random.below(10)
        for step in 0..<steps {
            let device = live[random.below(live.count)]
            let key = "k\(random.below(4))"
            let action = random.below(13)
            trace("step \(step) on \(device.deviceName): action \(action) key \(key)")
            do {
                switch action {
                case 0, 1:
                    // A stored file in a row (staged for the cloud; the upload comes later).
                    let path = work + "/f-\(random.next())"
                    try Data("bytes \(random.next())".utf8).write(to: URL(fileURLWithPath: path))
                    let place: Place = random.below(4) == 0 ? .deviceOnly : .cloud
                    let put: String
                    if random.below(2) == 0 {
                        // A person's original (never deleted by anything).
                        originals.append(path)
                        put = "coven_put_user_file('\(try Staging(device).prepareUserFile(path: path, namespace: "music", place: place).id)')"
                    } else {
                        let fd = open(path, O_RDONLY)
                        defer { close(fd) }
                        put = "coven_put_staged('\(try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: "covers", place: place).id)')"
                    }
                    try device.write(sql: "INSERT INTO settings (id, value, file) VALUES ('\(key)', 'v', \(put)) ON CONFLICT (id) DO UPDATE SET file = excluded.file")
                case 2:
                    try device.write(sql: "DELETE FROM settings WHERE id = '\(key)'")
                case 3:
                    try device.write(sql: "UPDATE settings SET file = NULL, value = 'cleared' WHERE id = '\(key)'")
                case 4:
                    // Another row names the same object with coven_existing_file.
                    if let file = try device.database.scalar("SELECT file FROM settings WHERE file IS NOT NULL ORDER BY id LIMIT 1 OFFSET ?1", [random.below(2)]).textValue {
                        try device.write(sql: "INSERT INTO settings (id, value, file) VALUES ('e\(random.below(3))', 'again', coven_existing_file('\(file)')) ON CONFLICT (id) DO UPDATE SET file = excluded.file")
                    }
                case 5 where try device.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue ?? 0 > 0:
                    _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
                case 6:
                    // A move of device-only files to the cloud, maybe cancelled before it is sent.
                    let files = try device.database.query("SELECT id FROM coven_files WHERE place = 'device' AND device = ?1", [device.deviceID]).compactMap { $0.string("id") }
                    if let file = files.first {
                        let move = try Moves(device).moveToCloud(files: [file])
                        if random.below(2) == 0 { _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:])) }
                        if random.below(2) == 0 { try Moves(device).cancelMove(move) }
                    }
                case 7:
                    _ = try StoreSync(device).sync()
                case 8:
                    // A stored file of a row made device-only here (a copy in a folder of this
                    // device), or a snapshot.
                    if random.below(2) == 0 {
                        _ = try Snapshots(device).snapshot()
                    } else if let file = try device.database.scalar("SELECT id FROM coven_files WHERE place = 'stored' AND namespace = 'music' ORDER BY id LIMIT 1 OFFSET ?1", [random.below(2)]).textValue {
                        let folder = work + "/\(device.deviceName)-kept"
                        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: file, names: ["f-\(random.next())"], input: "argument 1")])
                    }
                case 9, 10:
                    let report = try collectGarbageByProof(device, goneDevices: random.below(3) == 0)
                    deleted += report.deleted.filter { $0.kind == .file }.count
                    if let failure = try check("after gc on \(device.deviceName) at step \(step)") { return (failure, deleted) }
                case 12:
                    // A lost value restored: a losing make-device-only switch whose copy is gone
                    // is refused (bytes_absent), a value naming a record deleted since brings it
                    // back while its image is kept.
                    let lost = try StoreSync(device).lostValues().filter { $0.restorable && $0.restoredAt == nil }
                    if !lost.isEmpty {
                        let chosen = lost[random.below(lost.count)]
                        trace("  restores \(chosen.table) \(chosen.rowID) \(chosen.values["file"].map { "\($0)" } ?? "")")
                        try StoreSync(device).restoreLost(chosen.id)
                    }
                default:
                    // One device removed for good, by another.
                    if live.count == 3, random.below(3) == 0 {
                        let gone = live.remove(at: 2)
                        trace("  \(live[0].deviceName) removes \(gone.deviceName)\(members ? " with its member" : "")")
                        if members {
                            _ = try Members(live[0]).remove("m1")
                        } else {
                            try StoreSync(live[0]).removeDevice(gone.deviceID)
                        }
                    } else {
                        _ = try StoreSync(device).sync()
                    }
                }
                if tracing {
                    for row in try device.database.query("SELECT id, object, place, device FROM coven_files ORDER BY id") {
                        trace("  record \(row.string("id") ?? "") \(row.string("object") ?? "") \(row.string("place") ?? "") \(row.string("device") ?? "")")
                    }
                    for row in try device.database.query("SELECT object, device, seq, why FROM coven_gc_candidates") {
                        trace("  candidate \(row.string("object") ?? "") of \(row.string("device") ?? "") seq \(row.int("seq").map(String.init) ?? "nil") \(row.string("why") ?? "")")
                    }
                }
            } catch let error as CovenError where [.fileInMove, .invalidState, .fileUnknown, .notThisDevice, .deviceOnly, .bytesAbsent].contains(error.code) {
                // A refusal of the random step: nothing changed.
                trace("  refused: \(error.code.rawValue)")
            }
        }
        // Every live device uploads, syncs twice and runs gc; then once more, so each sees the
        // others' frontiers over its deletes.
        for _ in 0..<2 {
            for device in live where try device.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue ?? 0 > 0 {
                _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
            }
            for _ in 0..<2 { for device in live { _ = try StoreSync(device).sync() } }
            for device in live {
                if tracing {
                    for row in try device.database.query("SELECT id, object, place FROM coven_files ORDER BY id") { trace("before final gc \(device.deviceName) record \(row.values)") }
                    for row in try device.database.query("SELECT id, object FROM coven_deleted_files ORDER BY id") { trace("before final gc \(device.deviceName) image \(row.values)") }
                    for row in try device.database.query("SELECT id, file FROM settings") { trace("before final gc \(device.deviceName) settings \(row.values)") }
                    for row in try device.database.query("SELECT object, device, seq, why, files FROM coven_gc_candidates") { trace("before final gc \(device.deviceName) candidate \(row.values)") }
                }
                let report = try collectGarbageByProof(device, goneDevices: true)
                trace("final gc on \(device.deviceName): deleted \(report.deleted.map(\.key)) kept \(report.kept.map { "\($0.key) \($0.reason)" })")
                for info in try provider.list(prefix: "snapshots/") {
                    let manifest = try DeviceSetup.peekManifest(provider: provider, info: info, keys: keys)
                    trace("  snapshot \(info.key) coverage \(manifest.coverage) at \(manifest.createdAt) frontier \(manifest.frontier)")
                }
                deleted += report.deleted.filter { $0.kind == .file }.count
                if let failure = try check("after the final gc on \(device.deviceName)") { return (failure, deleted) }
            }
        }
        for original in originals where !FileManager.default.fileExists(atPath: original) {
            return ("an original is gone: \(original)", deleted)
        }
        var referenced = try named(live, anyPlace: true)
        for info in try provider.list(prefix: "snapshots/") {
            referenced.formUnion(try DeviceSetup.snapshotObjects(provider: provider, info: info, keys: keys))
        }
        let leaked = try stored().subtracting(referenced)
        if tracing {
            trace("end: live \(live.map(\.deviceName))")
            for device in live {
                for row in try device.database.query("SELECT id, object, place, device FROM coven_files ORDER BY id") {
                    trace("end \(device.deviceName) record \(row.string("id") ?? "") \(row.string("object") ?? "") \(row.string("place") ?? "") \(row.string("device") ?? "")")
                }
                for row in try device.database.query("SELECT object, device, seq, why, files FROM coven_gc_candidates") {
                    trace("end \(device.deviceName) candidate \(row.string("object") ?? "") of \(row.string("device") ?? "") seq \(row.int("seq").map(String.init) ?? "nil") \(row.string("why") ?? "") \(row.string("files") ?? "")")
                }
                for row in try device.database.query("SELECT id, file FROM settings") {
                    trace("end \(device.deviceName) settings \(row.string("id") ?? "") \(row.string("file") ?? "")")
                }
            }
        }
        if !leaked.isEmpty {
            var why: [String] = []
            for device in live {
                let report = try collectGarbageByProof(device, dryRun: true, goneDevices: true)
                why += report.kept.filter { leaked.contains($0.key) }.map { "\(device.deviceName): \($0.key) \($0.reason.rawValue) \($0.devices) \($0.detail ?? "")" }
            }
            return ("unreferenced objects left: \(leaked.sorted()); kept: \(why)", deleted)
        }
        return (nil, deleted)
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// coven gc between two and three devices on file://, or on the real S3 server a subclass
/// names (``DeviceTestCase/s3Server``), one rule a test (DESIGN.md "Deleting stored bytes").
class GCTestCase: DeviceTestCase {
    func stored(_ device: Device, _ key: String) throws -> Bool {
        try device.connectStorage().head(key) != nil
    }

    /// A settings row `id` naming a new stored file of `text`; returns the file id and object.
    @discardableResult
    func storedSetting(_ device: Device, id: String, _ text: String) throws -> (file: String, object: String) {
        let staged = try stageApp(device, text: text)
        let file = try device.write(sql: "INSERT INTO settings (id, value, file) VALUES ('\(id)', 'v', coven_put_staged('\(staged.id)'))").files[0]
        let object = try StoredFiles.store(device, file: file)
        return (file, object)
    }

    func reasons(_ report: GCReport, _ key: String) -> [GCReport.KeepReason] {
        report.kept.filter { $0.key == key }.map(\.reason)
    }
}

class GCTests: GCTestCase {
    /// The delete of a file's last record: kept until every other device has published a
    /// frontier that includes it; an idle device releases it with a sync that publishes nothing
    /// but its frontier; then the bytes go, once.
    func testADeleteWaitsForEveryOtherDeviceThenTheBytesGo() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let (_, object) = try storedSetting(a, id: "s1", "bytes of s1")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        let first = try collectGarbageByProof(a)
        XCTAssertEqual(reasons(first, object), [.deviceBehind])
        XCTAssertEqual(first.kept.first?.devices, [b.deviceID])
        XCTAssertTrue(try stored(a, object))
        // b has nothing to publish, but applied the delete: its sync publishes its frontier.
        let idle = try StoreSync(b).sync()
        XCTAssertEqual(idle.pushed.published.count, 1)
        XCTAssertEqual(idle.pushed.entries, 0)
        let dry = try collectGarbageByProof(a, dryRun: true)
        XCTAssertEqual(dry.deleted.map(\.key), [object])
        XCTAssertTrue(try stored(a, object), "a dry run deletes nothing")
        let second = try collectGarbageByProof(a)
        XCTAssertEqual(second.deleted.map(\.key), [object])
        XCTAssertFalse(try stored(a, object))
        let third = try collectGarbageByProof(a)
        XCTAssertTrue(third.deleted.isEmpty && third.kept.isEmpty, "the candidate is settled")
        // Neither b's empty change nor a's next sync asks for another frontier: no ping-pong.
        _ = try StoreSync(a).sync()
        XCTAssertTrue(try StoreSync(b).sync().pushed.published.isEmpty)
    }

    /// A quiet pass (nothing to delete, 200 stored files, another device) lists no files: one
    /// listing of devices/ and one of snapshots/, one listing of each device's changes after
    /// the applied (for this one: published) one, in a store of members the key generations
    /// under audiences/, and nothing else.
    func testAQuietPassListsNoFiles() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        for n in 0..<4 {
            let staged = try (0..<50).map { try stageApp(a, text: "file \(n) \($0)").id }
            try a.write(sql: staged.enumerated().map { "INSERT INTO settings (id, value, file) VALUES ('s\(n)-\($0.offset)', 'v', coven_put_staged('\($0.element)'));" }.joined())
        }
        _ = try StoredFiles.store(a, file: try XCTUnwrap(try a.database.scalar("SELECT id FROM coven_files LIMIT 1").textValue))
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try collectGarbageByProof(a)
        let counting = CrashingStorage(try a.connectStorage())
        let lock = try a.lock(wait: true)
        let report = try collectGarbageByProof(a, provider: counting, dryRun: false, goneDevices: false, stop: Stop())
        _ = lock
        XCTAssertTrue(report.deleted.isEmpty && report.kept.isEmpty)
        // In a store of members, the sync's look for new key generations: the circles', the store's.
        let keys = Self.storeKind == .members ? ["LIST audiences/", "LIST audiences/store/"] : []
        XCTAssertEqual(counting.requests.filter { $0.hasPrefix("LIST ") }.sorted(),
                       (["LIST changes/\(a.deviceID)/", "LIST changes/\(b.deviceID)/", "LIST devices/", "LIST snapshots/"] + keys).sorted())
        XCTAssertEqual(counting.requests.filter { !$0.hasPrefix("LIST ") }, [])
    }

    /// Candidates are read a page of objects at a time, each page's deletes sent before the
    /// next: more than two pages all go, and the table ends empty.
    func testCandidatesOfManyObjectsAreCollectedPageByPage() throws {
        let a = try makeDevice(name: "a")
        let (_, stored) = try storedSetting(a, id: "s1", "bytes")
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        _ = try StoreSync(a).sync()
        let count = 2 * Collector.candidatePage + 10
        let folder = "files/\(a.deviceID)/"
        try a.database.transaction {
            for n in 0..<count {
                try a.candidates.add(object: folder + String(format: "gone-%06d", n), stamp: "", why: .deleted, file: nil)
                try a.candidates.setSeq(object: folder + String(format: "gone-%06d", n), seq: 1)
            }
        }
        let report = try collectGarbageByProof(a)
        XCTAssertFalse(report.hasFailures)
        // The made-up objects were never stored: file:// says they are gone already; S3, which
        // answers a delete of nothing as done, does not.
        XCTAssertEqual(report.deleted.count + report.alreadyGone.count, count + 1)
        XCTAssertTrue(report.deleted.contains { $0.key == stored })
        if s3 == nil { XCTAssertEqual(report.alreadyGone.count, count) }
        XCTAssertFalse(try self.stored(a, stored))
        XCTAssertEqual(try self.count(a, "SELECT count(*) FROM coven_gc_candidates"), 0)
    }

    /// A write not published yet holds its candidate (a dry run pushes nothing).
    func testAnUnpublishedDeleteKeepsTheBytes() throws {
        let a = try makeDevice(name: "a")
        let (_, object) = try storedSetting(a, id: "s1", "bytes")
        _ = try StoreSync(a).sync()
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        let dry = try collectGarbageByProof(a, dryRun: true)
        XCTAssertEqual(reasons(dry, object), [.unpublished])
        let real = try collectGarbageByProof(a)
        XCTAssertEqual(real.deleted.map(\.key), [object], "alone in the store, once published it goes")
    }

    /// A new record over the same object made on another device with coven_existing_file
    /// before it saw the delete keeps the bytes: it arrives by pull before gc deletes.
    func testAnExistingFileReferenceMadeMeanwhileKeepsTheBytes() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let (file, object) = try storedSetting(a, id: "s1", "shared bytes")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        _ = try StoreSync(a).sync()
        // b, not having seen the delete, names the object again.
        try b.write(sql: "INSERT INTO settings (id, value, file) VALUES ('s2', 'again', coven_existing_file('\(file)'))")
        _ = try StoreSync(b).sync()
        let report = try collectGarbageByProof(a)
        XCTAssertTrue(report.deleted.isEmpty)
        XCTAssertEqual(report.renamed, 1)
        XCTAssertTrue(try stored(a, object))
        var bytes: [UInt8] = []
        let newFile = try XCTUnwrap(try a.database.scalar("SELECT file FROM settings WHERE id = 's2'").textValue)
        try Reader(a).readFile(newFile) { bytes.append(contentsOf: $0) }
        XCTAssertEqual(bytes, Array("shared bytes".utf8))
        // When b deletes that last record, b's gc deletes the bytes once a has seen it.
        try b.write(sql: "DELETE FROM settings WHERE id = 's2'")
        XCTAssertEqual(reasons(try collectGarbageByProof(b), object), [.deviceBehind])
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try collectGarbageByProof(b).deleted.map(\.key), [object])
    }

    /// Two records naming one object, deleted on two devices at once: the bytes wait for
    /// every device's frontier over both deletes. A third device that saw only one of them
    /// may still name the object through the other record (here it does, with
    /// coven_existing_file, after publishing a frontier over the first delete).
    func testTwoDeletesOfRecordsNamingOneObjectBothHoldTheBytes() throws {
        let a = try makeDevice(name: "a")
        let x = try join("x", from: a)
        let y = try join("y", from: a)
        let (file, object) = try storedSetting(a, id: "s1", "bytes two records name")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(x).sync()
        try x.write(sql: "INSERT INTO settings (id, value, file) VALUES ('s2', 'v', coven_existing_file('\(file)'))")
        for device in [x, a, y] { _ = try StoreSync(device).sync() }
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        try x.write(sql: "DELETE FROM settings WHERE id = 's2'")
        _ = try StoreSync(x).sync()
        _ = try StoreSync(y).sync()  // y's frontier covers x's delete, not a's
        _ = try StoreSync(a).sync()
        _ = try StoreSync(x).sync()
        // y, not having seen a's delete, names the object again through s1's record.
        try y.write(sql: "INSERT INTO settings (id, value, file) VALUES ('s3', 'v', coven_existing_file('\(file)'))")
        for device in [x, a] {
            let report = try collectGarbageByProof(device)
            XCTAssertTrue(report.deleted.isEmpty, "\(device.deviceName) deleted \(report.deleted)")
            XCTAssertEqual(reasons(report, object), [.deviceBehind], "\(device.deviceName): \(report.kept)")
            XCTAssertEqual(report.kept.first?.devices, [y.deviceID])
        }
        XCTAssertTrue(try stored(a, object))
        _ = try StoreSync(y).sync()
        var bytes: [UInt8] = []
        let named = try XCTUnwrap(try y.database.scalar("SELECT file FROM settings WHERE id = 's3'").textValue)
        try Reader(y).readFile(named) { bytes.append(contentsOf: $0) }
        XCTAssertEqual(bytes, Array("bytes two records name".utf8))
    }

    /// A record another device holds but has not published (its write waits for a bound
    /// upload) is listed in that device's change as a held object: gc keeps the bytes.
    func testAnotherDevicesUnpublishedRecordHoldsTheBytes() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let (file, object) = try storedSetting(a, id: "s1", "held bytes")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'x')")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        // b's cover waits for its upload, and every later write of b with it.
        let cover = try stageApp(b, text: "cover")
        try b.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(Self.album)', coven_put_staged('\(cover.id)'))")
        try b.write(sql: "INSERT INTO settings (id, value, file) VALUES ('s2', 'held', coven_existing_file('\(file)'))")
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        _ = try StoreSync(a).sync()
        let synced = try StoreSync(b).sync()
        XCTAssertEqual(synced.pushed.held, 2)
        XCTAssertEqual(synced.pushed.entries, 0, "only b's frontier went out, with its held objects")
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(reasons(report, object), [.heldByDevice])
        XCTAssertEqual(report.kept.first?.devices, [b.deviceID])
        XCTAssertTrue(try stored(a, object))
    }

    /// A record that only a private row elsewhere names (a todo of a list that is not shared,
    /// naming the file with coven_existing_file): that device's change lists the object among
    /// those its records hold, and gc keeps the bytes; once the list is shared the record
    /// reaches the others and names the object itself.
    func testARecordOnlyAPrivateRowElsewhereNamesKeepsTheBytes() throws {
        typealias G = GateTests
        let a = try makeDevice(G.gateManifest, name: "a")
        let b = try join("b", from: a)
        let (workspace, shared, privateList, todo, secret) = (G.id(1), G.id(11), G.id(10), G.id(20), G.id(23))
        let staged = try stageApp(a, text: "a photo", namespace: "pics")
        try a.write(sql: """
            INSERT INTO workspaces (id, name) VALUES ('\(workspace)', 'home');
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(shared)', '\(workspace)', 'shopping', 1);
            INSERT INTO todos (id, list_id, title, file) VALUES ('\(todo)', '\(shared)', 'milk', coven_put_staged('\(staged.id)'));
            """)
        let file = try XCTUnwrap(try a.database.scalar("SELECT file FROM todos").textValue)
        let object = try StoredFiles.store(a, file: file)
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: """
            INSERT INTO lists (id, workspace_id, name, shared) VALUES ('\(privateList)', '\(workspace)', 'diary', 0);
            INSERT INTO todos (id, list_id, title, file) VALUES ('\(secret)', '\(privateList)', 'secret', coven_existing_file('\(file)'));
            """)
        _ = try StoreSync(b).sync()
        try a.write(sql: "DELETE FROM todos WHERE id = '\(todo)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        // b publishes a later write of a shared row: its private record is still held.
        try b.write(sql: "INSERT INTO notes (id, body) VALUES ('\(G.id(60))', 'later')")
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_files"), 0, "a never saw b's private record")
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(reasons(report, object), [.heldByDevice])
        XCTAssertEqual(report.kept.first?.devices, [b.deviceID])
        XCTAssertTrue(try stored(a, object))
        // b shares the list: its record goes to a, which now names the object itself.
        try b.write(sql: "UPDATE lists SET shared = 1 WHERE id = '\(privateList)'")
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_files"), 1)
        XCTAssertTrue(try collectGarbageByProof(a).deleted.isEmpty)
        var bytes: [UInt8] = []
        let named = try XCTUnwrap(try a.database.scalar("SELECT file FROM todos WHERE id = ?1", [secret]).textValue)
        try Reader(a).readFile(named) { bytes.append(contentsOf: $0) }
        XCTAssertEqual(bytes, Array("a photo".utf8))
    }

    /// The losing side of a concurrent edit naming the file keeps its bytes.
    func testALostValueKeepsTheBytes() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let (_, object) = try storedSetting(a, id: "s1", "lost bytes")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "UPDATE settings SET value = 'from b' WHERE id = 's1'")
        try a.write(sql: "UPDATE settings SET file = NULL WHERE id = 's1'")  // later: wins, releases the file
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(try StoreSync(a).lostValues().count, 1)
        XCTAssertEqual(reasons(report, object), [.lostValue])
        XCTAssertTrue(try stored(a, object))
    }

    /// A lost value dropped keeps nothing: the bytes it named go at the next gc; a take-out
    /// (it cannot be restored) never kept them.
    func testADroppedLostValueNoLongerKeepsTheBytes() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let (_, object) = try storedSetting(a, id: "s1", "lost bytes")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try b.write(sql: "UPDATE settings SET value = 'from b' WHERE id = 's1'")
        try a.write(sql: "UPDATE settings SET file = NULL WHERE id = 's1'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()
        let lost = try XCTUnwrap(try StoreSync(a).lostValues().first)
        XCTAssertEqual(reasons(try collectGarbageByProof(a), object), [.lostValue])
        XCTAssertThrowsError(try StoreSync(a).dropLost([lost.id, 99])) { XCTAssertEqual(($0 as? CovenError)?.code, .notFound) }
        XCTAssertEqual(try StoreSync(a).lostValues().count, 1, "a refused drop forgets nothing")
        XCTAssertEqual(try StoreSync(a).dropLost([lost.id]), [lost.id])
        XCTAssertTrue(try StoreSync(a).lostValues().isEmpty)
        XCTAssertEqual(try collectGarbageByProof(a).deleted.map(\.key), [object])
        XCTAssertFalse(try stored(a, object))
    }

    /// A device that has not synced for a month holds deletions back until it syncs or is
    /// removed for good; then it no longer does.
    func testASilentDeviceHoldsBackUntilItIsRemoved() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        let (_, object) = try storedSetting(a, id: "s1", "bytes")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(c).sync()
        try a.write(sql: "DELETE FROM settings WHERE id = 's1'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        let held = try collectGarbageByProof(a)
        XCTAssertEqual(reasons(held, object), [.deviceBehind])
        XCTAssertEqual(held.kept.first?.devices, [c.deviceID])
        try StoreSync(a).removeDevice(c.deviceID)
        XCTAssertEqual(try collectGarbageByProof(a).deleted.map(\.key), [object])
        XCTAssertThrowsError(try StoreSync(c).sync()) { XCTAssertEqual(($0 as? CovenError)?.code, .deviceGone) }
    }

    /// A device that deleted a file's last record and was removed for good before it ran gc:
    /// the other devices, which applied its delete, delete the bytes (in another device's
    /// folder, so --gone-devices would never list them).
    func testTheDeleteOfADeviceRemovedBeforeItsGCIsCollectedByTheOthers() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        let (_, object) = try storedSetting(a, id: "s1", "bytes c deletes")
        for device in [a, b, c] { _ = try StoreSync(device).sync() }
        try c.write(sql: "DELETE FROM settings WHERE id = 's1'")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync()
        try StoreSync(a).removeDevice(c.deviceID)
        let held = try collectGarbageByProof(a)
        XCTAssertEqual(reasons(held, object), [.deviceBehind])
        XCTAssertEqual(held.kept.first?.devices, [b.deviceID])
        // b learns of the removal, and still applies c's delete that a applied (a's frontier
        // says so): both end with the same rows.
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try count(b, "SELECT count(*) FROM settings WHERE id = 's1'"), 0)
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(report.deleted.map(\.key), [object], "\(report.kept)")
        XCTAssertFalse(try stored(a, object))
        // b judged it too: deleting it again is harmless, and settles b's candidate.
        let fromB = try collectGarbageByProof(b)
        XCTAssertFalse(fromB.hasFailures)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_gc_candidates"), 0)
    }

    /// A settings row `id` naming a new stored file of a user namespace (so it can be made
    /// device-only); returns the file id and object.
    func storedTrack(_ device: Device, id: String, _ text: String) throws -> (file: String, object: String) {
        let staged = try Staging(device).prepareUserFile(path: try file("track-\(id).flac", text), namespace: "music", place: .cloud)
        let file = try device.write(sql: "INSERT INTO settings (id, value, file) VALUES ('\(id)', 'v', coven_put_user_file('\(staged.id)'))").files[0]
        return (file, try StoredFiles.store(device, file: file))
    }

    /// Makes `file` device-only on `device`, its copy under the case's folder.
    func makeDeviceOnly(_ device: Device, _ file: String) throws {
        let folder = work + "/mdo-\(device.deviceName)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try DeviceOnlyMaker(device).makeDeviceOnly(folder: folder, requests: [DeviceOnlyRequest(file: file, names: ["\(file).flac"], input: "argument 1")])
    }

    /// Issue 19 item 22: the laptop uploads a track, the desktop makes it device-only and
    /// syncs; the laptop, which applied the switch, deletes the stored bytes once every other
    /// live device's frontier covers the switch (the desktop keeps its copy).
    func testBytesAnotherDeviceMadeDeviceOnlyGoByTheGCOfADeviceThatAppliedTheSwitch() throws {
        let laptop = try makeDevice(name: "laptop")
        let desktop = try join("desktop", from: laptop)
        let phone = try join("phone", from: laptop)
        let (file, object) = try storedTrack(laptop, id: "t1", "a track")
        for device in [laptop, desktop, phone] { _ = try StoreSync(device).sync() }
        try makeDeviceOnly(desktop, file)
        _ = try StoreSync(desktop).sync()
        _ = try StoreSync(laptop).sync()
        let held = try collectGarbageByProof(laptop)
        XCTAssertEqual(reasons(held, object), [.deviceBehind], "the phone has not applied the switch yet")
        XCTAssertEqual(held.kept.first?.devices, [phone.deviceID])
        XCTAssertTrue(try stored(laptop, object))
        _ = try StoreSync(phone).sync()
        let report = try collectGarbageByProof(laptop)
        XCTAssertEqual(report.deleted.map(\.key), [object], "\(report.kept)")
        XCTAssertFalse(try stored(laptop, object))
        XCTAssertEqual(try Uploads(desktop).fileStatus(file), .deviceOnly(device: desktop.deviceID))
        // The desktop's own gc judges it too: deleting it again is harmless.
        XCTAssertFalse(try collectGarbageByProof(desktop).hasFailures)
        XCTAssertTrue(try collectGarbageByProof(laptop).kept.isEmpty)
    }

    /// Item 22, the desktop removed before its own gc ran: the laptop, which applied the
    /// switch, deletes the bytes (they are not in the desktop's folder, so --gone-devices
    /// would never list them).
    func testBytesADeviceMadeDeviceOnlyGoAfterItIsRemovedBeforeItsGC() throws {
        let laptop = try makeDevice(name: "laptop")
        let desktop = try join("desktop", from: laptop)
        let (file, object) = try storedTrack(laptop, id: "t1", "a track")
        for device in [laptop, desktop] { _ = try StoreSync(device).sync() }
        try makeDeviceOnly(desktop, file)
        _ = try StoreSync(desktop).sync()
        _ = try StoreSync(laptop).sync()
        try StoreSync(laptop).removeDevice(desktop.deviceID)
        let report = try collectGarbageByProof(laptop)
        XCTAssertEqual(report.deleted.map(\.key), [object], "\(report.kept)")
        XCTAssertFalse(try stored(laptop, object))
    }

    /// Issue 19 item 23: temporary files a killed write left in this device's folder of a
    /// file:// store go once older than a day, and so does an upload session no queued upload
    /// names; a fresh one of each (a write running now) stays, and so does every object.
    func testLeftoverTemporaryFilesOfThisDevicesFolderGoOnceOld() throws {
        let a = try makeDevice(name: "a")
        let (_, object) = try storedSetting(a, id: "s1", "stored bytes")
        _ = try StoreSync(a).sync()
        let folder = storeFolder + "/files/\(a.deviceID)"
        let old = folder + "/.coven-tmp-0123456789abcdef"
        let fresh = folder + "/.coven-tmp-fedcba9876543210"
        for path in [old, fresh] { XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("part of an upload".utf8))) }
        let twoDaysAgo = Date().addingTimeInterval(-2 * 86400)
        try FileManager.default.setAttributes([.modificationDate: twoDaysAgo], ofItemAtPath: old)
        // Multipart sessions of objects no queued upload names (a start whose answer was lost):
        // one started two days ago, one now.
        let provider = try a.connectStorage()
        let orphan = "files/\(a.deviceID)/orphan"
        let oldSession = try provider.createMultipart(orphan, totalSize: 10, partSize: 10)
        try FileManager.default.setAttributes([.modificationDate: twoDaysAgo], ofItemAtPath: storeFolder + "/.uploads/\(oldSession)/info")
        let freshSession = try provider.createMultipart(orphan + "-fresh", totalSize: 10, partSize: 10)
        let dry = try collectGarbageByProof(a, dryRun: true)
        XCTAssertEqual(dry.deleted, [.init(key: "files/\(a.deviceID)/.coven-tmp-0123456789abcdef", kind: .temporary)])
        XCTAssertEqual(dry.abortedUploads, [orphan])
        XCTAssertTrue(FileManager.default.fileExists(atPath: old), "a dry run deletes nothing")
        let report = try collectGarbageByProof(a)
        XCTAssertEqual(report.deleted, [.init(key: "files/\(a.deviceID)/.coven-tmp-0123456789abcdef", kind: .temporary)])
        XCTAssertFalse(FileManager.default.fileExists(atPath: old))
        XCTAssertEqual(report.abortedUploads, [orphan])
        XCTAssertTrue(FileManager.default.fileExists(atPath: fresh), "a fresh temporary file may be a write running now")
        XCTAssertEqual(try provider.uploadsInProgress(prefix: "files/\(a.deviceID)/").map(\.uploadID), [freshSession])
        XCTAssertTrue(try stored(a, object))
    }

    /// --gone-devices: the unfinished uploads of a device gone for good are aborted and what
    /// no record names in its folder goes; what a record names stays; a rerun is harmless.
    func testGoneDeviceCleanupAbortsItsUploadsAndDeletesWhatNothingNames() throws {
        let a = try makeDevice(name: "a")
        let c = try join("c", from: a)
        let (_, named) = try storedSetting(c, id: "kept", "named by a record")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync()
        let provider = try a.connectStorage()
        let orphan = "files/\(c.deviceID)/orphan"
        try provider.put(orphan, data: Array("nothing names this".utf8))
        let unfinished = "files/\(c.deviceID)/unfinished"
        _ = try provider.createMultipart(unfinished, totalSize: 10, partSize: 10)
        try StoreSync(a).removeDevice(c.deviceID)
        let plain = try collectGarbageByProof(a)
        XCTAssertTrue(plain.deleted.isEmpty, "without --gone-devices nothing is listed")
        let report = try collectGarbageByProof(a, goneDevices: true)
        XCTAssertEqual(report.deleted.map(\.key), [orphan])
        XCTAssertEqual(report.abortedUploads, [unfinished])
        XCTAssertTrue(try provider.uploadsInProgress(prefix: "files/\(c.deviceID)/").isEmpty)
        XCTAssertTrue(try stored(a, named))
        XCTAssertFalse(try stored(a, orphan))
        let again = try collectGarbageByProof(a, goneDevices: true)
        XCTAssertTrue(again.deleted.isEmpty && again.abortedUploads.isEmpty)
    }

    /// Two devices running gc at once (one after the other on the same candidates here, and
    /// the same gone folder): deleting twice is harmless, nothing named goes.
    func testTwoDevicesCollectingTheSameFolderDeleteNothingNamed() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        let c = try join("c", from: a)
        let (_, named) = try storedSetting(c, id: "kept", "named")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try a.connectStorage().put("files/\(c.deviceID)/stray", data: [1, 2, 3])
        try StoreSync(a).removeDevice(c.deviceID)
        let stray = "files/\(c.deviceID)/stray"
        let fromA = try collectGarbageByProof(a, dryRun: true, goneDevices: true)
        let fromB = try collectGarbageByProof(b, goneDevices: true)
        XCTAssertEqual(fromA.deleted.map(\.key), [stray])
        XCTAssertEqual(fromB.deleted.map(\.key), [stray])
        // a deletes what it judged while b already did: deleting twice succeeds.
        XCTAssertTrue(try a.connectStorage().deleteObjects([stray]).isEmpty)
        let rerun = try collectGarbageByProof(a, goneDevices: true)
        XCTAssertFalse(rerun.hasFailures)
        XCTAssertTrue(try stored(a, named))
        XCTAssertTrue(try stored(b, named))
    }

    /// Change objects go only when a snapshot covers them and every live device has applied
    /// them, but the latest of each live device (its publisher checks it is there); without a
    /// snapshot, none go. Snapshots past the newest two go.
    func testChangeObjectsNeedASnapshotAndSnapshotsPastTheNewestTwoGo() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        _ = try StoreSync(b).sync()
        for n in 1...3 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(n)', 'v')")
            _ = try StoreSync(a).sync()
        }
        _ = try StoreSync(b).sync()
        try b.write(sql: "INSERT INTO settings (id, value) VALUES ('b1', 'v')")
        _ = try StoreSync(b).sync()
        let provider = try a.connectStorage()
        XCTAssertTrue(try collectGarbageByProof(a).deleted.isEmpty, "no snapshot: every change stays")
        // Snapshots of a at its seqs 3, 4 and 5 (each a new write published first).
        var keys: [String] = []
        for n in 4...6 {
            try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k\(n)', 'v')")
            keys.append(try Snapshots(a).snapshot().key)
        }
        _ = try StoreSync(b).sync()
        let report = try collectGarbageByProof(a)
        // b has published a frontier over a's first three changes only (it published nothing
        // since); the newest snapshot covers those and b's one change, which is b's latest
        // and stays.
        let expected = (1...3).map { ChangeObject.path(device: a.deviceID, seq: UInt64($0)) }
        XCTAssertEqual(report.deleted.filter { $0.kind == .change }.map(\.key).sorted(), expected.sorted())
        XCTAssertEqual(report.deleted.filter { $0.kind == .snapshot }.map(\.key), [keys[0]])
        XCTAssertNil(try provider.head(ChangeObject.path(device: a.deviceID, seq: 1)))
        XCTAssertNotNil(try provider.head(ChangeObject.path(device: b.deviceID, seq: 1)), "b's latest change")
        XCTAssertNotNil(try provider.head(ChangeObject.path(device: a.deviceID, seq: 4)), "b has not published a frontier over it")
        XCTAssertNotNil(try provider.head(keys[1]))
        XCTAssertNotNil(try provider.head(keys[2]))
        XCTAssertTrue(try collectGarbageByProof(a).deleted.isEmpty, "a rerun finds nothing more")
        // A new device joins from the newest snapshot and holds every row.
        let c = try join("c", from: a)
        XCTAssertEqual(try c.database.scalar("SELECT count(*) FROM settings").intValue, 7)
    }
}

/// Every rule above on the signature-checking S3 server (moto) on loopback.
final class GCS3RuleTests: GCTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery on Linux finds a class's own methods only.
    override func testADeleteWaitsForEveryOtherDeviceThenTheBytesGo() throws { try super.testADeleteWaitsForEveryOtherDeviceThenTheBytesGo() }
    override func testAQuietPassListsNoFiles() throws { try super.testAQuietPassListsNoFiles() }
    override func testCandidatesOfManyObjectsAreCollectedPageByPage() throws { try super.testCandidatesOfManyObjectsAreCollectedPageByPage() }
    override func testAnUnpublishedDeleteKeepsTheBytes() throws { try super.testAnUnpublishedDeleteKeepsTheBytes() }
    override func testAnExistingFileReferenceMadeMeanwhileKeepsTheBytes() throws { try super.testAnExistingFileReferenceMadeMeanwhileKeepsTheBytes() }
    override func testTwoDeletesOfRecordsNamingOneObjectBothHoldTheBytes() throws { try super.testTwoDeletesOfRecordsNamingOneObjectBothHoldTheBytes() }
    override func testAnotherDevicesUnpublishedRecordHoldsTheBytes() throws { try super.testAnotherDevicesUnpublishedRecordHoldsTheBytes() }
    override func testARecordOnlyAPrivateRowElsewhereNamesKeepsTheBytes() throws { try super.testARecordOnlyAPrivateRowElsewhereNamesKeepsTheBytes() }
    override func testALostValueKeepsTheBytes() throws { try super.testALostValueKeepsTheBytes() }
    override func testASilentDeviceHoldsBackUntilItIsRemoved() throws { try super.testASilentDeviceHoldsBackUntilItIsRemoved() }
    override func testTheDeleteOfADeviceRemovedBeforeItsGCIsCollectedByTheOthers() throws { try super.testTheDeleteOfADeviceRemovedBeforeItsGCIsCollectedByTheOthers() }
    override func testGoneDeviceCleanupAbortsItsUploadsAndDeletesWhatNothingNames() throws { try super.testGoneDeviceCleanupAbortsItsUploadsAndDeletesWhatNothingNames() }
    override func testBytesAnotherDeviceMadeDeviceOnlyGoByTheGCOfADeviceThatAppliedTheSwitch() throws {
        try super.testBytesAnotherDeviceMadeDeviceOnlyGoByTheGCOfADeviceThatAppliedTheSwitch()
    }
    override func testBytesADeviceMadeDeviceOnlyGoAfterItIsRemovedBeforeItsGC() throws { try super.testBytesADeviceMadeDeviceOnlyGoAfterItIsRemovedBeforeItsGC() }
    // file:// only: S3 writes leave no temporary files (its sessions: GCS3Tests).
    override func testLeftoverTemporaryFilesOfThisDevicesFolderGoOnceOld() throws {}
    override func testTwoDevicesCollectingTheSameFolderDeleteNothingNamed() throws { try super.testTwoDevicesCollectingTheSameFolderDeleteNothingNamed() }
    override func testChangeObjectsNeedASnapshotAndSnapshotsPastTheNewestTwoGo() throws { try super.testChangeObjectsNeedASnapshotAndSnapshotsPastTheNewestTwoGo() }
}

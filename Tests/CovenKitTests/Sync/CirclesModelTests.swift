@testable import CovenKit
import CovenTestSupport
import Foundation
import Synchronization
import XCTest

/// Randomized circles: three members of a store, with a device or two each, make circles of
/// some of them, add and remove members, rotate keys, write and delete albums, tracks, covers
/// with stored files and owner-only notes in the store and in circles, keep albums back by
/// their gate or share them again, move albums (with what is under them) between audiences,
/// run gc, sync, and join new
/// devices from snapshots, in random order. Then every device syncs until quiet, and:
/// - for the store and for each circle, every device whose member is on its newest roster
///   holds the same albums of that audience;
/// - a device whose member was never on any roster of a circle holds no value or album id
///   written there that no move took out of it, in its rows or anywhere in its database file
///   (deletes and tombstones included);
/// - every device of one member holds the same kept rows (a track follows its album, and one
///   written into a circle under an album a concurrent write kept in the store stays with the
///   circle's members, as written);
/// - no device holds a row of a circle its member is not in, but what it read before its
///   removal;
/// - nothing is refused (every writer was a member of the audience it wrote, when it wrote),
///   and every note is owned by the member that wrote it (another member's change of it is
///   refused locally, `not_owner`);
/// - after every gc (random ones, and two rounds on every device at the end), every object a
///   stored file record names still exists, on every device whose member still reads the
///   record's audience (a removed member keeps its records of the circle, and holds back none
///   of its bytes).
/// The seed of a failing run is printed; `COVEN_SEED=N` replays one, `COVEN_RUNS=N` sets how
/// many.
final class CirclesModelTests: XCTestCase {
    static let manifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [
            { "name": "albums", "identity": "uuid", "audience_column": "audience", "gated_by": "shared" },
            { "name": "tracks", "identity": "uuid", "audience_from": "album_id" },
            { "name": "covers", "identity": "uuid", "audience_from": "album_id", "files": [ { "column": "file" } ] },
            { "name": "notes", "identity": "uuid", "audience_from": "album_id", "owner_only": true }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, audience TEXT NOT NULL DEFAULT 'store', shared INTEGER NOT NULL DEFAULT 1, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), title TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE covers (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE notes (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), owner TEXT, body TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    func testCirclesConvergeAndStayPrivateOverManySeededRuns() throws {
        if let failure = SeededRuns.run("circles", runs: 40, base: 0x41C1_0000, run) {
            XCTFail(failure)
            return
        }
        // gc had something to delete (runs go on several cores: the count is behind a lock).
        if ProcessInfo.processInfo.environment["COVEN_SEED"] == nil { XCTAssertGreaterThan(Self.deleted.withLock { $0 }, 0, "the runs' gc deleted stored bytes") }
    }

    /// A device's own rows kept back by its gate, never published, that a pull makes kept: they
    /// go to the audience they are in now only if it is the one they were kept back in, or the
    /// store was (a circle's members all read the store), never to more readers. A track kept
    /// back in the circle stays off the store when a crossing write moves its album back there;
    /// a note kept back in the store goes to the circle a crossing write moves its album into.
    func testRowsKeptBackGoWhereTheyWereWrittenOrToFewerReaders() throws {
        let work = NSTemporaryDirectory() + "coven-kept-back-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: work) }
        let a = try DeviceSetup.create(paths: DevicePaths(database: work + "/a/device.db"), storage: .file(directory: work + "/store"),
                                  manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "a")
        _ = try Members(a).establish(name: "alice")
        let bobIdentity = try MemberIdentity(), carolIdentity = try MemberIdentity()
        _ = try Members(a).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        _ = try Members(a).add(name: "carol", recipient: carolIdentity.recipient.description, admin: false)
        let b = try DeviceSetup.join(paths: DevicePaths(database: work + "/b/device.db"), storage: a.storage, identity: bobIdentity, name: "b")
        let c = try DeviceSetup.join(paths: DevicePaths(database: work + "/c/device.db"), storage: a.storage, identity: carolIdentity, name: "c")
        let circle = try Circles(a).create(name: "couple", members: ["bob"]).circle.id
        let x = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d0001", y = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d0002"
        func syncAll() throws { for _ in 0..<2 { for device in [a, b, c] { _ = try StoreSync(device).sync() } } }
        func count(_ device: Device, _ sql: String) throws -> Int64 { try device.database.scalar(sql).intValue ?? -1 }
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(x)', 'x'), ('\(y)', 'y')")
        try syncAll()
        // X into the circle; Carol does not see it before she writes X in the store.
        try a.write(sql: "UPDATE albums SET audience = '\(circle)' WHERE id = '\(x)'")
        _ = try StoreSync(a).sync()
        _ = try StoreSync(b).sync()
        try a.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(x)', 'for two only')")
        try a.write(sql: "UPDATE albums SET shared = 0 WHERE id = '\(x)'")
        // Y: a note, then kept back; Bob, not seeing that, moves Y into the circle.
        try a.write(sql: "INSERT INTO notes (id, album_id, body) VALUES (coven_uuid7(), '\(y)', 'a note')")
        try a.write(sql: "UPDATE albums SET shared = 0 WHERE id = '\(y)'")
        _ = try StoreSync(a).sync()  // retracts X from the circle and Y from the store; the track and note stay
        usleep(2_000)
        try c.write(sql: "UPDATE albums SET title = 'x (carol)' WHERE id = '\(x)'")
        try b.write(sql: "UPDATE albums SET audience = '\(circle)' WHERE id = '\(y)'")
        _ = try StoreSync(c).sync()
        _ = try StoreSync(b).sync()
        _ = try StoreSync(a).sync()  // X back in the store, shared; Y in the circle, shared
        XCTAssertEqual(try a.database.scalar("SELECT audience FROM albums WHERE id = ?1", [x]).textValue, "store")
        XCTAssertEqual(try a.database.scalar("SELECT audience FROM albums WHERE id = ?1", [y]).textValue, circle)
        try syncAll()
        // A later write of Alice's to the tracks sends what its standing changed, not that one.
        try a.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(x)', 'for all')")
        try syncAll()
        XCTAssertEqual(try count(c, "SELECT count(*) FROM tracks WHERE title = 'for two only'"), 0, "the track kept back in the circle reached no one")
        XCTAssertEqual(try count(c, "SELECT count(*) FROM tracks WHERE title = 'for all'"), 1)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM tracks WHERE title = 'for two only'"), 0)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM notes WHERE album_id = '\(y)'"), 1, "the note went to the circle")
        XCTAssertEqual(try count(c, "SELECT count(*) FROM notes"), 0)
        let provider = try a.connectStorage()
        for info in try provider.list(prefix: "") {
            let bytes = try XCTUnwrap(try provider.getObject(info.key))
            XCTAssertNil(bytes.firstRange(of: Array("for two only".utf8)), info.key)
        }
    }

    /// Stored objects the runs' gc deleted.
    static let deleted = Mutex(0)

    final class Node {
        let device: Device
        let member: String
        init(_ device: Device, member: String) {
            self.device = device
            self.member = member
        }
    }

    func run(seed: UInt64, work: String) throws -> String? {
        var random = SeededRandom(state: seed)
        func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[random.below(items.count)] }
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let first = try DeviceSetup.create(paths: DevicePaths(database: work + "/d0/device.db"), storage: .file(directory: work + "/store"),
                                      manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "d0")
        let owner = try Members(first).establish(name: "m0")
        let ownerID = try XCTUnwrap(try Members(first).memberID())
        var identities: [String: MemberIdentity] = [ownerID: owner]
        var nodes = [Node(first, member: ownerID)]
        var deviceCount = 1
        func join(_ member: String) throws -> Node {
            let device = try DeviceSetup.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage,
                                         identity: try XCTUnwrap(identities[member]), name: "d\(deviceCount)")
            deviceCount += 1
            let node = Node(device, member: member)
            nodes.append(node)
            return node
        }
        for index in 1...2 {
            let identity = try MemberIdentity()
            let added = try Members(first).add(name: "m\(index)", recipient: identity.recipient.description, admin: index == 1)
            identities[added.member.id] = identity
            _ = try join(added.member.id)
        }
        if random.below(2) == 0 { _ = try join(ownerID) }
        for node in nodes { _ = try StoreSync(node.device).sync() }
        let members = [ownerID] + identities.keys.filter { $0 != ownerID }.sorted()
        // Each circle's members ever (a removed member keeps what it read).
        var everIn: [String: Set<String>] = [:]
        var made: [String] = []
        // Values written into a circle, and those a move took out of it (seen elsewhere since).
        var secret: [String: Set<String>] = [:]
        var exposed: Set<String> = []
        // Members ever removed from each circle: their devices keep the circle's records, and
        // hold its bytes back from no one.
        var removedFrom: [String: Set<String>] = [:]
        let provider = try first.connectStorage()
        // gc safety: every object a stored record names on a device still reading its audience
        // exists (a removed member's records of the circle are not counted).
        func gcSafety(_ when: String) throws -> String? {
            let present = Set(try provider.list(prefix: "files/").map(\.key))
            for node in nodes {
                for row in try node.device.database.query("SELECT id, object, audience FROM coven_files WHERE place = 'stored'") {
                    let audience = row.string("audience") ?? ""
                    if audience != RowAudiences.store, removedFrom[audience]?.contains(node.member) == true { continue }
                    if let object = row.string("object"), !present.contains(object) {
                        if ProcessInfo.processInfo.environment["COVEN_SEED"] != nil {
                            let id = row.string("id") ?? ""
                            for info in try provider.list(prefix: "changes/") {
                                let parts = info.key.split(separator: "/")
                                guard parts.count == 3, let bytes = try provider.getObject(info.key),
                                      let change = try? first.keys.open(change: bytes, path: info.key, publisher: String(parts[1])) else { continue }
                                for section in change.sections {
                                    for entry in section.entries where entry.id == id || entry.values.contains(.text(id)) || entry.table == "albums" && entry.id.hasSuffix("0006") {
                                        print("TRACE change \(info.key) \(section.audience.prefix(4)) \(entry.kind) \(entry.table) \(entry.id.suffix(4)) \(entry.stamp) held=\(change.heldObjects)")
                                    }
                                }
                            }
                            for n in nodes {
                                print("TRACE \(n.device.deviceName) record", try n.device.database.query("SELECT id, audience, place, _updated_at FROM coven_files WHERE id = ?1", [id]).map { $0.values.map { $0.textValue ?? "\($0)" } },
                                      "covers", try n.device.database.query("SELECT c.id, c.album_id, c._updated_at, a.shared FROM covers c LEFT JOIN albums a ON a.id = c.album_id WHERE c.file = ?1", [id]).map { $0.values.map { $0.textValue ?? "\($0)" } },
                                      "published", try n.device.database.query("SELECT tbl, id, retracted FROM coven_published WHERE id = ?1", [id]).map { $0.values.map { $0.textValue ?? "\($0)" } },
                                      "tomb", try n.device.database.query("SELECT * FROM coven_tombstones WHERE id = ?1", [id]).map { $0.values.map { $0.textValue ?? "\($0)" } },
                                      "deletedfiles", try n.device.database.query("SELECT count(*) FROM coven_deleted_files WHERE id = ?1", [id]).map { $0.values.map { $0.textValue ?? "\($0)" } },
                                      "registry", try n.device.database.query("SELECT device, applied_seq FROM coven_device_registry").map { $0.values.map { $0.textValue ?? "\($0)" } })
                            }
                        }
                        return "\(when): \(node.device.deviceName) names \(object) (record \(row.string("id") ?? "") of \(audience.prefix(4))), which is gone"
                    }
                }
            }
            return nil
        }
        var deletedObjects = 0 {
            didSet { Self.deleted.withLock { $0 += deletedObjects - oldValue } }
        }
        var log: [String] = []
        let steps = 18 + random.below(12)
        for step in 0..<steps {
            do {
                let node = nodes[random.below(nodes.count)]
                let device = node.device
                switch random.below(15) {
                case 0...3:
                    // Writes an album (and sometimes a track) into an audience this member
                    // writes, as this device knows it; or retitles one, or moves it.
                    // In the order the circles were made (their ids are random: a replay picks alike).
                    let known = try Circles(device).writableAudiences()
                    let writable = [RowAudiences.store] + made.filter { known.contains($0) }
                    // An album here, or a new one (ids are random in life: two devices never make
                    // one id in two audiences).
                    let present = try device.database.query("SELECT id FROM albums ORDER BY id").compactMap { $0.string("id") }
                    let fresh = String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d%04x", step)
                    guard let audience = pick(writable), let album = random.below(3) == 0 || present.isEmpty ? fresh : pick(present) else { continue }
                    let value = "v\(step)x\(device.deviceName)"
                    let here = try device.database.queryOne("SELECT title, audience FROM albums WHERE id = ?1", [album])
                    if let here, let current = here.string("audience"), !writable.contains(current) { continue }
                    if let here, let current = here.string("audience"), current != audience, let title = here.string("title") {
                        // A move: what the album holds now is seen in the new audience.
                        exposed.insert(title)
                        exposed.insert(album)
                        for track in try device.database.query("SELECT title FROM tracks WHERE album_id = ?1", [album]) {
                            if let title = track.string("title") { exposed.insert(title) }
                        }
                        for note in try device.database.query("SELECT body FROM notes WHERE album_id = ?1", [album]) {
                            if let body = note.string("body") { exposed.insert(body) }
                        }
                    }
                    try device.write(sql: """
                        INSERT INTO albums (id, title, audience) VALUES ('\(album)', '\(value)', '\(audience)')
                        ON CONFLICT (id) DO UPDATE SET title = excluded.title, audience = excluded.audience
                        """)
                    if audience != RowAudiences.store {
                        secret[audience, default: []].insert(value)
                        if here == nil { secret[audience, default: []].insert(album) }
                    }
                    if random.below(2) == 0 {
                        let track = "t\(step)x\(device.deviceName)"
                        try device.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(album)', '\(track)')")
                        if audience != RowAudiences.store { secret[audience, default: []].insert(track) }
                    }
                    if random.below(3) == 0 {
                        // A cover with its bytes, uploaded now or later.
                        let path = work + "/cover-\(step)"
                        try Data("cover \(step) \(random.next())".utf8).write(to: URL(fileURLWithPath: path))
                        let fd = open(path, O_RDONLY)
                        defer { close(fd) }
                        let staged = try Staging(device).stageAppBytes(from: fd, sourceName: path, namespace: "covers", place: .cloud)
                        try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(staged.id)'))")
                        if random.below(2) == 0 { _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:])) }
                    }
                    log.append("\(device.deviceName) writes \(value) in \(audience.prefix(4))")
                case 4, 5:
                    _ = try StoreSync(device).sync()
                    log.append("\(device.deviceName) syncs")
                case 6:
                    // Deletes an album with its tracks, or one track, of an audience this
                    // member writes (a circle's delete stays in its section).
                    let writable = try Circles(device).writableAudiences()
                    let albums = try device.database.query("SELECT id, audience FROM albums ORDER BY id").compactMap { row -> String? in
                        guard let id = row.string("id"), writable.contains(row.string("audience") ?? "") else { return nil }
                        return id
                    }
                    guard let album = pick(albums) else { continue }
                    if random.below(2) == 0, let track = pick(try device.database.query("SELECT id FROM tracks WHERE album_id = ?1 ORDER BY id", [album]).compactMap { $0.string("id") }) {
                        try device.write(sql: "DELETE FROM tracks WHERE id = '\(track)'")
                        log.append("\(device.deviceName) deletes a track of \(album.suffix(4))")
                    } else {
                        try device.write(sql: "DELETE FROM tracks WHERE album_id = '\(album)'; DELETE FROM covers WHERE album_id = '\(album)'; DELETE FROM notes WHERE album_id = '\(album)'; DELETE FROM albums WHERE id = '\(album)'")
                        log.append("\(device.deviceName) deletes \(album.suffix(4))")
                    }
                case 7:
                    // A circle of this member and some others.
                    let others = members.filter { $0 != node.member && random.below(2) == 0 }
                    let names = try others.map { id in try XCTUnwrap(try device.keys.roster(audience: "store", generation: try XCTUnwrap(try device.keys.storeGeneration())).first { $0.id == id }?.name) }
                    let circle = try Circles(device).create(name: "c\(step)", members: names)
                    everIn[circle.circle.id, default: []].formUnion([node.member] + others)
                    made.append(circle.circle.id)
                    log.append("\(device.deviceName) makes c\(step) of \(([node.member] + others).map { $0.prefix(4) })")
                case 8, 9:
                    // An admin of a circle adds or removes a member, or rotates its key.
                    let circles = try Circles(device).list().filter { circle in circle.isMember && circle.members.contains { $0.id == node.member && $0.role != "member" } }
                    guard let circle = pick(circles) else { continue }
                    let inIt = Set(circle.members.map(\.id))
                    switch random.below(3) {
                    case 0:
                        guard let target = pick(members.filter { !inIt.contains($0) }) else { continue }
                        _ = try Circles(device).add(circle.id, member: target, admin: random.below(3) == 0)
                        everIn[circle.id, default: []].insert(target)
                        log.append("\(device.deviceName) adds \(target.prefix(4)) to \(circle.name)")
                    case 1:
                        guard let target = pick(inIt.subtracting([node.member]).sorted()) else { continue }
                        do {
                            removedFrom[circle.id, default: []].insert(target)
                            _ = try Circles(device).remove(circle.id, member: target)
                            log.append("\(device.deviceName) removes \(target.prefix(4)) from \(circle.name)")
                        } catch let error as CovenError where error.code == .refused {}
                    default:
                        _ = try Circles(device).rotate(circle.id)
                        log.append("\(device.deviceName) rotates \(circle.name)")
                    }
                case 10:
                    _ = try Snapshots(device).snapshot()
                    log.append("\(device.deviceName) snapshots")
                case 13:
                    // The album's gate: kept back on this device (its peers drop it), or shared again.
                    let writable = try Circles(device).writableAudiences()
                    let albums = try device.database.query("SELECT id, audience FROM albums ORDER BY id").compactMap { row -> String? in
                        guard let id = row.string("id"), writable.contains(row.string("audience") ?? "") else { return nil }
                        return id
                    }
                    guard let album = pick(albums) else { continue }
                    try device.write(sql: "UPDATE albums SET shared = 1 - shared WHERE id = '\(album)'")
                    log.append("\(device.deviceName) flips the gate of \(album.suffix(4))")
                case 14:
                    // A note on an album, the member's own (owner-only); or another's, refused here.
                    let albums = try device.database.query("SELECT id FROM albums ORDER BY id").compactMap { $0.string("id") }
                    guard let album = pick(albums) else { continue }
                    let others = try device.database.query("SELECT id FROM notes WHERE owner IS NOT ?1 ORDER BY id", [node.member]).compactMap { $0.string("id") }
                    let value = "n\(step)x\(device.deviceName)"
                    if let other = pick(others), random.below(3) == 0 {
                        do {
                            try device.write(sql: "UPDATE notes SET body = '\(value)' WHERE id = '\(other)'")
                            return "\(device.deviceName) changed another member's note \(other); \(log)"
                        } catch let error as CovenError where error.code == .notOwner {
                            log.append("\(device.deviceName) may not change note \(other.suffix(4))")
                        }
                    } else {
                        let audience = try device.database.scalar("SELECT audience FROM albums WHERE id = ?1", [album]).textValue ?? RowAudiences.store
                        try device.write(sql: "INSERT INTO notes (id, album_id, body) VALUES (coven_uuid7(), '\(album)', '\(value)')")
                        if audience != RowAudiences.store { secret[audience, default: []].insert(value) }
                        log.append("\(device.deviceName) notes \(value) on \(album.suffix(4))")
                    }
                case 12:
                    // gc here: nothing a reader of its audience names goes.
                    if try device.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue ?? 0 > 0 {
                        _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
                    }
                    let report = try GarbageCollection(device).collectGarbage()
                    deletedObjects += report.deleted.filter { $0.kind == .file }.count
                    log.append("\(device.deviceName) gc deletes \(report.deleted.count)")
                    if let failure = try gcSafety("after gc on \(device.deviceName) at step \(step)") { return failure + "; \(log)" }
                default:
                    // A new device of a member, from the newest snapshot if there is one.
                    guard nodes.count < 6, let member = pick(members) else { continue }
                    let joined = try join(member)
                    log.append("\(joined.device.deviceName) joins as \(member.prefix(4))")
                }
            } catch let error as CovenError where [.notAdmin, .notInCircle, .exists, .busy, .notOwner].contains(error.code) {
                // A device whose knowledge is behind storage's: refused, nothing changed.
                log.append("refused: \(error.code.rawValue)")
            } catch {
                return "step \(step) threw \(error); \(log)"
            }
        }
        for _ in 0..<3 {
            for node in nodes {
                do {
                    if try node.device.database.scalar("SELECT count(*) FROM coven_upload_queue").intValue ?? 0 > 0 {
                        _ = try UploadWorker.run(paths: node.device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
                    }
                    _ = try StoreSync(node.device).sync()
                } catch { return "the last syncs: \(node.device.deviceName) threw \(error); \(log)" }
            }
        }
        // Every device runs gc, twice (the second sees every frontier past the first's deletes).
        for round in 0..<2 {
            for node in nodes {
                let report = try GarbageCollection(node.device).collectGarbage()
                deletedObjects += report.deleted.filter { $0.kind == .file }.count
                if let failure = try gcSafety("after the final gc \(round) on \(node.device.deviceName)") { return failure + "; \(log)" }
                _ = try StoreSync(node.device).sync()
            }
        }

        // The newest roster of each circle, as storage holds it.
        var current: [String: Set<String>] = [:]
        for node in nodes {
            for circle in try Circles(node.device).list() where circle.isMember {
                let roster = Set(circle.members.map(\.id))
                if let known = current[circle.id], known != roster { return "\(node.device.deviceName) reads another roster of \(circle.name); \(log)" }
                current[circle.id] = roster
            }
        }
        // The rows a device's peers hold: those its gate keeps (a shared album and what is
        // under it); one kept back stays on its device alone.
        func rows(_ device: Device, _ audience: String) throws -> [String] {
            try device.database.query("SELECT id, title FROM albums WHERE audience = ?1 AND shared = 1 ORDER BY id", [audience]).map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")" }
        }
        func everything(_ device: Device) throws -> [String] {
            let kept = "album_id IN (SELECT id FROM albums WHERE shared = 1)"
            return try device.database.query("SELECT id, title, audience FROM albums WHERE shared = 1 ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")|\($0.string("audience") ?? "")" }
                + device.database.query("SELECT id, album_id, title FROM tracks WHERE \(kept) ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("album_id") ?? "")|\($0.string("title") ?? "")" }
                + device.database.query("SELECT id, album_id, owner, body FROM notes WHERE \(kept) ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("album_id") ?? "")|\($0.string("owner") ?? "")|\($0.string("body") ?? "")" }
        }
        func explain(_ device: Device) throws -> String {
            let lost = try device.database.query("SELECT tbl, row_id, why FROM coven_lost_values").map { "\($0.string("tbl") ?? "") \($0.string("row_id") ?? "") \($0.string("why") ?? "")" }
            let sections = try device.database.query("SELECT device, seq, audience, generation, opened FROM coven_change_sections").map { $0.values }
            let gens = try device.database.query("SELECT * FROM coven_circles").map { $0.values }
            if ProcessInfo.processInfo.environment["COVEN_SEED"] != nil {
                for n in nodes {
                    print("TRACE \(n.device.deviceName) albums", try n.device.database.query("SELECT id, title, audience, shared, _updated_at FROM albums").map { $0.values.map { $0.textValue ?? "\($0)" } })
                    print("TRACE \(n.device.deviceName) tombs", try n.device.database.query("SELECT tbl, id, stamp, audience FROM coven_tombstones WHERE tbl = 'albums'").map { $0.values.map { $0.textValue ?? "\($0)" } })
                    print("TRACE \(n.device.deviceName) registry", try n.device.database.query("SELECT device, applied_seq FROM coven_device_registry").map { $0.values.map { $0.textValue ?? "\($0)" } }, try DeviceStatus(of: n.device).sync.keyUnavailable)
                    print("TRACE \(n.device.deviceName) sections", try n.device.database.query("SELECT device, seq, audience, generation, opened FROM coven_change_sections").map { $0.values.map { $0.textValue ?? "\($0)" } }, try n.device.database.query("SELECT audience, generation, opened, member FROM coven_circles").map { $0.values.map { $0.textValue ?? "\($0)" } })
                    print("TRACE \(n.device.deviceName) notes", try n.device.database.query("SELECT id, album_id, body, _updated_at FROM notes").map { $0.values.map { $0.textValue ?? "\($0)" } })
                    print("TRACE \(n.device.deviceName) published", try n.device.database.query("SELECT tbl, id, retracted, audience FROM coven_published WHERE tbl <> 'coven_files'").map { $0.values.map { $0.textValue ?? "\($0)" } }, try n.device.database.scalar("SELECT count(*) FROM coven_outbox").intValue ?? -1)
                    print("TRACE \(n.device.deviceName) lost", try n.device.database.query("SELECT tbl, row_id, why, device FROM coven_lost_values").map { $0.values.map { $0.textValue ?? "\($0)" } })
                }
            }
            return "sections there: \(sections); circles there: \(gens); lost there: \(lost); \(nodes.map { "\($0.device.deviceName)=\($0.member.prefix(4))" }); \(log)"
        }
        // The same albums of each audience on every device of its members.
        for audience in [RowAudiences.store] + current.keys.sorted() {
            let holders = nodes.filter { audience == RowAudiences.store || current[audience]?.contains($0.member) == true }
            guard let reference = holders.first else { continue }
            let expected = try rows(reference.device, audience)
            for node in holders.dropFirst() {
                let held = try rows(node.device, audience)
                if held != expected { return "\(node.device.deviceName) holds \(held) of \(audience.prefix(4)), \(reference.device.deviceName) \(expected); \(try explain(node.device))" }
            }
        }
        // Every row the same on the devices of one member. (A track follows its album: one
        // written into a circle under an album that a concurrent write kept in the store stays
        // with the circle's members, as it was written.)
        for member in members {
            let own = nodes.filter { $0.member == member }
            guard let reference = own.first else { continue }
            let expected = try everything(reference.device)
            for node in own.dropFirst() {
                let held = try everything(node.device)
                if held != expected { return "\(node.device.deviceName) holds \(held), \(reference.device.deviceName) \(expected); \(try explain(node.device))" }
            }
        }
        for node in nodes {
            let device = node.device
            if try device.database.scalar("SELECT count(*) FROM coven_lost_values WHERE why IN ('not_authorized', 'not_owner')").intValue != 0 {
                return "\(device.deviceName) refused an entry; \(try device.database.query("SELECT tbl, row_id, why, device FROM coven_lost_values WHERE why IN ('not_authorized', 'not_owner')").map { $0.values }) \(try explain(device))"
            }
            // Every note is its writer's: coven filled the owner, and only the owner changed it.
            for row in try device.database.query("SELECT id, owner, body FROM notes") {
                guard let owner = row.string("owner"), let body = row.string("body") else { return "\(device.deviceName) holds note \(row.string("id") ?? "") with no owner; \(log)" }
                let writer = body.split(separator: "x").last.map(String.init) ?? ""
                guard let writerNode = nodes.first(where: { $0.device.deviceName == writer }), writerNode.member == owner else {
                    return "\(device.deviceName) holds note \(body) owned by \(owner.prefix(4)), written by \(writer); \(log)"
                }
            }
            // Rows of a circle only where the member is, or was, in it.
            for row in try device.database.query("SELECT DISTINCT audience FROM albums WHERE audience <> 'store'") {
                let audience = row.string("audience") ?? ""
                if everIn[audience]?.contains(node.member) != true { return "\(device.deviceName) holds rows of \(audience.prefix(4)), never its member's; \(log)" }
            }
            // Nothing written into a circle it was never in, anywhere in its database file.
            try device.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            let bytes = [UInt8](FileManager.default.contents(atPath: device.paths.database) ?? Data())
            for (audience, values) in secret where everIn[audience]?.contains(node.member) != true {
                for value in values.subtracting(exposed) where bytes.firstRange(of: Array(value.utf8)) != nil {
                    return "\(device.deviceName) holds '\(value)' of circle \(audience.prefix(4)), never its member's; \(log)"
                }
            }
        }
        return nil
    }
}

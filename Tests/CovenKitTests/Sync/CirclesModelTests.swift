@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Randomized circles: three members of a store, with a device or two each, make circles of
/// some of them, add and remove members, rotate keys, write albums and tracks into the store
/// and into circles, move albums (with their tracks) between audiences, sync, and join new
/// devices from snapshots, in random order. Then every device syncs until quiet, and:
/// - for the store and for each circle, every device whose member is on its newest roster
///   holds the same albums of that audience;
/// - a device whose member was never on any roster of a circle holds no value written there
///   that no move took out of it, in its rows or anywhere in its database file;
/// - every device of one member holds the same rows (a track follows its album, and one
///   written into a circle under an album a concurrent write kept in the store stays with the
///   circle's members, as written);
/// - no device holds a row of a circle its member is not in, but what it read before its
///   removal;
/// - nothing is refused (every writer was a member of the audience it wrote, when it wrote).
/// The seed of a failing run is printed; `COVEN_SEED=N` replays one, `COVEN_RUNS=N` sets how
/// many.
final class CirclesModelTests: XCTestCase {
    static let manifest = """
        {
          "tables": [
            { "name": "albums", "identity": "uuid", "audience_column": "audience" },
            { "name": "tracks", "identity": "uuid", "audience_from": "album_id" }
          ],
          "migrations": [
            "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, audience TEXT NOT NULL DEFAULT 'store', _updated_at TEXT NOT NULL DEFAULT '') STRICT",
            "CREATE TABLE tracks (id TEXT PRIMARY KEY, album_id TEXT NOT NULL REFERENCES albums(id), title TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
          ]
        }
        """

    func testCirclesConvergeAndStayPrivateOverManySeededRuns() throws {
        if let failure = SeededRuns.run("circles", runs: 40, base: 0x41C1_0000, run) { XCTFail(failure) }
    }

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
        let first = try Device.create(paths: DevicePaths(database: work + "/d0/device.db"), storage: .file(directory: work + "/store"),
                                      manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "d0")
        let owner = try Members(first).establish(name: "m0")
        let ownerID = try XCTUnwrap(try Members(first).memberID())
        var identities: [String: MemberIdentity] = [ownerID: owner]
        var nodes = [Node(first, member: ownerID)]
        var deviceCount = 1
        func join(_ member: String) throws -> Node {
            let device = try Device.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage,
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
        var log: [String] = []
        let steps = 18 + random.below(12)
        for step in 0..<steps {
            do {
                let node = nodes[random.below(nodes.count)]
                let device = node.device
                switch random.below(12) {
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
                        for track in try device.database.query("SELECT title FROM tracks WHERE album_id = ?1", [album]) {
                            if let title = track.string("title") { exposed.insert(title) }
                        }
                    }
                    try device.write(sql: """
                        INSERT INTO albums (id, title, audience) VALUES ('\(album)', '\(value)', '\(audience)')
                        ON CONFLICT (id) DO UPDATE SET title = excluded.title, audience = excluded.audience
                        """)
                    if audience != RowAudiences.store { secret[audience, default: []].insert(value) }
                    if random.below(2) == 0 {
                        let track = "t\(step)x\(device.deviceName)"
                        try device.write(sql: "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(album)', '\(track)')")
                        if audience != RowAudiences.store { secret[audience, default: []].insert(track) }
                    }
                    log.append("\(device.deviceName) writes \(value) in \(audience.prefix(4))")
                case 4...6:
                    _ = try StoreSync(device).sync()
                    log.append("\(device.deviceName) syncs")
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
                            _ = try Circles(device).remove(circle.id, member: target)
                            log.append("\(device.deviceName) removes \(target.prefix(4)) from \(circle.name)")
                        } catch let error as CovenError where error.code == .refused {}
                    default:
                        _ = try Circles(device).rotate(circle.id)
                        log.append("\(device.deviceName) rotates \(circle.name)")
                    }
                case 10:
                    _ = try device.snapshot()
                    log.append("\(device.deviceName) snapshots")
                default:
                    // A new device of a member, from the newest snapshot if there is one.
                    guard nodes.count < 6, let member = pick(members) else { continue }
                    let joined = try join(member)
                    log.append("\(joined.device.deviceName) joins as \(member.prefix(4))")
                }
            } catch let error as CovenError where [.notAdmin, .notInCircle, .exists, .busy].contains(error.code) {
                // A device whose knowledge is behind storage's: refused, nothing changed.
                log.append("refused: \(error.code.rawValue)")
            } catch {
                return "step \(step) threw \(error); \(log)"
            }
        }
        for _ in 0..<3 {
            for node in nodes {
                do { _ = try StoreSync(node.device).sync() } catch { return "the last syncs: \(node.device.deviceName) threw \(error); \(log)" }
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
        func rows(_ device: Device, _ audience: String) throws -> [String] {
            try device.database.query("SELECT id, title FROM albums WHERE audience = ?1 ORDER BY id", [audience]).map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")" }
        }
        func everything(_ device: Device) throws -> [String] {
            try device.database.query("SELECT id, title, audience FROM albums ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")|\($0.string("audience") ?? "")" }
                + device.database.query("SELECT id, album_id, title FROM tracks ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("album_id") ?? "")|\($0.string("title") ?? "")" }
        }
        func explain(_ device: Device) throws -> String {
            let lost = try device.database.query("SELECT tbl, row_id, why FROM coven_lost_values").map { "\($0.string("tbl") ?? "") \($0.string("row_id") ?? "") \($0.string("why") ?? "")" }
            return "lost there: \(lost); \(nodes.map { "\($0.device.deviceName)=\($0.member.prefix(4))" }); \(log)"
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

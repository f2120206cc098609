@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Randomized members: a store whose owner adds members (admins or not), whose devices join by
/// identity, write, sync, and are removed or left out by a rekey, in random order. Then every
/// live device syncs until quiet, and:
/// - every live device holds the same rows;
/// - no row holds a value that a device wrote after its removal (its member removed, or its
///   member's keys replaced without it) was published;
/// - no device of a removed member opens a change published after its removal, with any key it
///   holds;
/// - every entry a live device refused is one such device's, or (`not_owner`) a change of a row
///   of the owner-only table `journal` by another member than its owner;
/// - every journal row is owned by the member that wrote it, and holds only what that member's
///   devices wrote: another member's write is refused locally, and the same forged past the
///   local checks is refused by every device that applies it.
/// The seed of a failing run is printed; `COVEN_SEED=N` replays one, `COVEN_RUNS=N` sets how
/// many.
final class MembersModelTests: XCTestCase {
    static let manifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [ { "name": "albums", "identity": "uuid" }, { "name": "journal", "identity": "uuid", "owner_only": true } ],
          "migrations": [ "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, year INTEGER, _updated_at TEXT NOT NULL DEFAULT '') STRICT",
                          "CREATE TABLE journal (id TEXT PRIMARY KEY, owner TEXT, body TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
        }
        """

    func testMembersConvergeAndRemovedDevicesAreCutOffOverManySeededRuns() throws {
        if let failure = SeededRuns.run("members", runs: 120, base: 0x3E3B_0000, run) { XCTFail(failure) }
    }

    /// A device of the model: whose it is, and since when it is cut off (its member removed,
    /// or left out of a rekey): the generation of that roster change.
    final class Node {
        let device: Device
        let member: String
        var cutOffAt: UInt64?
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
        var identities: [String: MemberIdentity] = [try XCTUnwrap(try Members(first).memberID()): owner]
        var names: [String: String] = [try XCTUnwrap(try Members(first).memberID()): "m0"]
        var nodes = [Node(first, member: try XCTUnwrap(try Members(first).memberID()))]
        var deviceCount = 1
        var memberCount = 1
        // Values written after their writer was cut off: they must never be seen.
        var forbidden: Set<String> = []
        // Devices that forged a write past the local checks.
        var forgers: Set<String> = []
        let albums = (0..<3).map { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d%04x", $0) }
        // Journal rows: each member writes its own two (the id names the member's index).
        var memberIndex: [String: Int] = [try XCTUnwrap(try Members(first).memberID()): 0]
        func journal(_ index: Int, _ k: Int) -> String { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2e%02x%02x", index, k) }
        var live: [Node] { nodes.filter { $0.cutOffAt == nil } }
        func admins() throws -> [Node] {
            try live.filter { node in
                guard let generation = try node.device.keys.storeGeneration() else { return false }
                return try node.device.keys.roster(audience: "store", generation: generation).contains { $0.id == node.member && $0.role.isAdmin }
            }
        }
        /// Cuts off the devices of `member` but `keep`, as of `generation`.
        func cutOff(member: String, keep: String? = nil, at generation: UInt64) {
            for node in nodes where node.member == member && node.device.deviceID != keep && node.cutOffAt == nil { node.cutOffAt = generation }
        }
        func sync(_ node: Node) throws {
            do {
                _ = try StoreSync(node.device).sync()
            } catch let error as CovenError where error.code == .deviceGone && node.cutOffAt != nil {
                // A device cut off is refused once it learns it.
            }
        }
        let steps = 14 + random.below(10)
        var log: [String] = []
        for step in 0..<steps {
          do {
            let node = nodes[random.below(nodes.count)]
            switch random.below(15) {
            case 12, 13:
                // A member writes its own journal row; or tries another member's, refused here.
                guard let mine = memberIndex[node.member] else { continue }
                // Another member's row only when it is here (a row taken before its owner wrote
                // it would be a guess of a random id).
                let others = try node.device.database.query("SELECT id FROM journal WHERE owner IS NOT ?1 ORDER BY id", [node.member]).compactMap { $0.string("id") }
                let own = random.below(3) != 0 || others.isEmpty
                let row = own ? journal(mine, random.below(2)) : others[random.below(others.count)]
                let value = "j\(step)-m\(mine)-\(node.device.deviceName)"
                let sql = random.below(4) == 0 ? "DELETE FROM journal WHERE id = '\(row)'"
                    : "INSERT INTO journal (id, body) VALUES ('\(row)', '\(value)') ON CONFLICT (id) DO UPDATE SET body = excluded.body"
                do {
                    try node.device.write(sql: sql)
                    if !own { return "\(node.device.deviceName) changed journal row \(row) of another member; \(log)" }
                    if node.cutOffAt != nil { forbidden.insert(value) }
                    log.append("\(node.device.deviceName) journal \(own ? "own" : "other") \(row.suffix(4))")
                } catch let error as CovenError where error.code == .deviceGone || (error.code == .notOwner && !own) {}
            case 14:
                // The same past the local checks (a forged coven): every device refuses it.
                guard let mine = memberIndex[node.member], node.cutOffAt == nil else { continue }
                let others = try node.device.database.query("SELECT id FROM journal WHERE owner IS NOT ?1 ORDER BY id", [node.member]).compactMap { $0.string("id") }
                guard !others.isEmpty else { continue }
                let row = others[random.below(others.count)]
                let value = "forged\(step)-m\(mine)"
                forbidden.insert(value)
                // The forging device holds what it forged: only the others are held to the rules.
                forgers.insert(node.device.deviceID)
                let device = node.device
                try device.database.transaction {
                    try device.recordWrite { recorded in
                        try device.database.run("""
                            INSERT INTO journal (id, owner, body, _updated_at) VALUES (?1, ?2, ?3, ?4)
                            ON CONFLICT (id) DO UPDATE SET body = excluded.body, _updated_at = excluded._updated_at
                            """, [row, node.member, value, recorded.stamp])
                    }
                }
                log.append("\(node.device.deviceName) forges journal \(row.suffix(4))")
            case 0...3:
                let value = "s\(step)-\(node.device.deviceName)"
                let album = albums[random.below(albums.count)]
                do {
                    try node.device.write(sql: "INSERT INTO albums (id, title, year) VALUES ('\(album)', '\(value)', \(random.below(3000))) ON CONFLICT (id) DO UPDATE SET title = excluded.title")
                    if node.cutOffAt != nil { forbidden.insert(value) }
                    log.append("\(node.device.deviceName) writes \(value)")
                } catch let error as CovenError where error.code == .deviceGone {}
            case 4...6:
                try sync(node)
                log.append("\(node.device.deviceName) syncs")
            case 7:
                // An admin adds a member, whose device joins (sometimes two).
                guard let admin = pick(try admins()), memberCount < 4 else { continue }
                let identity = try MemberIdentity()
                let name = "m\(memberCount)"
                memberCount += 1
                let added = try Members(admin.device).add(name: name, recipient: identity.recipient.description, admin: random.below(2) == 0)
                identities[added.member.id] = identity
                names[added.member.id] = name
                memberIndex[added.member.id] = memberCount - 1
                for _ in 0..<(1 + random.below(2)) {
                    let device = try DeviceSetup.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage, identity: identity,
                                                 name: "d\(deviceCount)")
                    deviceCount += 1
                    nodes.append(Node(device, member: added.member.id))
                    _ = try StoreSync(device).sync()
                }
                log.append("\(admin.device.deviceName) adds \(name) at \(added.generation)")
            case 8:
                // An admin removes another member (never the owner, never its own).
                guard let admin = pick(try admins()) else { continue }
                let others = Set(live.map(\.member)).subtracting([admin.member, nodes[0].member]).sorted()
                guard let target = pick(others) else { continue }
                let removed = try Members(admin.device).remove(target)
                cutOff(member: target, at: removed.generation)
                log.append("\(admin.device.deviceName) removes \(names[target] ?? target) at \(removed.generation)")
            case 9:
                // A member replaces its keys on one of its live devices: its others are cut off.
                guard node.cutOffAt == nil, try node.device.keys.storeGeneration() != nil else { continue }
                let (identity, change) = try Members(node.device).rekey()
                identities[node.member] = identity
                cutOff(member: node.member, keep: node.device.deviceID, at: change.generation)
                log.append("\(node.device.deviceName) rekeys \(names[node.member] ?? "") at \(change.generation)")
            default:
                // A device of a member on the roster joins again by identity.
                guard random.below(3) == 0, let member = pick(Set(live.map(\.member)).sorted()),
                      let identity = identities[member] else { continue }
                let device = try DeviceSetup.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage, identity: identity,
                                             name: "d\(deviceCount)")
                deviceCount += 1
                nodes.append(Node(device, member: member))
                log.append("\(device.deviceName) joins as \(names[member] ?? member)")
            }
          } catch {
            return "step \(step) threw \(error); \(log)"
          }
        }
        for _ in 0..<3 {
            for node in nodes {
                do { try sync(node) } catch { return "the last syncs: \(node.device.deviceName) threw \(error); \(log)" }
            }
        }

        // The same rows everywhere, none forbidden.
        func dump(_ device: Device) throws -> [String] {
            try device.database.query("SELECT id, title, year FROM albums ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")|\($0.int("year") ?? -1)" }
                + device.database.query("SELECT id, owner, body FROM journal ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("body") ?? "")|\($0.string("owner") ?? "")" }
        }
        let honest = live.filter { !forgers.contains($0.device.deviceID) }
        guard let reference = honest.first else { return nil }
        let expected = try dump(reference.device)
        for node in honest {
            let rows = try dump(node.device)
            if rows != expected { return "\(node.device.deviceName) holds \(rows), \(reference.device.deviceName) \(expected); \(log)" }
            for row in rows where forbidden.contains(String(row.split(separator: "|")[1])) {
                return "\(node.device.deviceName) holds \(row), written after its writer was cut off; \(log)"
            }
            // Entries refused here are a cut-off device's.
            let cut = Set(nodes.filter { $0.cutOffAt != nil }.map(\.device.deviceID))
            for row in try node.device.database.query("SELECT device FROM coven_lost_values WHERE why = 'not_authorized'") {
                let writer = row.string("device") ?? ""
                if !cut.contains(writer) { return "\(node.device.deviceName) refused an entry of \(writer), not cut off; \(log)" }
            }
            for row in try node.device.database.query("SELECT tbl FROM coven_lost_values WHERE why = 'not_owner'") where row.string("tbl") != "journal" {
                return "\(node.device.deviceName) refused an entry of \(row.string("tbl") ?? "") as not_owner; \(log)"
            }
            // Every journal row is its writer's: owned by the member its id names, holding a
            // value that member wrote.
            for row in try node.device.database.query("SELECT id, owner, body FROM journal") {
                let id = row.string("id") ?? "", owner = row.string("owner") ?? "", body = row.string("body") ?? ""
                guard let index = Int(id.suffix(4).prefix(2), radix: 16), memberIndex[owner] == index, body.contains("-m\(index)") else {
                    return "\(node.device.deviceName) holds journal row \(id) owned by \(owner) with '\(body)'; \(log)"
                }
                if forbidden.contains(body) { return "\(node.device.deviceName) holds journal '\(body)', forged or cut off; \(log)" }
            }
        }
        // A cut-off device opens no change published under a generation past its cut-off.
        let provider = try StorageConnector(location: first.storage).connect()
        for node in nodes {
            guard let cutOff = node.cutOffAt else { continue }
            let keys = Keyring(paths: node.device.paths, database: node.device.database, deviceID: node.device.deviceID)
            for info in try provider.list(prefix: "changes/") {
                guard let (publisher, _) = ChangeObject.parsePath(info.key), let bytes = try provider.getObject(info.key),
                      let generation = ChangeObject.storeGeneration(of: bytes), generation >= cutOff else { continue }
                let registered = try first.database.scalar("SELECT public_key FROM coven_device_registry WHERE device = ?1", [publisher]).textValue
                guard let hex = registered else { continue }
                do {
                    _ = try ChangeObject.open(bytes, path: info.key, keyOf: { audience, asked in try keys.key(audience: audience, generation: asked) },
                                              publicKey: try DevicePublicKey(hex: hex))
                    return "\(node.device.deviceName), cut off at generation \(cutOff), opens \(info.key) of generation \(generation); \(log)"
                } catch let error as CovenError where error.code == .keyUnavailable {}
            }
        }
        return nil
    }
}

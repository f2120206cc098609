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
/// - every entry a live device refused is one such device's.
/// The seed of a failing run is printed; `COVEN_SEED=N` replays one, `COVEN_RUNS=N` sets how
/// many.
final class MembersModelTests: XCTestCase {
    static let manifest = """
        {
          "namespaces": [ { "name": "covers", "kind": "app" } ],
          "tables": [ { "name": "albums", "identity": "uuid" } ],
          "migrations": [ "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, year INTEGER, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
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
        let first = try Device.create(paths: DevicePaths(database: work + "/d0/device.db"), storage: .file(directory: work + "/store"),
                                      manifest: try Manifest(json: Data(Self.manifest.utf8)), name: "d0")
        let owner = try Members(first).establish(name: "m0")
        var identities: [String: MemberIdentity] = [try XCTUnwrap(try Members(first).memberID()): owner]
        var names: [String: String] = [try XCTUnwrap(try Members(first).memberID()): "m0"]
        var nodes = [Node(first, member: try XCTUnwrap(try Members(first).memberID()))]
        var deviceCount = 1
        var memberCount = 1
        // Values written after their writer was cut off: they must never be seen.
        var forbidden: Set<String> = []
        let albums = (0..<3).map { String(format: "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d%04x", $0) }
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
            switch random.below(12) {
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
                for _ in 0..<(1 + random.below(2)) {
                    let device = try Device.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage, identity: identity,
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
                let device = try Device.join(paths: DevicePaths(database: work + "/d\(deviceCount)/device.db"), storage: first.storage, identity: identity,
                                             name: "d\(deviceCount)")
                deviceCount += 1
                nodes.append(Node(device, member: member))
                log.append("\(device.deviceName) joins as \(names[member] ?? member)")
            }
          } catch {
            return "step \(step) threw \(error); \(log)"
          }
        }
        for _ in 0..<3 { for node in nodes { try sync(node) } }

        // The same rows everywhere, none forbidden.
        func dump(_ device: Device) throws -> [String] {
            try device.database.query("SELECT id, title, year FROM albums ORDER BY id").map { "\($0.string("id") ?? "")|\($0.string("title") ?? "")|\($0.int("year") ?? -1)" }
        }
        let expected = try dump(live[0].device)
        for node in live {
            let rows = try dump(node.device)
            if rows != expected { return "\(node.device.deviceName) holds \(rows), \(live[0].device.deviceName) \(expected); \(log)" }
            for row in rows where forbidden.contains(String(row.split(separator: "|")[1])) {
                return "\(node.device.deviceName) holds \(row), written after its writer was cut off; \(log)"
            }
            // Entries refused here are a cut-off device's.
            let cut = Set(nodes.filter { $0.cutOffAt != nil }.map(\.device.deviceID))
            for row in try node.device.database.query("SELECT device FROM coven_lost_values WHERE why = 'not_authorized'") {
                let writer = row.string("device") ?? ""
                if !cut.contains(writer) { return "\(node.device.deviceName) refused an entry of \(writer), not cut off; \(log)" }
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

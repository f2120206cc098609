@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Issue 34, "People's keys hold": a member's keys, rosters and circles stay right through
/// reading commands, removals, storage that loses generations, and outsiders who know a
/// circle row's id.
class PeoplesKeysTests: DeviceTestCase {
    /// Alice (owner), Bob and Carol, a device each, synced.
    struct People {
        var alice: Device
        var bob: Device
        var carol: Device
        var all: [Device] { [alice, bob, carol] }
    }

    func threeMembers() throws -> People {
        let alice = try makeDevice(name: "alice")
        _ = try Members(alice).establish(name: "alice")
        let bob = try MemberIdentity(), carol = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bob.recipient.description, admin: false)
        _ = try Members(alice).add(name: "carol", recipient: carol.recipient.description, admin: false)
        let people = People(alice: alice, bob: try join("bob", from: alice, identity: bob), carol: try join("carol", from: alice, identity: carol))
        try syncAll(people.all)
        return people
    }

    func syncAll(_ devices: [Device]) throws {
        for _ in 0..<2 { for device in devices { _ = try StoreSync(device).sync() } }
    }

    func title(_ device: Device, _ id: String) throws -> String? {
        try device.database.scalar("SELECT title FROM albums WHERE id = ?1", [id]).textValue
    }

    /// Runs the real coven on `device`.
    func coven(_ device: Device, _ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let out = work + "/.out-\(UUID().uuidString.prefix(8))"
        let err = out + ".err"
        defer { unlink(out); unlink(err) }
        var environment = ProcessInfo.processInfo.environment
        environment["COVEN_DB"] = device.paths.database
        environment["NO_COLOR"] = "1"
        let result = try Spawn.run(try covenBinary(), arguments, environment: environment, directory: work, stdin: nil, stdout: out, stderr: err, timeout: 60)
        XCTAssertFalse(result.timedOut, "coven \(arguments) timed out")
        let text = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return (result.status, text(out), text(err))
    }

    /// What a device holds: the files of its folder (names and bytes; the cache's aside), and
    /// every row of coven's key and member tables and settings.
    func held(_ device: Device) throws -> [String] {
        var state: [String] = []
        let folder = device.paths.folder
        for name in try FileManager.default.contentsOfDirectory(atPath: folder).sorted() {
            let path = folder + "/" + name
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), !isFolder.boolValue, !name.hasPrefix("device.db") else { continue }
            state.append("\(name): \(SHA256.digest(Array(FileManager.default.contents(atPath: path) ?? Data())).hex)")
        }
        for table in ["coven_audience_rosters", "coven_circles", "coven_meta", "coven_device_registry"] {
            for row in try device.database.query("SELECT * FROM \(table) ORDER BY 1, 2") {
                state.append("\(table): " + row.columns.map { "\($0)=\(row[$0])" }.joined(separator: " "))
            }
        }
        return state
    }

    // MARK: 1. Reading commands write nothing

    /// After an admin's `member add`, another member's `coven members`, `circles` and `status`
    /// (before any sync) succeed and write nothing; the device then syncs and reads what is
    /// sealed under the new generation.
    func testReadingCommandsBeforeASyncWriteNothing() throws {
        let p = try threeMembers()
        _ = try makeCircle(p.alice, name: "parents", members: ["bob"])
        let dave = try MemberIdentity()
        _ = try Members(p.alice).add(name: "dave", recipient: dave.recipient.description, admin: false)
        _ = try Circles(p.alice).add("parents", member: "carol")
        let before = try held(p.bob)
        let members = try coven(p.bob, ["members", "--json"])
        XCTAssertEqual(members.status, 0, members.stderr)
        let roster = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(members.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(roster["generation"] as? Int, 4)
        XCTAssertEqual(Set((roster["members"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }), ["alice", "bob", "carol", "dave"])
        let circles = try coven(p.bob, ["circles", "--json"])
        XCTAssertEqual(circles.status, 0, circles.stderr)
        let listed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(circles.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(listed.first?["generation"] as? Int, 2)
        XCTAssertEqual(Set((listed.first?["members"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }), ["alice", "bob", "carol"])
        XCTAssertEqual(try coven(p.bob, ["status", "--json"]).status, 0)
        XCTAssertEqual(try held(p.bob), before, "a reading command wrote to the device")
        // Sealed under the new generation, read once the device syncs.
        try p.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'after dave')")
        try syncAll([p.alice, p.bob])
        XCTAssertEqual(try title(p.bob, Self.album), "after dave")
        XCTAssertEqual(try StoreSync(p.bob).lostValues().count, 0)
        XCTAssertEqual(try Members(p.bob).localRoster().members.map(\.name).sorted(), ["alice", "bob", "carol", "dave"])
    }

    /// A device that holds a generation's key without its roster (what a coven before this
    /// fix left after a failed `coven members`) learns the roster again at its next sync, and
    /// applies what is sealed under that generation.
    func testAKeyWithoutItsRosterIsLearnedAgain() throws {
        let p = try threeMembers()
        let dave = try MemberIdentity()
        _ = try Members(p.alice).add(name: "dave", recipient: dave.recipient.description, admin: false)
        // Bob's device keeps generation 4's key, not its roster.
        let key = try XCTUnwrap(try p.alice.keys.learnedKeyBytes(audience: "store", generation: 4))
        let line = "store 4 \(key.hex)\n"
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: p.bob.paths.audienceKeys))
        handle.seekToEndOfFile()
        handle.write(Data(line.utf8))
        try handle.close()
        let bob = try Device.open(paths: p.bob.paths)
        XCTAssertEqual(try bob.keys.storeGeneration(), 3, "a key without its roster is not a learned generation")
        try p.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'after dave')")
        _ = try StoreSync(p.alice).sync()
        _ = try StoreSync(bob).sync()
        XCTAssertEqual(try title(bob, Self.album), "after dave")
        XCTAssertEqual(try StoreSync(bob).lostValues().count, 0)
        XCTAssertEqual(try bob.keys.storeGeneration(), 4)
        XCTAssertEqual(try Members(bob).localRoster().members.map(\.name).sorted(), ["alice", "bob", "carol", "dave"])
    }
}

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

    /// What a device holds: its database and WAL files and every file of its folder (path and
    /// bytes), and every row of coven's key and member tables and settings.
    func held(_ device: Device) throws -> [String] {
        var state: [String] = []
        let folder = device.paths.folder
        for name in try FileManager.default.subpathsOfDirectory(atPath: folder).sorted() {
            let path = folder + "/" + name
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else { continue }
            state.append(isFolder.boolValue ? "\(name)/" : "\(name): \(SHA256.digest(Array(FileManager.default.contents(atPath: path) ?? Data())).hex)")
        }
        for suffix in ["", "-wal"] {
            state.append("device.db\(suffix): \(SHA256.digest(Array(FileManager.default.contents(atPath: device.paths.database + suffix) ?? Data())).hex)")
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

    // MARK: 2. A removal from the store is a removal from its circles

    /// A copy of `device`'s database and folder, as a removed member could keep it.
    func savedCopy(of device: Device, as name: String) throws -> DevicePaths {
        let copy = DevicePaths(database: work + "/\(name)/device.db")
        try FileManager.default.createDirectory(atPath: work + "/\(name)", withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: device.paths.database + suffix) {
            try FileManager.default.copyItem(atPath: device.paths.database + suffix, toPath: copy.database + suffix)
        }
        try FileManager.default.copyItem(atPath: device.paths.folder, toPath: copy.folder)
        return copy
    }

    /// alice and bob share circle `parents`; alice removes bob from the store: bob is off the
    /// circle's roster, and with the keys of a copy of his device saved before, neither the
    /// circle's section of alice's next change nor the file object it names opens.
    func testRemovingAMemberTakesThemOutOfTheirCircles() throws {
        let p = try threeMembers()
        let circle = try makeCircle(p.alice, name: "parents", members: ["bob"])
        try p.alice.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'before', '\(circle)')")
        try syncAll(p.all)
        XCTAssertEqual(try title(p.bob, Self.album), "before")
        let saved = try Device.open(paths: try savedCopy(of: p.bob, as: "bob-saved"))
        let removal = try Members(p.alice).remove("bob")
        XCTAssertEqual(removal.circles, [circle])
        let parents = try XCTUnwrap(try Circles(p.alice).list().first { $0.id == circle })
        XCTAssertEqual(parents.generation, 2)
        XCTAssertEqual(parents.members.map(\.name), ["alice"])
        XCTAssertEqual(try Members(p.alice).remove("bob").objectsWritten, 0, "run again, it is done")
        // alice writes in the circle, with a new cover, after the removal.
        let after = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f4e"
        let cover = try stageApp(p.alice, text: "after bob")
        let file = try p.alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(after)', 'after bob', '\(circle)');
            INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(after)', coven_put_staged('\(cover.id)'));
            """).files[0]
        try StoredFiles.store(p.alice, file: file)
        _ = try StoreSync(p.alice).sync()
        let record = try XCTUnwrap(try p.alice.fileRecord(file))
        // bob's saved keys, even given the change's envelope (the store's key of after), open
        // no section of the circle published after the removal.
        let provider = try p.alice.connectStorage()
        var shut = 0
        for info in try provider.list(prefix: "changes/\(p.alice.deviceID)/") {
            let bytes = try XCTUnwrap(try provider.getObject(info.key))
            let change = try ChangeObject.open(bytes, path: info.key, keyOf: { audience, generation in
                audience == RowAudiences.store ? try p.alice.keys.key(audience: audience, generation: generation)
                    : try saved.keys.key(audience: audience, generation: generation)
            }, publicKey: try p.alice.keys.signingKey().publicKey)
            let entries = change.sections.flatMap(\.entries)
            XCTAssertFalse(entries.contains { $0.id == after || $0.id == file }, "bob's saved keys opened the circle's section of \(info.key)")
            shut += change.unreadSections.filter { $0.audience == circle }.count
        }
        XCTAssertEqual(shut, 1, "the circle's section written after the removal stays shut")
        // Nor does any key bob saved open the new file object (its own key does).
        let object = try XCTUnwrap(try provider.getObject(record.coordinates.object))
        let opener = try ObjectReader(key: try FileKey(hex: record.coordinates.key), plaintextSize: record.size)
        var plain: [UInt8] = []
        try opener.feed(object) { plain += Array($0) }
        try opener.finish { plain += Array($0) }
        XCTAssertEqual(String(decoding: plain, as: UTF8.self), "after bob")
        var keys = try saved.keys.storeKeysNewestFirst()
        for generation in try saved.keys.generations(audience: circle) { keys += [try XCTUnwrap(try saved.keys.key(audience: circle, generation: generation))] }
        for key in keys {
            let reader = try ObjectReader(key: key, plaintextSize: record.size)
            XCTAssertThrowsError(try reader.feed(object) { _ in }, "a key bob saved opened the cover")
        }
        // The circle's members read on.
        _ = try StoreSync(p.carol).sync()
        XCTAssertNil(try title(p.carol, after))
    }

    /// A circle the remover does not administer loses the removed member at the next sync of
    /// one of its admins' devices.
    func testAnotherCirclesAdminTakesTheRemovedMemberOutAtSync() throws {
        let p = try threeMembers()
        let circle = try makeCircle(p.carol, name: "book club", members: ["bob"])
        try syncAll(p.all)
        _ = try Members(p.alice).remove("bob")
        XCTAssertEqual(try Circles(p.carol).list().first { $0.id == circle }?.members.map(\.name).sorted(), ["bob", "carol"])
        _ = try StoreSync(p.carol).sync()
        let club = try XCTUnwrap(try Circles(p.carol).list().first { $0.id == circle })
        XCTAssertEqual(club.generation, 2)
        XCTAssertEqual(club.members.map(\.name), ["carol"])
        _ = try StoreSync(p.carol).sync()
        XCTAssertEqual(try Circles(p.carol).list().first { $0.id == circle }?.generation, 2, "once")
    }

    // MARK: 3. Storage that lost generations

    /// After `member remove bob` (generation 4), storage loses `audiences/store/4` (a NAS put
    /// back from a backup): alice's `member add dave` refuses with `integrity` naming it and
    /// publishes nothing (no generation 4 built on 3, whose roster holds bob); `members`,
    /// `sync` and `status` say storage's chain is behind.
    func testAChainStorageLostTheEndOfIsNeverBuiltOn() throws {
        let p = try threeMembers()
        _ = try Members(p.alice).remove("bob")
        let lost = AudienceGeneration.path(audience: RowAudiences.store, generation: 4)
        let backup = try XCTUnwrap(FileManager.default.contents(atPath: storeFolder + "/" + lost))
        try FileManager.default.removeItem(atPath: storeFolder + "/" + lost)
        let dave = try MemberIdentity()
        let refused = assertCovenError(.integrity) { try Members(p.alice).add(name: "dave", recipient: dave.recipient.description, admin: false) }
        XCTAssertEqual(refused?.details["object"], lost)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeFolder + "/" + lost), "a generation was published on the shorter chain")
        XCTAssertEqual(try Members(p.alice).roster().storageBehind,
                       KeyChainLoss(audience: RowAudiences.store, object: lost, storageGeneration: 3, heldGeneration: 4))
        let members = try coven(p.alice, ["members", "--json"])
        XCTAssertEqual(members.status, 0, members.stderr)
        XCTAssertTrue(members.stderr.contains(lost), members.stderr)
        let member = try coven(p.alice, ["member", "add", "dave", dave.recipient.description])
        XCTAssertEqual(member.status, 6, member.stderr)
        XCTAssertTrue(member.stderr.contains(lost), member.stderr)
        assertCovenError(.integrity) { try StoreSync(p.alice).sync() }
        XCTAssertEqual(try DeviceStatus(of: p.alice).sync.keyChainsBehind.map(\.object), [lost])
        let status = try coven(p.alice, ["status"])
        XCTAssertTrue(status.stdout.contains("keys") && status.stdout.contains(lost), status.stdout)
        // Put back, the chain is whole again: the record goes, and dave is added after bob's removal.
        try backup.write(to: URL(fileURLWithPath: storeFolder + "/" + lost))
        _ = try StoreSync(p.alice).sync()
        XCTAssertEqual(try DeviceStatus(of: p.alice).sync.keyChainsBehind, [])
        let added = try Members(p.alice).add(name: "dave", recipient: dave.recipient.description, admin: false)
        XCTAssertEqual(added.generation, 5)
        XCTAssertEqual(try Members(p.alice).roster().members.map(\.name).sorted(), ["alice", "carol", "dave"])
    }

    /// The same for a circle's chain: a circle change on a chain that ends below what this
    /// device holds is refused, naming the missing generation.
    func testACirclesChainStorageLostTheEndOfIsNeverBuiltOn() throws {
        let p = try threeMembers()
        let circle = try makeCircle(p.alice, name: "parents", members: ["bob", "carol"])
        _ = try Circles(p.alice).remove(circle, member: "bob")
        let lost = AudienceGeneration.path(audience: circle, generation: 2)
        try FileManager.default.removeItem(atPath: storeFolder + "/" + lost)
        let refused = assertCovenError(.integrity) { try Circles(p.alice).rotate(circle) }
        XCTAssertEqual(refused?.details["object"], lost)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeFolder + "/" + lost), "a generation was published on the shorter chain")
        XCTAssertEqual(try Circles(p.alice).listFresh().first?.storageBehind?.object, lost)
        XCTAssertEqual(try DeviceStatus(of: p.alice).sync.keyChainsBehind.map(\.object), [lost])
    }

    // MARK: 4. An outsider cannot pull a circle's row back into the store

    /// carol (not in circle `parents`) knew album AL's id from before alice moved it into the
    /// circle; alice and bob edited it there since.
    func albumMovedIntoACircle() throws -> (People, String) {
        let p = try threeMembers()
        let circle = try makeCircle(p.alice, name: "parents", members: ["bob"])
        try p.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'family album')")
        try syncAll(p.all)
        XCTAssertEqual(try title(p.carol, Self.album), "family album")
        try p.alice.write(sql: "UPDATE albums SET audience = '\(circle)' WHERE id = '\(Self.album)'")
        try syncAll(p.all)
        try p.bob.write(sql: "UPDATE albums SET title = 'our album' WHERE id = '\(Self.album)'")
        try syncAll(p.all)
        XCTAssertNil(try title(p.carol, Self.album), "the move's retract")
        return (p, circle)
    }

    /// A device that skips the writer's check (its tombstone of AL gone) writes AL in the
    /// store: alice's and bob's devices refuse it (`not_authorized`, a lost value, counted by
    /// sync) and keep AL in the circle.
    func testReceiversRefuseAnOutsiderTakingARowOutOfACircle() throws {
        let (p, circle) = try albumMovedIntoACircle()
        // An edit in the circle carol has not applied when she writes: she saw the move.
        try p.alice.write(sql: "UPDATE albums SET title = 'our album, again' WHERE id = '\(Self.album)'")
        _ = try StoreSync(p.alice).sync()
        try p.carol.database.run("DELETE FROM coven_tombstones WHERE id = ?1", [Self.album])
        try p.carol.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'carol pulls it back', 'store')")
        _ = try StoreSync(p.carol).sync(pull: false)
        for device in [p.alice, p.bob] {
            let report = try StoreSync(device).sync()
            XCTAssertEqual(report.pulled.refused, 1, device.deviceName)
            XCTAssertEqual(try title(device, Self.album), "our album, again", device.deviceName)
            XCTAssertEqual(try device.database.scalar("SELECT audience FROM albums WHERE id = ?1", [Self.album]).textValue, circle, device.deviceName)
            let lost = try StoreSync(device).lostValues().filter { $0.rowID == Self.album }
            XCTAssertEqual(lost.map(\.why), ["not_authorized"], device.deviceName)
        }
    }

    /// carol's own device refuses her write of AL first (`not_in_circle`): it records nothing,
    /// and nothing reaches alice's or bob's devices.
    func testTheWritersDeviceRefusesAnOutsiderTakingARowOutOfACircle() throws {
        let (p, circle) = try albumMovedIntoACircle()
        let outbox = try count(p.carol, "SELECT count(*) FROM coven_outbox")
        for sql in ["INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'carol pulls it back', 'store')",
                    "REPLACE INTO albums (id, title) VALUES ('\(Self.album)', 'carol pulls it back')",
                    "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'carol pulls it back') ON CONFLICT (id) DO UPDATE SET title = excluded.title"] {
            let refused = assertCovenError(.notInCircle) { try p.carol.write(sql: sql) }
            XCTAssertEqual(refused?.details["id"], Self.album, sql)
        }
        XCTAssertNil(try title(p.carol, Self.album))
        XCTAssertEqual(try count(p.carol, "SELECT count(*) FROM coven_outbox"), outbox, "nothing recorded")
        try syncAll(p.all)
        XCTAssertEqual(try title(p.alice, Self.album), "our album")
        XCTAssertEqual(try p.bob.database.scalar("SELECT audience FROM albums WHERE id = ?1", [Self.album]).textValue, circle)
        // A row deleted (not retracted) may be written again under its id, as before.
        try p.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.otherAlbum)', 'gone')")
        try syncAll(p.all)
        try p.alice.write(sql: "DELETE FROM albums WHERE id = '\(Self.otherAlbum)'")
        try syncAll(p.all)
        try p.carol.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.otherAlbum)', 'back')")
        try syncAll(p.all)
        XCTAssertEqual(try title(p.alice, Self.otherAlbum), "back")
    }

    /// bob, removed from circle `parents`, keeps its rows; REPLACE INTO and INSERT OR REPLACE of
    /// one (the row deleted and inserted by SQLite, no delete trigger fired) are checked as the
    /// update they are: `not_in_circle`, nothing recorded.
    func testReplacingACirclesRowGoesThroughTheCircleCheck() throws {
        let (p, circle) = try albumMovedIntoACircle()
        _ = try Circles(p.alice).remove(circle, member: "bob")
        try syncAll(p.all)
        let outbox = try count(p.bob, "SELECT count(*) FROM coven_outbox")
        for verb in ["REPLACE INTO", "INSERT OR REPLACE INTO"] {
            assertCovenError(.notInCircle) { try p.bob.write(sql: "\(verb) albums (id, title, audience) VALUES ('\(Self.album)', 'mine now', 'store')") }
        }
        XCTAssertEqual(try title(p.bob, Self.album), "our album")
        XCTAssertEqual(try count(p.bob, "SELECT count(*) FROM coven_outbox"), outbox, "nothing recorded")
        // A member of the circle replaces its row in place: an update, published in the circle.
        try p.alice.write(sql: "REPLACE INTO albums (id, title, audience) VALUES ('\(Self.album)', 'replaced', '\(circle)')")
        try syncAll(p.all)
        XCTAssertEqual(try title(p.alice, Self.album), "replaced")
        XCTAssertNil(try title(p.carol, Self.album))
    }

    static let otherAlbum = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"

    /// REPLACE INTO, INSERT OR REPLACE and an upsert of another member's owner-only row are
    /// `not_owner` on the writer's device, and change nothing.
    func testReplacingAnotherMembersOwnedRowIsNotOwner() throws {
        let alice = try makeDevice(OwnedRowsTests.journalManifest, name: "alice")
        let bobIdentity = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        try alice.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary')")
        try syncAll([alice, bob])
        let owner = try alice.database.scalar("SELECT owner FROM journal").textValue
        let outbox = try count(bob, "SELECT count(*) FROM coven_outbox")
        for sql in ["REPLACE INTO journal (id, body) VALUES ('\(Self.album)', 'bob was here')",
                    "INSERT OR REPLACE INTO journal (id, body) VALUES ('\(Self.album)', 'bob was here')",
                    "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'bob was here') ON CONFLICT (id) DO UPDATE SET body = excluded.body, owner = NULL"] {
            assertCovenError(.notOwner) { try bob.write(sql: sql) }
        }
        XCTAssertEqual(try bob.database.scalar("SELECT body FROM journal").textValue, "dear diary")
        XCTAssertEqual(try bob.database.scalar("SELECT owner FROM journal").textValue, owner)
        XCTAssertEqual(try count(bob, "SELECT count(*) FROM coven_outbox"), outbox, "nothing recorded")
        // The owner replaces its own row: kept as its own, and published.
        try alice.write(sql: "REPLACE INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary, again')")
        XCTAssertEqual(try alice.database.scalar("SELECT owner FROM journal").textValue, owner)
        try syncAll([alice, bob])
        XCTAssertEqual(try bob.database.scalar("SELECT body FROM journal").textValue, "dear diary, again")
    }
}

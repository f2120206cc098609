@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// Issue 34's low items: what people are told, and what a deleted owner-only row's id is.
extension PeoplesKeysTests {
    // MARK: 5. A deleted owner-only row's id stays its owner's

    /// alice deletes her journal row; bob's write of its id is `not_owner` on his device, and
    /// a write that skips his device's check (the tombstone taken out of its database) is
    /// refused by alice's device (`not_owner`, a lost value), which `coven sync` counts and
    /// `coven lost` lists.
    func testADeletedOwnedRowsIdCannotBeTakenOver() throws {
        let alice = try makeDevice(OwnedRowsTests.journalManifest, name: "alice")
        let bobIdentity = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        try alice.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary')")
        try syncAll([alice, bob])
        try alice.write(sql: "DELETE FROM journal WHERE id = '\(Self.album)'")
        try syncAll([alice, bob])
        let refused = assertCovenError(.notOwner) { try bob.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'mine now')") }
        XCTAssertEqual(refused?.details["id"], Self.album)
        // Around the writer's check: no tombstone, no owner to keep, on bob's device.
        try bob.database.run("DELETE FROM coven_tombstones WHERE id = ?1", [Self.album])
        try bob.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'mine now')")
        _ = try StoreSync(bob).sync()
        let sync = try coven(alice, ["sync", "--json"])
        XCTAssertEqual(sync.status, 0, sync.stderr)
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(sync.stdout.utf8)) as? [String: Any])
        let pulled = try XCTUnwrap(report["pulled"] as? [String: Any])
        XCTAssertEqual(pulled["refused"] as? Int, 1, sync.stdout)
        XCTAssertNil(try alice.database.scalar("SELECT body FROM journal WHERE id = ?1", [Self.album]).textValue)
        let lost = try coven(alice, ["lost"])
        XCTAssertTrue(lost.stdout.contains("not_owner") && lost.stdout.contains(Self.album), lost.stdout)
        // The text line names the refused entries too.
        try bob.write(sql: "UPDATE journal SET body = 'still mine' WHERE id = '\(Self.album)'")
        _ = try StoreSync(bob).sync()
        let text = try coven(alice, ["sync"])
        XCTAssertTrue(text.stdout.contains("1 entry refused ('coven lost' lists why)"), text.stdout + text.stderr)
        // alice writes it again: her own id, on her device (bob's, which went around its checks,
        // keeps its own row and refuses hers: that device is his to spoil, no one else's).
        try alice.write(sql: "INSERT INTO journal (id, body) VALUES ('\(Self.album)', 'dear diary, again')")
        try syncAll([alice, bob])
        XCTAssertEqual(try alice.database.scalar("SELECT body FROM journal WHERE id = ?1", [Self.album]).textValue, "dear diary, again")
    }

    // MARK: 6. What people are told

    /// A removed member's device is told what works: an admin adds the member again, then a
    /// join; a join with the identity meanwhile is `not_found` and says the same.
    func testARemovedMemberIsToldWhatWorks() throws {
        let p = try threeMembers()
        let bobFile = work + "/bob.identity"
        try Members(p.bob).export(to: bobFile)
        _ = try Members(p.alice).remove("bob")
        let sync = try coven(p.bob, ["sync"])
        XCTAssertEqual(sync.status, 4, sync.stderr)
        XCTAssertTrue(sync.stderr.contains("device_gone") && sync.stderr.contains("coven member add"), sync.stderr)
        let joined = try coven(p.bob, ["--db", work + "/bob2/device.db", "join", "file://" + storeFolder, "--identity", bobFile])
        XCTAssertEqual(joined.status, 3, joined.stderr)
        XCTAssertTrue(joined.stderr.contains("not_found") && joined.stderr.contains("coven member add"), joined.stderr)
    }

    /// A damaged identity file is bad data, `decoding` (6), however it came (--identity,
    /// --key-file); a missing one `io` (1) saying why.
    func testADamagedIdentityFileIsDecodingAndAMissingOneSaysWhy() throws {
        let p = try threeMembers()
        let good = work + "/bob.identity"
        try Members(p.bob).export(to: good)
        let text = try String(contentsOfFile: good, encoding: .utf8)
        let damaged = [text.replacingOccurrences(of: "COVEN-MEMBER-SECRET-1", with: "COVEN-MEMBER-SECRT-1"),
                       String(text.dropLast(4)) + "\n", flipped(text)]
        for (index, body) in damaged.enumerated() {
            let path = work + "/damaged-\(index)"
            try body.write(toFile: path, atomically: true, encoding: .utf8)
            for option in ["--identity", "--key-file"] {
                let joined = try coven(p.bob, ["--db", work + "/j\(index)/device.db", "join", "file://" + storeFolder, option, path])
                XCTAssertEqual(joined.status, 6, "\(option) \(index): " + joined.stderr)
                XCTAssertTrue(joined.stderr.contains("decoding"), "\(option) \(index): " + joined.stderr)
            }
        }
        let missing = try coven(p.bob, ["--db", work + "/j/device.db", "join", "file://" + storeFolder, "--identity", work + "/nowhere"])
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("No such file"), missing.stderr)
    }

    /// `text` with one character of its secret line changed (its checksum no longer matches).
    private func flipped(_ text: String) -> String {
        var characters = Array(text)
        guard let start = text.range(of: MemberIdentity.secretPrefix + "1").map({ text.distance(from: text.startIndex, to: $0.upperBound) }) else { return text }
        characters[start + 10] = characters[start + 10] == "Q" ? "P" : "Q"
        return String(characters)
    }

    /// A member's secret line pasted as a recipient is `usage`, and not one character of the
    /// secret is echoed.
    func testASecretPastedAsARecipientIsNeverEchoed() throws {
        let p = try threeMembers()
        let secret = try MemberIdentity().secretLine
        let body = String(secret.dropFirst(MemberIdentity.secretPrefix.count + 1))
        for arguments in [["member", "add", "eve", secret], ["member", "add", "eve", secret, "--json"]] {
            let added = try coven(p.alice, arguments)
            XCTAssertEqual(added.status, 2, added.stderr)
            XCTAssertFalse(added.stderr.contains(String(body.prefix(3))) || added.stdout.contains(String(body.prefix(3))), added.stderr)
        }
        let key = try p.alice.keys.storeKeyBytes().hex
        let pasted = try coven(p.alice, ["member", "add", "eve", key])
        XCTAssertEqual(pasted.status, 2, pasted.stderr)
        XCTAssertFalse(pasted.stderr.contains(String(key.prefix(3))), pasted.stderr)
        // A recipient mistyped is public: echoed, to find it.
        let typo = try coven(p.alice, ["member", "add", "eve", "coven1qqqq"])
        XCTAssertTrue(typo.stderr.contains("coven1qqqq"), typo.stderr)
    }

    /// Two members whose names differ only in case: the second is `exists`.
    func testMemberNamesDifferingOnlyInCaseAreOneName() throws {
        let p = try threeMembers()
        for name in ["Bob", "BOB", "bob"] {
            let refused = assertCovenError(.exists) { try Members(p.alice).add(name: name, recipient: try MemberIdentity().recipient.description, admin: false) }
            XCTAssertEqual(refused?.details["name"], "bob")
        }
        XCTAssertEqual(try Members(p.alice).roster().members.map(\.name).sorted(), ["alice", "bob", "carol"])
    }

    /// A change sealed under a generation storage does not show this device yet (its
    /// `audiences/store/` rolled back) waits: `sync` says it waits for a key, not "nothing
    /// to do", and applies it once the generation is back.
    func testSyncSaysAChangeWaitsForAKey() throws {
        let p = try threeMembers()
        let dave = try MemberIdentity()
        _ = try Members(p.alice).add(name: "dave", recipient: dave.recipient.description, admin: false)
        try p.alice.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'after dave')")
        _ = try StoreSync(p.alice).sync()
        let newest = AudienceGeneration.path(audience: RowAudiences.store, generation: 4)
        let saved = try XCTUnwrap(FileManager.default.contents(atPath: storeFolder + "/" + newest))
        try FileManager.default.removeItem(atPath: storeFolder + "/" + newest)
        let first = try coven(p.bob, ["sync"])
        XCTAssertEqual(first.status, 0, first.stderr)
        let again = try coven(p.bob, ["sync"])
        XCTAssertTrue(again.stdout.contains("wait for a key generation") && !again.stdout.contains("nothing to do"), again.stdout)
        XCTAssertTrue(again.stderr.contains(p.alice.deviceID), again.stderr)
        XCTAssertNil(try title(p.bob, Self.album))
        try saved.write(to: URL(fileURLWithPath: storeFolder + "/" + newest))
        _ = try StoreSync(p.bob).sync()
        XCTAssertEqual(try title(p.bob, Self.album), "after dave")
    }
}

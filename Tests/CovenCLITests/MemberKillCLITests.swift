import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `kill -9` of the real `coven member add` and `coven member remove` against moto behind the
/// fault proxy, before and after their generation reaches storage, then the same command again:
/// nothing is lost and nothing is done twice (one generation per roster change, the removed
/// member's devices gone either way).
final class MemberKillCLITests: XCTestCase {
    func testKilledMemberAddAndRemoveRunAgainFinishOnce() throws {
        if ProcessInfo.processInfo.environment["COVEN_SKIP_S3"] == "1" { throw XCTSkip("COVEN_SKIP_S3=1") }
        let s3 = try ProxiedS3(bucketPrefix: "coven-member-kill")
        defer { s3.stop() }
        let folder = try NotesFolder("member-kill", environment: s3.server.environment)
        let work = folder.work
        func coven(_ arguments: [String], db: String) throws -> ProcessResult { try folder.coven(arguments, db: db) }
        func ok(_ arguments: [String], db: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
            let result = try coven(arguments, db: db)
            XCTAssertEqual(result.status, 0, "\(arguments): \(result.stderrText)", file: file, line: line)
            return result.stdoutText
        }
        let storage = "s3://\(s3.bucket)/store?endpoint=\(s3.proxy.endpoint)&path_style=true"
        _ = try ok(["init", "--storage", storage, "--manifest", "coven.json", "--name", "a", "--member", "alice"], db: "a")
        let bob = try ok(["member", "keygen", "-o", work + "/bob.identity"], db: "a").trimmingCharacters(in: .newlines)
        func generations() throws -> [String] {
            try StorageConnector(location: s3.location()).connect().list(prefix: "audiences/store/").map { String($0.key.split(separator: "/").last ?? "") }.sorted()
        }

        /// Runs `arguments` on a, stalls the first request of `method` to a path holding `path`
        /// (before it reaches storage, or after, as the answer), kills it there.
        func killStalled(_ arguments: [String], method: String, path: String, before: Bool) throws {
            try s3.proxy.clear()
            func matching() -> Int { s3.proxy.requests().filter { $0.hasPrefix(method + " ") && $0.contains(path) }.count }
            let seen = matching()
            try s3.proxy.inject(#"{"mode": "stall", "seconds": 60, "method": "\#(method)", "path": "\#(path)", "before": \#(before), "count": 1}"#)
            let child = try Spawn.start(folder.binary, ["--db", folder.database("a")] + arguments, environment: folder.environment, directory: work,
                                        stderr: work + "/a.err")
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, matching() == seen { Thread.sleep(forTimeInterval: 0.05) }
            // The stalled request has been sent (and, `before: false`, reached storage).
            Thread.sleep(forTimeInterval: before ? 0 : 0.3)
            kill(child.pid, SIGKILL)
            XCTAssertEqual(Spawn.wait(child, timeout: 10).status, 128 + SIGKILL)
            try s3.proxy.clear()
        }

        // Killed before its generation reached storage: nothing published; the rerun adds.
        try killStalled(["member", "add", "bob", bob], method: "PUT", path: "/audiences/", before: true)
        XCTAssertEqual(try generations(), ["0000000000000001"])
        // Killed after: the rerun finds bob added and publishes nothing more.
        try killStalled(["member", "add", "bob", bob], method: "PUT", path: "/audiences/", before: false)
        XCTAssertEqual(try generations(), ["0000000000000001", "0000000000000002"])
        let again = try coven(["--json", "member", "add", "bob", bob], db: "a")
        XCTAssertEqual(again.status, 0, again.stderrText)
        XCTAssertTrue(again.stdoutText.contains(#""objects_written":0"#), again.stdoutText)
        XCTAssertEqual(try generations(), ["0000000000000001", "0000000000000002"])
        XCTAssertEqual(try ok(["members"], db: "a").split(separator: "\n").filter { $0.contains("\tbob\t") }.count, 1)

        // Bob's device joins by identity and writes; alice reads it.
        _ = try ok(["join", storage, "--identity", work + "/bob.identity", "--name", "bob-laptop"], db: "b")
        _ = try ok(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'from bob', coven_stamp())"], db: "b")
        _ = try ok(["sync"], db: "b")
        _ = try ok(["sync"], db: "a")
        XCTAssertEqual(try ok(["sql", "SELECT body FROM notes"], db: "a"), "from bob\n")

        // remove killed after its generation, before its removal marks: the rerun marks bob's
        // device gone and publishes no other generation.
        try killStalled(["member", "remove", "bob"], method: "PUT", path: "/devices/", before: true)
        XCTAssertEqual(try generations().count, 3)
        let removed = try coven(["--json", "member", "remove", "bob"], db: "a")
        XCTAssertEqual(removed.status, 0, removed.stderrText)
        XCTAssertTrue(removed.stdoutText.contains(#""devices_gone":["#) && !removed.stdoutText.contains(#""devices_gone":[]"#), removed.stdoutText)
        XCTAssertEqual(try generations().count, 3)
        XCTAssertEqual(try ok(["sql", "SELECT count(*) FROM coven_devices WHERE gone"], db: "a"), "1\n")
        let refused = try coven(["sync"], db: "b")
        XCTAssertEqual(refused.status, 4, refused.stderrText)
        XCTAssertTrue(refused.stderrText.contains("device_gone"), refused.stderrText)
        // What alice writes now, bob's device cannot read with the keys it holds.
        _ = try ok(["write", "INSERT INTO notes VALUES (coven_uuid7(), 'after', coven_stamp())"], db: "a")
        _ = try ok(["sync"], db: "a")
        XCTAssertEqual(try ok(["sql", "SELECT count(*) FROM notes"], db: "b"), "1\n")
    }
}

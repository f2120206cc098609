import CovenKit
@testable import CovenKit
import Foundation
import XCTest

/// The manifest's shape (docs/manifest.md): what it reads, and every refusal with its message.
final class ManifestTests: XCTestCase {
    private func parse(_ json: String) throws -> Manifest { try Manifest(json: Data(json.utf8)) }

    func testReadsEveryKey() throws {
        let manifest = try parse("""
            {
              "namespaces": [
                { "name": "music", "kind": "user", "budget": "2GiB", "kept": true },
                { "name": "covers", "kind": "app", "budget": 268435456 },
                { "name": "docs", "kind": "app", "budget": "1.5 MB" },
                { "name": "plain", "kind": "user" }
              ],
              "tables": [
                { "name": "albums", "identity": "uuid", "audience_column": "audience" },
                { "name": "tracks", "identity": "uuid", "audience_from": "album_id",
                  "files": [ { "column": "file", "write_once": true } ] },
                { "name": "covers", "identity": "uuid", "files": [ { "column": "file", "bound": true, "bound_limit": "512KiB" } ] },
                { "name": "thumbs", "identity": "uuid", "files": [ { "column": "file", "bound": true } ] },
                { "name": "settings", "identity": "shared-key" },
                { "name": "lists", "identity": "uuid", "gated_by": "shared", "remote_root": false },
                { "name": "workspaces", "identity": "uuid", "gated_by_descendants": true },
                { "name": "radio", "identity": "uuid", "remote_root": true, "gated_by_descendants": false }
              ],
              "migrations": [ "SELECT 1", "SELECT 2" ]
            }
            """)
        XCTAssertEqual(manifest.namespaces.map(\.name), ["music", "covers", "docs", "plain"])
        XCTAssertEqual(manifest.namespaces.map(\.kind), [.user, .app, .app, .user])
        XCTAssertEqual(manifest.namespaces.map(\.budget), [2_147_483_648, 268_435_456, 1_500_000, nil])
        XCTAssertEqual(manifest.namespaces.map(\.kept), [true, false, false, false])
        XCTAssertEqual(manifest.table("albums")?.audienceColumn, "audience")
        XCTAssertEqual(manifest.table("tracks")?.audienceFrom, "album_id")
        XCTAssertEqual(manifest.table("tracks")?.files.first?.writeOnce, true)
        XCTAssertEqual(manifest.table("tracks")?.files.first?.bound, false)
        XCTAssertEqual(manifest.table("covers")?.files.first?.boundLimit, 524_288)
        XCTAssertEqual(manifest.table("thumbs")?.files.first?.boundLimit, Manifest.defaultBoundLimit)
        XCTAssertEqual(Manifest.defaultBoundLimit, 1_572_864)
        XCTAssertEqual(manifest.table("settings")?.identity, .sharedKey)
        XCTAssertEqual(manifest.table("settings")?.gate, Manifest.Gate.none)
        XCTAssertEqual(manifest.table("lists")?.gate, .gatedBy(column: "shared"))
        XCTAssertEqual(manifest.table("workspaces")?.gate, .gatedByDescendants)
        XCTAssertEqual(manifest.table("radio")?.gate, .remoteRoot)
        XCTAssertEqual(manifest.migrations, ["SELECT 1", "SELECT 2"])
    }

    func testEmptyDocumentIsAnEmptyManifest() throws {
        let manifest = try parse("{}")
        XCTAssertTrue(manifest.namespaces.isEmpty && manifest.tables.isEmpty && manifest.migrations.isEmpty)
    }

    func testCanonicalJSONReadsBackTheSame() throws {
        let manifest = try parse(DeviceTestCase.albumManifest)
        XCTAssertEqual(try parse(try manifest.canonicalJSON()), manifest)
        let gates = try parse("""
            { "tables": [ { "name": "a", "identity": "uuid", "gated_by": "g" }, { "name": "b", "identity": "uuid", "remote_root": true },
                          { "name": "c", "identity": "uuid", "gated_by_descendants": true } ] }
            """)
        XCTAssertEqual(try parse(try gates.canonicalJSON()), gates)
        let owned = try parse("""
            { "tables": [ { "name": "a", "identity": "uuid", "owner_only": true }, { "name": "b", "identity": "uuid", "owner_only": true, "owner_column": "by" },
                          { "name": "c", "identity": "uuid", "owner_only": false } ] }
            """)
        XCTAssertEqual(owned.tables.map(\.ownerColumn), ["owner", "by", nil])
        XCTAssertEqual(try parse(try owned.canonicalJSON()), owned)
    }

    /// Every refusal of docs/manifest.md, with its exact message.
    func testEveryRefusalNamesItsPath() {
        let cases: [(String, String)] = [
            ("{ \"namespaces\": [ ", "the manifest is not valid JSON"),
            ("[1, 2]", "the manifest must be an object"),
            ("{ \"namespace\": [] }", "unknown key 'namespace'"),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"cache\": 1 } ] }", "unknown key 'namespaces[0].cache'"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"gate\": \"x\" } ] }", "unknown key 'tables[0].gate'"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\", \"writeonce\": true } ] } ] }", "unknown key 'tables[0].files[0].writeonce'"),
            ("{ \"namespaces\": {} }", "namespaces must be an array"),
            ("{ \"tables\": 3 }", "tables must be an array"),
            ("{ \"migrations\": \"CREATE\" }", "migrations must be an array"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": {} } ] }", "tables[0].files must be an array"),
            ("{ \"namespaces\": [ 1 ] }", "namespaces[0] must be an object"),
            ("{ \"tables\": [ [] ] }", "tables[0] must be an object"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ \"f\" ] } ] }", "tables[0].files[0] must be an object"),
            ("{ \"namespaces\": [ { \"kind\": \"user\" } ] }", "namespaces[0].name is missing"),
            ("{ \"namespaces\": [ { \"name\": 7, \"kind\": \"user\" } ] }", "namespaces[0].name must be a string"),
            ("{ \"namespaces\": [ { \"name\": \"my music\", \"kind\": \"user\" } ] }", "namespaces[0].name: 'my music' is not a plain SQL name (letters, digits, _)"),
            ("{ \"namespaces\": [ { \"name\": \"1st\", \"kind\": \"user\" } ] }", "namespaces[0].name: '1st' is not a plain SQL name (letters, digits, _)"),
            ("{ \"namespaces\": [ { \"name\": \"\", \"kind\": \"user\" } ] }", "namespaces[0].name: '' is not a plain SQL name (letters, digits, _)"),
            ("{ \"namespaces\": [ { \"name\": \"caf\\u00e9\", \"kind\": \"user\" } ] }", "namespaces[0].name: 'café' is not a plain SQL name (letters, digits, _)"),
            ("{ \"namespaces\": [ { \"name\": \"m\" } ] }", "namespaces[0].kind is missing"),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"users\" } ] }", "namespaces[0].kind must be 'user' or 'app'"),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": 1 } ] }", "namespaces[0].kind must be a string"),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": \"lots\" } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": -1 } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": 1.5 } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": 1e30 } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": \"9999999TiB\" } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"budget\": true } ] }", "namespaces[0].budget must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"kept\": 1 } ] }", "namespaces[0].kept must be true or false"),
            ("{ \"namespaces\": [ { \"name\": \"m\", \"kind\": \"user\", \"kept\": \"yes\" } ] }", "namespaces[0].kept must be true or false"),
            ("{ \"namespaces\": [ { \"name\": \"a\", \"kind\": \"user\" }, { \"name\": \"a\", \"kind\": \"app\" } ] }", "namespaces[1].name: namespace 'a' is declared twice"),
            ("{ \"tables\": [ { \"identity\": \"uuid\" } ] }", "tables[0].name is missing"),
            ("{ \"tables\": [ { \"name\": \"coven_notes\", \"identity\": \"uuid\" } ] }", "tables[0].name: 'coven_notes' uses a reserved prefix"),
            ("{ \"tables\": [ { \"name\": \"SQLITE_x\", \"identity\": \"uuid\" } ] }", "tables[0].name: 'SQLITE_x' uses a reserved prefix"),
            ("{ \"tables\": [ { \"name\": \"t\" } ] }", "tables[0].identity is missing"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"serial\" } ] }", "tables[0].identity must be 'uuid' or 'shared-key'"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"audience_column\": \"a\", \"audience_from\": \"b\" } ] }", "tables[0]: a table has audience_column or audience_from, not both"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"audience_column\": \"a-b\" } ] }", "tables[0].audience_column: 'a-b' is not a plain SQL name (letters, digits, _)"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"gated_by\": \"s\", \"remote_root\": true } ] }", "tables[0]: table 't' has more than one gate form"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"gated_by\": \"s\", \"gated_by_descendants\": true } ] }", "tables[0]: table 't' has more than one gate form"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"remote_root\": true, \"gated_by_descendants\": true } ] }", "tables[0]: table 't' has more than one gate form"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"remote_root\": \"yes\" } ] }", "tables[0].remote_root must be true or false"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"bound\": true } ] } ] }", "tables[0].files[0].column is missing"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\", \"bound_limit\": 10 } ] } ] }", "tables[0].files[0].bound_limit is set on a column that is not bound"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\", \"bound\": true, \"bound_limit\": \"big\" } ] } ] }", "tables[0].files[0].bound_limit must be a whole number of bytes or a size like \"2GiB\""),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\", \"write_once\": 0 } ] } ] }", "tables[0].files[0].write_once must be true or false"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"files\": [ { \"column\": \"f\" }, { \"column\": \"f\" } ] } ] }", "tables[0].files[1].column: 'f' is declared twice"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\" }, { \"name\": \"t\", \"identity\": \"uuid\" } ] }", "tables[1].name: table 't' is declared twice"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"shared-key\", \"owner_only\": true } ] }", "tables[0]: table 't' is owner_only with identity 'shared-key'"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"owner_column\": \"o\" } ] }", "tables[0].owner_column is set on a table that is not owner_only"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"owner_only\": 1 } ] }", "tables[0].owner_only must be true or false"),
            ("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"owner_only\": true, \"audience_column\": \"owner\" } ] }", "tables[0].owner_column: 'owner' is already a column coven gives another role"),
            ("{ \"migrations\": [ \"  \" ] }", "migrations[0] must be a non-empty SQL string"),
            ("{ \"migrations\": [ \"SELECT 1\", 42 ] }", "migrations[1] must be a non-empty SQL string"),
        ]
        for (json, message) in cases {
            do {
                _ = try parse(json)
                XCTFail("accepted \(json)")
            } catch let error as CovenError {
                XCTAssertEqual(error.code, .manifest, json)
                XCTAssertEqual(error.message, message, json)
            } catch {
                XCTFail("\(json): \(error)")
            }
        }
    }

    func testTwoGateFormsHint() {
        do {
            _ = try parse("{ \"tables\": [ { \"name\": \"t\", \"identity\": \"uuid\", \"gated_by\": \"s\", \"remote_root\": true } ] }")
            XCTFail("accepted two gate forms")
        } catch let error as CovenError {
            XCTAssertEqual(error.hint, "a table has at most one of gated_by, gated_by_descendants, remote_root")
        } catch {
            XCTFail("\(error)")
        }
    }

    func testReadingAFile() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("coven-manifest-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try Data("{}".utf8).write(to: URL(fileURLWithPath: folder + "/m.json"))
        XCTAssertEqual(try Manifest(contentsOf: folder + "/m.json"), try parse("{}"))
        for (path, reason) in [(folder + "/none.json", "No such file or directory"), (folder, "Is a directory")] {
            do {
                _ = try Manifest(contentsOf: path)
                XCTFail("read \(path)")
            } catch let error as CovenError {
                XCTAssertEqual(error.code, .io, "a file that cannot be read is a local read that failed, not a bad manifest")
                XCTAssertEqual(error.message, "cannot read manifest '\(path)'")
                XCTAssertEqual(error.cause, reason)
            }
        }
    }

    func testByteSizes() {
        XCTAssertEqual(ByteSize.parse("0"), 0)
        XCTAssertEqual(ByteSize.parse("268435456"), 268_435_456)
        XCTAssertEqual(ByteSize.parse("2GiB"), 2_147_483_648)
        XCTAssertEqual(ByteSize.parse("500 MB"), 500_000_000)
        XCTAssertEqual(ByteSize.parse("1.5KiB"), 1536)
        XCTAssertEqual(ByteSize.parse("3B"), 3)
        for bad in ["", "GiB", "-1", "1.5", "2 gib", "1e3", "1..2MB", "99999999TiB"] {
            XCTAssertNil(ByteSize.parse(bad), bad)
        }
    }
}

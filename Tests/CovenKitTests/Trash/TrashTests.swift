@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// The trash (issue 37): every device keeps the last image of each row deleted, by its own
/// writes or the changes it applies; undelete writes them back as a new write every device
/// applies; gc keeps their bytes for the store's retention window; a mass delete is reported.
/// On file://, or on the S3 server a subclass names.
class TrashTests: DeviceTestCase {
    static let second = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f41"
    static let cover = "0193a9b2-4c1e-7d3a-9f20-5b8e1c2d3f50"

    /// Two devices of a store of members (alice), synced, with an album holding a cover whose
    /// file is stored; returns them and the cover's file and object.
    func albumWithCover() throws -> (a: Device, b: Device, file: String, object: String) {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a, identity: try Members(a).identity())
        let staged = try stageApp(a, text: "cover bytes")
        let file = try a.write(sql: """
            INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'first');
            INSERT INTO covers (id, album_id, file) VALUES ('\(Self.cover)', '\(Self.album)', coven_put_staged('\(staged.id)'))
            """).files[0]
        let object = try StoredFiles.store(a, file: file)
        for device in [a, b, a] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try count(b, "SELECT count(*) FROM covers"), 1)
        return (a, b, file, object)
    }

    func listed(_ device: Device, table: String? = nil) throws -> [TrashedRow] {
        var rows: [TrashedRow] = []
        try Trash(device).forEach(table: table) { rows.append($0) }
        return rows
    }

    func dump(_ device: Device) throws -> [String] {
        try ["albums", "covers", "settings", "coven_files"].flatMap { table in
            try device.database.query("SELECT * FROM \(table) ORDER BY id").map { "\(table): \($0.values.map { $0.textValue ?? "NULL" })" }
        }
    }

    // MARK: Recording

    /// A delete written here keeps each row's last image, who deleted it, the row deleted with
    /// it and the files it named; once published, the change that deleted it. A delete another
    /// device published is kept on applying it, with that change.
    func testDeletesHereAndElsewhereKeepTheLastImageWithTheirChange() throws {
        let (a, b, file, _) = try albumWithCover()
        try b.write(sql: "UPDATE albums SET title = 'last title'")
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        var rows = try listed(b)
        XCTAssertEqual(rows.map(\.table).sorted(), ["albums", "covers"])
        let album = try XCTUnwrap(rows.first { $0.table == "albums" })
        XCTAssertNil(album.change, "not published yet")
        XCTAssertEqual(album.device, b.deviceID)
        XCTAssertEqual(Dictionary(zip(album.columns, album.values), uniquingKeysWith: { a, _ in a })["title"], .text("last title"))
        let cover = try XCTUnwrap(rows.first { $0.table == "covers" })
        XCTAssertEqual(cover.parentTable, "albums")
        XCTAssertEqual(cover.parentID, Self.album)
        XCTAssertEqual(cover.files, [TrashedRow.File(id: file, size: 11)])
        let pushed = try StoreSync(b).sync().pushed.published
        rows = try listed(b)
        XCTAssertEqual(Set(rows.map(\.change)), ["\(b.deviceID):\(try XCTUnwrap(pushed.last))"])
        // a applies the delete: the same rows, the same change, from its own copy of the rows.
        _ = try StoreSync(a).sync()
        let there = try listed(a)
        XCTAssertEqual(there.map(\.id), rows.map(\.id))
        XCTAssertEqual(there.map(\.change), rows.map(\.change))
        XCTAssertEqual(there.first { $0.table == "covers" }?.parentID, Self.album)
        XCTAssertEqual(there.first { $0.table == "albums" }?.member, try Members(b).memberID())
        // --table and --since narrow the list.
        XCTAssertEqual(try listed(a, table: "covers").map(\.id), [Self.cover])
        var later: [TrashedRow] = []
        try Trash(a).forEach(since: Date().addingTimeInterval(3600)) { later.append($0) }
        XCTAssertEqual(later, [])
        let summary = try Trash(a).summary()
        XCTAssertEqual(summary.rows, 2)
        XCTAssertEqual(summary.files, 1)
        XCTAssertEqual(summary.bytes, 11)
        XCTAssertEqual(summary.retention, Trash.defaultRetention)
    }

    // MARK: Undelete

    /// A row deleted on b comes back on a with its file after gc ran on both inside the
    /// window: a new write, stamped after the delete, that b applies as any other; both
    /// converge and read the file.
    func testUndeleteComesBackEverywhereWithItsFileAfterGCInsideTheWindow() throws {
        let (a, b, file, object) = try albumWithCover()
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        for device in [b, a, b] { _ = try StoreSync(device).sync() }
        for device in [a, b] {
            let report = try GarbageCollection(device).collectGarbage()
            XCTAssertEqual(report.kept.filter { $0.key == object }.map(\.reason), [.trash], "the window keeps the bytes")
            XCTAssertTrue(report.deleted.isEmpty)
        }
        XCTAssertNotNil(try a.connectStorage().head(object))
        let back = try Undelete(a).rows(table: "albums", ids: [Self.album])
        XCTAssertEqual(back.rows.map(\.id), [Self.album, Self.cover], "the cover deleted with it comes back too")
        XCTAssertEqual(back.files, [file])
        let tombstone = try XCTUnwrap(try Tombstones(database: a.database).stamp(table: "albums", id: Self.album))
        XCTAssertGreaterThan(try XCTUnwrap(try a.database.scalar("SELECT _updated_at FROM albums").textValue), tombstone)
        XCTAssertEqual(try listed(a), [], "what came back leaves the trash")
        for device in [a, b, a] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try dump(a), try dump(b))
        XCTAssertEqual(try listed(b), [], "b applied the write: its trash forgets the rows")
        XCTAssertEqual(try b.database.scalar("SELECT file FROM covers").textValue, file)
        XCTAssertEqual(try FileReaderHelper.read(b, file), Array("cover bytes".utf8))
        // A later gc on either keeps the bytes: a row names them again.
        for device in [a, b] { _ = try GarbageCollection(device).collectGarbage() }
        XCTAssertNotNil(try a.connectStorage().head(object))
    }

    /// After the window gc frees the bytes, and undelete refuses the row naming them with
    /// `bytes_absent`, naming the file, changing nothing; a row with no file past the window
    /// leaves the trash at the next gc, and the one whose bytes went at the one after.
    func testAfterTheWindowGCFreesTheBytesAndUndeleteSaysBytesAbsent() throws {
        let (a, b, file, object) = try albumWithCover()
        try Trash(a).setRetention(1)
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        for device in [a, b, a] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try Trash(b).retention(), 1, "the window is the store's: b applied a's setting")
        Thread.sleep(forTimeInterval: 1.2)
        XCTAssertEqual(try GarbageCollection(b).collectGarbage().deleted.map(\.key), [object])
        XCTAssertNil(try a.connectStorage().head(object))
        // The album named no file: past the window it left the trash; the cover stays one more
        // pass, so undelete can say its bytes are gone.
        XCTAssertEqual(try b.database.query("SELECT tbl FROM coven_tombstones WHERE trash IS NOT NULL").compactMap { $0.string("tbl") }, ["covers"])
        XCTAssertEqual(try listed(b), [], "past the window nothing is listed")
        let outbox = try count(b, "SELECT count(*) FROM coven_outbox")
        let refused = assertCovenError(.bytesAbsent) { try Undelete(b).rows(table: "covers", ids: [Self.cover]) }
        XCTAssertEqual(refused?.details["file"], file)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM covers"), 0, "nothing came back")
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_outbox"), outbox, "nothing recorded")
        // a never ran gc: its image of the record is there, but storage says the bytes are gone.
        let seq = try XCTUnwrap(try a.database.scalar("""
            SELECT \(Trash.seqSQL) FROM coven_trash_pages p JOIN coven_tombstones t ON t.trash = p.page WHERE t.tbl = 'covers'
            """).intValue)
        assertCovenError(.bytesAbsent) { try Undelete(a).change(device: b.deviceID, seq: seq) }
        XCTAssertEqual(try count(a, "SELECT count(*) FROM albums"), 0, "all or nothing: the album stays deleted too")
        _ = try GarbageCollection(b).collectGarbage()
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL"), 0, "past the window and keeping nothing, the rows leave")
    }

    /// `trash empty` lets gc free the bytes before the window ends; emptying before a time
    /// keeps what was deleted after it.
    func testTrashEmptyLetsGCFreeTheBytesEarly() throws {
        let (a, b, _, object) = try albumWithCover()
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        for device in [b, a, b] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try Trash(b).empty(before: Date().addingTimeInterval(-3600)), 0)
        XCTAssertEqual(try GarbageCollection(b).collectGarbage().kept.map(\.reason), [.trash])
        XCTAssertEqual(try Trash(b).empty(before: nil), 2)
        XCTAssertEqual(try GarbageCollection(b).collectGarbage().deleted.map(\.key), [object])
        XCTAssertEqual(try listed(a).count, 2, "a's trash is its own: it lists the rows, whose bytes are gone")
        assertCovenError(.bytesAbsent) { try Undelete(a).rows(table: "covers", ids: [Self.cover]) }
    }

    /// A window of 0 turns the trash off for the store: the devices that applied the setting
    /// keep no deleted row, here or from a pull, and gc frees the bytes as soon as every device has seen the delete; rows trashed
    /// before are past the window, and the next gc drops them. Its image, while kept, is in a
    /// page its tombstone names.
    func testARetentionOfZeroKeepsNoTrash() throws {
        let (a, b, _, object) = try albumWithCover()
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.second)', 'kept before')")
        _ = try StoreSync(a).sync()
        try a.write(sql: "DELETE FROM albums WHERE id = '\(Self.second)'")
        // The row's tombstone names its page, which holds its image with its table, id and the
        // delete's stamp.
        let stored = try XCTUnwrap(a.database.scalar("""
            SELECT p.entries FROM coven_trash_pages p JOIN coven_tombstones t ON t.trash = p.page WHERE t.tbl = 'albums' AND t.id = '\(Self.second)'
            """).bytesValue)
        let entry = try XCTUnwrap(try TrashPage.open(stored).first)
        let stamp = try XCTUnwrap(a.database.scalar("SELECT stamp FROM coven_tombstones WHERE id = '\(Self.second)'").textValue)
        XCTAssertEqual([entry.table, entry.id, entry.stamp], ["albums", Self.second, stamp])
        XCTAssertEqual(entry.columns.firstIndex(of: "title").map { entry.values[$0] }, .text("kept before"))
        try Trash(a).setRetention(0)
        XCTAssertEqual(try Trash(a).retention(), 0)
        XCTAssertEqual(try listed(a), [], "the row trashed before is past the window")
        for device in [a, b, a] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try Trash(b).retention(), 0, "b applied a's setting")
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        XCTAssertEqual(try count(b, "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL AND id IN ('\(Self.album)', '\(Self.cover)')"), 0, "a delete here keeps nothing")
        for device in [b, a] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL AND id IN ('\(Self.album)', '\(Self.cover)')"), 0, "nor does a pull")
        XCTAssertEqual(try count(a, "SELECT count(*) FROM covers"), 0)
        _ = try StoreSync(b).sync()
        let report = try GarbageCollection(b).collectGarbage()
        XCTAssertEqual(report.deleted.map(\.key), [object], "no window to wait for")
        _ = try GarbageCollection(a).collectGarbage()
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL"), 0, "gc dropped the row trashed before")
        assertCovenError(.notFound) { try Undelete(a).rows(table: "covers", ids: [Self.cover]) }
    }

    /// Schema step 23 keeps every trashed row of step 21's table, keyed by (table, id) as before:
    /// a second image of the same row replaces the first.
    func testSchemaStep23KeepsTheTrashedRows() throws {
        let raw = try Database(path: ":memory:", create: true)
        for step in Schema.steps.prefix(22) { try step(raw) }
        try raw.run("INSERT INTO coven_trash (tbl, id, image, stamp, deleted_at, device) VALUES ('notes', 'n1', x'00', 's1', 'd1', 'dev')")
        try Schema.steps[22](raw)
        XCTAssertEqual(try raw.scalar("SELECT tbl || '/' || id || '/' || stamp FROM coven_trash").textValue, "notes/n1/s1")
        try raw.run("""
            INSERT INTO coven_trash (tbl, id, image, stamp, deleted_at, device) VALUES ('notes', 'n1', x'00', 's2', 'd2', 'dev')
            ON CONFLICT (tbl, id) DO UPDATE SET stamp = excluded.stamp
            """)
        XCTAssertEqual(try raw.scalar("SELECT group_concat(stamp) FROM coven_trash").textValue, "s2")
        XCTAssertEqual(try raw.scalar("SELECT count(*) FROM sqlite_schema WHERE name IN ('coven_trash_row', 'coven_trash_parent')").intValue, 2)
    }

    /// Schema step 24 moves step 23's trashed rows into pages, the rows of one change (this
    /// device's unpublished writes by their stamp), audience and owner together, and links
    /// each row's tombstone to its page; a row read from its page is the row as it was, image,
    /// parent and files; coven_trash is gone.
    func testSchemaStep24MovesTheTrashedRowsIntoPages() throws {
        let raw = try Database(path: ":memory:", create: true)
        for step in Schema.steps.prefix(23) { try step(raw) }
        func image(_ title: String) -> [UInt8] {
            RowEntryCodec.encode([RowEntry(kind: .upsert, table: "", id: "", stamp: "", columns: ["id", "title"], values: [.text("x"), .text(title)])])
        }
        let rows: [[SQLValue]] = [
            ["albums", "a1", .blob(image("one")), "s1", "dev", 7, "store", .null, .null, .null, "[]"],
            ["covers", "c1", .blob(image("cover")), "s1", "dev", 7, "store", .null, "albums", "a1", #"[{"id":"f1","size":12}]"#],
            ["albums", "a2", .blob(image("two")), "s2", "me", .null, "store", .null, .null, .null, "[]"],
            ["albums", "a3", .blob(image("three")), "s3", "me", .null, "store", .null, .null, .null, "[]"],
            ["notes", "n1", .blob(image("mine")), "s4", "dev", 7, "store", "alice", .null, .null, "[]"],
        ]
        for row in rows {
            try raw.run("""
                INSERT INTO coven_trash (tbl, id, image, stamp, deleted_at, device, seq, audience, owner, parent_tbl, parent_id, files)
                VALUES (?1, ?2, ?3, ?4, 'd', ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                """, row)
        }
        try raw.run("INSERT INTO coven_tombstones (tbl, id, stamp) VALUES ('albums', 'a1', 's9')")
        try Schema.steps[23](raw)
        XCTAssertFalse(try raw.hasTable("coven_trash"))
        XCTAssertEqual(try raw.scalar("SELECT count(*) FROM coven_trash_pages").intValue, 4, "(dev, 7), me's two writes, alice's")
        XCTAssertEqual(try raw.scalar("SELECT stamp FROM coven_tombstones WHERE id = 'a1'").textValue, "s9", "a tombstone keeps its stamp")
        let pages = try TrashPageCache(database: raw)
        for row in rows {
            let table = row[0].textValue ?? "", id = row[1].textValue ?? ""
            let page = try XCTUnwrap(raw.scalar("SELECT trash FROM coven_tombstones WHERE tbl = ?1 AND id = ?2", [table, id]).intValue, id)
            let entry = try XCTUnwrap(pages.entry(page: page, table: table, id: id), id)
            XCTAssertEqual(entry.stamp, row[3].textValue)
            XCTAssertEqual(entry.values.last, try RowEntryCodec.decode(row[2].bytesValue ?? []).first?.values.last)
            XCTAssertEqual(entry.parentID, row[9].textValue)
            XCTAssertEqual(entry.files.map(\.id), id == "c1" ? ["f1"] : [])
            XCTAssertEqual(entry.files.map(\.size), id == "c1" ? [12] : [])
        }
        XCTAssertEqual(try raw.scalar("SELECT group_concat(owner) FROM coven_trash_pages").textValue, "alice")
    }

    /// A mass delete applied by a pull is reported (and kept as the last one), and undelete
    /// --change brings every row back, on every device.
    func testAMassDeleteIsReportedAndUndeleteChangeBringsEveryRowBack() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a, identity: try Members(a).identity())
        try a.write(sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150) INSERT INTO settings (id, value) SELECT 'k' || i, 'v' || i FROM n")
        try a.write(sql: "INSERT INTO albums (id, title) VALUES ('\(Self.album)', 'kept')")
        for device in [a, b] { _ = try StoreSync(device).sync() }
        // A small delete is no mass delete.
        try b.write(sql: "DELETE FROM settings WHERE id = 'k1'")
        XCTAssertEqual(try StoreSync(b).sync().pulled.massDeletes, [])
        XCTAssertEqual(try StoreSync(a).sync().pulled.massDeletes, [])
        try b.write(sql: "DELETE FROM settings")
        let seq = try XCTUnwrap(try StoreSync(b).sync().pushed.published.last)
        let pulled = try StoreSync(a).sync().pulled
        XCTAssertEqual(pulled.massDeletes.count, 1)
        let mass = try XCTUnwrap(pulled.massDeletes.first)
        XCTAssertEqual(mass.device, b.deviceID)
        XCTAssertEqual(mass.seq, Int64(seq))
        XCTAssertEqual(mass.tables.map(\.table), ["settings"])
        XCTAssertEqual(mass.tables.map(\.rows), [149])
        XCTAssertEqual(mass.undo, "coven undelete --change \(b.deviceID):\(seq)")
        XCTAssertEqual(try Trash(a).lastMassDelete()?.seq, Int64(seq))
        let back = try Undelete(a).change(device: b.deviceID, seq: Int64(seq))
        XCTAssertEqual(back.rows.count, 149)
        for device in [a, b, a] { _ = try StoreSync(device).sync() }
        for device in [a, b] {
            XCTAssertEqual(try count(device, "SELECT count(*) FROM settings"), 149)
            XCTAssertEqual(try count(device, "SELECT count(*) FROM settings WHERE value = 'v150'"), 1)
        }
        XCTAssertEqual(try dump(a), try dump(b))
        // The one deleted alone stays in the trash, undeletable by its own change.
        XCTAssertEqual(try listed(a).map(\.id), ["k1"])
    }

    /// A change deleting rows of more than a page's bytes spreads them over several pages,
    /// sealed beside the pull (and beside the write that deleted them): every row is listed
    /// once with its values and comes back; a row written back leaves the trash (its link cut,
    /// its image left in its page), and a snapshot's pages hold only the rows still in the
    /// trash; emptied, the pages go.
    func testManyDeletesSpreadOverPagesAndASnapshotHoldsOnlyTheTrashedRows() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a, identity: try Members(a).identity())
        try a.write(sql: """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
            INSERT INTO settings (id, value) SELECT 'k' || i, 'v' || i || ' ' || hex(randomblob(60)) FROM n
            """)
        for device in [a, b] { _ = try StoreSync(device).sync() }
        let values = Dictionary(uniqueKeysWithValues: try a.database.query("SELECT id, value FROM settings").map { ($0.string("id") ?? "", $0.string("value") ?? "") })
        try b.write(sql: "DELETE FROM settings")
        XCTAssertEqual(try listed(b).count, 3000, "the write's own pages")
        let seqs = try StoreSync(b).sync().pushed.published
        _ = try StoreSync(a).sync()
        let pages = try count(a, "SELECT count(*) FROM coven_trash_pages")
        XCTAssertGreaterThanOrEqual(pages, 4, "about 140 bytes a row, 128 KiB a page")
        XCTAssertEqual(try count(a, "SELECT sum(rows) FROM coven_trash_pages"), 3000)
        let rows = try listed(a)
        XCTAssertEqual(rows.count, 3000)
        XCTAssertEqual(Set(rows.map(\.id)).count, 3000)
        for row in rows {
            XCTAssertEqual(row.columns.firstIndex(of: "value").map { row.values[$0] }, .text(values[row.id] ?? "?"), row.id)
            XCTAssertEqual(row.device, b.deviceID)
            XCTAssertTrue(seqs.map { Int64($0) }.contains(row.seq ?? -1), "\(String(describing: row.seq)) of \(seqs)")
        }
        try a.write(sql: "INSERT INTO settings (id, value) VALUES ('k7', 'again')")
        XCTAssertEqual(try listed(a).count, 2999)
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_trash_pages"), pages, "the image stays in its page until gc")
        _ = try StoreSync(a).sync()
        _ = try Snapshots(a).snapshot()
        let c = try join("c", from: a, identity: try Members(a).identity())
        XCTAssertEqual(try listed(c).map(\.id), try listed(a).map(\.id))
        XCTAssertEqual(try count(c, "SELECT sum(rows) FROM coven_trash_pages"), 2999, "no image of a row out of the trash")
        let back = try seqs.reduce(0) { $0 + (try Undelete(c).change(device: b.deviceID, seq: Int64($1)).rows.count) }
        XCTAssertEqual(back, 2999)
        XCTAssertEqual(try count(c, "SELECT count(*) FROM settings"), 3000)
        XCTAssertEqual(try Trash(a).empty(before: nil), 2999)
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_trash_pages"), 0)
    }

    /// A quarter of a table's rows is a mass delete too (when at least ten).
    func testAQuarterOfATableIsAMassDelete() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40) INSERT INTO settings (id, value) SELECT 'k' || i, 'v' FROM n")
        for device in [a, b] { _ = try StoreSync(device).sync() }
        try b.write(sql: "DELETE FROM settings WHERE CAST(substr(id, 2) AS INTEGER) <= 9")
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try StoreSync(a).sync().pulled.massDeletes, [], "nine rows: under the floor")
        try b.write(sql: "DELETE FROM settings WHERE CAST(substr(id, 2) AS INTEGER) <= 20")
        _ = try StoreSync(b).sync()
        XCTAssertEqual(try StoreSync(a).sync().pulled.massDeletes.map { $0.tables.map(\.rows) }, [[11]], "11 of 31 rows")
    }

    /// The trash adds nothing to a quiet sync: the same requests with rows in the trash as
    /// with none.
    func testAQuietSyncMakesTheSameRequestsWithATrash() throws {
        let a = try makeDevice(name: "a")
        let b = try join("b", from: a)
        try a.write(sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) INSERT INTO settings (id, value) SELECT 'k' || i, 'v' FROM n")
        for device in [a, b, a, b] { _ = try StoreSync(device).sync() }
        func quietRequests() throws -> [String] {
            let counting = CrashingStorage(try b.connectStorage())
            let report = try StoreSync(b, storage: counting).sync()
            XCTAssertTrue(report.quiet)
            return counting.requests.sorted()
        }
        let before = try quietRequests()
        try a.write(sql: "DELETE FROM settings")
        for device in [a, b, a, b] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try Trash(b).summary().rows, 300)
        XCTAssertEqual(try quietRequests(), before)
    }

    // MARK: Refusals

    /// Bad input changes nothing: an unknown table, a row not in the trash (one undeleted
    /// already), a change that deleted nothing here.
    func testBadInputIsRefusedAndChangesNothing() throws {
        let (a, b, _, _) = try albumWithCover()
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        for device in [b, a] { _ = try StoreSync(device).sync() }
        let outbox = try count(a, "SELECT count(*) FROM coven_outbox")
        assertCovenError(.usage) { try Undelete(a).rows(table: "nope", ids: [Self.album]) }
        assertCovenError(.notFound) { try Undelete(a).rows(table: "albums", ids: [Self.album, Self.second]) }
        assertCovenError(.notFound) { try Undelete(a).change(device: b.deviceID, seq: 99) }
        assertCovenError(.usage) { try Trash(a).setRetention(-1) }
        // A cover whose album is still deleted: its album comes back first.
        let orphan = assertCovenError(.invalidState) { try Undelete(a).rows(table: "covers", ids: [Self.cover]) }
        XCTAssertEqual(orphan?.details["parent"], Self.album)
        XCTAssertEqual(try count(a, "SELECT count(*) FROM albums"), 0)
        XCTAssertEqual(try count(a, "SELECT count(*) FROM coven_outbox"), outbox)
        XCTAssertEqual(try listed(a).count, 2)
    }

    /// A circle's rows are neither listed nor undeletable on a device of a member not in it;
    /// another member's rows of an owner-only table are not listed there and undelete says
    /// `not_owner`.
    func testCircleAndOwnerOnlyRowsAreNeitherListedNorUndeletableByOthers() throws {
        let manifest = """
            {
              "namespaces": [ { "name": "covers", "kind": "app" } ],
              "tables": [
                { "name": "albums", "identity": "uuid", "audience_column": "audience" },
                { "name": "journal", "identity": "uuid", "owner_only": true }
              ],
              "migrations": [
                "CREATE TABLE albums (id TEXT PRIMARY KEY, title TEXT, audience TEXT NOT NULL DEFAULT 'store', _updated_at TEXT NOT NULL DEFAULT '') STRICT",
                "CREATE TABLE journal (id TEXT PRIMARY KEY, owner TEXT, body TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT"
              ]
            }
            """
        let alice = try makeDevice(manifest, name: "alice")
        let bobIdentity = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        let circle = try Circles(alice).create(name: "private", members: []).circle.id
        try alice.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(Self.album)', 'secret', '\(circle)');
            INSERT INTO albums (id, title) VALUES ('\(Self.second)', 'shared');
            INSERT INTO journal (id, body) VALUES ('\(Self.cover)', 'dear diary')
            """)
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try count(bob, "SELECT count(*) FROM journal"), 1, "bob reads alice's journal")
        try alice.write(sql: "DELETE FROM albums; DELETE FROM journal")
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try listed(alice).map(\.id).sorted(), [Self.album, Self.second, Self.cover].sorted())
        XCTAssertEqual(try listed(bob).map(\.id), [Self.second], "bob sees neither the circle's row nor alice's journal")
        XCTAssertEqual(try Trash(bob).summary().rows, 1)
        assertCovenError(.notFound) { try Undelete(bob).rows(table: "albums", ids: [Self.album]) }
        assertCovenError(.notOwner) { try Undelete(bob).rows(table: "journal", ids: [Self.cover]) }
        // --change leaves out what bob may not bring back.
        let seq = try XCTUnwrap(try listed(alice).first?.seq)
        XCTAssertEqual(try Undelete(bob).change(device: alice.deviceID, seq: seq).rows.map(\.id), [Self.second])
        XCTAssertEqual(try count(bob, "SELECT count(*) FROM journal"), 0)
        // Bob is no admin: the store's window is not his to set.
        assertCovenError(.notAdmin) { try Trash(bob).setRetention(60) }
        // Alice brings back her own.
        XCTAssertEqual(try Undelete(alice).rows(table: "journal", ids: [Self.cover]).rows.count, 1)
        XCTAssertEqual(try Undelete(alice).rows(table: "albums", ids: [Self.album]).rows.count, 1)
        for device in [alice, bob, alice] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try count(bob, "SELECT count(*) FROM journal"), 1)
        XCTAssertEqual(try count(bob, "SELECT count(*) FROM albums"), 1, "the shared album; the circle's stays alice's")
        XCTAssertEqual(try count(alice, "SELECT count(*) FROM albums"), 2)
    }

    /// A setting from a device whose member is no admin is refused on apply (a forged client
    /// that skipped the local check): kept as a lost value, never applied.
    func testARetentionFromANonAdminIsRefusedOnApply() throws {
        let alice = try makeDevice(name: "alice")
        let bobIdentity = try MemberIdentity()
        _ = try Members(alice).add(name: "bob", recipient: bobIdentity.recipient.description, admin: false)
        let bob = try join("bob", from: alice, identity: bobIdentity)
        for device in [alice, bob] { _ = try StoreSync(device).sync() }
        try bob.database.transaction {
            try bob.recordWrite { write in
                try bob.database.run("INSERT INTO coven_store_settings (id, value, _updated_at) VALUES ('trash_retention', '1', ?1)", [write.stamp])
            }
        }
        _ = try StoreSync(bob).sync()
        XCTAssertEqual(try StoreSync(alice).sync().pulled.refused, 1)
        XCTAssertEqual(try Trash(alice).retention(), Trash.defaultRetention)
        XCTAssertEqual(try StoreSync(alice).lostValues().map(\.why), ["not_authorized"])
    }

    /// A device joining from a snapshot learns the store's trash and its window.
    func testADeviceJoiningFromASnapshotLearnsTheTrash() throws {
        let (a, b, _, _) = try albumWithCover()
        try Trash(a).setRetention(7 * 86_400)
        try b.write(sql: "DELETE FROM covers; DELETE FROM albums")
        for device in [b, a] { _ = try StoreSync(device).sync() }
        _ = try Snapshots(a).snapshot()
        let c = try join("c", from: a, identity: try Members(a).identity())
        XCTAssertEqual(try listed(c).map(\.id), try listed(a).map(\.id))
        XCTAssertEqual(try listed(c).map(\.change), try listed(a).map(\.change))
        XCTAssertEqual(try Trash(c).retention(), 7 * 86_400)
        XCTAssertEqual(try Undelete(c).rows(table: "albums", ids: [Self.album]).rows.count, 2)
        for device in [c, a, b] { _ = try StoreSync(device).sync() }
        XCTAssertEqual(try count(b, "SELECT count(*) FROM covers"), 1)
    }
}

/// Reads a whole file through the engine.
enum FileReaderHelper {
    static func read(_ device: Device, _ file: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try Reader(device).readFile(file) { bytes.append(contentsOf: $0) }
        return bytes
    }
}

final class TrashS3Tests: TrashTests {
    override class var s3Server: S3TestServer.Kind? { .moto }

    // Test discovery on Linux finds a class's own methods only.
    override func testUndeleteComesBackEverywhereWithItsFileAfterGCInsideTheWindow() throws {
        try super.testUndeleteComesBackEverywhereWithItsFileAfterGCInsideTheWindow()
    }
    override func testAfterTheWindowGCFreesTheBytesAndUndeleteSaysBytesAbsent() throws {
        try super.testAfterTheWindowGCFreesTheBytesAndUndeleteSaysBytesAbsent()
    }
    override func testAMassDeleteIsReportedAndUndeleteChangeBringsEveryRowBack() throws {
        try super.testAMassDeleteIsReportedAndUndeleteChangeBringsEveryRowBack()
    }
}

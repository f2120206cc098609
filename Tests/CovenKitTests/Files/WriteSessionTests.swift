@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven write`: each refusal, a failed write changing nothing, a file going with its last
/// reference, and the outbox recording one changeset per write.
final class WriteSessionTests: AlbumDeviceTestCase {
    /// Everything a write could change, to compare before and after a refused one.
    private func snapshot() throws -> [String] {
        var lines: [String] = []
        for table in ["albums", "tracks", "covers", "settings", "coven_files", "coven_staged", "coven_local",
                      "coven_upload_queue", "coven_outbox", "coven_move_state", "coven_meta"] {
            for row in try device.database.query("SELECT * FROM \(table) ORDER BY 1") {
                lines.append(table + ": " + row.values.map { "\($0)" }.joined(separator: "|"))
            }
        }
        lines += try FileManager.default.contentsOfDirectory(atPath: paths.copies).sorted()
        return lines
    }

    private func insertTrack(_ file: String, id: String = "coven_uuid7()") -> String {
        "INSERT INTO tracks (id, album_id, file) VALUES (\(id), '\(album)', \(file))"
    }

    func testEachRefusalChangesNothingAndStagedFilesStayStaged() throws {
        let cover = try stageApp(device, text: "PNG").id
        let big = try stageApp(device, text: String(repeating: "x", count: 17)).id
        let local = try stageApp(device, text: "local", place: .deviceOnly).id
        let song = try Staging(device).prepareUserFile(path: try file("song.flac", "fLaC"), namespace: "music", place: .cloud).id
        let first = try device.write(sql: insertTrack("coven_put_staged('\(try stageApp(device, text: "first").id)')", id: "'01a228b5-0000-7000-8000-000000000001'")).files[0]
        let other = try stageApp(device, text: "other").id

        let cases: [(ErrorCode, String)] = [
            (.fileUnknown, insertTrack("'01a228b5-8875-73ea-8544-f3549008cd7b'")),
            (.fileUnreferenced, "SELECT coven_put_staged('\(cover)')"),
            (.fileUnreferenced, "INSERT INTO tracks (id, album_id, title) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover)'))"),
            (.notFound, insertTrack("coven_put_staged('no-such-staged-id')")),
            (.invalidId, "INSERT INTO albums (id) VALUES ('album-1')"),
            (.invalidId, "INSERT INTO albums (id) VALUES ('0193A9B2-4C1E-7D3A-9F20-5B8E1C2D3F40')"),
            (.invalidId, "INSERT INTO albums (id) VALUES ('0193a9b2-4c1e-1d3a-9f20-5b8e1c2d3f40')"),
            (.invalidId, "INSERT INTO albums (id) VALUES ('01A228B5-0000-7000-8000-000000000002'); INSERT INTO albums (id) VALUES ('x')"),
            (.fileWriteOnce, "UPDATE tracks SET file = coven_put_staged('\(other)') WHERE id = '01a228b5-0000-7000-8000-000000000001'"),
            (.fileWriteOnce, "UPDATE tracks SET file = NULL WHERE id = '01a228b5-0000-7000-8000-000000000001'"),
            (.boundFileTooLarge, "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(big)'))"),
            (.namespaceKind, "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_user_file('\(song)'))"),
            (.namespaceKind, insertTrack("coven_put_user_file('\(cover)')")),
            (.namespaceKind, insertTrack("coven_put_staged('\(song)')")),
            (.namespaceKind, insertTrack("coven_put_user_file('covers', '\(song)')")),
            (.undeclaredNamespace, insertTrack("coven_put_user_file('photos', '\(song)')")),
            (.deviceOnly, "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(local)'))"),
            (.deviceOnly, "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', '\(first)')"),
            (.usage, insertTrack("coven_put_user_file('music', '\(song)', 'attic')")),
            (.sql, "DELETE FROM coven_files"),
            (.sql, "UPDATE coven_staged SET size = 0"),
            (.sql, "DROP TABLE albums"),
            (.sql, "CREATE TABLE extra (a)"),
            (.sql, "PRAGMA foreign_keys = OFF"),
            (.sql, "COMMIT"),
            (.sql, "ATTACH ':memory:' AS other"),
            (.sql, "INSERT INTO no_such_table VALUES (1)"),
            // A refusal after good statements undoes them too.
            (.fileUnknown, "INSERT INTO settings (id, value) VALUES ('theme', 'dark'); " + insertTrack("'01a228b5-8875-73ea-8544-f3549008cd7b'")),
        ]
        let before = try snapshot()
        for (code, sql) in cases {
            assertCovenError(code) { try device.write(sql: sql) }
            XCTAssertEqual(try snapshot(), before, "a refused write changed something: \(sql)")
        }
        // The staged files still stage a write that is right.
        let result = try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover)')); "
                                           + insertTrack("coven_put_user_file('\(song)')"))
        XCTAssertEqual(result.files.count, 2)
    }

    func testErrorDetailsNameTheCell() throws {
        let error = assertCovenError(.fileUnknown) {
            try device.write(sql: insertTrack("'01a228b5-8875-73ea-8544-f3549008cd7b'", id: "'01a228b5-0000-7000-8000-000000000009'"))
        }
        XCTAssertEqual(error?.details, ["table": "tracks", "column": "file", "id": "01a228b5-0000-7000-8000-000000000009",
                                        "file": "01a228b5-8875-73ea-8544-f3549008cd7b"])
    }

    /// A reference names a file of its own row's audience.
    func testAReferenceInAnotherAudienceIsUnknown() throws {
        let circle = "01a228b5-0000-7000-8000-0000000000c1"
        let circleID = try makeCircle(device)
        try device.write(sql: "INSERT INTO albums (id, title, audience) VALUES ('\(circle)', 'Private', '\(circleID)')")
        let file = try device.write(sql: insertTrack("coven_put_staged('\(try stageApp(device, text: "a").id)')")).files[0]
        XCTAssertEqual(try device.fileRecord(file)?.audience, "store")
        assertCovenError(.fileUnknown) {
            try device.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(circle)', '\(file)')")
        }
        // A new file takes its row's audience.
        let inCircle = try device.write(sql: "INSERT INTO tracks (id, album_id, file) VALUES (coven_uuid7(), '\(circle)', coven_put_staged('\(try stageApp(device, text: "b").id)'))").files[0]
        XCTAssertEqual(try device.fileRecord(inCircle)?.audience, circleID)
    }

    func testTheStagingWriteRecordsTheFileQueuesItsUploadAndTheOutbox() throws {
        let staged = try stageApp(device, text: "cover bytes")
        let result = try device.write(sql: "INSERT INTO settings (id, file) VALUES ('cover', coven_put_staged('\(staged.id)'))")
        let fileID = try XCTUnwrap(result.files.first)
        XCTAssertEqual(result.staged, [staged.id: fileID])
        XCTAssertTrue(Identifier.isCanonicalUUID(fileID))
        let record = try XCTUnwrap(try device.fileRecord(fileID))
        XCTAssertEqual(record.coordinates.at, .device)
        XCTAssertEqual(record.coordinates.device, device.deviceID)
        XCTAssertTrue(record.coordinates.object.hasPrefix("files/\(device.deviceID)/"))
        XCTAssertEqual(record.coordinates.object.count, "files/".count + 36 + 1 + 26)
        XCTAssertEqual(record.coordinates.key.count, 64)
        XCTAssertNil(record.hash)
        XCTAssertEqual(record.size, 11)
        let queue = try XCTUnwrap(try device.database.queryOne("SELECT * FROM coven_upload_queue"))
        XCTAssertEqual(queue.string("object"), record.coordinates.object)
        XCTAssertEqual(queue.string("state"), "queued")
        XCTAssertEqual(queue.string("move"), result.move)
        XCTAssertEqual(queue.int("bytes_total"), 8 + 11 + 16)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_move_state WHERE id = ?1 AND state = 'moving'", [result.move ?? ""]), 1)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), 0)
        XCTAssertEqual(try device.database.scalar("SELECT copy FROM coven_local").textValue, "copies/" + staged.id)

        // Two files put by one write get their own names and keys, and share one move.
        let two = try device.write(sql: "INSERT INTO settings (id, file) VALUES ('a', coven_put_staged('\(try stageApp(device, text: "1").id)')), ('b', coven_put_staged('\(try stageApp(device, text: "2").id)'))")
        let records = try two.files.map { try XCTUnwrap(try device.fileRecord($0)) }
        XCTAssertNotEqual(records[0].coordinates.object, records[1].coordinates.object)
        XCTAssertNotEqual(records[0].coordinates.key, records[1].coordinates.key)
        XCTAssertEqual(try count(device, "SELECT count(DISTINCT move) FROM coven_upload_queue WHERE move = ?1", [two.move ?? ""]), 1)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_upload_queue WHERE move = ?1", [two.move ?? ""]), 2)
    }

    /// One outbox write per write: row images of the synced tables and coven_files, stamped
    /// with the write's clock value, which every synced row it touched carries in _updated_at.
    func testTheOutboxRecordsOneWriteOfRowImages() throws {
        let before = try count(device, "SELECT count(*) FROM coven_outbox")
        let staged = try stageApp(device, text: "x")
        try device.write(sql: "INSERT INTO settings (id, value, file) VALUES ('theme', 'dark', coven_put_staged('\(staged.id)')); UPDATE albums SET title = 'Let It Be'")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_outbox"), before + 1)
        let entry = try XCTUnwrap(try device.database.queryOne("SELECT * FROM coven_outbox ORDER BY seq DESC LIMIT 1"))
        let hlc = try XCTUnwrap(entry.string("hlc"))
        let changes = try RowEntryCodec.decode(try XCTUnwrap(entry.bytes("entries")))
        XCTAssertEqual(Set(changes.map(\.table)), ["settings", "albums", "coven_files"])
        XCTAssertEqual(entry.int("rows"), Int64(changes.count))
        // Whole rows, every column, with the write's stamp.
        let setting = try XCTUnwrap(changes.first { $0.table == "settings" })
        XCTAssertEqual(setting.kind, .upsert)
        XCTAssertEqual(setting.stamp, hlc)
        XCTAssertEqual(setting.value("value"), .text("dark"))
        XCTAssertEqual(setting.value("_updated_at"), .text(hlc))
        let albumImage = try XCTUnwrap(changes.first { $0.table == "albums" })
        XCTAssertEqual(albumImage.value("title"), .text("Let It Be"))
        XCTAssertEqual(Set(albumImage.columns), Set(try device.database.query("SELECT name FROM pragma_table_info('albums')").compactMap { $0.string("name") }))
        XCTAssertEqual(try device.database.scalar("SELECT _updated_at FROM settings WHERE id = 'theme'").textValue, hlc)
        XCTAssertEqual(try device.database.scalar("SELECT _updated_at FROM albums").textValue, hlc)
        XCTAssertEqual(try device.database.scalar("SELECT _updated_at FROM coven_files").textValue, hlc)
        XCTAssertEqual(entry.string("waits_for"), "[]")

        // Stamps only grow, even within one millisecond.
        var stamps: [String] = [hlc]
        for index in 0..<5 {
            try device.write(sql: "UPDATE settings SET value = '\(index)' WHERE id = 'theme'")
            stamps.append(try XCTUnwrap(try device.database.scalar("SELECT hlc FROM coven_outbox ORDER BY seq DESC LIMIT 1").textValue))
        }
        XCTAssertEqual(stamps, stamps.sorted())
        XCTAssertEqual(Set(stamps).count, stamps.count)
        // A write that changes no synced row records nothing; a local table is not recorded.
        let count0 = try count(device, "SELECT count(*) FROM coven_outbox")
        try device.write(sql: "SELECT 1")
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_outbox"), count0)

        // A bound reference's write waits for its upload.
        let cover = try stageApp(device, text: "tiny")
        try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover.id)'))")
        let object = try XCTUnwrap(try device.database.scalar("SELECT object FROM coven_upload_queue WHERE bound = 1").textValue)
        XCTAssertEqual(try device.database.scalar("SELECT waits_for FROM coven_outbox ORDER BY seq DESC LIMIT 1").textValue, "[\"\(object)\"]")
        XCTAssertTrue(try device.database.scalar("SELECT move FROM coven_upload_queue WHERE bound = 1").isNull)
    }

    // MARK: - A file goes with its last reference

    private func putSetting(_ id: String) throws -> (file: String, object: String, copy: String) {
        let staged = try stageApp(device, text: "bytes of \(id)")
        let file = try device.write(sql: "INSERT INTO settings (id, file) VALUES ('\(id)', coven_put_staged('\(staged.id)'))").files[0]
        let object = try XCTUnwrap(try device.fileRecord(file)).coordinates.object
        return (file, object, paths.folder + "/copies/" + staged.id)
    }

    /// A record no row names ends: its image stays (a row written elsewhere may still bring it
    /// back), and so do its upload and coven's copy, until gc frees the bytes.
    private func assertReleased(_ put: (file: String, object: String, copy: String), line: UInt = #line) throws {
        XCTAssertNil(try device.fileRecord(put.file), "the record goes", line: line)
        XCTAssertNotNil(try device.fileRecords.image(put.file), "its image stays", line: line)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_upload_queue WHERE object = ?1", [put.object]), 1, "its upload goes on", line: line)
        XCTAssertTrue(FileManager.default.fileExists(atPath: put.copy), "coven's copy stays until gc frees the bytes", line: line)
    }

    func testDeletingTheLastRowReleasesTheFile() throws {
        let put = try putSetting("one")
        try device.write(sql: "INSERT INTO settings (id, file) VALUES ('two', '\(put.file)')")
        try device.write(sql: "DELETE FROM settings WHERE id = 'one'")
        XCTAssertNotNil(try device.fileRecord(put.file), "another row still names it")
        XCTAssertTrue(FileManager.default.fileExists(atPath: put.copy))
        try device.write(sql: "DELETE FROM settings WHERE id = 'two'")
        try assertReleased(put)
        // The deletion of the record is in the write's record, as a tombstone.
        let entries = try RowEntryCodec.decode(try XCTUnwrap(try device.database.scalar("SELECT entries FROM coven_outbox ORDER BY seq DESC LIMIT 1").bytesValue))
        XCTAssertTrue(entries.contains { $0.table == "coven_files" && $0.kind == .delete && $0.id == put.file })
        XCTAssertTrue(entries.contains { $0.table == "settings" && $0.kind == .delete && $0.id == "two" })
        // Uploaded and published: gc frees the bytes, the image and coven's copy.
        _ = try UploadWorker.run(paths: device.paths, jobs: 1, once: true, settings: UploadSettings(environment: [:]))
        _ = try StoreSync(device).sync()
        XCTAssertEqual(try collectGarbageByProof(device).deleted.map(\.key), [put.object])
        XCTAssertNil(try device.fileRecords.image(put.file))
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_local WHERE object = ?1", [put.object]), 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: put.copy), "coven's copy is removed")
    }

    func testClearingTheLastReferenceReleasesTheFile() throws {
        let put = try putSetting("one")
        try device.write(sql: "UPDATE settings SET file = NULL WHERE id = 'one'")
        try assertReleased(put)
    }

    func testRepointingTheLastReferenceReleasesTheOldFile() throws {
        let put = try putSetting("one")
        let next = try stageApp(device, text: "next")
        let newFile = try device.write(sql: "UPDATE settings SET file = coven_put_staged('\(next.id)') WHERE id = 'one'").files[0]
        try assertReleased(put)
        XCTAssertNotNil(try device.fileRecord(newFile))
        // Repointing to an existing file releases the old one too.
        let other = try putSetting("two")
        try device.write(sql: "UPDATE settings SET file = '\(newFile)' WHERE id = 'two'")
        try assertReleased(other)
    }

    func testDeletingAParentRowDoesNotReleaseAChildsFile() throws {
        let file = try device.write(sql: insertTrack("coven_put_staged('\(try stageApp(device, text: "t").id)')")).files[0]
        try device.write(sql: "UPDATE albums SET title = 'x'")
        XCTAssertNotNil(try device.fileRecord(file))
    }

    /// A write of many rows is checked a batch of changes at a time, its references gathered
    /// over all of them: a file one row stops naming and a row of a later batch names stays, a
    /// file put on a row of a later batch is named, and the write deleting them all releases both.
    func testReferencesAreGatheredOverAWriteOfManyRows() throws {
        let put = try putSetting("one")
        try device.write(sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500) INSERT INTO settings (id, value) SELECT 'row' || i, 'v' FROM n")
        try device.write(sql: "DELETE FROM settings WHERE id = 'one'; UPDATE settings SET value = 'w'; UPDATE settings SET file = '\(put.file)' WHERE id = 'row1500'")
        XCTAssertNotNil(try device.fileRecord(put.file), "a row of a later batch names it")
        XCTAssertTrue(FileManager.default.fileExists(atPath: put.copy))

        let staged = try stageApp(device, text: "late")
        let late = try device.write(sql: "UPDATE settings SET value = 'x'; UPDATE settings SET file = coven_put_staged('\(staged.id)') WHERE id = 'row1499'").files[0]
        let object = try XCTUnwrap(try device.fileRecord(late)).coordinates.object

        try device.write(sql: "DELETE FROM settings")
        try assertReleased(put)
        try assertReleased((late, object, paths.folder + "/copies/" + staged.id))
    }

    /// An upload already begun at the provider goes on when its record ends.
    func testAnUploadUnderWayGoesOnWhenItsRecordEnds() throws {
        let put = try putSetting("one")
        try device.database.run("UPDATE coven_upload_queue SET upload_id = 'session-1' WHERE object = ?1", [put.object])
        try device.write(sql: "DELETE FROM settings WHERE id = 'one'")
        XCTAssertNil(try device.fileRecord(put.file))
        XCTAssertEqual(try device.database.scalar("SELECT state FROM coven_upload_queue WHERE object = ?1", [put.object]).textValue, "queued")
        XCTAssertTrue(FileManager.default.fileExists(atPath: put.copy))
    }

    /// coven_existing_file: a new record over the same object; the object goes only with the
    /// last record naming it.
    func testExistingFileSharesTheObjectUntilTheLastRecordGoes() throws {
        let put = try putSetting("one")
        let copy = try device.write(sql: "INSERT INTO settings (id, file) VALUES ('two', coven_existing_file('\(put.file)'))").files[0]
        XCTAssertNotEqual(copy, put.file)
        XCTAssertEqual(try device.fileRecord(copy)?.coordinates.object, put.object)
        try device.write(sql: "DELETE FROM settings WHERE id = 'one'")
        XCTAssertNil(try device.fileRecord(put.file))
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_upload_queue WHERE object = ?1", [put.object]), 1)
        XCTAssertTrue(FileManager.default.fileExists(atPath: put.copy))
        try device.write(sql: "DELETE FROM settings WHERE id = 'two'")
        try assertReleased((copy, put.object, put.copy))
        assertCovenError(.fileUnknown) { try device.write(sql: "INSERT INTO settings (id, file) VALUES ('x', coven_existing_file('\(put.file)'))") }
    }

    /// A file another device holds on that device only: not ours to copy over
    /// (`not_this_device`), and a bound reference cannot name it (`device_only`).
    func testAFileOnAnotherDeviceOnly() throws {
        let elsewhere = "01a228b5-0000-7000-8000-0000000000e1"
        let coordinates = Coordinates(at: .device, device: "0d66d330-9a6d-4a26-8c94-738d73b70517",
                                      object: "files/0d66d330-9a6d-4a26-8c94-738d73b70517/abcdefghijklmnopqrstuvwxyz", key: String(repeating: "0", count: 64))
        // As a sync would apply it: a record made by another device.
        try device.database.run("INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at) VALUES (?1, 'store', 'covers', 4, NULL, ?2, 'x')",
                                [elsewhere, coordinates.json])
        let copied = assertCovenError(.notThisDevice) {
            try device.write(sql: "INSERT INTO settings (id, file) VALUES ('copy', coven_existing_file('\(elsewhere)'))")
        }
        XCTAssertEqual(copied?.details["device"], "0d66d330-9a6d-4a26-8c94-738d73b70517")
        assertCovenError(.deviceOnly) {
            try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', '\(elsewhere)')")
        }
        // A trailing reference may name it: other devices see it on that device.
        XCTAssertNoThrow(try device.write(sql: "INSERT INTO settings (id, file) VALUES ('there', '\(elsewhere)')"))
        XCTAssertEqual(try DeviceStatus(of: device).files.deviceOnlyElsewhere, 1)
    }

    /// A bound reference may name a file uploading for another bound reference; the write
    /// waits for that upload too.
    func testABoundReferenceToAFileUploadingForAnother() throws {
        let cover = try stageApp(device, text: "tiny")
        let file = try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover.id)'))").files[0]
        try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', '\(file)')")
        let object = try XCTUnwrap(try device.fileRecord(file)).coordinates.object
        let waits = try device.database.query("SELECT waits_for FROM coven_outbox ORDER BY seq DESC LIMIT 2").compactMap { $0.string("waits_for") }
        XCTAssertEqual(waits, ["[\"\(object)\"]", "[\"\(object)\"]"])
        // Once its upload is no longer under way (failed), it is on this device only: refused.
        try device.database.run("UPDATE coven_upload_queue SET state = 'failed' WHERE object = ?1", [object])
        assertCovenError(.deviceOnly) { try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', '\(file)')") }
    }

    /// `write --each` prepares its statements once a write, not once a line: a write of 300
    /// files prepares no more than one of 30 (the upload queued for each file was a statement
    /// prepared anew, a third of the time of a 100,000-line write).
    func testWriteEachPreparesItsStatementsOnceNotOncePerLine() throws {
        func prepares(_ count: Int) throws -> Int {
            let staged = try (0..<count).map { _ in try stageApp(device, text: "x").id }
            var index = 0
            let before = device.database.statementsPrepared
            try device.writeEach(sql: "INSERT INTO settings (id, file) VALUES (:id, coven_put_staged(:staged))", listsFiles: false) {
                guard index < staged.count else { return nil }
                defer { index += 1 }
                return (index + 1, ["id": .text("\(count)-\(index)"), "staged": .text(staged[index])])
            }
            return device.database.statementsPrepared - before
        }
        let few = try prepares(30)
        let many = try prepares(300)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM settings"), 330)
        let positions = try device.database.query("SELECT position FROM coven_upload_queue ORDER BY position").compactMap { $0.int("position") }
        XCTAssertEqual(positions.count, 330)
        XCTAssertEqual(positions, Array(1...Int64(positions.count)), "queued in order, one after the other")
        XCTAssertLessThanOrEqual(many, few + 2, "statements prepared per line: \(few) for 30 lines, \(many) for 300")
    }

    /// `write --each` of many files holds none of them in memory: its puts are rows of a
    /// temporary table, read back a page at a time, checked across pages, and refused whole.
    func testWriteEachKeepsItsFilesInTheDatabaseAndListsThemAPageAtATime() throws {
        let total = PutIntents.pageSize + 101
        let staged = try (0..<total).map { _ in try stageApp(device, text: "x").id }
        func each(_ ids: [String]) -> () throws -> (line: Int, parameters: [String: SQLValue])? {
            var index = 0
            return {
                guard index < ids.count else { return nil }
                defer { index += 1 }
                return (index + 1, ["id": .text("s\(index)"), "staged": .text(ids[index])])
            }
        }
        let sql = "INSERT INTO settings (id, file) VALUES (:id, coven_put_staged(:staged))"
        // A staged file put twice, the second time on a later page of the puts: refused whole.
        let error = assertCovenError(.notFound) { try device.writeEach(sql: sql, listsFiles: false, next: each(staged + [staged[3]])) }
        XCTAssertEqual(error?.details["line"], String(total + 1))
        XCTAssertEqual(try count(device, "SELECT count(*) FROM settings"), 0)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged"), Int64(total))
        var listed: [(file: String, staged: String?)] = []
        try device.forEachFilePut { listed.append(($0, $1)) }
        XCTAssertTrue(listed.isEmpty, "a refused write lists no file")

        let result = try device.writeEach(sql: sql, listsFiles: false, next: each(staged))
        XCTAssertEqual(result.files, [])
        XCTAssertEqual(result.staged, [:])
        XCTAssertEqual(try count(device, "SELECT count(*) FROM temp.coven_write_puts"), Int64(total), "the puts are rows, not memory")
        try device.forEachFilePut { listed.append(($0, $1)) }
        XCTAssertEqual(listed.map(\.staged), staged, "in the order the write put them")
        let rows = Dictionary(uniqueKeysWithValues: try device.database.query("SELECT id, file FROM settings").map { ($0.string("id") ?? "", $0.string("file") ?? "") })
        for (index, put) in listed.enumerated() {
            XCTAssertEqual(rows["s\(index)"], put.file)
            XCTAssertEqual(try device.fileRecord(put.file)?.size, 1)
        }
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_upload_queue"), Int64(total))

        // A refused write after it lists nothing (not the files of the write before), nor does
        // the next write.
        assertCovenError(.notFound) { try device.writeEach(sql: sql, listsFiles: false, next: each(["no-such-staged-id"])) }
        var after = 0
        try device.forEachFilePut { _, _ in after += 1 }
        XCTAssertEqual(after, 0)
        try device.write(sql: "UPDATE settings SET value = 'v' WHERE id = 's0'")
        try device.forEachFilePut { _, _ in after += 1 }
        XCTAssertEqual(after, 0)
        // Listing them in the result still works, in order.
        let more = try (0..<3).map { _ in try stageApp(device, text: "y").id }
        var index = 0
        let listing = try device.writeEach(sql: "INSERT INTO settings (id, file) VALUES (:id, coven_put_staged(:staged))") {
            guard index < more.count else { return nil }
            defer { index += 1 }
            return (index + 1, ["id": .text("m\(index)"), "staged": .text(more[index])])
        }
        XCTAssertEqual(listing.files.count, 3)
        XCTAssertEqual(Set(listing.staged.keys), Set(more))
        XCTAssertEqual(try device.database.query("SELECT file FROM settings WHERE id LIKE 'm%' ORDER BY id").compactMap { $0.string("file") }, listing.files)
        XCTAssertEqual(try count(device, "SELECT count(*) FROM temp.coven_write_puts"), 0, "listed in the result, not kept")
    }

    /// The write's own tables are coven's: the app's SQL may not write them, even while coven's
    /// functions, which do, run in the same statement.
    func testTheAppsSQLMayNotWriteTheWritesOwnTables() throws {
        let cover = try stageApp(device, text: "PNG").id
        try device.write(sql: "SELECT 1")
        for sql in [
            "DELETE FROM temp.coven_write_puts",
            "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover)')); DELETE FROM temp.coven_write_puts",
            "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover)')); UPDATE temp.coven_write_references SET named = 1",
            "INSERT INTO temp.coven_write_references (file, named) SELECT coven_put_staged('\(cover)'), 1",
        ] {
            let error = assertCovenError(.sql) { try device.write(sql: sql) }
            XCTAssertTrue(error?.message.contains("a write changes only the app's rows") ?? false, "\(sql): \(error?.message ?? "")")
        }
        XCTAssertEqual(try count(device, "SELECT count(*) FROM coven_staged WHERE id = ?1", [cover]), 1)
        XCTAssertEqual(try device.write(sql: "INSERT INTO covers (id, album_id, file) VALUES (coven_uuid7(), '\(album)', coven_put_staged('\(cover)'))").files.count, 1)
    }

    func testParametersBindAndReturningRowsComeBack() throws {
        let result = try device.write(sql: "INSERT INTO settings (id, value) VALUES (:id, @value) RETURNING id, value",
                                      parameters: ["id": .text("theme"), "value": .text("dark")])
        XCTAssertEqual(result.rows.map { $0.values }, [[.text("theme"), .text("dark")]])
        assertCovenError(.usage) { try device.write(sql: "SELECT :missing") }
        assertCovenError(.usage) { try device.write(sql: "SELECT ?") }
    }
}

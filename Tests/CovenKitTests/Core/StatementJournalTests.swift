@testable import CovenKit
import CovenTestSupport
import CSQLite
import Foundation
import XCTest

/// A statement's journal (the pages it changed, kept so it alone could be undone) stays in
/// memory up to ``Database/statementJournalInMemory``: a statement of a transaction that
/// changes a few MiB of rows opens no temporary file.
final class StatementJournalTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = try TestPaths.temporaryDirectory("statement-journal")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// SQLite's temporary files open in this process (deleted as soon as made: found by their
    /// descriptors).
    private func openTemporaryFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)
        }.filter { $0.contains("etilqs_") }
    }

    func testAStatementChangingMegabytesOfRowsKeepsItsJournalInMemory() throws {
        let database = try Database(path: folder + "/journal.db", create: true)
        XCTAssertEqual(Database.configured, SQLITE_OK, "SQLite was initialized before coven set its statement journal")
        try database.execute("PRAGMA journal_mode = WAL")
        // A CHECK constraint: an update of many rows may fail half-way, so SQLite journals it.
        try database.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL CHECK (length(body) > 0))")
        try database.transaction {
            try database.run("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000) INSERT INTO t SELECT i, printf('%.300c', 'a') FROM n")
        }
        let before = try openTemporaryFiles()
        try database.transaction {
            try database.run("UPDATE t SET body = 'b' WHERE id = 1")
            // About 1.3 MB of pages that were there before it: 20 times SQLite's 64 KiB.
            try database.run("UPDATE t SET body = printf('%.300c', 'c')")
            XCTAssertEqual(try openTemporaryFiles(), before, "the statement's journal went to a file")
        }
        XCTAssertEqual(try database.scalar("SELECT count(*) FROM t WHERE body = printf('%.300c', 'c')").intValue, 4000)
    }
}

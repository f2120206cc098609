@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A statement run many times shares its rows' column names; they follow the schema when
/// SQLite prepares the statement again.
final class StatementRowsTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = try TestPaths.temporaryDirectory("statement-rows")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func testTheRowsOfAStatementNameTheColumnsOfTheSchemaTheyWereReadUnder() throws {
        let database = try Database(path: folder + "/rows.db", create: true)
        try database.execute("CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        let select = "SELECT * FROM t ORDER BY a"
        var rows = try database.query(select)
        XCTAssertEqual(rows.map(\.columns), [["a", "b"], ["a", "b"]])
        XCTAssertEqual(rows.map { $0.string("b") }, ["one", "two"])

        // A column more: the cached statement is prepared again by SQLite, with three columns.
        try database.execute("ALTER TABLE t ADD COLUMN c INTEGER NOT NULL DEFAULT 7")
        rows = try database.query(select)
        XCTAssertEqual(rows.map(\.columns), [["a", "b", "c"], ["a", "b", "c"]])
        XCTAssertEqual(rows.map { $0.int("c") }, [7, 7])

        // As many columns, one renamed: the rows say its new name.
        try database.execute("ALTER TABLE t RENAME COLUMN b TO title")
        rows = try database.query(select)
        XCTAssertEqual(rows.map(\.columns), [["a", "title", "c"], ["a", "title", "c"]])
        XCTAssertEqual(rows.map { $0.string("title") }, ["one", "two"])
        XCTAssertNil(rows[0].string("b"))

        // Two statements of different columns, one after the other, each keep their own.
        XCTAssertEqual(try database.queryOneCached("SELECT a AS x FROM t WHERE a = ?1", [1])?.columns, ["x"])
        XCTAssertEqual(try database.queryOneCached("SELECT a AS y, c FROM t WHERE a = ?1", [2])?.columns, ["y", "c"])
        XCTAssertEqual(try database.queryOneCached("SELECT a AS x FROM t WHERE a = ?1", [2])?.int("x"), 2)
    }

    /// A blob bound where it is (a staged file's chunk hashes) is stored as given, and the kept
    /// statement holds no pointer to it after: its next run, without the blob, binds nothing
    /// stale, and a failed run clears it too.
    func testABlobBoundInPlaceIsStoredAsGivenAndNotKeptBound() throws {
        let database = try Database(path: folder + "/in-place.db", create: true)
        try database.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB)")
        let insert = "INSERT INTO t (id, b) VALUES (?1, ?2)"
        var big = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
        try database.runCached(insert, [1, SQLValue.text("replaced")], inPlace: big, at: 2)
        try database.runCached(insert, [2, SQLValue.null], inPlace: [], at: 2)
        big[0] ^= 0xFF  // changed after its run: the row keeps what was bound
        try database.runCached(insert, [3])
        let rows = try database.query("SELECT id, b, typeof(b) AS kind FROM t ORDER BY id")
        XCTAssertEqual(rows[0].bytes("b").map { Array($0) }, (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) })
        XCTAssertEqual(rows[1].string("kind"), "blob")
        XCTAssertEqual(rows[1].bytes("b")?.count, 0)
        XCTAssertEqual(rows[2].string("kind"), "null", "the in-place binding was cleared")
        XCTAssertThrowsError(try database.runCached(insert, [1, SQLValue.null], inPlace: [1, 2, 3], at: 2), "a taken id")
        try database.runCached(insert, [4])
        XCTAssertEqual(try database.query("SELECT typeof(b) AS kind FROM t WHERE id = 4").first?.string("kind"), "null")
    }
}

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
}

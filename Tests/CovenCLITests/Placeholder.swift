@testable import coven
import XCTest

final class ProbeTests: XCTestCase {
    func testParse() throws {
        let inv = try Parser.parse(["--json", "a"], options: [], arguments: [ArgumentSpec("X", help: "x")], command: "t")
        XCTAssertEqual(inv.arguments, ["a"])
    }
}

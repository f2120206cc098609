@testable import CovenKit
import Foundation
import XCTest

/// The three ways make-device-only takes a file and its path.
final class DeviceOnlyRequestTests: XCTestCase {
    func testArguments() throws {
        let request = try DeviceOnlyRequest.argument("f1=AC/DC/Back in Black.flac", position: 3)
        XCTAssertEqual(request.file, "f1")
        XCTAssertEqual(request.names, ["AC", "DC", "Back in Black.flac"])
        XCTAssertEqual(request.input, "argument 3")
        XCTAssertEqual(request.given, "AC/DC/Back in Black.flac")
        // Only the first = separates the file from its path.
        XCTAssertEqual(try DeviceOnlyRequest.argument("f1=a=b", position: 1).names, ["a=b"])
        XCTAssertEqual(assertCovenError(.usage) { try DeviceOnlyRequest.argument("=a", position: 2) }?.details["input"], "argument 2")
        // An absolute path has an empty first name.
        assertCovenError(.empty) { try DeviceOnlyRequest.argument("f1=/etc/passwd", position: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.argument("f1=a/", position: 1) }
    }

    func testTabLines() throws {
        let request = try DeviceOnlyRequest.tabLine("f2\tAC/DC\tBack in Black.flac", number: 7)
        XCTAssertEqual(request.names, ["AC/DC", "Back in Black.flac"])
        XCTAssertEqual(request.input, "line 7")
        XCTAssertEqual(request.given, "[\"AC/DC\",\"Back in Black.flac\"]")
        assertCovenError(.usage) { try DeviceOnlyRequest.tabLine("\tname", number: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.tabLine("f2\t\tname", number: 1) }
        assertCovenError(.empty) { try DeviceOnlyRequest.tabLine("f2\tname\t", number: 1) }
    }

    func testJSONLines() throws {
        let request = try DeviceOnlyRequest.jsonLine("{\"file\": \"f3\", \"path\": [\"AC/DC\", \"Back in Black.flac\"]}", number: 2)
        XCTAssertEqual(request.names, ["AC/DC", "Back in Black.flac"])
        XCTAssertEqual(request.input, "line 2")
        for bad in ["[]", "not json", "{\"file\": 3, \"path\": [\"a\"]}", "{\"file\": \"f\"}", "{\"file\": \"f\", \"path\": \"a/b\"}",
                    "{\"file\": \"f\", \"path\": [\"a\"], \"extra\": 1}", "{\"file\": \"f\", \"path\": [1]}"] {
            XCTAssertEqual(assertCovenError(.usage) { try DeviceOnlyRequest.jsonLine(bad, number: 5) }?.details["input"], "line 5", bad)
        }
        assertCovenError(.empty) { try DeviceOnlyRequest.jsonLine("{\"file\": \"f\", \"path\": []}", number: 1) }
    }
}

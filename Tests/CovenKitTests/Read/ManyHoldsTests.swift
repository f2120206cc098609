@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven get` of many files (ManyHolds): each held, several at once, reported in the order of
/// the list, a file that fails reported on its own and the others held.
final class ManyHoldsTests: ReadTestCase {
    func testFilesAreHeldInParallelAndReportedInTheOrderOfTheListWithTheFailuresAmongThem() throws {
        var files: [String] = []
        for index in 0..<20 {
            files.append(try StoredFiles.stageApp(device, bytes: Array("file \(index)".utf8), namespace: "blobs", table: "blobs"))
        }
        _ = try StoredFiles.store(device, file: files[0])
        let absent = "01234567-0123-4123-8123-0123456789ab"
        // Past one window, with an unknown id and an id given twice among them.
        var list: [String] = []
        for round in 0..<4 { list += files.map { $0 } + (round == 1 ? [absent, files[3]] : []) }
        var given = list.makeIterator()
        var outcomes: [HoldOutcome] = []
        // Each path is checked when it is reported, as `coven get` prints it: a copy in the
        // cache may give way later (coven-get(1)), a later window's hold of the same file
        // included.
        var checked: [String] = []
        let summary = try ManyHolds(device: device).hold(parallel: 4, next: { given.next() }, report: { outcome in
            outcomes.append(outcome)
            if case .success(let held) = outcome.result, let index = files.firstIndex(of: outcome.file) {
                checked.append((try? String(contentsOfFile: held.path, encoding: .utf8)) == "file \(index)" ? "ok" : "\(outcome.file) at \(held.path)")
            }
        })
        XCTAssertEqual(outcomes.map(\.file), list, "one outcome per id, in the order of the list")
        XCTAssertEqual(summary, HoldSummary(held: list.count - 1, failed: 1))
        XCTAssertEqual(checked, Array(repeating: "ok", count: list.count - 1), "every path holds its file when reported")
        for outcome in outcomes {
            if case .failure(let error) = outcome.result {
                XCTAssertEqual(outcome.file, absent)
                XCTAssertEqual(error.code, .fileAbsent)
            }
        }
    }
}

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

    /// The files a batch fetches fresh sit beside the ones held the usual way, in one list: a
    /// partial in the cache (resumed with its missing chunks), a file on this device only (its
    /// copy), one held already. Every line comes in the order of the list with the file's bytes,
    /// and the fresh files are recorded complete, synced and checked, with the proof of their
    /// check.
    func testFreshFilesFetchedInABatchSitBesideTheOnesHeldTheUsualWay() throws {
        let chunk = Int(ObjectLayout.chunkSize)
        var bytes: [String: [UInt8]] = [:]
        var fresh: [String] = []
        for index in 0..<10 {
            let content = pattern(3000 + index, seed: UInt64(index))
            let id = try storedFile(content)
            fresh.append(id)
            bytes[id] = content
        }
        let partial = try storedFile(pattern(3 * chunk, seed: 50))
        bytes[partial] = pattern(3 * chunk, seed: 50)
        _ = try read(partial, ReadRange(offset: 0, length: 10))
        let held = try storedFile(pattern(500, seed: 51))
        bytes[held] = pattern(500, seed: 51)
        _ = try Reader(device).holdFile(held)
        let local = try StoredFiles.stageApp(device, bytes: pattern(700, seed: 52), namespace: "blobs", table: "blobs", place: .deviceOnly)
        bytes[local] = pattern(700, seed: 52)
        let list = [fresh[0], partial, fresh[1], local] + fresh[2...] + [held, fresh[0]]
        var given = list.makeIterator()
        var outcomes: [HoldOutcome] = []
        var contents: [[UInt8]?] = []
        let summary = try ManyHolds(device: device).hold(parallel: 3, next: { given.next() }, report: { outcome in
            outcomes.append(outcome)
            contents.append((try? outcome.result.get()).flatMap { FileManager.default.contents(atPath: $0.path) }.map { [UInt8]($0) })
        })
        XCTAssertEqual(summary, HoldSummary(held: list.count, failed: 0))
        XCTAssertEqual(outcomes.map(\.file), list, "one line per id, in the order of the list")
        for (id, content) in zip(list, contents) { XCTAssertEqual(content, bytes[id], "the held copy of \(id) holds its bytes when reported") }
        func source(_ id: String) -> ReadSource? { outcomes.first { $0.file == id }.flatMap { try? $0.result.get().report.source } }
        XCTAssertEqual(source(local), .copy)
        XCTAssertEqual(source(held), .cache)
        XCTAssertEqual(source(partial), .storage)
        let resumed = try XCTUnwrap(outcomes.first { $0.file == partial }?.result.get().report)
        XCTAssertLessThan(resumed.bytesFetched, ObjectLayout.encryptedSize(plaintextSize: Int64(3 * chunk)), "only the missing chunks fetched")
        for id in fresh {
            XCTAssertEqual(source(id), .storage)
            XCTAssertEqual(try cacheRow(id)?.int("complete"), CacheState.completeVerified.rawValue, "recorded complete, synced and checked")
            let object = try device.requireFile(id).coordinates.object
            XCTAssertTrue(CheckedBytes(device).isStillChecked("cache:" + object, path: Cache(device).cachePaths(object: object).data), "with the proof of its check")
        }
    }
}

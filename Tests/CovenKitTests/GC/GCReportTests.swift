@testable import CovenKit
import Foundation
import XCTest

/// What gc tells as it goes: each delete once storage confirmed it (and it is recorded here),
/// and an object already gone apart from those it deleted.
final class GCReportTests: GCTestCase {
    func testEachDeleteIsToldOnceConfirmedAndAnObjectAlreadyGoneApart() throws {
        let a = try makeDevice(name: "a")
        let (_, first) = try storedSetting(a, id: "s1", "bytes of s1")
        let (_, second) = try storedSetting(a, id: "s2", "bytes of s2")
        _ = try StoreSync(a).sync()
        try a.write(sql: "DELETE FROM settings")
        _ = try StoreSync(a).sync()
        try a.connectStorage().delete(first)
        // The trash would keep the bytes for its window (TrashTests): the proof is judged here.
        try Trash(a).empty(before: nil)
        var told: [(key: String, gone: Bool, stillCandidate: Bool)] = []
        let report = try GarbageCollection(a).collectGarbage { deleted, gone in
            let left = (try? a.database.scalar("SELECT count(*) FROM coven_gc_candidates WHERE object = ?1", [deleted.key]).intValue) ?? -1
            told.append((deleted.key, gone, left != 0))
        }
        XCTAssertEqual(report.deleted.map(\.key), [second])
        XCTAssertEqual(report.alreadyGone.map(\.key), [first])
        XCTAssertEqual(Set(told.map(\.key)), [first, second])
        XCTAssertEqual(told.first { $0.key == first }?.gone, true)
        XCTAssertEqual(told.first { $0.key == second }?.gone, false)
        XCTAssertFalse(told.contains { $0.stillCandidate }, "told only once the delete is recorded")
        XCTAssertFalse(try stored(a, second))
    }
}

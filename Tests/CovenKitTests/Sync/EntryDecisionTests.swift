@testable import CovenKit
import XCTest

/// Last writer wins as one pure rule (Sync/EntryDecision.swift), asked directly.
final class EntryDecisionTests: XCTestCase {
    private let a = "2026-12-04T08:00:00.000Z-0000-a", b = "2026-12-04T08:00:01.000Z-0000-b", c = "2026-12-04T08:00:02.000Z-0000-c"

    private func decide(_ kind: RowEntry.Kind, file: Bool = false, _ stamp: String,
                        local: String? = nil, tombstone: String? = nil, image: String? = nil) -> EntryDecision {
        EntryDecision.decide(kind: kind, isFileRecord: file, stamp: stamp, local: local, tombstone: tombstone, image: image)
    }

    /// An upsert's.
    private func decide(_ stamp: String, file: Bool = false, local: String? = nil, tombstone: String? = nil, image: String? = nil) -> EntryDecision {
        decide(.upsert, file: file, stamp, local: local, tombstone: tombstone, image: image)
    }

    func testANewerEntryWinsOverTheRowItsTombstoneAndTheRegistersImage() {
        XCTAssertEqual(decide(b), .win, "nothing here")
        XCTAssertEqual(decide(b, local: a), .win)
        XCTAssertEqual(decide(.delete, b, local: a), .win)
        XCTAssertEqual(decide(b, tombstone: a), .win, "a write after a delete brings the row back")
        XCTAssertEqual(decide(b, file: true, image: a), .win)
    }

    func testAnOlderEntryLosesToTheNewestOfWhatIsHere() {
        XCTAssertEqual(decide(a, local: b), .lose(current: b))
        XCTAssertEqual(decide(a, local: b, tombstone: c), .lose(current: c), "a late write older than a delete stays deleted")
        XCTAssertEqual(decide(.delete, a, local: c), .lose(current: c))
        XCTAssertEqual(decide(a, file: true, image: b), .lose(current: b))
    }

    func testTheSameStampIsTheSameWrite() {
        XCTAssertEqual(decide(b, local: b), .skip)
        XCTAssertEqual(decide(.delete, b, tombstone: b), .skip)
        XCTAssertEqual(decide(.retract, b, tombstone: b), .skip)
    }

    func testAMovedRowsImageLandsOverItsOwnRetract() {
        // One write moved the row: its retract (in the old audience) left a tombstone of the
        // write's stamp, and its image (in the new one) carries the same stamp.
        XCTAssertEqual(decide(b, tombstone: b), .crossedImage)
        XCTAssertEqual(decide(b, local: b, tombstone: b), .skip, "the image is here already")
        XCTAssertEqual(decide(.delete, b, tombstone: b), .skip)
    }

    func testAFileRecordsDeleteIsSettledNotDecided() {
        XCTAssertEqual(decide(.delete, file: true, a, image: c), .settleFileRecord)
        XCTAssertEqual(decide(.retract, file: true, c), .settleFileRecord)
    }
}

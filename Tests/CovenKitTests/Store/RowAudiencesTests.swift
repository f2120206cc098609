@testable import CovenKit
import Foundation
import XCTest

/// The one owner of a row's audience and of the kept rule answers for many rows at once.
final class RowAudiencesTests: AlbumDeviceTestCase {
    func testAudiencesFollowTheColumnAndTheParentForManyRowsInOneAnswer() throws {
        let circle = "01a228b5-0000-7000-8000-0000000000c1"
        let tracks = (0..<4).map { "01a228b5-0000-7000-8000-00000000010\($0)" }
        let circle1 = try makeCircle(device, name: "one")
        let circle2 = try makeCircle(device, name: "two")
        try device.write(sql: """
            INSERT INTO albums (id, title, audience) VALUES ('\(circle)', 'Private', '\(circle1)');
            INSERT INTO tracks (id, album_id, title) VALUES ('\(tracks[0])', '\(album)', 'a'), ('\(tracks[1])', '\(circle)', 'b');
            """)
        let audiences = try RowAudiences(device: device)
        XCTAssertTrue(audiences.placesAudience("tracks"))
        XCTAssertEqual(try audiences.audiences(table: "albums", ids: [album, circle]), [album: "store", circle: circle1])
        // A row that is not here has no answer.
        XCTAssertEqual(try audiences.audiences(table: "tracks", ids: tracks), [tracks[0]: "store", tracks[1]: circle1])
        XCTAssertEqual(try audiences.audiences(table: "tracks", ids: []), [:])
        // Moving the album moves its tracks with it.
        try device.write(sql: "UPDATE albums SET audience = '\(circle2)' WHERE id = '\(album)'")
        XCTAssertEqual(try audiences.audiences(table: "tracks", ids: [tracks[0]]), [tracks[0]: circle2])
        // Every row of a table without an audience column is the store's.
        XCTAssertFalse(audiences.placesAudience("settings"))
    }

    func testKeptAnswersInSetsAndRefusesATableThatIsNotSynced() throws {
        let audiences = try RowAudiences(device: device)
        // No gates in this manifest: every row is kept.
        XCTAssertEqual(try audiences.kept(table: "albums", ids: [album, "01a228b5-0000-7000-8000-0000000000ff"]), [album: true])
        XCTAssertEqual(try audiences.isKept(table: "albums", id: album), true)
        XCTAssertNil(try audiences.isKept(table: "albums", id: "01a228b5-0000-7000-8000-0000000000ff"))
        assertCovenError(.notFound) { try audiences.checkKeptTable("coven_meta") }
        XCTAssertNoThrow(try audiences.checkKeptTable("coven_files"))
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// `coven_files` decodes its coordinates once, in generated columns (schema step 4), which every
/// query and view reads through the object index, and which are never published.
final class SchemaCoordinatesTests: DeviceTestCase {
    /// A device with one stored file, one queued for upload and one on this device only.
    private func threeFiles() throws -> Device {
        let device = try makeDevice()
        for (index, place) in [Place.cloud, .cloud, .deviceOnly].enumerated() {
            let staged = try stageApp(device, text: "cover \(index)", place: place)
            try device.write(sql: """
                INSERT INTO albums (id, title) VALUES (coven_uuid7(), 'a');
                INSERT INTO settings (id, file) VALUES ('s\(index)', coven_put_staged('\(staged.id)'))
                """)
        }
        return device
    }

    func testTheGeneratedColumnsHoldWhatCoordinatesDecode() throws {
        let device = try threeFiles()
        let rows = try device.database.query("SELECT id, coordinates, place, device, object FROM coven_files")
        XCTAssertEqual(rows.count, 3)
        for row in rows {
            let coordinates = try Coordinates(json: XCTUnwrap(row.string("coordinates")))
            XCTAssertEqual(row.string("place"), coordinates.at.rawValue)
            XCTAssertEqual(row.string("device"), coordinates.device)
            XCTAssertEqual(row.string("object"), coordinates.object)
        }
        // The object index is on the generated column.
        let indexed = try device.database.query("SELECT name FROM pragma_index_info('coven_files_object')").compactMap { $0.string("name") }
        XCTAssertEqual(indexed, ["object"])
    }

    func testGeneratedColumnsAreNeverPublished() throws {
        let device = try threeFiles()
        let entries = try device.database.query("SELECT entries FROM coven_outbox ORDER BY seq")
            .flatMap { try RowEntryCodec.decode(XCTUnwrap($0.bytes("entries"))) }
        let files = entries.filter { $0.table == "coven_files" }
        XCTAssertFalse(files.isEmpty)
        for entry in files {
            XCTAssertEqual(Set(entry.columns), ["id", "audience", "namespace", "size", "hash", "coordinates", "_updated_at"])
        }
    }

    /// The views join coven_files through its object index, never scanning the records (the
    /// plan `coven uploads` was tuned to on a library of 100,000 files).
    func testTheViewsJoinFileRecordsThroughTheObjectIndex() throws {
        let device = try threeFiles()
        for view in ["coven_uploads", "coven_user_files", "coven_moves", "coven_sending"] {
            let plan = try device.database.query("EXPLAIN QUERY PLAN SELECT * FROM \(view)").compactMap { $0.string("detail") }
            XCTAssertTrue(plan.contains { $0.hasPrefix("SEARCH f USING INDEX coven_files_object") }, "\(view): \(plan)")
            XCTAssertFalse(plan.contains { $0.hasPrefix("SCAN f") }, "\(view): \(plan)")
        }
    }
}

@testable import CovenKit
import Foundation
import XCTest

/// A device entry names its member, whose key vouches for the device's key.
final class DeviceCertificationTests: XCTestCase {
    private let store = "0193a9b2-0000-4000-8000-00000000000a"
    private let device = "0193a9b2-0000-4000-8000-0000000000d1"

    func testAMembersDeviceIsVouchedForAndTheVouchCannotBeMovedOrForged() throws {
        let bob = try MemberIdentity()
        let mallory = try MemberIdentity()
        let key = try DeviceSigningKey()
        let entry = DeviceEntry(device: device, name: "bob-laptop", joinedAt: "2026-12-01T00:00:00.000Z", publicKey: key.publicKey)
        let certified = try entry.certified(store: store, member: "m-bob", identity: bob)
        XCTAssertNoThrow(try certified.checkCertification(store: store, recipient: bob.recipient))
        // Through the sealed JSON and back.
        let decoded = try DeviceEntry.decode(try certified.encoded())
        XCTAssertEqual(decoded, certified)
        XCTAssertNoThrow(try decoded.checkCertification(store: store, recipient: bob.recipient))
        func reason(_ body: () throws -> Void) -> String? {
            do { try body() } catch let error as CovenError { XCTAssertEqual(error.code, .integrity); return error.details["reason"] } catch { XCTFail("\(error)") }
            return nil
        }
        XCTAssertEqual(reason { try certified.checkCertification(store: store, recipient: mallory.recipient) }, "member_signature")
        XCTAssertEqual(reason { try certified.checkCertification(store: "other", recipient: bob.recipient) }, "member_signature")
        var swapped = certified
        swapped.publicKey = try DeviceSigningKey().publicKey
        XCTAssertEqual(reason { try swapped.checkCertification(store: store, recipient: bob.recipient) }, "member_signature")
        var claimed = certified
        claimed.member = "m-alice"
        XCTAssertEqual(reason { try claimed.checkCertification(store: store, recipient: bob.recipient) }, "member_signature")
        XCTAssertEqual(reason { try entry.checkCertification(store: store, recipient: bob.recipient) }, "no_member")
        // An entry of a store before members has neither field, and its JSON is as before.
        XCTAssertFalse(String(decoding: try entry.encoded(), as: UTF8.self).contains("member"))
        // A member without its signature is malformed.
        var json = String(decoding: try entry.encoded(), as: UTF8.self)
        json.insert(contentsOf: "\"member\":\"m-bob\",", at: json.index(after: json.startIndex))
        XCTAssertThrowsError(try DeviceEntry.decode(Array(json.utf8))) { XCTAssertEqual(($0 as? CovenError)?.code, .decoding) }
    }
}

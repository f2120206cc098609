@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

// The suites that matter for both kinds of store, run again on the variant without members
// (`coven init --no-member`): their own classes run on the store `coven init` makes. Test
// discovery on Linux finds a class's own methods only, so each variant overrides every test of
// its suite; `NoMemberVariantsTests` checks that none is missed.

/// ``FsckTests`` on a store without members.
final class FsckNoMemberTests: FsckTests {
    override class var storeKind: TestStoreKind { .noMember }

    override func testACleanStoreIsVerifiedWhole() throws { try super.testACleanStoreIsVerifiedWhole() }
    override func testDamagedStoredObjectsAreFoundAndNamed() throws { try super.testDamagedStoredObjectsAreFoundAndNamed() }
    override func testASwapOfObjectsOfOneSizeIsFound() throws { try super.testASwapOfObjectsOfOneSizeIsFound() }
    override func testFastMakesOnlyListings() throws { try super.testFastMakesOnlyListings() }
    override func testCoverageAcrossRunsTakesTheOldestFirst() throws { try super.testCoverageAcrossRunsTakesTheOldestFirst() }
    override func testUnnamedObjectsAreReportedNotDeleted() throws { try super.testUnnamedObjectsAreReportedNotDeleted() }
    override func testATimeLimitStopsTakingObjects() throws { try super.testATimeLimitStopsTakingObjects() }
    override func testChangesAndObjectsTakeTurnsByAge() throws { try super.testChangesAndObjectsTakeTurnsByAge() }
    override func testKnownDamageCountsInEveryRunUntilFoundWhole() throws { try super.testKnownDamageCountsInEveryRunUntilFoundWhole() }
    override func testAStoppedRunResumesWhereItStopped() throws { try super.testAStoppedRunResumesWhereItStopped() }
}

/// ``FsckLocalTests`` on a store without members.
final class FsckLocalNoMemberTests: FsckLocalTests {
    override class var storeKind: TestStoreKind { .noMember }

    override func testChangedAndMissingOriginalsAreReportedNeverTouched() throws {
        try super.testChangedAndMissingOriginalsAreReportedNeverTouched()
    }
    override func testDamagedCopiesAndCacheEntriesAreFound() throws { try super.testDamagedCopiesAndCacheEntriesAreFound() }
    override func testRepairSealsObjectsAgainFromLocalSources() throws { try super.testRepairSealsObjectsAgainFromLocalSources() }
    override func testDamagedChangesAndSnapshotsAreFoundAndOwnChangesRepublished() throws {
        try super.testDamagedChangesAndSnapshotsAreFoundAndOwnChangesRepublished()
    }
    override func testAnObjectASnapshotNamesThatIsGoneIsReported() throws { try super.testAnObjectASnapshotNamesThatIsGoneIsReported() }
    override func testAnOwnChangeThatDiffersFromWhatWasRecordedIsFound() throws { try super.testAnOwnChangeThatDiffersFromWhatWasRecordedIsFound() }
}

/// ``SyncDamageTests`` on a store without members.
final class SyncDamageNoMemberTests: SyncDamageTests {
    override class var storeKind: TestStoreKind { .noMember }

    override func testAMissingChangeBelowOneStorageHoldsIsAGap() throws { try super.testAMissingChangeBelowOneStorageHoldsIsAGap() }
    override func testARestoredDatabaseMissingItsOwnLaterChangeIsStopped() throws {
        try super.testARestoredDatabaseMissingItsOwnLaterChangeIsStopped()
    }
    override func testALostLatestChangeIsPublishedAgainByItsPublisher() throws { try super.testALostLatestChangeIsPublishedAgainByItsPublisher() }
    override func testADamagedChangeIsPublishedAgainByItsPublisherAndTheOthersGoOn() throws {
        try super.testADamagedChangeIsPublishedAgainByItsPublisherAndTheOthersGoOn()
    }
    override func testARowOfAChangePublishedAgainComesBackWithItsRecordFromALaterChange() throws {
        try super.testARowOfAChangePublishedAgainComesBackWithItsRecordFromALaterChange()
    }
    override func testAReportOfAnIntactChangeIsDroppedWithoutPublishing() throws {
        try super.testAReportOfAnIntactChangeIsDroppedWithoutPublishing()
    }
    override func testADamagedChangeOfAGoneDeviceIsNamedAndGonePast() throws { try super.testADamagedChangeOfAGoneDeviceIsNamedAndGonePast() }
    override func testARestoredDatabaseAppliesItsOwnPublishedChangesAndGoesOn() throws {
        try super.testARestoredDatabaseAppliesItsOwnPublishedChangesAndGoesOn()
    }
    override func testALostDeviceKeyIsRefusedAndNothingIsPublished() throws { try super.testALostDeviceKeyIsRefusedAndNothingIsPublished() }
    override func testADamagedDeviceKeyIsRefusedAndNothingIsPublished() throws { try super.testADamagedDeviceKeyIsRefusedAndNothingIsPublished() }
    override func testADeviceJoinedFromASnapshotPublishesItsFrontierAtItsFirstSync() throws {
        try super.testADeviceJoinedFromASnapshotPublishesItsFrontierAtItsFirstSync()
    }
}

/// ``GCTests`` on a store without members.
final class GCNoMemberTests: GCTests {
    override class var storeKind: TestStoreKind { .noMember }

    override func testADeleteWaitsForEveryOtherDeviceThenTheBytesGo() throws { try super.testADeleteWaitsForEveryOtherDeviceThenTheBytesGo() }
    override func testAQuietPassListsNoFiles() throws { try super.testAQuietPassListsNoFiles() }
    override func testCandidatesOfManyObjectsAreCollectedPageByPage() throws { try super.testCandidatesOfManyObjectsAreCollectedPageByPage() }
    override func testAnUnpublishedDeleteKeepsTheBytes() throws { try super.testAnUnpublishedDeleteKeepsTheBytes() }
    override func testAnExistingFileReferenceMadeMeanwhileKeepsTheBytes() throws {
        try super.testAnExistingFileReferenceMadeMeanwhileKeepsTheBytes()
    }
    override func testTwoDeletesOfRecordsNamingOneObjectBothHoldTheBytes() throws {
        try super.testTwoDeletesOfRecordsNamingOneObjectBothHoldTheBytes()
    }
    override func testAnotherDevicesUnpublishedRecordHoldsTheBytes() throws { try super.testAnotherDevicesUnpublishedRecordHoldsTheBytes() }
    override func testARecordOnlyAPrivateRowElsewhereNamesKeepsTheBytes() throws {
        try super.testARecordOnlyAPrivateRowElsewhereNamesKeepsTheBytes()
    }
    override func testALostValueKeepsTheBytes() throws { try super.testALostValueKeepsTheBytes() }
    override func testADroppedLostValueNoLongerKeepsTheBytes() throws { try super.testADroppedLostValueNoLongerKeepsTheBytes() }
    override func testASilentDeviceHoldsBackUntilItIsRemoved() throws { try super.testASilentDeviceHoldsBackUntilItIsRemoved() }
    override func testTheDeleteOfADeviceRemovedBeforeItsGCIsCollectedByTheOthers() throws {
        try super.testTheDeleteOfADeviceRemovedBeforeItsGCIsCollectedByTheOthers()
    }
    override func testBytesAnotherDeviceMadeDeviceOnlyGoByTheGCOfADeviceThatAppliedTheSwitch() throws {
        try super.testBytesAnotherDeviceMadeDeviceOnlyGoByTheGCOfADeviceThatAppliedTheSwitch()
    }
    override func testBytesADeviceMadeDeviceOnlyGoAfterItIsRemovedBeforeItsGC() throws {
        try super.testBytesADeviceMadeDeviceOnlyGoAfterItIsRemovedBeforeItsGC()
    }
    override func testLeftoverTemporaryFilesOfThisDevicesFolderGoOnceOld() throws {
        try super.testLeftoverTemporaryFilesOfThisDevicesFolderGoOnceOld()
    }
    override func testGoneDeviceCleanupAbortsItsUploadsAndDeletesWhatNothingNames() throws {
        try super.testGoneDeviceCleanupAbortsItsUploadsAndDeletesWhatNothingNames()
    }
    override func testTwoDevicesCollectingTheSameFolderDeleteNothingNamed() throws {
        try super.testTwoDevicesCollectingTheSameFolderDeleteNothingNamed()
    }
    override func testChangeObjectsNeedASnapshotAndSnapshotsPastTheNewestTwoGo() throws {
        try super.testChangeObjectsNeedASnapshotAndSnapshotsPastTheNewestTwoGo()
    }
}

/// Each variant above overrides every test of its suite, so that a test added to a suite runs
/// on both kinds of store.
final class NoMemberVariantsTests: XCTestCase {
    /// The names of the tests a class declares in its own body in `source`.
    static func tests(of name: String, in source: String) throws -> Set<String> {
        let start = try XCTUnwrap(source.range(of: "class \(name): "), "no class \(name)")
        let end = source.range(of: "\n}\n", range: start.upperBound..<source.endIndex)?.lowerBound ?? source.endIndex
        let body = source[start.upperBound..<end]
        let pattern = try NSRegularExpression(pattern: "\\n    (?:override )?func (test\\w+)\\(")
        let text = String(body)
        return Set(pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        })
    }

    func testEveryTestOfASuiteRunsOnBothKindsOfStore() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let variants = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        for (file, suite, variant) in [("Fsck/FsckTests.swift", "FsckTests", "FsckNoMemberTests"),
                                       ("Fsck/FsckLocalTests.swift", "FsckLocalTests", "FsckLocalNoMemberTests"),
                                       ("Sync/SyncDamageTests.swift", "SyncDamageTests", "SyncDamageNoMemberTests"),
                                       ("GC/GCTests.swift", "GCTests", "GCNoMemberTests")] {
            let source = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            let wanted = try Self.tests(of: suite, in: source)
            XCTAssertFalse(wanted.isEmpty, suite)
            XCTAssertEqual(try Self.tests(of: variant, in: variants), wanted, "\(variant) must override every test of \(suite)")
        }
    }
}

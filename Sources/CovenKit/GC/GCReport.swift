import Foundation

/// What one `coven gc` did (or, with `dryRun`, would do).
public struct GCReport: Sendable, Equatable {
    /// What kind of stored object an entry is.
    public enum Kind: String, Sendable {
        case file, change, snapshot
        /// A temporary file an interrupted write left (file://).
        case temporary
    }

    /// Why an object stays.
    public enum KeepReason: String, Sendable {
        /// This device's upload queue still names it.
        case uploadQueued = "upload_queued"
        /// The write that made it a candidate is not published yet.
        case unpublished = "unpublished_write"
        /// A device not gone for good has not published a frontier that includes that write.
        case deviceBehind = "device_behind"
        /// A lost value names it (or the record it was).
        case lostValue = "lost_value"
        /// A retained snapshot may name it.
        case snapshot
        /// Another device's latest change says its unpublished records name it.
        case heldByDevice = "held_by_device"
        /// This device applied sections of circles it cannot read, whose records may name it.
        case unreadSections = "unread_sections"
        /// A row deleted within the store's retention window names it (the trash): it goes
        /// once the window ends, or after `coven trash empty`.
        case trash
        /// The provider refused the delete (403).
        case refused = "storage_refused"
        /// The delete failed (the network, the provider): it is not taken as deleted.
        case failed = "storage_failed"
    }

    /// An object deleted.
    public struct Deleted: Sendable, Equatable {
        public var key: String
        public var kind: Kind
    }

    /// An object kept back, and why; `devices` names the devices holding it back.
    public struct Kept: Sendable, Equatable {
        public var key: String
        public var kind: Kind
        public var reason: KeepReason
        public var devices: [String] = []
        public var detail: String?
    }

    public var dryRun = false
    public var deleted: [Deleted] = []
    /// Objects gc was to delete that storage said were not there (deleted by hand, by another
    /// device's gc, or lost): their candidates are settled as for a delete.
    public var alreadyGone: [Deleted] = []
    public var kept: [Kept] = []
    /// Unfinished uploads aborted: of gone devices (`--gone-devices`), and this device's own
    /// that no queued upload names (a start whose answer was lost).
    public var abortedUploads: [String] = []
    /// Changes applied by the pull that gc starts with.
    public var pulled = 0
    /// Candidates settled while a record names their object again, dropped from the table
    /// (the object stays; ending that record makes it a candidate anew).
    public var renamed = 0

    /// Whether a deletion failed (refused or not confirmed).
    public var hasFailures: Bool { kept.contains { $0.reason == .refused || $0.reason == .failed } }
}

/// A snapshot in storage and what it covers, as far as this device can tell.
struct SnapshotInfo {
    var key: String
    var size: Int64
    var device: String
    var seq: Int64
    /// For each device, the highest seq of it whose writes the snapshot holds; nil when this
    /// device cannot tell (it then may name anything).
    var coverage: [String: Int64]?
    /// The newest stamp it holds (orders snapshots).
    var newestStamp: String
    /// Its circles' parts, as its manifest lists them (circle → generation), and as storage
    /// holds them (circle → object).
    var parts: [String: UInt64] = [:]
    var partObjects: [String: ObjectInfo] = [:]
}

import Foundation

/// One published change, as `changes/<device>/<seq>` holds it once opened (DESIGN.md "Change
/// objects"): who wrote it, its place in the device's log, the schema it was written under, the
/// device's frontier, the stored objects that this device's unpublished records name, and the
/// entries in commit order.
public struct PublishedChange: Sendable, Equatable {
    public var format: Int = 1
    public var store: String
    public var device: String
    public var seq: Int64
    /// The writer's schema: how many migrations it applied, and the digest of their text.
    public var schemaCount: Int
    public var schemaDigest: String
    public var frontier: [String: Int64]
    public var objects: [String]
    public var entries: [RowEntry]

    /// `changes/<device>/<seq zero-padded to 16 digits>`.
    public static func path(device: String, seq: Int64) -> String {
        "changes/\(device)/" + String(format: "%016lld", seq)
    }

    /// The newest stamp of its entries.
    public var maxStamp: String { entries.map(\.stamp).max() ?? "" }
}

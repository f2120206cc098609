import Foundation

/// How a change is sealed and opened with this device's keys: the change format (Sync) asks the
/// keys layer for a key by audience and generation, and the keys layer knows nothing of changes.
/// Pull, fsck, snapshots, gc and circle backfill all open a change here, the way pull does.
extension Keyring {
    /// A change signed by this device: the bytes to publish. In a store of members, format 2
    /// under the newest generation of the store audience's key this device holds; before
    /// members, format 1 under the store key.
    func seal(_ change: ChangeObject) throws -> [UInt8] {
        guard let generation = try storeGeneration(), let key = try key(audience: RowAudiences.store, generation: generation) else {
            return try change.seal(storeKey: try storeKey(), signingKey: try signingKey())
        }
        return try change.sealSections(storeKey: (generation, key), keyOf: { audience in
            guard let newest = try self.newestGeneration(audience: audience), let key = try self.key(audience: audience, generation: newest) else {
                throw CovenError(.notInCircle, "this device holds no key of circle '\(audience)', whose rows a change to publish holds",
                                 hint: "a member of the circle writes its rows", details: ["audience": audience])
            }
            return (newest, key)
        }, signingKey: try signingKey())
    }

    /// A published change of `publisher` (this device's own included), checked against its
    /// registered key, authenticated and decoded.
    ///
    /// - Throws: as ``ChangeObject/open(_:path:storeKey:publicKey:storeID:)``; `.integrity`
    ///   when the publisher has no registered key.
    func open(change bytes: [UInt8], path: String, publisher: String, storeID: String? = nil) throws -> ChangeObject {
        let key = publisher == deviceID ? try signingKey().publicKey : try publicKey(of: publisher)
        return try ChangeObject.open(bytes, path: path, keyOf: { audience, generation in try self.key(audience: audience, generation: generation) },
                                     publicKey: key, storeID: storeID)
    }
}

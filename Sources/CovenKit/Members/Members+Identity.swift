import Foundation

// MARK: - The member this device belongs to

extension Members {
    /// The identity of the member this device belongs to.
    ///
    /// - Throws: `.invalidState` when the device belongs to no member yet; `.io` / `.usage` when
    ///   its identity file cannot be read or is damaged.
    public func identity() throws -> MemberIdentity {
        guard try memberID() != nil else {
            throw CovenError(.invalidState, "this device belongs to no member of the store yet", hint: "make this device's store member-aware with 'coven member init NAME'")
        }
        do {
            return try MemberIdentity(contentsOf: device.paths.memberIdentity)
        } catch var error as CovenError where error.code == .usage {
            // The device's own file, not a command line's: damage, as a damaged store key is.
            error.code = .integrity
            let path = device.paths.memberIdentity
            error.message = "this device's member identity '\(path)' is damaged: "
                + error.message.replacingOccurrences(of: "'\(path)' is not a coven member identity: ", with: "")
            error.hint = "put it back from another device of the member: 'coven member export -o FILE' there, then copy FILE over that path here (mode 0600)"
            throw error
        }
    }

    /// This device's member is on no roster of the store since generation `removed`.
    static func removed(since removed: UInt64) -> CovenError {
        CovenError(.deviceGone, "this device's member is not on the store's roster since generation \(removed): it was removed, or its keys were replaced",
                   hint: "this device no longer syncs; if the member's keys were replaced ('coven member rekey' on another of its devices), "
                       + "join a new device with the new identity ('coven member export -o FILE' there); if it was removed, " + removedHint,
                   details: ["object": AudienceGeneration.path(audience: RowAudiences.store, generation: removed)])
    }

    /// What works for a member removed from the store: its identity opens nothing published
    /// since, and a join with it is `not_found`, until an admin adds the member again.
    static let removedHint = "ask an admin of the store to add you again ('coven member add NAME RECIPIENT' on their device, "
        + "RECIPIENT the coven1… line of your identity), then make a new device with 'coven join URL --identity FILE'; "
        + "until then a join with this identity is refused ('not_found')"

    /// Whether this device's member opens the newest generation of the store's key in storage
    /// (false: it was removed, or its keys replaced without this device); nil for a device of no
    /// member, or when storage or the chain cannot be read. Reads only.
    func readsNewestGeneration() -> Bool? {
        guard (try? memberID()) ?? nil != nil, let identity = try? identity(), let provider = try? device.connectStorage(),
              let state = try? storeChain(provider: provider).read(identity: identity) else { return nil }
        return state.unreadable.isEmpty
    }

    /// Makes this device one of the member's whose identity is at `path` (a device of a store
    /// made before members, or of another member's): the identity is kept here, this device's
    /// entry vouched for by it, and the store's keys read with it.
    ///
    /// - Throws: `.exists` when this device belongs to a member already; `.notFound` when the
    ///   identity is on no roster of the store; `.usage` / `.io` for an unreadable identity.
    public func adopt(identityAt path: String) throws -> Member {
        let identity = try MemberIdentity(contentsOf: path)
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        if let current = try memberID() {
            throw CovenError(.exists, "this device already belongs to member '\(current)'", details: ["member": current])
        }
        return try adopt(identity, provider: try device.connectStorage())
    }

    /// ``adopt(identityAt:)`` under the caller's lock (a join holds the device).
    @discardableResult
    func adopt(_ identity: MemberIdentity, provider: StorageProvider) throws -> Member {
        try DeviceRegistry(device).refresh(provider: provider, rereadUnvouched: true)
        guard let state = try storeChain(provider: provider).read(identity: identity), let newest = state.newest, state.unreadable.isEmpty,
              let me = newest.generation.roster.first(where: { $0.recipient == identity.recipient }) else {
            throw CovenError(.notFound, "that identity is not a member of this store's newest roster (never added, removed, or its keys replaced since)",
                             hint: "ask an admin of the store to add it ('coven member add NAME \(identity.recipient)' on their device), then run this again")
        }
        if FileManager.default.fileExists(atPath: device.paths.memberIdentity) {
            // A run stopped after it kept the identity: the same one goes on, no other.
            guard try MemberIdentity(contentsOf: device.paths.memberIdentity).recipient == identity.recipient else {
                throw CovenError(.exists, "this device keeps another member's identity at '\(device.paths.memberIdentity)'", details: ["path": device.paths.memberIdentity])
            }
        } else {
            try identity.write(to: device.paths.memberIdentity)
        }
        try finishEstablishment(identity: identity, memberID: me.id, provider: provider, onlyThisDevice: true)
        return Member(id: me.id, name: me.name, role: me.role.rawValue, recipient: me.recipient.description, isThisDevicesMember: true, devices: 1)
    }

    /// Writes this device's member identity to `path` (mode 0600, never over a file), for
    /// joining the member's other devices.
    public func export(to path: String) throws {
        try identity().write(to: path)
    }
}

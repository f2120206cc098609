import Foundation

/// The members of a store as this device knows them (DESIGN.md "Members and circles"): the
/// member this device belongs to (its identity, kept in `<db>.d/member.identity`, and its id
/// in the device's settings), and the roster of the store audience, read from its chain of
/// key generations. It takes from ``Device`` and adds nothing to it.
public struct Members {
    /// A member as `coven members` lists it.
    public struct Member: Equatable, Sendable {
        public var id: String
        public var name: String
        public var role: String
        public var recipient: String
        /// Whether this device belongs to it.
        public var isThisDevicesMember: Bool
    }

    /// The roster of the store audience at its newest generation this member reads.
    public struct Roster: Equatable, Sendable {
        public var generation: UInt64
        public var members: [Member]
    }

    let device: Device

    public init(_ device: Device) {
        self.device = device
    }

    /// The setting holding the id of the member this device belongs to.
    static let memberSetting = "member_id"

    /// The id of the member this device belongs to; nil on a device of a store before members.
    public func memberID() throws -> String? {
        try device.setting(Self.memberSetting)
    }

    /// The identity of the member this device belongs to.
    ///
    /// - Throws: `.invalidState` when the device belongs to no member yet; `.io` / `.usage` when
    ///   its identity file cannot be read or is damaged.
    public func identity() throws -> MemberIdentity {
        guard try memberID() != nil else {
            throw CovenError(.invalidState, "this device belongs to no member of the store yet", hint: "make this device's store member-aware with 'coven member init NAME'")
        }
        return try MemberIdentity(contentsOf: device.paths.memberIdentity)
    }

    /// The chain of the store audience, checked with the device registry this device knows.
    func storeChain(provider: StorageProvider) throws -> AudienceChain {
        let registry = try device.database.query("SELECT device, public_key FROM coven_device_registry")
        var keys: [String: String] = [:]
        for row in registry { if let id = row.string("device"), let key = row.string("public_key") { keys[id] = key } }
        let members = try memberOfDevices()
        return AudienceChain(provider: provider, store: device.storeID, audience: RowAudiences.store,
                             signerKey: { id in
                                 guard let hex = keys[id] else { throw CovenError(.notFound, "no device \(id)") }
                                 return try DevicePublicKey(hex: hex)
                             },
                             memberOf: { members[$0] })
    }

    /// The member each device belongs to, as far as this device knows: its own, from its
    /// settings. (Other devices' members come from their vouched entries, which the registry
    /// learns when members add devices.)
    func memberOfDevices() throws -> [String: String] {
        var members: [String: String] = [:]
        if let own = try memberID() { members[device.deviceID] = own }
        return members
    }

    /// Makes this device's store one of members, with `name` its first member, the owner, whose
    /// identity this device keeps: generation 1 of the store audience is published with the store
    /// key (every device that holds it reads generation 1), and this device's entry is vouched
    /// for by the new member.
    ///
    /// - Throws: `.exists` when the store has members already (storage holds generation 1, or
    ///   this device belongs to a member); `.usage` for an empty name; `.storage`.
    @discardableResult
    public func establish(name: String) throws -> MemberIdentity {
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty, !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw CovenError(.usage, "a member's name is a word, not '\(name)'")
        }
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        guard try memberID() == nil else {
            throw CovenError(.exists, "this device already belongs to member '\(try memberID() ?? "")'", details: ["member": try memberID() ?? ""])
        }
        let provider = try device.connectStorage()
        let chain = try storeChain(provider: provider)
        guard try chain.generations().isEmpty else {
            // A run of this device that published generation 1 and was killed before it
            // recorded its member: finished now, with the same member.
            if let (identity, memberID) = try interruptedEstablishment(chain: chain) {
                try finishEstablishment(identity: identity, memberID: memberID, provider: provider)
                return identity
            }
            throw CovenError(.exists, "the store already has members", hint: "join this store as a member with 'coven join URL --identity FILE'",
                             details: ["object": AudienceGeneration.path(audience: RowAudiences.store, generation: 1)])
        }
        // The identity is kept before anything is published: a crash after leaves a device that
        // finds its member on the next call (the identity file is there, the setting is not).
        let identity: MemberIdentity
        if FileManager.default.fileExists(atPath: device.paths.memberIdentity) {
            identity = try MemberIdentity(contentsOf: device.paths.memberIdentity)
        } else {
            identity = try MemberIdentity()
            try identity.write(to: device.paths.memberIdentity)
        }
        let memberID = Identifier.uuid4()
        let owner = AudienceGeneration.Member(id: memberID, name: name, role: .owner, recipient: identity.recipient)
        guard try chain.publishFirst(roster: [owner], key: try device.keys.storeKeyBytes(), signer: device.deviceID,
                                     signingKey: try device.keys.signingKey()) else {
            throw CovenError(.exists, "another device made the store's first member at the same time", hint: "join this store as a member with 'coven join URL --identity FILE'")
        }
        try finishEstablishment(identity: identity, memberID: memberID, provider: provider)
        return identity
    }

    /// This device's entry vouched for by its new member, then the member recorded here.
    private func finishEstablishment(identity: MemberIdentity, memberID: String, provider: StorageProvider) throws {
        let joinedAt = try device.database.scalar("SELECT joined_at FROM coven_device_registry WHERE device = ?1", [device.deviceID]).textValue ?? Timestamp.iso8601(Date())
        let entry = try DeviceEntry(device: device.deviceID, name: device.deviceName, joinedAt: joinedAt, publicKey: try device.keys.signingKey().publicKey)
            .certified(store: device.storeID, member: memberID, identity: identity)
        try provider.put(entry.path, data: try entry.seal(keys: device.keys))
        try device.setSetting(Self.memberSetting, memberID)
    }

    /// The identity this device keeps and the owner's id, when generation 1 of the store is this
    /// device's own work (signed by it, its identity the owner) and no member was recorded here.
    private func interruptedEstablishment(chain: AudienceChain) throws -> (MemberIdentity, String)? {
        guard FileManager.default.fileExists(atPath: device.paths.memberIdentity) else { return nil }
        let identity = try MemberIdentity(contentsOf: device.paths.memberIdentity)
        guard let state = try? chain.read(identity: identity), let first = state.opened.first, first.generation.signer == device.deviceID,
              let owner = first.generation.roster.first(where: { $0.recipient == identity.recipient && $0.role == .owner }) else { return nil }
        return (identity, owner.id)
    }

    /// The store audience's roster at the newest generation this device's member reads.
    ///
    /// - Throws: `.invalidState` for a device of a store before members; `.integrity` for a
    ///   forged or damaged chain (naming the object); `.storage`.
    public func roster() throws -> Roster {
        let identity = try identity()
        let own = try memberID()
        guard let state = try storeChain(provider: try device.connectStorage()).read(identity: identity), let newest = state.newest else {
            throw CovenError(.invalidState, "the store has no members yet")
        }
        return Roster(generation: newest.generation.generation, members: newest.generation.roster.map {
            Member(id: $0.id, name: $0.name, role: $0.role.rawValue, recipient: $0.recipient.description, isThisDevicesMember: $0.id == own)
        })
    }

    /// Writes this device's member identity to `path` (mode 0600, never over a file), for
    /// joining the member's other devices.
    public func export(to path: String) throws {
        try identity().write(to: path)
    }
}

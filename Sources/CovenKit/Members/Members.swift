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
        /// Its devices not gone for good, as this device knows them.
        public var devices: Int = 0
    }

    /// The roster of the store audience at its newest generation this member reads.
    public struct Roster: Equatable, Sendable {
        public var generation: UInt64
        public var members: [Member]
        /// Set when storage's chain ends below the generation this device holds: what it lost.
        public var storageBehind: KeyChainLoss?
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

    /// The chain of the store audience, checked with the device registry this device knows.
    func storeChain(provider: StorageProvider) throws -> AudienceChain {
        try chain(audience: RowAudiences.store, provider: provider)
    }

    /// The chain of `audience` (the store or a circle), checked with the device registry this
    /// device knows.
    func chain(audience: String, provider: StorageProvider) throws -> AudienceChain {
        let registry = try device.database.query("SELECT device, public_key, member, member_signature FROM coven_device_registry")
        var keys: [String: String] = [:]
        var vouched: [String: (member: String, signature: [UInt8])] = [:]
        for row in registry {
            guard let id = row.string("device"), let key = row.string("public_key") else { continue }
            keys[id] = key
            if let member = row.string("member"), let signature = row.string("member_signature").flatMap({ [UInt8](hex: $0) }) { vouched[id] = (member, signature) }
        }
        let store = device.storeID
        let keyring = device.keys
        var chain = AudienceChain(provider: provider, store: store, audience: audience,
                             signerKey: { id in
                                 guard let hex = keys[id] else { throw CovenError(.notFound, "no device \(id)") }
                                 return try DevicePublicKey(hex: hex)
                             },
                             memberOf: { device, roster in
                                 guard let (member, signature) = vouched[device], let hex = keys[device], let key = try? DevicePublicKey(hex: hex),
                                       let recipient = roster.first(where: { $0.id == member })?.recipient,
                                       DeviceEntry.vouches(recipient, signature: signature, store: store, member: member, device: device, publicKey: key)
                                 else { return nil }
                                 return member
                             },
                             namedMember: { device in vouched[device]?.member })
        chain.held = try keyring.newestGeneration(audience: audience) ?? 0
        chain.heldKey = { try keyring.learnedKeyBytes(audience: audience, generation: $0) }
        return chain
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
        try Self.checkName(name)
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        guard try memberID() == nil else {
            throw CovenError(.exists, "this device already belongs to member '\(try memberID() ?? "")'", details: ["member": try memberID() ?? ""])
        }
        let provider = try device.connectStorage()
        // Every device of the store becomes the owner's: know them all first.
        try DeviceRegistry(device).refresh(provider: provider)
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

    /// This device's entry vouched for by its new member, and every other live device's (the
    /// owner holds every device of a store made before members), then the member recorded
    /// here with generation 1.
    func finishEstablishment(identity: MemberIdentity, memberID: String, provider: StorageProvider, onlyThisDevice: Bool = false) throws {
        let rows = try device.database.query("SELECT device, name, joined_at, public_key FROM coven_device_registry WHERE gone = 0 AND public_key IS NOT NULL ORDER BY device <> ?1, device",
                                             [device.deviceID])
        for row in rows where !onlyThisDevice || row.string("device") == device.deviceID {
            guard let id = row.string("device"), let hex = row.string("public_key") else { continue }
            let publicKey = id == device.deviceID ? try device.keys.signingKey().publicKey : try DevicePublicKey(hex: hex)
            let entry = try DeviceEntry(device: id, name: row.string("name") ?? "", joinedAt: row.string("joined_at") ?? Timestamp.iso8601(Date()), publicKey: publicKey)
                .certified(store: device.storeID, member: memberID, identity: identity)
            try provider.put(entry.path, data: try entry.seal(keys: device.keys))
            try SyncState(database: device.database).learnDevice(id, name: entry.name, joinedAt: entry.joinedAt, publicKey: publicKey.hex,
                                                                 member: memberID, memberSignature: entry.memberSignature)
        }
        try device.setSetting(Self.memberSetting, memberID)
        try refresh(provider: provider)
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

    /// The store audience's roster at the newest generation this device's member reads, read
    /// from storage first (every link checked) and learned nowhere: a reading command writes
    /// nothing, and the next sync learns what it read. When storage's chain ends below the
    /// generation this device holds, the roster held here, with what storage lost.
    ///
    /// - Throws: `.invalidState` for a device of a store before members; `.integrity` for a
    ///   forged or damaged chain (naming the object); `.deviceGone` when this device's member
    ///   was removed; `.storage`.
    public func roster() throws -> Roster {
        let identity = try identity()
        let provider = try device.connectStorage()
        let state: AudienceChain.State
        do {
            guard let read = try storeChain(provider: provider).read(identity: identity) else { return try localRoster() }
            state = read
        } catch let error as CovenError where ChainLosses.loss(error) != nil {
            var roster = try localRoster()
            roster.storageBehind = ChainLosses.loss(error)
            return roster
        }
        if let removed = state.unreadable.first { throw Self.removed(since: removed) }
        guard let newest = state.newest, newest.generation.generation > (try device.keys.storeGeneration() ?? 0) else { return try localRoster() }
        return Roster(generation: newest.generation.generation, members: try listed(newest.generation.roster))
    }

    /// The roster of the newest generation this device holds, as learned.
    func localRoster() throws -> Roster {
        guard let generation = try device.keys.storeGeneration() else { throw CovenError(.invalidState, "the store has no members yet") }
        return Roster(generation: generation, members: try listed(try device.keys.roster(audience: RowAudiences.store, generation: generation)))
    }

    /// `roster` as `coven members` lists it, with each member's devices known here.
    private func listed(_ roster: [AudienceGeneration.Member]) throws -> [Member] {
        let own = try memberID()
        let devices = try device.database.query("SELECT member, count(*) AS n FROM coven_device_registry WHERE gone = 0 AND member IS NOT NULL GROUP BY member")
        var counts: [String: Int] = [:]
        for row in devices { if let member = row.string("member") { counts[member] = Int(row.int("n") ?? 0) } }
        return roster.map {
            Member(id: $0.id, name: $0.name, role: $0.role.rawValue, recipient: $0.recipient.description, isThisDevicesMember: $0.id == own,
                   devices: counts[$0.id] ?? 0)
        }
    }

    /// Reads generations of the store audience this device has not learned yet, with its
    /// member's identity, and keeps their keys and rosters (``Keyring``). One listing when
    /// there are none; nothing on a device that belongs to no member.
    ///
    /// - Returns: the newest generation held after.
    /// - Throws: `.deviceGone` when this device's member is not on the newest roster (removed,
    ///   or its keys replaced without this device); `.integrity` naming the object for a forged
    ///   or broken chain; `.storage`.
    ///
    /// - Parameter retire: check the live devices against the newest roster even when no
    ///   generation is new (devices learned of now, or a roster change run again).
    @discardableResult
    func refresh(provider: StorageProvider, retire: Bool = false) throws -> UInt64? {
        guard try memberID() != nil else { return try device.keys.storeGeneration() }
        let known = try device.keys.storeGeneration() ?? 0
        let prefix = "audiences/\(RowAudiences.store)/"
        // From the one before the newest held: storage still holds that one, and maybe more.
        let after = known <= 1 ? prefix : AudienceGeneration.path(audience: RowAudiences.store, generation: known - 1)
        let listed = try provider.list(prefix: prefix, after: after, limit: 2).map(\.key)
        let losses = ChainLosses(device: device)
        let whole = known == 0 || listed.first == AudienceGeneration.path(audience: RowAudiences.store, generation: known)
        // Nothing new, and storage still holds the newest generation held here.
        guard !whole || listed.count > (known == 0 ? 0 : 1) else {
            try losses.recording(RowAudiences.store) {}
            if retire, known > 0 { try retireDevicesOffRoster(try device.keys.roster(audience: RowAudiences.store, generation: known), provider: provider) }
            return known == 0 ? nil : known
        }
        // New generations, or a chain storage lost the end of (the read names what it lost).
        let identity = try identity()
        guard let state = try losses.recording(RowAudiences.store, { try storeChain(provider: provider).read(identity: identity) }),
              let newest = state.newest else { return nil }
        try device.keys.learn(audience: RowAudiences.store, state.opened)
        if state.unreadable.isEmpty, let newest = state.newest {
            try retireDevicesOffRoster(newest.generation.roster, provider: provider)
        }
        if let removed = state.unreadable.first { throw Self.removed(since: removed) }
        return newest.generation.generation
    }

    /// Marks gone for good every live device whose member is not on `roster` (removed), or
    /// whose entry that member's key on it did not vouch for (its keys were replaced without
    /// this device): published as removal marks, put-if-absent, so whichever device learns the
    /// generation first finishes a removal that was stopped half-way.
    ///
    /// - Returns: the devices marked gone now.
    @discardableResult
    func retireDevicesOffRoster(_ roster: [AudienceGeneration.Member], provider: StorageProvider) throws -> [String] {
        let store = device.storeID
        var retired: [String] = []
        let rows = try device.database.query("SELECT device, public_key, member, member_signature FROM coven_device_registry WHERE gone = 0 AND member IS NOT NULL ORDER BY device")
        for row in rows {
            guard let id = row.string("device"), id != device.deviceID, let member = row.string("member") else { continue }
            guard let key = row.string("public_key").flatMap({ try? DevicePublicKey(hex: $0) }) else { continue }
            let recipient = roster.first(where: { $0.id == member })?.recipient
            func vouched(_ signature: [UInt8]?) -> Bool {
                guard let recipient, let signature else { return false }
                return DeviceEntry.vouches(recipient, signature: signature, store: store, member: member, device: id, publicKey: key)
            }
            if vouched(row.string("member_signature").flatMap({ [UInt8](hex: $0) })) { continue }
            // The member's keys changed: its device's entry, vouched for again by the new key,
            // is read once more.
            if recipient != nil, let sealed = try provider.getObject(Device.registryEntryKey(id)),
               let entry = try? DeviceEntry.open(sealed, path: Device.registryEntryKey(id), keys: device.keys),
               entry.device == id, entry.member == member, entry.publicKey == key, vouched(entry.memberSignature), let signature = entry.memberSignature {
                try SyncState(database: device.database).setMemberSignature(id, member: member, signature: signature)
                continue
            }
            _ = try StoreSync(device, storage: provider).markGone(id)
            retired.append(id)
        }
        return retired
    }

    /// What adding or removing a member did.
    public struct RosterChange: Sendable, Equatable {
        /// The member added or removed.
        public var member: Member
        /// The generation published.
        public var generation: UInt64
        /// Objects written: the generation, and each removed device's mark.
        public var objectsWritten: Int
        /// The removed member's devices, now gone for good.
        public var devicesGone: [String] = []
        /// The circles given a new generation without a member removed from the store.
        public var circles: [String] = []
    }

    /// Adds the person whose recipient is `recipient` to the store as `name`: a new generation
    /// of the store's key, wrapped to every member and to them, signed by this device. Their
    /// devices then join with `coven join URL --identity FILE`.
    ///
    /// - Throws: `.usage` for a malformed recipient or an empty name; `.notAdmin` when this
    ///   device's member is not an admin; `.refused` when the recipient or the name is a
    ///   member's already; `.busy` when other admins kept publishing first; `.storage`.
    public func add(name: String, recipient text: String, admin: Bool) throws -> RosterChange {
        try Self.checkName(name)
        let recipient = try MemberRecipient(text)
        let newID = Identifier.uuid4()
        return try change { roster in
            if let same = roster.first(where: { $0.recipient == recipient }), same.name == name, same.role == (admin ? .admin : .member) {
                // Run again after it published (killed before it said so): done already.
                return (nil, same)
            }
            if let same = roster.first(where: { $0.recipient == recipient }) {
                throw CovenError(.refused, "that recipient is member '\(same.name)' (\(same.id)) already", details: ["member": same.id])
            }
            // Names are what people type and read: two that differ only in case are one name.
            if let same = roster.first(where: { $0.name.caseInsensitiveCompare(name) == .orderedSame }) {
                throw CovenError(.exists, "a member is called '\(same.name)' already", hint: "give the new member another name", details: ["name": same.name, "member": same.id])
            }
            let member = AudienceGeneration.Member(id: newID, name: name, role: admin ? .admin : .member, recipient: recipient)
            return (roster + [member] as [AudienceGeneration.Member]?, member)
        }
    }

    /// Removes `member` (a name or an id) from the store: a new generation of the store's key
    /// without them, then their devices marked gone for good. Removal is forward only: they
    /// keep what they read before, and their storage credentials must be revoked by a person.
    ///
    /// - Throws: `.notFound` for no such member; `.usage` for a name two members share;
    ///   `.notAdmin` when this device's member is not an admin; `.refused` to remove the owner
    ///   (another admin may not), this device's own member, or the last admin; `.storage`.
    public func remove(_ member: String) throws -> RosterChange {
        let own = try memberID()
        let earlier = try device.database.query("SELECT DISTINCT member FROM coven_audience_rosters WHERE audience = ?1", [RowAudiences.store]).compactMap { $0.string("member") }
        return try self.change { roster in
            let target: AudienceGeneration.Member
            do {
                target = try Self.resolve(member, in: roster)
            } catch let error as CovenError where error.code == .notFound {
                // Removed already (a run killed after it published): its devices were marked
                // gone as the generation was learned. Done.
                guard let past = try self.pastMember(member), !earlier.isEmpty else { throw error }
                return (nil, past)
            }
            if target.id == own {
                throw CovenError(.refused, "'\(member)' is this device's own member", hint: "another admin removes a member; to leave, ask one", details: ["member": target.id])
            }
            if target.role == .owner {
                throw CovenError(.refused, "'\(member)' is the store's owner, whom no other admin may remove", details: ["member": target.id])
            }
            let rest = roster.filter { $0.id != target.id }
            guard rest.contains(where: { $0.role.isAdmin }) else {
                throw CovenError(.refused, "'\(member)' is the store's last admin", details: ["member": target.id])
            }
            return (rest as [AudienceGeneration.Member]?, target)
        }
    }

    /// Makes `member` (a name or an id) an admin of the store, or a member who is not one: a new
    /// generation of the store's key with the role changed (the same key holders, a fresh key).
    ///
    /// - Throws: `.notFound` for no such member; `.usage` for a name two members share;
    ///   `.notAdmin` when this device's member is not an admin; `.refused` for the owner, whose
    ///   role never changes; `.storage`.
    public func setRole(_ member: String, admin: Bool) throws -> RosterChange {
        let role: AudienceGeneration.Role = admin ? .admin : .member
        return try change { roster in
            let target = try Self.resolve(member, in: roster)
            if target.role == .owner {
                throw CovenError(.refused, "'\(member)' is the store's owner, an admin whose role never changes", details: ["member": target.id])
            }
            // Run again after it published, or asked for what is: done already.
            if target.role == role { return (nil, target) }
            var changed = target
            changed.role = role
            let next = roster.map { $0.id == target.id ? changed : $0 }
            guard next.contains(where: { $0.role.isAdmin }) else {
                throw CovenError(.refused, "'\(member)' is the store's last admin", details: ["member": target.id])
            }
            return (next as [AudienceGeneration.Member]?, changed)
        }
    }

    /// A member of an earlier roster of the store that `text` names (id or name), no longer on
    /// the newest.
    private func pastMember(_ text: String) throws -> AudienceGeneration.Member? {
        let rows = try device.database.query("""
            SELECT member, name, role, recipient FROM coven_audience_rosters WHERE audience = ?1 AND (member = ?2 OR name = ?2)
            ORDER BY generation DESC LIMIT 1
            """, [RowAudiences.store, text])
        guard let row = rows.first, let id = row.string("member"), let role = AudienceGeneration.Role(rawValue: row.string("role") ?? ""),
              let recipient = try? MemberRecipient(row.string("recipient") ?? "") else { return nil }
        return AudienceGeneration.Member(id: id, name: row.string("name") ?? "", role: role, recipient: recipient)
    }

    /// Publishes the next generation of the store's key with the roster `edit` makes of the
    /// newest, under the device lock, after checking this device's member is an admin there
    /// (again at each retry of a lost race).
    private func change(_ edit: @escaping ([AudienceGeneration.Member]) throws -> ([AudienceGeneration.Member]?, AudienceGeneration.Member)) throws -> RosterChange {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let identity = try identity()
        let own = try memberID()
        let provider = try device.connectStorage()
        let gone = { () throws -> Set<String> in Set(try self.device.database.query("SELECT device FROM coven_device_registry WHERE gone = 1").compactMap { $0.string("device") }) }
        let before = try gone()
        try DeviceRegistry(device).refresh(provider: provider)
        // A removal stopped after its generation was learned here finishes now: its devices
        // gone, and its circles given new generations without it.
        try refresh(provider: provider, retire: true)
        try Circles(device).refresh(provider: provider)
        var rotated = try Circles(device).dropRemovedMembers(provider: provider)
        var subject: AudienceGeneration.Member?
        // Nothing to publish (a rerun of what was done): say so from the roster held.
        if let generation = try device.keys.storeGeneration() {
            let current = try device.keys.roster(audience: RowAudiences.store, generation: generation)
            if let me = current.first(where: { $0.id == own }), me.role.isAdmin, case (nil, let member) = try edit(current) {
                let retired = try gone().subtracting(before).sorted()
                return RosterChange(member: Member(id: member.id, name: member.name, role: member.role.rawValue, recipient: member.recipient.description,
                                                   isThisDevicesMember: member.id == own, devices: 0),
                                    generation: generation, objectsWritten: retired.count + rotated.count, devicesGone: retired, circles: rotated)
            }
        }
        let published = try storeChain(provider: provider).publishNext(identity: identity, signer: device.deviceID, signingKey: try device.keys.signingKey()) { roster in
            guard let me = roster.first(where: { $0.id == own }), me.role.isAdmin else {
                throw CovenError(.notAdmin, "this device's member is not an admin of the store", hint: "ask an admin of the store ('coven members' lists the roles)")
            }
            let (next, member) = try edit(roster)
            subject = member
            // Another admin did the same in a race this device lost: the roster is theirs, kept.
            return next ?? roster
        }
        // Learning the generation marks the devices of a member no longer on it gone, and
        // takes them out of this member's circles.
        try refresh(provider: provider)
        rotated += try Circles(device).dropRemovedMembers(provider: provider)
        let retired = try gone().subtracting(before).sorted()
        guard let subject else { throw CovenError(.internal, "a roster change without its member") }
        return RosterChange(member: Member(id: subject.id, name: subject.name, role: subject.role.rawValue, recipient: subject.recipient.description,
                                           isThisDevicesMember: subject.id == own, devices: 0),
                            generation: published.generation.generation, objectsWritten: 1 + retired.count + rotated.count, devicesGone: retired,
                            circles: rotated)
    }

    /// Replaces this device's member's keys (their identity was exposed, say): a new identity,
    /// kept aside first, then a new generation of the store's key whose roster holds the new
    /// recipient, this device's entry vouched for by the new key, and the new identity put in
    /// place. The member's other devices, vouched for by the old key, are gone for good: they
    /// join again with the new identity. Run again after a kill, it goes on with the same new
    /// identity.
    ///
    /// - Returns: the new identity and the generation published.
    public func rekey() throws -> (identity: MemberIdentity, change: RosterChange) {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        // identity() refuses a device that belongs to no member.
        let current = try identity()
        guard let own = try memberID() else { throw CovenError(.internal, "a member identity without its member") }
        let provider = try device.connectStorage()
        let gone = { () throws -> Set<String> in Set(try self.device.database.query("SELECT device FROM coven_device_registry WHERE gone = 1").compactMap { $0.string("device") }) }
        let before = try gone()
        try DeviceRegistry(device).refresh(provider: provider)
        let nextPath = device.paths.memberIdentity + ".next"
        let next: MemberIdentity
        if FileManager.default.fileExists(atPath: nextPath) {
            next = try MemberIdentity(contentsOf: nextPath)
        } else {
            next = try MemberIdentity()
            try next.write(to: nextPath)
        }
        let chain = try storeChain(provider: provider)
        var generation: UInt64
        var member: AudienceGeneration.Member
        if let state = try? chain.read(identity: next), let newest = state.newest, state.unreadable.isEmpty,
           let me = newest.generation.roster.first(where: { $0.id == own && $0.recipient == next.recipient }) {
            // Published by a run that was stopped after.
            generation = newest.generation.generation
            member = me
        } else {
            try refresh(provider: provider)
            var replaced: AudienceGeneration.Member?
            let published = try chain.publishNext(identity: current, signer: device.deviceID, signingKey: try device.keys.signingKey()) { roster in
                guard let me = roster.first(where: { $0.id == own }) else {
                    throw CovenError(.deviceGone, "this device's member is not on the store's roster", hint: Self.removedHint)
                }
                let new = AudienceGeneration.Member(id: me.id, name: me.name, role: me.role, recipient: next.recipient)
                replaced = new
                return roster.map { $0.id == own ? new : $0 }
            }
            generation = published.generation.generation
            guard let replaced else { throw CovenError(.internal, "a rekey without its member") }
            member = replaced
        }
        // The member's circles hold its new recipient too (a generation each, as the store's).
        try Circles(device).rekey(member: own, from: current, to: next, provider: provider)
        // This device vouched for by the new key, then the new identity in place.
        let publicKey = try device.keys.signingKey().publicKey
        let joinedAt = try device.database.scalar("SELECT joined_at FROM coven_device_registry WHERE device = ?1", [device.deviceID]).textValue ?? Timestamp.iso8601(Date())
        let entry = try DeviceEntry(device: device.deviceID, name: device.deviceName, joinedAt: joinedAt, publicKey: publicKey)
            .certified(store: device.storeID, member: own, identity: next)
        try provider.put(entry.path, data: try entry.seal(keys: device.keys))
        try SyncState(database: device.database).setMemberSignature(device.deviceID, member: own, signature: entry.memberSignature ?? [])
        guard rename(nextPath, device.paths.memberIdentity) == 0 else { throw CovenError.posix("rename into", path: device.paths.memberIdentity) }
        try AtomicFile.syncFolder(device.paths.folder)
        try refresh(provider: provider, retire: true)
        let retired = try gone().subtracting(before).sorted()
        return (next, RosterChange(member: Member(id: member.id, name: member.name, role: member.role.rawValue, recipient: next.recipient.description,
                                                  isThisDevicesMember: true, devices: 1),
                                   generation: generation, objectsWritten: 2 + retired.count, devicesGone: retired))
    }

    /// The member of `roster` that `text` names: its id, or its name when one member has it.
    static func resolve(_ text: String, in roster: [AudienceGeneration.Member]) throws -> AudienceGeneration.Member {
        try resolve(text, in: roster, id: \.id, name: \.name, kind: "member", scope: "in this store", lister: "coven members")
    }

    /// The item of `items` that `text` names: its id, or its name when one item has it (a
    /// member, a circle).
    ///
    /// - Throws: `.notFound` naming `kind` and `scope`; `.usage` for a name two items share,
    ///   with a hint to name it by its id (`lister` lists them).
    static func resolve<Item>(_ text: String, in items: [Item], id: (Item) -> String, name: (Item) -> String,
                              kind: String, scope: String, lister: String) throws -> Item {
        if let byID = items.first(where: { id($0) == text }) { return byID }
        let named = items.filter { name($0) == text }
        guard let first = named.first else {
            throw CovenError(.notFound, "no \(kind) '\(text)' \(scope)", hint: "'\(lister)' lists them", details: [kind: text])
        }
        guard named.count == 1 else {
            throw CovenError(.usage, "\(named.count) \(kind)s are called '\(text)': \(named.map(id).joined(separator: ", "))",
                             hint: "name the \(kind) by its id ('\(lister)' lists them)", details: [kind: text])
        }
        return first
    }

    static func checkName(_ name: String) throws {
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty, !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw CovenError(.usage, "a member's name is a word, not '\(name)'")
        }
    }
}

import Foundation

/// The circles of a store (DESIGN.md "Members and circles"): audiences smaller than the store,
/// each with its own chain of key generations at `audiences/<circle id>/`, as the store's. A
/// circle's rows and file records travel in its own section of a change, sealed under its key:
/// a store member outside it sees that a section exists and checks its signature, nothing more.
///
/// The one owner of `coven_circles` (each circle's chain as this device last read it). Keys
/// and rosters are the ``Keyring``'s, which learns them here. It takes from ``Device`` and adds
/// nothing to it.
///
/// ```swift
/// let circles = Circles(device)
/// let couple = try circles.create(name: "couple", members: ["alice", "bob"])
/// try circles.add(couple.id, member: "carol")
/// try circles.remove(couple.id, member: "bob")   // then bob reads nothing published after
/// ```
public struct Circles {
    /// A circle as `coven circles` lists it: one this device's member is in, or was.
    public struct Circle: Equatable, Sendable {
        public var id: String
        public var name: String
        /// The newest generation this member opened.
        public var generation: UInt64
        /// Its roster at that generation.
        public var members: [Members.Member]
        /// Whether this device's member is on the newest roster in storage (false: removed).
        public var isMember: Bool
        /// Set when storage's chain ends below the generation this device holds: what it lost.
        public var storageBehind: KeyChainLoss?
    }

    /// What a change of a circle's roster did.
    public struct Change: Equatable, Sendable {
        public var circle: Circle
        /// The member added or removed (nil for a rotation).
        public var member: Members.Member?
        /// Objects written to storage (0 when it was done already).
        public var objectsWritten: Int
    }

    let device: Device
    var database: Database { device.database }

    public init(_ device: Device) {
        self.device = device
    }

    // MARK: Reading the chains

    /// Reads the chains of circles that changed since the last look: one listing of
    /// `audiences/`, then each circle with a generation not read yet, opened with this device's
    /// member identity. Their keys and rosters go to the ``Keyring``. A circle this member was
    /// never on is remembered too (its sections are skipped, not waited for). Nothing on a
    /// device that belongs to no member.
    ///
    /// - Throws: `.integrity` naming the object for a forged or broken chain; `.storage`.
    func refresh(provider: StorageProvider) throws {
        guard try Members(device).memberID() != nil else { return }
        let highest = try storageGenerations(provider: provider)
        let known = try knownGenerations()
        try checkLosses(highest: highest, known: known, provider: provider)
        let changed = highest.filter { (known[$0.key] ?? 0) < $0.value }
        guard !changed.isEmpty else { return }
        let identity = try Members(device).identity()
        for audience in changed.keys.sorted() {
            try read(audience, identity: identity, provider: provider)
        }
    }

    /// The newest generation storage holds of each circle: one listing of `audiences/`, a page
    /// at a time, that ends where the store's own generations begin (``Members`` reads those).
    /// A circle's id is a lowercase UUID, and every hex digit sorts before the `s` of
    /// `audiences/store/`: no circle is listed past it, and an object there that is no circle's
    /// is not read.
    private func storageGenerations(provider: StorageProvider) throws -> [String: UInt64] {
        var highest: [String: UInt64] = [:]
        let store = "audiences/\(RowAudiences.store)/"
        var after = "audiences/"
        while true {
            let page = try provider.list(prefix: "audiences/", after: after, limit: 1000)
            let circles = page.prefix { $0.key < store }
            for info in circles {
                guard let (audience, generation) = AudienceGeneration.parsePath(info.key) else { continue }
                highest[audience] = max(highest[audience] ?? 0, generation)
            }
            guard circles.count == page.count, page.count == 1000, let last = page.last else { break }
            after = last.key
        }
        return highest
    }

    /// The newest generation of each circle this device read (`coven_circles`).
    private func knownGenerations() throws -> [String: UInt64] {
        var known: [String: UInt64] = [:]
        for row in try database.query("SELECT audience, generation FROM coven_circles") {
            if let audience = row.string("audience") { known[audience] = UInt64(row.int("generation") ?? 0) }
        }
        return known
    }

    /// Refuses circles whose chain in storage ends below the generation this device holds
    /// (``ChainLosses``): `.integrity` naming the first missing object, recorded for status.
    /// A circle recorded so before and whole again is cleared.
    private func checkLosses(highest: [String: UInt64], known: [String: UInt64], provider: StorageProvider) throws {
        let recorded = Set(try ChainLosses(device: device).all().map(\.audience))
        for audience in known.keys.sorted() where (highest[audience] ?? 0) < (known[audience] ?? 0) || recorded.contains(audience) {
            let chain = try Members(device).chain(audience: audience, provider: provider)
            try ChainLosses(device: device).recording(audience) { try chain.checkReaches(highest[audience] ?? 0) }
        }
    }

    /// What this member reads of one circle's chain, learned nowhere.
    private enum Reading {
        /// It was never on a roster of it; storage's newest generation.
        case never(UInt64)
        case opened(AudienceChain.State)
    }

    /// Reads one circle's chain with `identity`, checking its first generation: nil when
    /// storage holds none.
    private func open(_ audience: String, identity: MemberIdentity, provider: StorageProvider) throws -> Reading? {
        let chain = try Members(device).chain(audience: audience, provider: provider)
        let state: AudienceChain.State
        do {
            guard let read = try chain.read(identity: identity) else { return nil }
            state = read
        } catch let error as CovenError where error.code == .notFound && error.details["audience"] == audience {
            // Never on a roster of it: its sections are not for this member.
            return .never(try chain.generations().last ?? 0)
        }
        guard let first = state.opened.first else { return nil }
        try checkFirst(first.generation, chain: chain)
        return .opened(state)
    }

    /// Reads one circle's chain and records what this member holds of it.
    private func read(_ audience: String, identity: MemberIdentity, provider: StorageProvider) throws {
        switch try open(audience, identity: identity, provider: provider) {
        case nil:
            return
        case .never(let highest)?:
            try record(audience, name: nil, generation: highest, opened: 0, member: false)
        case .opened(let state)?:
            guard let newest = state.newest else { return }
            try device.keys.learn(audience: audience, state.opened)
            let highest = newest.generation.generation + UInt64(state.unreadable.count)
            try record(audience, name: newest.generation.name, generation: highest, opened: newest.generation.generation, member: state.unreadable.isEmpty)
        }
    }

    /// Generation 1 of a circle is signed by a device of a member it names as an admin: anyone
    /// else's is a forgery (any store member may make a circle, with itself its first admin).
    private func checkFirst(_ first: AudienceGeneration, chain: AudienceChain) throws {
        guard first.generation == 1 else { return }
        var member: String?
        if let vouch = first.signerVouch, let signerKey = try? chain.signerKey(first.signer),
           let recipient = first.roster.first(where: { $0.id == vouch.member })?.recipient,
           DeviceEntry.vouches(recipient, signature: vouch.signature, store: first.store, member: vouch.member, device: first.signer, publicKey: signerKey) {
            member = vouch.member
        }
        guard let member, first.roster.contains(where: { $0.id == member && $0.role.isAdmin }) else {
            throw CovenError(.integrity, "key generation '\(first.path)' is not signed by a device of an admin it names",
                             hint: "it was not made by a member of this store: remove the circle's objects and tell the store's admins",
                             details: ["object": first.path, "reason": "not_admin"])
        }
    }

    private func record(_ audience: String, name: String?, generation: UInt64, opened: UInt64, member: Bool) throws {
        try database.run("""
            INSERT INTO coven_circles (audience, name, generation, opened, member) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (audience) DO UPDATE SET name = COALESCE(excluded.name, name), generation = excluded.generation,
                opened = max(opened, excluded.opened), member = excluded.member
            """, [audience, name, Int64(generation), Int64(opened), member ? 1 : 0])
    }

    // MARK: What this device may do

    /// The circles this device's member is in or was in, by name.
    public func list() throws -> [Circle] {
        let own = try Members(device).memberID()
        return try database.query("SELECT audience, name, opened, member FROM coven_circles WHERE opened > 0 ORDER BY name, audience").compactMap { row in
            guard let id = row.string("audience") else { return nil }
            let generation = UInt64(row.int("opened") ?? 0)
            let roster = try device.keys.roster(audience: id, generation: generation).map {
                Members.Member(id: $0.id, name: $0.name, role: $0.role.rawValue, recipient: $0.recipient.description, isThisDevicesMember: $0.id == own)
            }
            return Circle(id: id, name: row.string("name") ?? "", generation: generation, members: roster, isMember: row.int("member") == 1)
        }
    }

    /// ``list()`` as storage says now: every chain read (each link checked) and learned
    /// nowhere, so a reading command writes nothing; the next sync learns what it read. A
    /// circle whose chain in storage ends below the generation held here is listed as held,
    /// with what storage lost.
    ///
    /// - Throws: `.invalidState` on a device that belongs to no member; `.integrity` naming
    ///   the object for a forged or damaged chain; `.storage`.
    public func listFresh() throws -> [Circle] {
        let identity = try Members(device).identity()
        let own = try Members(device).memberID()
        let provider = try device.connectStorage()
        let highest = try storageGenerations(provider: provider)
        let known = try knownGenerations()
        var circles = try list()
        for index in circles.indices {
            let chain = try Members(device).chain(audience: circles[index].id, provider: provider)
            do { try chain.checkReaches(highest[circles[index].id] ?? 0) } catch let error as CovenError where ChainLosses.loss(error) != nil {
                circles[index].storageBehind = ChainLosses.loss(error)
            }
        }
        for audience in highest.keys.sorted() where (known[audience] ?? 0) < (highest[audience] ?? 0) {
            guard case .opened(let state)? = try open(audience, identity: identity, provider: provider), let newest = state.newest else { continue }
            let circle = Circle(id: audience, name: newest.generation.name ?? "", generation: newest.generation.generation,
                                members: newest.generation.roster.map { Self.listed($0, own: own) }, isMember: state.unreadable.isEmpty)
            circles.removeAll { $0.id == audience }
            circles.append(circle)
        }
        return circles.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
    }

    /// The circle `text` names among this member's: its id, or its name when one circle has it.
    ///
    /// - Throws: `.notFound`; `.usage` for a name two circles share.
    public func resolve(_ text: String) throws -> Circle {
        try Members.resolve(text, in: list(), id: \.id, name: \.name, kind: "circle", scope: "of this device's member", lister: "coven circles")
    }

    /// The audiences rows may be written into here: the store's, and each circle this device's
    /// member is on the newest roster of.
    func writableAudiences() throws -> Set<String> {
        var audiences: Set<String> = [RowAudiences.store]
        for row in try database.query("SELECT audience FROM coven_circles WHERE member = 1 AND opened > 0") {
            if let audience = row.string("audience") { audiences.insert(audience) }
        }
        return audiences
    }

    /// Whether a key may still come for a section this device holds no key of, so a pull waits
    /// for it: a circle or a generation not read here yet, or a generation past the newest this
    /// member opened of a circle it is in. A section of a circle it is not in, or was removed
    /// from before that generation, is gone past.
    func mayOpenLater(_ section: SectionKey) throws -> Bool {
        guard let row = try database.queryOne("SELECT generation, opened, member FROM coven_circles WHERE audience = ?1", [section.audience]) else { return true }
        if section.generation > UInt64(row.int("generation") ?? 0) { return true }
        return row.int("member") == 1 && section.generation > UInt64(row.int("opened") ?? 0)
    }

    // MARK: Changing circles

    /// Makes a circle called `name` of this device's member, an admin of it, and `members`
    /// (names or ids of the store's members; an admin of it later makes others admins): its
    /// generation 1, put-if-absent under a new id.
    ///
    /// - Throws: `.usage` for an empty name; `.exists` when this member has a circle of that
    ///   name; `.notFound` for a member not on the store's roster; `.storage`.
    public func create(name: String, members: [String]) throws -> Change {
        try Members.checkName(name)
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let identity = try Members(device).identity()
        guard let own = try Members(device).memberID() else { throw CovenError(.internal, "a member identity without its member") }
        let provider = try device.connectStorage()
        try DeviceRegistry(device).refresh(provider: provider)
        try Members(device).refresh(provider: provider)
        try refresh(provider: provider)
        if try list().contains(where: { $0.name == name && $0.isMember }) {
            throw CovenError(.exists, "this member is in a circle called '\(name)' already", hint: "'coven circles' lists them", details: ["circle": name])
        }
        guard let generation = try device.keys.storeGeneration() else { throw CovenError(.invalidState, "the store has no members yet") }
        let store = try device.keys.roster(audience: RowAudiences.store, generation: generation)
        guard let me = store.first(where: { $0.id == own }) else {
            throw CovenError(.deviceGone, "this device's member is not on the store's roster")
        }
        var roster = [AudienceGeneration.Member(id: me.id, name: me.name, role: .admin, recipient: me.recipient)]
        for text in members {
            let member = try Members.resolve(text, in: store)
            if roster.contains(where: { $0.id == member.id }) { continue }
            roster.append(AudienceGeneration.Member(id: member.id, name: member.name, role: .member, recipient: member.recipient))
        }
        let id = Identifier.uuid4()
        let signingKey = try device.keys.signingKey()
        var first = AudienceGeneration(store: device.storeID, audience: id, generation: 1, signer: device.deviceID, roster: roster, previousHash: [])
        first.signerVouch = AudienceGeneration.Vouch(member: own, signature: try identity.signingKey.sign(
            DeviceEntry.certificationMessage(store: device.storeID, member: own, device: device.deviceID, publicKey: signingKey.publicKey)))
        first.name = name
        let key = SecureRandom.bytes(32)
        guard try provider.putIfAbsent(first.path, data: try first.seal(key: key, previousKey: nil, signingKey: signingKey)) else {
            throw CovenError(.busy, "circle id '\(id)' is taken", hint: "run the command again")
        }
        try device.keys.learn(audience: id, [AudienceGeneration.Opened(generation: first, key: key, previousKey: nil)])
        try record(id, name: name, generation: 1, opened: 1, member: true)
        return Change(circle: try resolve(id), member: nil, objectsWritten: 1)
    }

    /// Adds `member` (a name or an id of a store member) to `circle`, as an admin of it when
    /// `admin`: a new generation. Run again once done, it changes nothing.
    ///
    /// - Throws: `.notAdmin` when this device's member is not the circle's admin; `.notFound`.
    public func add(_ circle: String, member: String, admin: Bool = false) throws -> Change {
        try change(circle) { roster, store in
            let target = try Members.resolve(member, in: store)
            if let present = roster.first(where: { $0.id == target.id }) {
                // Already in it (a rerun), in the role asked for: done.
                if present.role.isAdmin == admin || !admin { return (nil, present) }
                var changed = present
                changed.role = .admin
                return (roster.map { $0.id == target.id ? changed : $0 }, changed)
            }
            let added = AudienceGeneration.Member(id: target.id, name: target.name, role: admin ? .admin : .member, recipient: target.recipient)
            return (roster + [added], added)
        }
    }

    /// Removes `member` (a name or an id) from `circle`: a new generation without it. What it
    /// read stays with it; it reads nothing sealed after.
    ///
    /// - Throws: `.notAdmin`; `.refused` for this device's own member or the circle's last admin.
    public func remove(_ circle: String, member: String) throws -> Change {
        let own = try Members(device).memberID()
        return try change(circle) { roster, store in
            guard let target = roster.first(where: { $0.id == member }) ?? roster.first(where: { $0.name == member }) else {
                // Removed already (a rerun): done.
                let past = try Members.resolve(member, in: store)
                return (nil, past)
            }
            if target.id == own {
                throw CovenError(.refused, "'\(member)' is this device's own member", hint: "another admin of the circle removes a member", details: ["member": target.id])
            }
            let rest = roster.filter { $0.id != target.id }
            guard rest.contains(where: { $0.role.isAdmin }) else {
                throw CovenError(.refused, "'\(member)' is the circle's last admin", details: ["member": target.id])
            }
            return (rest, target)
        }
    }

    /// A new generation of `circle`'s key with the same roster: what is written after is sealed
    /// under a key no earlier holder of a generation learns unless on the roster.
    public func rotate(_ circle: String) throws -> Change {
        try change(circle, rotate: true) { roster, _ in (roster, nil) }
    }

    /// Publishes the next generation of `circle` with the roster `edit` makes of the newest,
    /// under the device lock, after checking this device's member is an admin of it.
    private func change(_ circle: String, rotate: Bool = false,
                        _ edit: @escaping ([AudienceGeneration.Member], [AudienceGeneration.Member]) throws -> ([AudienceGeneration.Member]?, AudienceGeneration.Member?)) throws -> Change {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let identity = try Members(device).identity()
        let own = try Members(device).memberID()
        let provider = try device.connectStorage()
        try DeviceRegistry(device).refresh(provider: provider)
        try Members(device).refresh(provider: provider)
        try refresh(provider: provider)
        let target = try resolve(circle)
        guard target.isMember else {
            throw CovenError(.notInCircle, "this device's member was removed from circle '\(target.name)'", details: ["circle": target.id])
        }
        guard let storeGeneration = try device.keys.storeGeneration() else { throw CovenError(.invalidState, "the store has no members yet") }
        let store = try device.keys.roster(audience: RowAudiences.store, generation: storeGeneration)
        func isAdmin(_ roster: [AudienceGeneration.Member]) throws {
            guard let me = roster.first(where: { $0.id == own }), me.role.isAdmin else {
                throw CovenError(.notAdmin, "this device's member is not an admin of circle '\(target.name)'", hint: "ask an admin of the circle ('coven circles' lists the roles)",
                                 details: ["circle": target.id])
            }
        }
        // Nothing to publish (a rerun of what was done): said from the roster held.
        let held = try device.keys.roster(audience: target.id, generation: target.generation)
        if !rotate {
            try isAdmin(held)
            if case (nil, let member?) = try edit(held, store) {
                return Change(circle: target, member: Self.listed(member, own: own), objectsWritten: 0)
            }
        }
        var subject: AudienceGeneration.Member?
        let chain = try Members(device).chain(audience: target.id, provider: provider)
        _ = try chain.publishNext(identity: identity, signer: device.deviceID, signingKey: try device.keys.signingKey()) { roster in
            try isAdmin(roster)
            let (next, member) = try edit(roster, store)
            subject = member
            return next ?? roster
        }
        try read(target.id, identity: identity, provider: provider)
        return Change(circle: try resolve(target.id), member: subject.map { Self.listed($0, own: own) }, objectsWritten: 1)
    }

    /// Replaces `member`'s recipient in every circle it is in with `next`'s (`coven member
    /// rekey`, under the caller's lock): a new generation of each, which the member publishes
    /// itself (a rekey needs no admin), so its devices with the new identity go on reading them.
    /// A circle done already (a rekey run again after a kill) is passed over.
    func rekey(member: String, from current: MemberIdentity, to next: MemberIdentity, provider: StorageProvider) throws {
        try refresh(provider: provider)
        for circle in try list() where circle.isMember {
            let chain = try Members(device).chain(audience: circle.id, provider: provider)
            if let state = try? chain.read(identity: next), state.unreadable.isEmpty,
               state.newest?.generation.roster.contains(where: { $0.id == member && $0.recipient == next.recipient }) == true {
                continue
            }
            _ = try chain.publishNext(identity: current, signer: device.deviceID, signingKey: try device.keys.signingKey()) { roster in
                roster.map { entry in
                    guard entry.id == member else { return entry }
                    var replaced = entry
                    replaced.recipient = next.recipient
                    return replaced
                }
            }
            try read(circle.id, identity: next, provider: provider)
        }
    }

    /// Takes every member no longer on the store's newest roster (removed from the store) out
    /// of each circle this device's member is an admin of: a new generation of each, without
    /// them, under a fresh key (under the caller's lock).
    ///
    /// The failure story: a member removed from the store kept the circles' keys of then, and
    /// each circle's writes went on being sealed under them; their devices were gone, but with
    /// their storage credentials and a saved copy of a device they read every circle section
    /// and file record written after. The rule: a removal from the store is a removal from its
    /// circles. `coven member remove` does it for the remover's circles in the same operation;
    /// every admin's device of another circle does it at its next sync (only a circle's admin
    /// may publish its generations). It does not apply to circles this member only reads: their
    /// admins' devices do it.
    ///
    /// - Returns: the circles given a new generation.
    /// - Throws: `.storage`; `.busy` when other devices kept publishing first.
    @discardableResult
    func dropRemovedMembers(provider: StorageProvider) throws -> [String] {
        guard let own = try Members(device).memberID(), let generation = try device.keys.storeGeneration() else { return [] }
        let store = Set(try device.keys.roster(audience: RowAudiences.store, generation: generation).map(\.id))
        guard store.contains(own) else { return [] }
        var changed: [String] = []
        for circle in try list() where circle.isMember {
            let held = try device.keys.roster(audience: circle.id, generation: circle.generation)
            guard held.contains(where: { $0.id == own && $0.role.isAdmin }), held.contains(where: { !store.contains($0.id) }) else { continue }
            let identity = try Members(device).identity()
            let chain = try Members(device).chain(audience: circle.id, provider: provider)
            do {
                _ = try chain.publishNext(identity: identity, signer: device.deviceID, signingKey: try device.keys.signingKey()) { roster in
                    // Another admin published since: still this member's to change, or not at all.
                    guard roster.contains(where: { $0.id == own && $0.role.isAdmin }) else {
                        throw CovenError(.notAdmin, "this device's member is no longer an admin of circle '\(circle.name)'", details: ["circle": circle.id])
                    }
                    return roster.filter { store.contains($0.id) }
                }
                changed.append(circle.id)
            } catch let error as CovenError where error.code == .notAdmin && error.details["circle"] == circle.id {
                // Its other admins' devices take the member out: nothing of this one's to do.
            }
            try read(circle.id, identity: identity, provider: provider)
        }
        return changed
    }

    private static func listed(_ member: AudienceGeneration.Member, own: String?) -> Members.Member {
        Members.Member(id: member.id, name: member.name, role: member.role.rawValue, recipient: member.recipient.description, isThisDevicesMember: member.id == own)
    }
}

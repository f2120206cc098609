import Foundation

/// The chain of key generations of one audience in storage (`audiences/<audience>/`): reads it
/// whole and checks every link, and publishes the next generation put-if-absent, the only
/// sequencer object storage gives (DESIGN.md "Principals and keys"). Two admins who publish at
/// once make one chain: the loser's put is refused, it reads the winner's generation and builds
/// its own on top of it, at the next number; nothing is ever written under a generation it
/// could not publish.
struct AudienceChain {
    let provider: StorageProvider
    let store: String
    let audience: String
    /// The registered key of a device, to check who signed a generation.
    let signerKey: (String) throws -> DevicePublicKey?
    /// The member of a roster who vouched for a device (its entry certified by that member's
    /// key), to check that an admin's device signed.
    let memberOf: (String, [AudienceGeneration.Member]) -> String?
    /// The member a device's entry names, vouched for or not (``isRemoval(signer:roster:identity:)``).
    var namedMember: (String) -> String? = { _ in nil }
    /// The newest generation this device learned of the audience (0: none): storage's chain
    /// must reach it.
    var held: UInt64 = 0
    /// The key this device learned of a generation, if it did: storage's generation must be
    /// the one it learned.
    var heldKey: (UInt64) throws -> [UInt8]? = { _ in nil }

    /// What a member reads of the chain.
    struct State: Equatable {
        /// Every generation up to the newest this member opens, oldest first, each with its key.
        var opened: [AudienceGeneration.Opened]
        /// Their published bytes, for the next link's hash.
        var newestBytes: [UInt8]
        /// Generations past those, which this member cannot open (it was removed).
        var unreadable: [UInt64]

        var newest: AudienceGeneration.Opened? { opened.last }
    }

    /// The generation numbers storage holds, in order (one listing, a page at a time).
    func generations() throws -> [UInt64] {
        var numbers: [UInt64] = []
        let prefix = "audiences/\(audience)/"
        var after = prefix
        while true {
            let page = try provider.list(prefix: prefix, after: after, limit: 1000)
            numbers += page.compactMap { AudienceGeneration.parsePath($0.key).flatMap { $0.audience == audience ? $0.generation : nil } }
            guard page.count == 1000, let last = page.last else { break }
            after = last.key
        }
        return numbers.sorted()
    }

    /// Reads the chain with `identity`: finds the newest generation this member opens, walks
    /// back through the keys each generation holds of its previous one, and checks every link.
    ///
    /// - Returns: nil when storage holds no generation of this audience.
    /// - Throws: `.integrity` naming the object for a missing generation below the newest, a
    ///   forged or damaged one, or a broken link; `.notFound` when this member opens none (it
    ///   was never on a roster).
    func read(identity: MemberIdentity) throws -> State? {
        let numbers = try generations()
        try checkReaches(numbers.last ?? 0)
        guard let highest = numbers.last else { return nil }
        guard numbers == Array(1...highest) else {
            let missing = (1...highest).first { !numbers.contains($0) } ?? 1
            throw CovenError(.integrity, "key generation '\(AudienceGeneration.path(audience: audience, generation: missing))' is missing below generation \(highest)",
                             details: ["object": AudienceGeneration.path(audience: audience, generation: missing), "reason": "missing"])
        }
        var bytesOf: [UInt64: [UInt8]] = [:]
        func bytes(_ number: UInt64) throws -> [UInt8] {
            if let known = bytesOf[number] { return known }
            let path = AudienceGeneration.path(audience: audience, generation: number)
            guard let read = try provider.getObject(path) else {
                throw CovenError(.integrity, "key generation '\(path)' is missing", details: ["object": path, "reason": "missing"])
            }
            bytesOf[number] = read
            return read
        }
        var unreadable: [UInt64] = []
        var newest: AudienceGeneration.Opened?
        for number in numbers.reversed() {
            let path = AudienceGeneration.path(audience: audience, generation: number)
            if let opened = try AudienceGeneration.open(try bytes(number), path: path, store: store, identity: identity, signerKey: signerKey) {
                newest = opened
                break
            }
            unreadable.insert(number, at: 0)
        }
        guard var current = newest else {
            throw CovenError(.notFound, "no key generation of audience '\(audience)' is for this member", hint: "ask an admin of the store to add this member",
                             details: ["audience": audience])
        }
        // Back to the first, each opened with the key the next holds of it.
        var opened = [current]
        while current.generation.generation > 1 {
            guard let previousKey = current.previousKey else { throw CovenError(.internal, "a generation past the first holds no previous key") }
            let number = current.generation.generation - 1
            let previous: AudienceGeneration.Opened
            do {
                previous = try AudienceGeneration.open(try bytes(number), path: AudienceGeneration.path(audience: audience, generation: number),
                                                       store: store, key: previousKey, signerKey: signerKey)
            } catch let error as CovenError where error.details["reason"] == "sealed" {
                // Generation `number` checked out (signed, in place): the key the next one
                // holds of it is not its key, so the next one is forged.
                throw CovenError(.integrity, "key generation '\(current.generation.path)' holds a key that does not open generation \(number): it is forged",
                                 hint: "it was not published by an admin of this store: remove the object and tell the store's admins",
                                 cause: error.description, details: ["object": current.generation.path, "reason": "previous_key"])
            }
            try AudienceGeneration.checkLink(previous: previous.generation, previousBytes: try bytes(number), next: current.generation, memberOf: memberOf,
                                             signerKey: try? signerKey(current.generation.signer))
            opened.insert(previous, at: 0)
            current = previous
        }
        // Past the newest this member opens, the signatures are checked, and the first must be
        // of a device of an admin of the newest roster this member reads: anyone else's is a
        // forgery (a squatted number), not this member's removal.
        for number in unreadable {
            let path = AudienceGeneration.path(audience: audience, generation: number)
            let (signer, _, _) = try AudienceGeneration.verify(try bytes(number), path: path, store: store, signerKey: signerKey)
            if number == unreadable.first, let roster = opened.last?.generation.roster,
               !roster.contains(where: { $0.id == memberOf(signer, roster) && $0.role.isAdmin }),
               !isRemoval(signer: signer, roster: roster, identity: identity) {
                throw CovenError(.integrity, "key generation '\(path)' is signed by device '\(signer)', whose member was not an admin at generation \(number - 1)",
                                 hint: "it was not published by an admin of this store: remove the object and tell the store's admins",
                                 details: ["object": path, "reason": "not_admin"])
            }
        }
        try checkHeld(opened)
        let newestNumber = opened.last?.generation.generation ?? 1
        return State(opened: opened, newestBytes: try bytes(newestNumber), unreadable: unreadable)
    }

    /// Refuses a chain that ends below the newest generation this device learned (`highest`:
    /// storage's newest): storage lost generations (a backup put back), and building on it
    /// would publish a generation at or below one this device holds, on a roster it has moved
    /// past (a removed member's, say). The first missing generation is named.
    ///
    /// - Throws: `.integrity` with the missing object, `reason: behind`.
    func checkReaches(_ highest: UInt64) throws {
        guard highest < held else { return }
        let missing = AudienceGeneration.path(audience: audience, generation: highest + 1)
        throw CovenError(.integrity, "key generation '\(missing)' is missing: storage's chain of audience '\(audience)' ends at generation \(highest), and this device holds generation \(held)",
                         hint: "storage lost key generations (put back from an older backup?): put '\(missing)' back from a newer copy of the storage; nothing is published on the shorter chain",
                         details: ["object": missing, "reason": "behind", "audience": audience, "storage_generation": String(highest), "held_generation": String(held)])
    }

    /// Refuses a chain whose generation this device learned holds another key now: storage's
    /// object was replaced (generations lost, then published again on the shorter chain).
    private func checkHeld(_ opened: [AudienceGeneration.Opened]) throws {
        for generation in opened {
            guard let key = try heldKey(generation.generation.generation), key != generation.key else { continue }
            let path = generation.generation.path
            throw CovenError(.integrity, "key generation '\(path)' is not the generation this device learned: storage's chain was replaced",
                             hint: "storage lost key generations and another device published on the shorter chain: put the storage back from a newer copy and tell the store's admins",
                             details: ["object": path, "reason": "replaced", "audience": audience])
        }
    }

    /// Whether the first generation this member cannot open, signed by `signer`, is its
    /// removal (or its rekey on another device) rather than a forgery: `signer`'s entry names
    /// an admin of `roster`, the newest this member reads, or this member itself. The vouch for
    /// the signer that the generation carries is sealed under its key, and the signer's entry
    /// may be vouched for since by a key this member never saw (the signer's member rekeyed),
    /// so the entry's word is taken here. A forged entry and generation could only stop this
    /// device, which either answer does, and storage access allows anyway.
    private func isRemoval(signer: String, roster: [AudienceGeneration.Member], identity: MemberIdentity) -> Bool {
        guard let named = namedMember(signer), let member = roster.first(where: { $0.id == named }) else { return false }
        return member.role.isAdmin || member.recipient == identity.recipient
    }

    /// Publishes the next generation: `change` turns the newest roster into the next (adding,
    /// removing or changing a member), under a fresh key, signed by `signer` with `signingKey`.
    /// A lost put race reads the chain again and applies `change` to the winner's roster, at
    /// the next number, up to `attempts` times.
    ///
    /// - Returns: the generation published and its key.
    /// - Throws: what `change` throws (its refusal, named); `.busy` when every attempt lost a
    ///   race; `.notFound` when the chain is empty (the first generation is made by
    ///   ``publishFirst(roster:key:signer:signingKey:)``).
    func publishNext(identity: MemberIdentity, signer: String, signingKey: DeviceSigningKey, attempts: Int = 8,
                     change: ([AudienceGeneration.Member]) throws -> [AudienceGeneration.Member]) throws -> AudienceGeneration.Opened {
        for _ in 0..<attempts {
            guard let state = try read(identity: identity), let newest = state.newest else {
                throw CovenError(.notFound, "audience '\(audience)' has no key generation yet", details: ["audience": audience])
            }
            guard state.unreadable.isEmpty else {
                throw CovenError(.invalidState, "this member is not on the newest roster of audience '\(audience)'", hint: "it was removed; an admin of the store can add it again",
                                 details: ["audience": audience])
            }
            let roster = try change(newest.generation.roster)
            let number = newest.generation.generation + 1
            var next = AudienceGeneration(store: store, audience: audience, generation: number, signer: signer, roster: roster,
                                          previousHash: AudienceGeneration.hash(state.newestBytes))
            // A circle keeps its name from generation to generation.
            next.name = newest.generation.name
            // The signer's member vouches for it in the generation, with the key the newest
            // roster holds of it.
            if let member = newest.generation.roster.first(where: { $0.recipient == identity.recipient }) {
                next.signerVouch = AudienceGeneration.Vouch(member: member.id, signature: try identity.signingKey.sign(
                    DeviceEntry.certificationMessage(store: store, member: member.id, device: signer, publicKey: signingKey.publicKey)))
            }
            let key = SecureRandom.bytes(32)
            if try provider.putIfAbsent(next.path, data: try next.seal(key: key, previousKey: newest.key, signingKey: signingKey)) {
                return AudienceGeneration.Opened(generation: next, key: key, previousKey: newest.key)
            }
        }
        throw CovenError(.busy, "other devices kept publishing key generations of audience '\(audience)' first", hint: "run the command again",
                         details: ["audience": audience])
    }

    /// Publishes generation 1 with `key` (a store made before members: its store key).
    ///
    /// - Returns: false when storage holds a generation 1 already (another device made it).
    func publishFirst(roster: [AudienceGeneration.Member], key: [UInt8], signer: String, signingKey: DeviceSigningKey) throws -> Bool {
        let first = AudienceGeneration(store: store, audience: audience, generation: 1, signer: signer, roster: roster, previousHash: [])
        return try provider.putIfAbsent(first.path, data: try first.seal(key: key, previousKey: nil, signingKey: signingKey))
    }
}

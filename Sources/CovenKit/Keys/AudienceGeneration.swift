import Foundation

/// One generation of an audience's key, `audiences/<audience>/<gen>` (DESIGN.md "Principals and
/// keys"): the roster of the audience at that generation, its 256-bit key wrapped to every member
/// on it (one ``KeyStanza`` each), the previous generation's key sealed under the new one
/// (history for newcomers), the hash of the previous generation's object, and the signature of
/// the admin's device that published it. Written put-if-absent, so each audience has one
/// linear chain.
///
/// ```
/// object    = version ‖ store ‖ audience ‖ gen ‖ signer device ‖ stanzas ‖ sealed ‖ signature
/// sealed    = store object (docs/format.md 5) under the generation's key, bound to the path, of
///             previous hash ‖ previous key ‖ roster
/// signature = Ed25519(signer, "coven audience v1" ‖ 0 ‖ path ‖ 0 ‖ SHA-256(everything before))
/// ```
/// Every store member can check who published a generation; only those on its roster can read
/// it.
struct AudienceGeneration: Equatable {
    /// A member's part in an audience.
    enum Role: String, Equatable {
        /// The store's first member: an admin no other admin may remove.
        case owner
        /// Adds, removes and changes the roles of members.
        case admin
        /// Reads and writes.
        case member

        var isAdmin: Bool { self != .member }
    }

    /// One member on the roster.
    struct Member: Equatable {
        var id: String
        var name: String
        var role: Role
        var recipient: MemberRecipient
    }

    static let formatVersion: UInt8 = 1

    var store: String
    var audience: String
    var generation: UInt64
    /// The device that signed it.
    var signer: String
    var roster: [Member]
    /// SHA-256 of the previous generation's published bytes (empty for generation 1).
    var previousHash: [UInt8]
    /// The signer's member and that member's signature over the signer device's key, by the
    /// member's key on the previous roster: who vouched for the signer when it signed, kept in
    /// the generation because a member's key changes (`coven member rekey`) and its devices'
    /// entries with it. Absent from generations written before it was kept.
    var signerVouch: Vouch?
    /// A circle's name, sealed with the roster (nil for the store audience, and for
    /// generations written before circles). Written only after a vouch, which every generation
    /// of a circle carries.
    var name: String?

    struct Vouch: Equatable {
        var member: String
        var signature: [UInt8]
    }

    /// `audiences/<audience>/<gen, 16 digits>`.
    static func path(audience: String, generation: UInt64) -> String {
        let digits = String(generation)
        return "audiences/" + audience + "/" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    var path: String { Self.path(audience: audience, generation: generation) }

    /// What a member who opened a generation holds.
    struct Opened: Equatable {
        var generation: AudienceGeneration
        /// This generation's key.
        var key: [UInt8]
        /// The previous generation's key (nil for generation 1).
        var previousKey: [UInt8]?
    }

    // MARK: Publishing

    /// The published bytes: `key` wrapped to every member of the roster, the rest sealed under
    /// it, signed by `signingKey` (the signer device's).
    func seal(key: [UInt8], previousKey: [UInt8]?, signingKey: DeviceSigningKey) throws -> [UInt8] {
        guard key.count == 32, previousKey.map({ $0.count == 32 }) ?? true, generation >= 1,
              (generation == 1) == (previousKey == nil), (generation == 1) == previousHash.isEmpty, !roster.isEmpty else {
            throw CovenError(.internal, "cannot publish an invalid key generation", details: ["object": path])
        }
        var out: [UInt8] = [Self.formatVersion]
        RowEntryCodec.writeString(store, into: &out)
        RowEntryCodec.writeString(audience, into: &out)
        RowEntryCodec.writeVarint(generation, into: &out)
        RowEntryCodec.writeString(signer, into: &out)
        let context = KeyStanza.audienceContext(store: store, audience: audience, generation: generation)
        RowEntryCodec.writeVarint(UInt64(roster.count), into: &out)
        for member in roster {
            let stanza = try KeyStanza.wrap(key, to: member.recipient.agreement, aad: context)
            out += stanza.share + stanza.body
        }
        var inner: [UInt8] = []
        Self.writeBytes(previousHash, into: &inner)
        Self.writeBytes(previousKey ?? [], into: &inner)
        RowEntryCodec.writeVarint(UInt64(roster.count), into: &inner)
        for member in roster {
            RowEntryCodec.writeString(member.id, into: &inner)
            RowEntryCodec.writeString(member.name, into: &inner)
            RowEntryCodec.writeString(member.role.rawValue, into: &inner)
            RowEntryCodec.writeString(member.recipient.description, into: &inner)
        }
        if let signerVouch {
            RowEntryCodec.writeString(signerVouch.member, into: &inner)
            Self.writeBytes(signerVouch.signature, into: &inner)
            if let name { RowEntryCodec.writeString(name, into: &inner) }
        } else if name != nil {
            throw CovenError(.internal, "a named key generation without a vouch for its signer", details: ["object": path])
        }
        let sealed = try StoreSealer.seal(inner, storeKey: try FileKey(bytes: key), boundTo: path)
        Self.writeBytes(sealed, into: &out)
        return out + (try signingKey.sign(Self.signedMessage(path: path, body: out[...])))
    }

    private static func writeBytes(_ bytes: [UInt8], into out: inout [UInt8]) {
        RowEntryCodec.writeVarint(UInt64(bytes.count), into: &out)
        out += bytes
    }

    private static func readBytes(_ reader: inout ByteReader) throws -> [UInt8] {
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw CovenError(.decoding, "truncated") }
        return Array(try reader.take(Int(count)))
    }

    static func signedMessage(path: String, body: ArraySlice<UInt8>) -> [UInt8] {
        Array("coven audience v1".utf8) + [0] + Array(path.utf8) + [0] + body.withUnsafeBytes { SHA256.digest($0) }
    }

    /// SHA-256 of published bytes: what the next generation names as its previous.
    static func hash(_ published: [UInt8]) -> [UInt8] { SHA256.digest(published) }

    // MARK: Reading

    /// The clear part of a published generation: who signed it, checked against `signerKey`.
    ///
    /// - Throws: `.integrity` naming the object when it is truncated, signed by another key or
    ///   for another path, or names another store, audience or generation than its path;
    ///   `.updateRequired` for a newer format.
    static func verify(_ bytes: [UInt8], path: String, store: String, signerKey: (String) throws -> DevicePublicKey?)
        throws -> (signer: String, stanzas: [KeyStanza], sealed: [UInt8])
    {
        func refuse(_ why: String, _ reason: String) -> CovenError {
            CovenError(.integrity, "key generation '\(path)' \(why)", hint: "it was not published by a device of this store: remove the object and tell the store's admins",
                       details: ["object": path, "reason": reason])
        }
        let signatureSize = DeviceSigningKey.signatureSize
        guard bytes.count > signatureSize else { throw refuse("is truncated", "truncated") }
        let body = bytes[0..<(bytes.count - signatureSize)]
        var reader = ByteReader(Array(body))
        let parsed: (version: UInt8, store: String, audience: String, generation: UInt64, signer: String, stanzas: [KeyStanza], sealed: [UInt8])
        do {
            let version = try reader.byte()
            if version > formatVersion {
                throw CovenError(.updateRequired, "key generation '\(path)' uses a newer format than this coven reads", hint: "update coven", details: ["object": path])
            }
            let store = try reader.string()
            let audience = try reader.string()
            let generation = try reader.varint()
            let signer = try reader.string()
            let count = try reader.varint()
            guard count <= UInt64(reader.remaining / 80) else { throw refuse("is damaged", "decoding") }
            var stanzas: [KeyStanza] = []
            for _ in 0..<count { stanzas.append(KeyStanza(share: Array(try reader.take(32)), body: Array(try reader.take(48)))) }
            let sealed = try Self.readBytes(&reader)
            guard reader.isAtEnd else { throw refuse("is damaged", "decoding") }
            parsed = (version, store, audience, generation, signer, stanzas, sealed)
        } catch let error as CovenError where error.code == .updateRequired || error.details["reason"] != nil {
            throw error
        } catch {
            throw refuse("is damaged", "decoding")
        }
        guard parsed.version == formatVersion else { throw refuse("is damaged", "decoding") }
        guard path == Self.path(audience: parsed.audience, generation: parsed.generation) else {
            throw refuse("names another audience or generation than its path", "misplaced")
        }
        guard parsed.store == store else { throw refuse("belongs to another store", "store") }
        let key: DevicePublicKey?
        do { key = try signerKey(parsed.signer) } catch { throw refuse("is signed by device '\(parsed.signer)', which this store does not know", "signer") }
        // nil: a newcomer's first look, before it can read the device registry; it reads the
        // chain again, checked, once it can.
        if let key {
            do {
                try key.verify(Array(bytes[(bytes.count - signatureSize)...]), for: signedMessage(path: path, body: body))
            } catch {
                throw refuse("is not signed by the device it names", "signature")
            }
        }
        return (parsed.signer, parsed.stanzas, parsed.sealed)
    }

    /// Checks a published generation and opens it with `identity`: nil when no stanza is for
    /// this member (it is not on the roster).
    ///
    /// - Throws: as ``verify(_:path:store:signerKey:)``; `.integrity` when the sealed part does
    ///   not open under the key a stanza gave or is malformed, or the roster does not hold this
    ///   member.
    static func open(_ bytes: [UInt8], path: String, store: String, identity: MemberIdentity,
                     signerKey: (String) throws -> DevicePublicKey?) throws -> Opened? {
        try open(bytes, path: path, store: store, signerKey: signerKey) { stanzas, context in
            stanzas.lazy.compactMap { try? $0.unwrap(secret: identity.agreementSecret, aad: context) }.first
        }.flatMap { opened in
            guard opened.generation.roster.contains(where: { $0.recipient == identity.recipient }) else {
                throw CovenError(.integrity, "key generation '\(path)' opens for a member its roster does not hold", details: ["object": path, "reason": "sealed"])
            }
            return opened
        }
    }

    /// Checks a published generation and opens it with its key, known already (from the next
    /// generation, which holds it: how a newcomer reads history).
    ///
    /// - Throws: as ``open(_:path:store:identity:signerKey:)``.
    static func open(_ bytes: [UInt8], path: String, store: String, key: [UInt8],
                     signerKey: (String) throws -> DevicePublicKey?) throws -> Opened {
        guard let opened = try open(bytes, path: path, store: store, signerKey: signerKey, findKey: { _, _ in key }) else {
            throw CovenError(.internal, "a key generation opened with its key gave nothing")
        }
        return opened
    }

    private static func open(_ bytes: [UInt8], path: String, store: String, signerKey: (String) throws -> DevicePublicKey?,
                             findKey: ([KeyStanza], [UInt8]) throws -> [UInt8]?) throws -> Opened? {
        let (signer, stanzas, sealed) = try verify(bytes, path: path, store: store, signerKey: signerKey)
        guard let (audience, generation) = parsePath(path) else { throw CovenError(.internal, "'\(path)' is not a key generation's path") }
        let context = KeyStanza.audienceContext(store: store, audience: audience, generation: generation)
        guard let key = try findKey(stanzas, context) else { return nil }
        func refuse(_ why: String) -> CovenError {
            CovenError(.integrity, "key generation '\(path)' \(why)", details: ["object": path, "reason": "sealed"])
        }
        let inner: [UInt8]
        do { inner = try StoreSealer.open(sealed, storeKey: try FileKey(bytes: key), boundTo: path) } catch { throw refuse("does not open under its own key") }
        var reader = ByteReader(inner)
        var roster: [Member] = []
        let previousHash: [UInt8]
        let previousKey: [UInt8]
        var vouch: Vouch?
        var name: String?
        do {
            previousHash = try Self.readBytes(&reader)
            previousKey = try Self.readBytes(&reader)
            let count = try reader.varint()
            guard count <= UInt64(reader.remaining) else { throw refuse("holds a damaged roster") }
            for _ in 0..<count {
                let id = try reader.string()
                let name = try reader.string()
                guard let role = Role(rawValue: try reader.string()) else { throw refuse("names an unknown role") }
                roster.append(Member(id: id, name: name, role: role, recipient: try MemberRecipient(try reader.string())))
            }
            if !reader.isAtEnd {
                vouch = Vouch(member: try reader.string(), signature: try Self.readBytes(&reader))
                guard vouch?.signature.count == DeviceSigningKey.signatureSize else { throw refuse("holds a damaged vouch for its signer") }
                if !reader.isAtEnd { name = try reader.string() }
            }
            guard reader.isAtEnd else { throw refuse("holds trailing bytes") }
        } catch let error as CovenError where error.details["object"] == path {
            throw error
        } catch {
            throw refuse("holds a damaged roster")
        }
        guard roster.count == stanzas.count,
              (generation == 1) == previousHash.isEmpty, (generation == 1) == previousKey.isEmpty,
              previousHash.isEmpty || previousHash.count == 32, previousKey.isEmpty || previousKey.count == 32 else {
            throw refuse("holds a roster that does not match its stanzas")
        }
        return Opened(generation: AudienceGeneration(store: store, audience: audience, generation: generation, signer: signer, roster: roster,
                                                     previousHash: previousHash, signerVouch: vouch, name: name),
                      key: key, previousKey: previousKey.isEmpty ? nil : previousKey)
    }

    /// The audience and generation a path names.
    static func parsePath(_ path: String) -> (audience: String, generation: UInt64)? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "audiences", !parts[1].isEmpty, parts[2].utf8.count == 16,
              parts[2].utf8.allSatisfy({ (0x30...0x39).contains($0) }), let generation = UInt64(parts[2]), generation >= 1 else { return nil }
        return (String(parts[1]), generation)
    }

    /// Checks that `next` follows `previous` (whose published bytes are `previousBytes`) in one
    /// chain: the next number, the previous one's hash, and a signer whose member was an admin of
    /// the previous roster (`memberOf` says which member of it vouched for the signing device).
    ///
    /// - Throws: `.integrity` naming `next`'s object: a forged generation.
    static func checkLink(previous: AudienceGeneration, previousBytes: [UInt8], next: AudienceGeneration,
                          memberOf: (String, [Member]) -> String?, signerKey: DevicePublicKey? = nil) throws {
        func refuse(_ why: String, _ reason: String) -> CovenError {
            CovenError(.integrity, "key generation '\(next.path)' \(why)", hint: "it was not published by an admin of this store: remove the object and tell the store's admins",
                       details: ["object": next.path, "reason": reason])
        }
        guard next.audience == previous.audience, next.generation == previous.generation + 1 else { throw refuse("does not follow generation \(previous.generation)", "chain") }
        guard next.previousHash == hash(previousBytes) else { throw refuse("names another previous generation than '\(previous.path)'", "previous_hash") }
        // The vouch the generation carries, by the member's key on the previous roster; else
        // the signer's entry as this device knows it.
        var vouched: String?
        if let vouch = next.signerVouch, let signerKey, let recipient = previous.roster.first(where: { $0.id == vouch.member })?.recipient,
           DeviceEntry.vouches(recipient, signature: vouch.signature, store: next.store, member: vouch.member, device: next.signer, publicKey: signerKey) {
            vouched = vouch.member
        }
        guard let member = vouched ?? memberOf(next.signer, previous.roster),
              previous.roster.contains(where: { $0.id == member && $0.role.isAdmin }) || isRekey(of: member, from: previous.roster, to: next.roster) else {
            throw refuse("is signed by device '\(next.signer)', whose member was not an admin at generation \(previous.generation)", "not_admin")
        }
    }

    /// Whether `next` is `previous` with only `member`'s recipient replaced: a member replacing
    /// its own keys (`coven member rekey`), which needs no admin.
    static func isRekey(of member: String, from previous: [Member], to next: [Member]) -> Bool {
        guard previous.count == next.count else { return false }
        return zip(previous, next).allSatisfy { old, new in
            old.id == new.id && old.name == new.name && old.role == new.role && (old.id == member) == (old.recipient != new.recipient)
        }
    }
}

import Foundation

/// `devices/<id>.gone`: the mark of a device removed for good, by whom and when (docs/format.md
/// 10.3). Sealed under the store key bound to its path, and signed by the removing device's key,
/// so that every reader can tell which device made it, and judge whether it may
/// (``RemovalAuthority``).
struct GoneMark {
    var device: String
    var goneAt: String
    var removedBy: String
    /// The removing device's Ed25519 signature over ``signedMessage(store:)``; nil in a mark of a
    /// release before signed marks (honoured only where the store has no members, or of a
    /// device no member vouches for).
    var signature: [UInt8]?

    init(device: String, goneAt: String, removedBy: String) {
        self.device = device
        self.goneAt = goneAt
        self.removedBy = removedBy
    }

    /// What the remover signs: the domain, the store, the device removed, when, and by whom.
    func signedMessage(store: String) -> [UInt8] {
        Array("coven-device-gone-v1\0\(store)\0\(device)\0\(goneAt)\0\(removedBy)".utf8)
    }

    /// The mark signed by the removing device (`removedBy`: the keyring's device, or `signer`,
    /// the key of a device being made) and sealed.
    func seal(keys: Keyring, store: String, signer: DeviceSigningKey? = nil) throws -> [UInt8] {
        let signature = try (signer ?? keys.signingKey()).sign(signedMessage(store: store))
        let plaintext = try JSONSerialization.data(withJSONObject: [
            "coven_device_gone": 1, "device": device, "gone_at": goneAt, "removed_by": removedBy, "signature": signature.hex,
        ], options: [.sortedKeys])
        return try keys.seal([UInt8](plaintext), boundTo: Device.registryEntryKey(device) + Device.goneSuffix)
    }

    static func open(_ sealed: [UInt8], key: String, keys: Keyring) throws -> GoneMark {
        let plaintext: [UInt8]
        do {
            plaintext = try keys.open(sealed, boundTo: key)
        } catch var error as CovenError {
            error.details["object"] = key
            if error.code == .integrity { error.message = "removal mark '\(key)' fails authentication" }
            throw error
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(plaintext)) as? [String: Any], let device = object["device"] as? String,
              let goneAt = object["gone_at"] as? String else {
            throw CovenError(.decoding, "removal mark '\(key)' cannot be decoded", details: ["object": key])
        }
        var mark = GoneMark(device: device, goneAt: goneAt, removedBy: object["removed_by"] as? String ?? "")
        if let hex = object["signature"] as? String {
            guard let signature = [UInt8](hex: hex) else { throw CovenError(.decoding, "removal mark '\(key)' cannot be decoded", details: ["object": key]) }
            mark.signature = signature
        }
        return mark
    }
}

/// Whether a removal mark is to be honoured (DESIGN.md "Members and circles"): in a store of
/// members only an admin's device, or a device of the same member, takes a member's device out.
///
/// A mark is honoured when:
/// - the store has no members (every device holds the one key and may remove any; a mark of a
///   release before signed marks is unsigned);
/// - or the device removed is vouched for by no member of the newest roster (never a member's,
///   its member removed, or its member's keys replaced since): the roster took it out already;
/// - or it is signed by the device it names as its remover (by that device's registered key),
///   and that device is vouched for by the removed device's own member, or by a member who is an
///   admin on a roster of the store (by that member's key on it, or a later one).
///
/// What it cannot stop: an admin removed since still holds the signing key of their device, and
/// a mark carries no generation a reader could hold against them (like their storage
/// credentials, which let them delete objects outright, a person revokes them).
struct RemovalAuthority {
    let keys: Keyring
    let database: Database
    let store: String

    /// Why `mark` is not honoured; nil when it is.
    func refusal(of mark: GoneMark) throws -> String? {
        guard let newest = try keys.storeGeneration() else { return nil }
        let newestRoster = try keys.roster(audience: RowAudiences.store, generation: newest)
        guard let target = try vouchedMember(mark.device, roster: newestRoster) else { return nil }
        guard let signature = mark.signature else { return "it is not signed" }
        guard mark.removedBy != mark.device, let removerKey = try? keys.publicKey(of: mark.removedBy),
              (try? removerKey.verify(signature, for: mark.signedMessage(store: store))) != nil else {
            return "it is not signed by the device it names as its remover"
        }
        if let remover = try vouchedMember(mark.removedBy, roster: newestRoster), remover.id == target.id || remover.role.isAdmin { return nil }
        for generation in stride(from: newest, through: 1, by: -1) {
            let roster = try keys.roster(audience: RowAudiences.store, generation: generation)
            if let remover = try vouchedMember(mark.removedBy, roster: roster, orLater: generation), remover.role.isAdmin { return nil }
        }
        return "its remover's member is not an admin, nor the device's member"
    }

    /// The member of `roster` that vouched for `device` with its key on that roster (or, with
    /// `orLater`, its key of any generation from that one on: its keys replaced since); nil
    /// when none did.
    func vouchedMember(_ device: String, roster: [AudienceGeneration.Member], orLater: UInt64? = nil) throws -> AudienceGeneration.Member? {
        guard let row = try database.queryOne("SELECT public_key, member, member_signature FROM coven_device_registry WHERE device = ?1", [device]),
              let memberID = row.string("member"), let signature = row.string("member_signature").flatMap({ [UInt8](hex: $0) }),
              let publicKey = row.string("public_key").flatMap({ try? DevicePublicKey(hex: $0) }),
              let member = roster.first(where: { $0.id == memberID }) else { return nil }
        var recipients = [member.recipient]
        if let orLater {
            for row in try database.query("""
                SELECT DISTINCT recipient FROM coven_audience_rosters WHERE audience = ?1 AND member = ?2 AND generation >= ?3
                """, [RowAudiences.store, memberID, Int64(orLater)]) {
                if let recipient = try? MemberRecipient(row.string("recipient") ?? "") { recipients.append(recipient) }
            }
        }
        let vouched = recipients.contains { DeviceEntry.vouches($0, signature: signature, store: store, member: memberID, device: device, publicKey: publicKey) }
        return vouched ? member : nil
    }
}

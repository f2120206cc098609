import Foundation

// MARK: - Device registry entries

/// A device's entry in the store's registry, `<store>/devices/<device>`: who it is, its public
/// signing key (against which its changes are checked), whether it is gone for good, and,
/// optionally, how far it has published and applied (DESIGN.md, "Devices and keys";
/// docs/format.md, section 10).
///
/// The plaintext is one JSON object, keys sorted, no insignificant whitespace:
///
/// ```json
/// {"coven_device":1,"device":"…","frontier":{"…":12},"gone":false,"joined_at":"…","last_seq":7,
///  "name":"…","public_key":"64 hex digits"}
/// ```
///
/// `frontier` and `last_seq` are left out when unknown. It is sealed as a store object bound
/// to its path (``seal(storeKey:)``), so an entry cannot be moved to another device's name.
/// Decoding validates every field and screens the public key (``DevicePublicKey``); keys it does
/// not know are ignored, so a later version may add fields without a new format version.
public struct DeviceEntry: Sendable, Equatable {
    /// The entry format this code writes and reads.
    public static let formatVersion = 1

    /// The device's id.
    public var device: String
    /// Its name (a host name, or what `--name` gave).
    public var name: String
    /// When it joined, ISO 8601 with milliseconds.
    public var joinedAt: String
    /// Its Ed25519 public key.
    public var publicKey: DevicePublicKey
    /// Whether it was removed for good (`coven device remove`).
    public var gone: Bool
    /// For every other device, the highest seq it has applied with nothing missing below, when
    /// known.
    public var frontier: [String: UInt64]?
    /// The last seq it published, when known.
    public var lastSeq: UInt64?
    /// The member the device belongs to, and the member key's signature over the device's key
    /// (``certified(store:member:identity:)``): nil for a device of a store before members.
    /// Entries of format 1 carry them as two more fields, which a coven before members ignores.
    public var member: String?
    public var memberSignature: [UInt8]?

    /// An entry for `device`; `frontier` and `lastSeq` are nil when unknown.
    public init(
        device: String, name: String, joinedAt: String, publicKey: DevicePublicKey, gone: Bool = false,
        frontier: [String: UInt64]? = nil, lastSeq: UInt64? = nil
    ) {
        self.device = device
        self.name = name
        self.joinedAt = joinedAt
        self.publicKey = publicKey
        self.gone = gone
        self.frontier = frontier
        self.lastSeq = lastSeq
    }

    /// The entry's storage path: `devices/<device>`.
    public var path: String { Device.registryEntryKey(device) }

    // MARK: Codec

    private struct Wire: Codable {
        var coven_device: Int
        var device: String
        var name: String
        var joined_at: String
        var public_key: String
        var gone: Bool
        var frontier: [String: UInt64]?
        var last_seq: UInt64?
        var member: String?
        var member_signature: String?
    }

    private struct Version: Decodable {
        var coven_device: Int
    }

    /// The entry's JSON, keys sorted.
    public func encoded() throws -> [UInt8] {
        let wire = Wire(
            coven_device: Self.formatVersion, device: device, name: name, joined_at: joinedAt, public_key: publicKey.hex,
            gone: gone, frontier: frontier, last_seq: lastSeq, member: member, member_signature: memberSignature?.hex)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            return [UInt8](try encoder.encode(wire))
        } catch {
            throw CovenError(.internal, "cannot encode a device entry", cause: String(describing: error))
        }
    }

    /// Decodes and validates an entry's JSON.
    ///
    /// - Throws: ``CovenError`` `.updateRequired` when `coven_device` is newer than 1;
    ///   `.decoding` when the bytes are not such a JSON object, a field is missing or of the
    ///   wrong type, `coven_device` is below 1, the device id or join time is empty, or the
    ///   frontier names the device itself; `.integrity` when the public key is not 64 hex digits
    ///   or is refused by the screen.
    public static func decode(_ bytes: [UInt8]) throws -> DeviceEntry {
        let data = Data(bytes)
        let version: Int
        do {
            version = try JSONDecoder().decode(Version.self, from: data).coven_device
        } catch {
            throw failure("not a device entry", error)
        }
        if version > formatVersion {
            throw CovenError(
                .updateRequired, "a device entry uses a newer format than this coven supports",
                hint: "update coven to read it", cause: "coven_device \(version)", details: ["version": String(version)])
        }
        guard version == formatVersion else { throw failure("coven_device \(version)", nil) }
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: data)
        } catch {
            throw failure("a missing or mistyped field", error)
        }
        guard !wire.device.isEmpty, !wire.device.contains("/"), !wire.joined_at.isEmpty else {
            throw failure("an empty device id or join time", nil)
        }
        guard wire.frontier?[wire.device] == nil else { throw failure("a frontier naming the device itself", nil) }
        guard (wire.member == nil) == (wire.member_signature == nil) else { throw failure("a member without its signature, or the reverse", nil) }
        var signature: [UInt8]?
        if let hex = wire.member_signature {
            guard let bytes = [UInt8](hex: hex), bytes.count == DeviceSigningKey.signatureSize else { throw failure("a member signature that is not 64 bytes of hex", nil) }
            signature = bytes
        }
        var entry = DeviceEntry(
            device: wire.device, name: wire.name, joinedAt: wire.joined_at, publicKey: try DevicePublicKey(hex: wire.public_key),
            gone: wire.gone, frontier: wire.frontier, lastSeq: wire.last_seq)
        entry.member = wire.member
        entry.memberSignature = signature
        return entry
    }

    // MARK: The member's certification

    /// What a member signs to vouch for one of its devices: the store, the member, the device
    /// and its key.
    static func certificationMessage(store: String, member: String, device: String, publicKey: DevicePublicKey) -> [UInt8] {
        Array("coven device v1".utf8) + [0] + Array(store.utf8) + [0] + Array(member.utf8) + [0] + Array(device.utf8) + [0] + publicKey.bytes
    }

    /// Whether `signature` is `recipient`'s word, as member `member` of `store`, for `device`
    /// and its `publicKey`: the one check of a member's vouch (an entry's certification, a
    /// generation's signer, the registry's record of either).
    static func vouches(_ recipient: MemberRecipient, signature: [UInt8], store: String, member: String, device: String, publicKey: DevicePublicKey) -> Bool {
        (try? recipient.signing.verify(signature, for: certificationMessage(store: store, member: member, device: device, publicKey: publicKey))) != nil
    }

    /// This entry, vouched for by `member` of `store` with its identity.
    func certified(store: String, member: String, identity: MemberIdentity) throws -> DeviceEntry {
        var entry = self
        entry.member = member
        entry.memberSignature = try identity.signingKey.sign(Self.certificationMessage(store: store, member: member, device: device, publicKey: publicKey))
        return entry
    }

    /// Checks that the member this entry names, whose recipient is `recipient`, vouched for it.
    ///
    /// - Throws: `.integrity` naming the entry when it names no member or the signature is not
    ///   the member key's over this store, member, device and key (forged or moved).
    func checkCertification(store: String, recipient: MemberRecipient) throws {
        guard let member, let memberSignature else {
            throw CovenError(.integrity, "device entry '\(path)' names no member", details: ["object": path, "reason": "no_member"])
        }
        guard Self.vouches(recipient, signature: memberSignature, store: store, member: member, device: device, publicKey: publicKey) else {
            throw CovenError(.integrity, "device entry '\(path)' is not vouched for by member '\(member)'", details: ["object": path, "reason": "member_signature"])
        }
    }

    private static func failure(_ reason: String, _ error: (any Error)?) -> CovenError {
        CovenError(
            .decoding, "cannot decode a device entry",
            cause: error.map { "\(reason): \($0)" } ?? reason)
    }

    // MARK: Sealing

    /// The entry sealed under the store key, bound to its path.
    ///
    /// - Throws: ``CovenError`` `.internal` when encoding or libgcrypt fails.
    public func seal(storeKey: FileKey) throws -> [UInt8] {
        try StoreSealer.seal(try encoded(), storeKey: storeKey, boundTo: path)
    }

    /// The entry sealed under the keyring's store key, bound to its path.
    func seal(keys: Keyring) throws -> [UInt8] {
        try keys.seal(try encoded(), boundTo: path)
    }

    /// Seals with a given salt: for known-answer vectors only.
    func seal(storeKey: FileKey, salt: [UInt8]) throws -> [UInt8] {
        try StoreSealer.seal(try encoded(), storeKey: storeKey, salt: salt, boundTo: path)
    }

    /// Opens the entry stored at `path` (`devices/<device>`).
    ///
    /// - Throws: ``CovenError`` with `path` in its details: `.integrity` when the object fails
    ///   authentication (another key, another path, tampered), its public key is refused, or it
    ///   names another device than its path; `.decoding` or `.updateRequired` as ``decode(_:)``.
    public static func open(_ bytes: [UInt8], path: String, storeKey: FileKey) throws -> DeviceEntry {
        try open(bytes, path: path) { try StoreSealer.open($0, storeKey: storeKey, boundTo: path) }
    }

    /// Opens the entry stored at `path` with the keyring's store key, as ``open(_:path:storeKey:)``.
    static func open(_ bytes: [UInt8], path: String, keys: Keyring) throws -> DeviceEntry {
        try open(bytes, path: path) { try keys.open($0, boundTo: path) }
    }

    private static func open(_ bytes: [UInt8], path: String, opening: ([UInt8]) throws -> [UInt8]) throws -> DeviceEntry {
        do {
            let entry = try decode(try opening(bytes))
            guard entry.path == path else {
                throw CovenError(
                    .integrity, "a device entry names another device than its path", cause: "it says '\(entry.device)'",
                    details: ["reason": "misplaced"])
            }
            return entry
        } catch let error as CovenError {
            var error = error
            error.details["path"] = path
            throw error
        }
    }
}

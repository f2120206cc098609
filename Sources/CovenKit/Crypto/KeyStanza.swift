import Foundation

/// One key wrapped to one member: age's X25519 recipient stanza (C2SP age, "X25519
/// recipient stanza"), with coven's label and associated data binding the store, the audience
/// and the generation in (DESIGN.md "Principals and keys").
///
/// ```
/// ephemeral  = 32 random bytes;  share = X25519(ephemeral, 9)
/// shared     = X25519(ephemeral, recipient)          (refused when all zero)
/// wrap key   = HKDF-SHA-256(shared, salt = share ‖ recipient, info = label)
/// body       = ChaCha20-Poly1305(wrap key, nonce = 0, key, aad)
/// ```
/// Each stanza has a fresh ephemeral secret, so its wrap key is used once. A stanza names no
/// recipient: a member finds its own by trying (``unwrap(secret:keySize:label:aad:)`` fails
/// with `.integrity` on another member's).
struct KeyStanza: Equatable {
    /// The ephemeral share (32 bytes).
    var share: [UInt8]
    /// The wrapped key and its tag.
    var body: [UInt8]

    /// age's label, for its test vectors.
    static let ageLabel = Array("age-encryption.org/v1/X25519".utf8)
    /// coven's label for an audience key wrapped to a member.
    static let audienceLabel = Array("coven audience key v1".utf8)

    /// The associated data of an audience key's stanza: the store, the audience and the
    /// generation it opens, so a stanza cannot be moved to another.
    static func audienceContext(store: String, audience: String, generation: UInt64) -> [UInt8] {
        audienceLabel + [0] + Array(store.utf8) + [0] + Array(audience.utf8) + [0] + Array(String(generation).utf8)
    }

    /// `key` wrapped to the X25519 public key `recipient`.
    ///
    /// - Throws: `.integrity` when `recipient` is a low-order point.
    static func wrap(_ key: [UInt8], to recipient: [UInt8], label: [UInt8] = audienceLabel, aad: [UInt8]) throws -> KeyStanza {
        var ephemeral = SecureRandom.bytes(X25519.size)
        defer { for index in ephemeral.indices { ephemeral[index] = 0 } }
        let share = try X25519.publicKey(of: ephemeral)
        var shared = try X25519.sharedSecret(secret: ephemeral, share: recipient)
        defer { for index in shared.indices { shared[index] = 0 } }
        let wrapKey = try HKDF.derive(ikm: shared, salt: share + recipient, info: label)
        return KeyStanza(share: share, body: try ChaChaPoly.seal(key, key: wrapKey, aad: aad))
    }

    /// The key this stanza wraps to the holder of `secret`.
    ///
    /// - Throws: `.integrity` when the body is not `keySize` + 16 bytes (checked first, as age
    ///   requires), the share is a low-order point, or the stanza is not for this secret (or was
    ///   tampered with, or moved to another store, audience or generation).
    func unwrap(secret: [UInt8], keySize: Int = 32, label: [UInt8] = KeyStanza.audienceLabel, aad: [UInt8]) throws -> [UInt8] {
        guard body.count == keySize + ChaChaPoly.tagSize else {
            throw CovenError(.integrity, "a key stanza's body is \(body.count) bytes, not \(keySize + ChaChaPoly.tagSize)", details: ["reason": "body_length"])
        }
        let recipient = try X25519.publicKey(of: secret)
        var shared = try X25519.sharedSecret(secret: secret, share: share)
        defer { for index in shared.indices { shared[index] = 0 } }
        let wrapKey = try HKDF.derive(ikm: shared, salt: share + recipient, info: label)
        return try ChaChaPoly.open(body, key: wrapKey, aad: aad)
    }
}

import CGcrypt
import Foundation

/// ChaCha20-Poly1305 (RFC 8439) through libgcrypt, for the small sealed values of key
/// stanzas (age's construction wraps a key with it under a fixed all-zero nonce, which is safe
/// because each wrap key is used once).
enum ChaChaPoly {
    static let keySize = 32
    static let nonceSize = 12
    static let tagSize = 16

    /// `plaintext` sealed: ciphertext ‖ 16-byte tag.
    static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8] = zeroNonce, aad: [UInt8] = []) throws -> [UInt8] {
        let handle = try open(key: key, nonce: nonce, aad: aad)
        defer { gcry_cipher_close(handle) }
        var out = [UInt8](repeating: 0, count: plaintext.count + tagSize)
        try out.withUnsafeMutableBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            if !plaintext.isEmpty {
                try plaintext.withUnsafeBytes { input in
                    try Gcrypt.check(gcry_cipher_encrypt(handle, base, plaintext.count, input.baseAddress, plaintext.count), "encrypt with ChaCha20-Poly1305")
                }
            }
            try Gcrypt.check(gcry_cipher_gettag(handle, base + plaintext.count, tagSize), "compute a Poly1305 tag")
        }
        return out
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag).
    ///
    /// - Throws: `.integrity` when it is shorter than a tag or fails authentication (wrong key,
    ///   nonce, associated data or bytes); nothing of the plaintext is returned then.
    static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8] = zeroNonce, aad: [UInt8] = []) throws -> [UInt8] {
        guard sealed.count >= tagSize else {
            throw CovenError(.integrity, "a sealed value is shorter than its tag", details: ["reason": "length"])
        }
        let handle = try open(key: key, nonce: nonce, aad: aad)
        defer { gcry_cipher_close(handle) }
        let count = sealed.count - tagSize
        var out = [UInt8](repeating: 0, count: count)
        try sealed.withUnsafeBytes { input in
            guard let base = input.baseAddress else { return }
            if count > 0 {
                try out.withUnsafeMutableBytes { output in
                    try Gcrypt.check(gcry_cipher_decrypt(handle, output.baseAddress, count, base, count), "decrypt with ChaCha20-Poly1305")
                }
            }
            let code = gcry_cipher_checktag(handle, base + count, tagSize)
            if code != 0 {
                for index in out.indices { out[index] = 0 }
                if gcry_err_code(code) == GPG_ERR_CHECKSUM {
                    throw CovenError(.integrity, "a sealed value fails authentication", details: ["reason": "authentication"])
                }
                throw Gcrypt.error(code, "check a Poly1305 tag")
            }
        }
        return out
    }

    static let zeroNonce = [UInt8](repeating: 0, count: nonceSize)

    private static func open(key: [UInt8], nonce: [UInt8], aad: [UInt8]) throws -> gcry_cipher_hd_t {
        try Gcrypt.ensure()
        guard key.count == keySize, nonce.count == nonceSize else {
            throw CovenError(.internal, "ChaCha20-Poly1305 takes a 32-byte key and a 12-byte nonce")
        }
        var handle: gcry_cipher_hd_t?
        try Gcrypt.check(gcry_cipher_open(&handle, Int32(GCRY_CIPHER_CHACHA20.rawValue), Int32(GCRY_CIPHER_MODE_POLY1305.rawValue), UInt32(GCRY_CIPHER_SECURE.rawValue)),
                         "open ChaCha20-Poly1305")
        guard let handle else { throw CovenError(.internal, "libgcrypt gave no cipher handle") }
        do {
            try key.withUnsafeBytes { try Gcrypt.check(gcry_cipher_setkey(handle, $0.baseAddress, keySize), "set a ChaCha20 key") }
            try nonce.withUnsafeBytes { try Gcrypt.check(gcry_cipher_setiv(handle, $0.baseAddress, nonceSize), "set a ChaCha20 nonce") }
            if !aad.isEmpty {
                try aad.withUnsafeBytes { try Gcrypt.check(gcry_cipher_authenticate(handle, $0.baseAddress, aad.count), "authenticate associated data") }
            }
        } catch {
            gcry_cipher_close(handle)
            throw error
        }
        return handle
    }
}

import CGcrypt
import Foundation

/// X25519 (RFC 7748) through libgcrypt's `gcry_ecc_mul_point`: the Diffie-Hellman that wraps
/// audience keys to members (DESIGN.md "Members and circles").
///
/// libgcrypt 1.10.1 returns an all-zero shared secret, with no error, for a low-order point
/// (u = 0, u = 1, …): ``sharedSecret(secret:share:)`` refuses it, as age requires, so a
/// malicious share cannot force a known wrap key.
enum X25519 {
    /// Bytes of a secret scalar, a public key (a u-coordinate) and a shared secret.
    static let size = 32

    /// The public key of `secret` (32 bytes; libgcrypt clamps it): `X25519(secret, 9)`.
    static func publicKey(of secret: [UInt8]) throws -> [UInt8] {
        try multiply(secret, point: nil)
    }

    /// The shared secret of `secret` and another party's public key or ephemeral `share`.
    ///
    /// - Throws: `.integrity` when `share` is not 32 bytes, or is a low-order point (the shared
    ///   secret would be all zero).
    static func sharedSecret(secret: [UInt8], share: [UInt8]) throws -> [UInt8] {
        guard share.count == size else {
            throw CovenError(.integrity, "an X25519 share is \(size) bytes, not \(share.count)", details: ["reason": "share_length"])
        }
        let shared = try multiply(secret, point: share)
        // Constant time over the 32 bytes: no early exit on the first nonzero.
        guard shared.reduce(UInt8(0), { $0 | $1 }) != 0 else {
            throw CovenError(.integrity, "an X25519 share is a low-order point: the shared secret is all zero",
                             details: ["reason": "low_order"])
        }
        return shared
    }

    private static func multiply(_ scalar: [UInt8], point: [UInt8]?) throws -> [UInt8] {
        try Gcrypt.ensure()
        guard scalar.count == size else {
            throw CovenError(.internal, "an X25519 secret is \(size) bytes, not \(scalar.count)")
        }
        var result = [UInt8](repeating: 0, count: size)
        let code: gcry_error_t = result.withUnsafeMutableBufferPointer { out in
            scalar.withUnsafeBufferPointer { s in
                if let point {
                    return point.withUnsafeBufferPointer { p in
                        gcry_ecc_mul_point(Int32(GCRY_ECC_CURVE25519.rawValue), out.baseAddress, s.baseAddress, p.baseAddress)
                    }
                }
                return gcry_ecc_mul_point(Int32(GCRY_ECC_CURVE25519.rawValue), out.baseAddress, s.baseAddress, nil)
            }
        }
        try Gcrypt.check(code, "compute an X25519 product")
        return result
    }
}

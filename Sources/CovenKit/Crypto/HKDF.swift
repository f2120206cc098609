import CGcrypt

// MARK: - HMAC-SHA256

/// An HMAC-SHA256 over libgcrypt's message digest API, keyed once and reusable.
///
/// libgcrypt 1.10 has no HKDF in its KDF API (GCRY_KDF_HKDF arrived in 1.11), so HKDF is built
/// from this, as RFC 5869 describes. The handle, and so the key, lives in secure memory
/// (`GCRY_MD_FLAG_SECURE`) and is closed in `deinit`.
///
/// Related documentation: libgcrypt manual, "Working with hash algorithms" (`GCRY_MD_FLAG_HMAC`,
/// `gcry_md_setkey`).
final class HMACSHA256 {
    private let handle: gcry_md_hd_t
    static let outputSize = 32

    /// Opens an HMAC-SHA256 keyed with `key` (at least 1 byte).
    init(key: UnsafeRawBufferPointer) throws {
        try Gcrypt.ensure()
        var opened: gcry_md_hd_t?
        let code = gcry_md_open(
            &opened, Int32(GCRY_MD_SHA256.rawValue), UInt32(GCRY_MD_FLAG_HMAC.rawValue | GCRY_MD_FLAG_SECURE.rawValue))
        guard code == 0, let opened else { throw Gcrypt.error(code, "open HMAC-SHA256") }
        let keyCode = gcry_md_setkey(opened, key.baseAddress, key.count)
        guard keyCode == 0 else {
            gcry_md_close(opened)
            throw Gcrypt.error(keyCode, "set an HMAC-SHA256 key")
        }
        handle = opened
    }

    deinit { gcry_md_close(handle) }

    /// Adds bytes to the message.
    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        gcry_md_write(handle, base, bytes.count)
    }

    /// Writes the 32-byte MAC of everything added to `output`, then resets to the same key.
    func finish(into output: UnsafeMutableRawPointer) throws {
        try Gcrypt.check(coven_gcry_md_final(handle), "finish HMAC-SHA256")
        guard let digest = gcry_md_read(handle, Int32(GCRY_MD_SHA256.rawValue)) else {
            throw CovenError(.internal, "libgcrypt failed to read an HMAC-SHA256")
        }
        output.copyMemory(from: digest, byteCount: Self.outputSize)
        gcry_md_reset(handle)  // keeps the HMAC key
    }
}

@available(*, unavailable)
extension HMACSHA256: Sendable {}

// MARK: - HKDF-SHA256

/// HKDF with SHA-256 (RFC 5869): extract a pseudorandom key from input keying material and a
/// salt, then expand it with an info string into output keying material.
///
/// Intermediate values stay in libgcrypt secure memory and are wiped.
enum HKDF {
    /// The longest output RFC 5869 allows for SHA-256: 255 · 32 bytes.
    static let maximumOutput = 255 * HMACSHA256.outputSize

    /// HKDF-Extract: `PRK = HMAC-SHA256(salt, IKM)`, written to `prk` (32 bytes).
    ///
    /// An empty salt is replaced by 32 zero bytes, as RFC 5869, section 2.2 says.
    static func extract(ikm: UnsafeRawBufferPointer, salt: UnsafeRawBufferPointer, into prk: UnsafeMutableRawPointer)
        throws
    {
        let zeros = [UInt8](repeating: 0, count: HMACSHA256.outputSize)
        let mac = try zeros.withUnsafeBytes { zeros in try HMACSHA256(key: salt.isEmpty ? zeros : salt) }
        mac.update(ikm)
        try mac.finish(into: prk)
    }

    /// HKDF-Expand: fills `output` (at most 8160 bytes) from `prk` and `info`.
    static func expand(
        prk: UnsafeRawBufferPointer, info: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) throws {
        precondition(output.count <= maximumOutput, "internal error: HKDF output longer than 255 blocks")
        guard let out = output.baseAddress else { return }
        let mac = try HMACSHA256(key: prk)
        guard let block = gcry_malloc_secure(HMACSHA256.outputSize + 1) else {
            throw CovenError(.internal, "libgcrypt secure memory is exhausted")
        }
        defer {
            block.initializeMemory(as: UInt8.self, repeating: 0, count: HMACSHA256.outputSize + 1)
            gcry_free(block)
        }
        let counter = block + HMACSHA256.outputSize
        var written = 0
        var round: UInt8 = 1
        while written < output.count {
            // T(i) = HMAC(PRK, T(i−1) ‖ info ‖ i), with T(0) empty.
            if round > 1 { mac.update(UnsafeRawBufferPointer(start: block, count: HMACSHA256.outputSize)) }
            mac.update(info)
            counter.storeBytes(of: round, as: UInt8.self)
            mac.update(UnsafeRawBufferPointer(start: counter, count: 1))
            try mac.finish(into: block)
            let take = min(HMACSHA256.outputSize, output.count - written)
            (out + written).copyMemory(from: block, byteCount: take)
            written += take
            round &+= 1
        }
    }

    /// Derives a 32-byte key in secure memory: HKDF-SHA256(IKM = `ikm`, `salt`, `info`, L = 32).
    static func deriveKey(ikm: FileKey, salt: UnsafeRawBufferPointer, info: UnsafeRawBufferPointer) throws -> FileKey {
        let size = HMACSHA256.outputSize + FileKey.byteCount
        guard let scratch = gcry_malloc_secure(size) else {
            throw CovenError(.internal, "libgcrypt secure memory is exhausted")
        }
        defer {
            scratch.initializeMemory(as: UInt8.self, repeating: 0, count: size)
            gcry_free(scratch)
        }
        let prk = scratch
        let okm = scratch + HMACSHA256.outputSize
        try ikm.withUnsafeBytes { try extract(ikm: $0, salt: salt, into: prk) }
        try expand(
            prk: UnsafeRawBufferPointer(start: prk, count: HMACSHA256.outputSize), info: info,
            into: UnsafeMutableRawBufferPointer(start: okm, count: FileKey.byteCount))
        return try FileKey(bytes: UnsafeRawBufferPointer(start: okm, count: FileKey.byteCount))
    }
}

extension HKDF {
    /// HKDF-SHA256 of byte arrays, `count` bytes out (at most 8160): for the small derived
    /// values of member keys and key stanzas.
    static func derive(ikm: [UInt8], salt: [UInt8], info: [UInt8], count: Int = 32) throws -> [UInt8] {
        var prk = [UInt8](repeating: 0, count: HMACSHA256.outputSize)
        defer { for index in prk.indices { prk[index] = 0 } }
        try ikm.withUnsafeBytes { ikm in
            try salt.withUnsafeBytes { salt in
                try prk.withUnsafeMutableBytes { try extract(ikm: ikm, salt: salt, into: $0.baseAddress!) }
            }
        }
        var out = [UInt8](repeating: 0, count: count)
        try prk.withUnsafeBytes { prk in
            try info.withUnsafeBytes { info in
                try out.withUnsafeMutableBytes { try expand(prk: prk, info: info, into: $0) }
            }
        }
        return out
    }
}

import CGcrypt

// MARK: - HMAC-SHA256

/// HMAC-SHA256 from libgcrypt, for AWS Signature Version 4.
///
/// Related documentation: libgcrypt manual, "Working with hash algorithms" (`GCRY_MD_FLAG_HMAC`);
/// RFC 2104.
enum HMACSHA256 {
    /// The 32-byte HMAC-SHA256 of `message` under `key`.
    ///
    /// The libgcrypt handle is opened and closed within the call: one owner, no state kept.
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt is unavailable or refuses the key.
    static func authenticate(_ message: UnsafeRawBufferPointer, key: [UInt8]) throws -> [UInt8] {
        try Gcrypt.ensure()
        var handle: gcry_md_hd_t?
        let algorithm = Int32(GCRY_MD_SHA256.rawValue)
        let code = gcry_md_open(&handle, algorithm, UInt32(GCRY_MD_FLAG_HMAC.rawValue))
        guard code == 0, let handle else { throw Gcrypt.error(code, "open HMAC-SHA256") }
        defer { gcry_md_close(handle) }
        let keyCode = key.withUnsafeBytes { raw in
            gcry_md_setkey(handle, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), raw.count)
        }
        guard keyCode == 0 else { throw Gcrypt.error(keyCode, "set the HMAC key") }
        if let base = message.baseAddress, message.count > 0 {
            gcry_md_write(handle, base, message.count)
        }
        guard let digest = gcry_md_read(handle, algorithm) else {
            throw CovenError(.internal, "libgcrypt gave no HMAC-SHA256 digest")
        }
        return Array(UnsafeBufferPointer(start: digest, count: 32))
    }

    /// The HMAC-SHA256 of the UTF-8 bytes of `message` under `key`.
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    static func authenticate(_ message: String, key: [UInt8]) throws -> [UInt8] {
        var text = message
        return try text.withUTF8 { try authenticate(UnsafeRawBufferPointer($0), key: key) }
    }
}

// MARK: - One-shot HMAC-SHA256 for AWS Signature Version 4

extension HMACSHA256 {
    /// The 32-byte HMAC-SHA256 of `message` under `key`, through the keyed ``HMACSHA256``.
    ///
    /// Related documentation: libgcrypt manual, "Working with hash algorithms"; RFC 2104.
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt is unavailable or refuses the key.
    static func authenticate(_ message: UnsafeRawBufferPointer, key: [UInt8]) throws -> [UInt8] {
        let mac = try key.withUnsafeBytes { try HMACSHA256(key: $0) }
        mac.update(message)
        var digest = [UInt8](repeating: 0, count: outputSize)
        try digest.withUnsafeMutableBytes { try mac.finish(into: $0.baseAddress!) }
        return digest
    }

    /// The HMAC-SHA256 of the UTF-8 bytes of `message` under `key`.
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    static func authenticate(_ message: String, key: [UInt8]) throws -> [UInt8] {
        var text = message
        return try text.withUTF8 { try authenticate(UnsafeRawBufferPointer($0), key: key) }
    }
}

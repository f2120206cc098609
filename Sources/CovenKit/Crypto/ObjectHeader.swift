// MARK: - Object headers

/// The two v1 object headers and the rules for reading them (docs/format.md, sections 4–6).
enum ObjectHeader {
    /// "COVENF": a file object.
    static let fileMagic: [UInt8] = Array("COVENF".utf8)
    /// "COVENS": a store object.
    static let storeMagic: [UInt8] = Array("COVENS".utf8)
    /// The only version this code writes and reads.
    static let version: UInt8 = 0x01
    /// AES-256-GCM (with HKDF-SHA256 for store objects).
    static let algorithm: UInt8 = 0x01
    /// Bytes of magic, version and algorithm.
    static let prefixSize = 8
    /// Bytes of a store object's salt after the prefix.
    static let saltSize = 32
    /// The 8-byte file object header.
    static let file: [UInt8] = fileMagic + [version, algorithm]

    /// What an object is called in messages.
    static func kind(_ magic: [UInt8]) -> String {
        magic == storeMagic ? "store object" : "file object"
    }

    /// Checks the first 8 bytes of an object against `magic`, version 1 and algorithm 1.
    ///
    /// - Throws: `.integrity` when the bytes are too few, the magic differs, or a version or
    ///   algorithm byte is the reserved 0; `.updateRequired` when either is newer than 1.
    static func check(_ bytes: UnsafeRawBufferPointer, magic: [UInt8]) throws {
        let kind = kind(magic)
        guard bytes.count >= prefixSize else {
            throw CovenError(
                .integrity, "encrypted \(kind) is truncated", cause: "\(bytes.count.counted("byte")), shorter than its header",
                details: ["reason": "truncated"])
        }
        guard bytes.prefix(magic.count).elementsEqual(magic) else {
            throw CovenError(
                .integrity, "not a coven \(kind)", cause: "unknown magic \(Array(bytes.prefix(magic.count)).hex)",
                details: ["reason": "magic"])
        }
        let version = bytes[6]
        let algorithm = bytes[7]
        if version > Self.version || (version == Self.version && algorithm > Self.algorithm) {
            throw CovenError(
                .updateRequired, "encrypted \(kind) uses a newer format than this coven supports",
                hint: "update coven to read it",
                cause: "format version \(version), algorithm \(algorithm)",
                details: ["version": String(version), "algorithm": String(algorithm)])
        }
        guard version == Self.version, algorithm == Self.algorithm else {
            throw CovenError(
                .integrity, "encrypted \(kind) has an invalid header",
                cause: "format version \(version), algorithm \(algorithm)", details: ["reason": "header"])
        }
    }
}

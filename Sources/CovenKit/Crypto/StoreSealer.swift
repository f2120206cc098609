/// Seals and opens store objects: changes, snapshots and device-registry entries.
///
/// A store object is "COVENS", version 0x01, algorithm 0x01 and a 32-byte random salt, followed
/// by the chunked STREAM payload sealed under
/// `HKDF-SHA256(IKM: store key, salt: salt, info: "coven store object v1", L: 32)` with the whole
/// 40-byte header as associated data (docs/format.md, section 5). The fresh salt gives every
/// object its own payload key, so the store key never meets AES-GCM directly and sealing the same
/// plaintext twice gives unrelated objects.
///
/// Store objects are handled whole in memory.
public enum StoreSealer {
    /// The HKDF info string: the 21 ASCII bytes "coven store object v1".
    static let info: [UInt8] = Array("coven store object v1".utf8)
    /// Bytes of header: 8 of prefix and 32 of salt.
    static let headerSize = ObjectHeader.prefixSize + ObjectHeader.saltSize

    /// Seals `plaintext` as a store object under `storeKey`, with a fresh random salt.
    ///
    /// - Parameters:
    ///   - plaintext: the object's content, any size (empty included).
    ///   - storeKey: the store's 32-byte key.
    /// - Returns: the store object, `40 + n + 16 · max(1, ceil(n / 65536))` bytes.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    public static func seal(_ plaintext: [UInt8], storeKey: FileKey) throws -> [UInt8] {
        try seal(plaintext, storeKey: storeKey, salt: SecureRandom.bytes(ObjectHeader.saltSize))
    }

    /// Seals with a given salt: for known-answer vectors only; real objects need a random salt.
    static func seal(_ plaintext: [UInt8], storeKey: FileKey, salt: [UInt8]) throws -> [UInt8] {
        precondition(salt.count == ObjectHeader.saltSize, "internal error: a store object salt is 32 bytes")
        let header = ObjectHeader.storeMagic + [ObjectHeader.version, ObjectHeader.algorithm] + salt
        let cipher = try ChunkCipher(key: payloadKey(storeKey: storeKey, salt: salt), associatedData: header)
        let size = Int64(plaintext.count)
        let chunks = ObjectLayout.chunkCount(plaintextSize: size)
        let sealedSize = headerSize + plaintext.count + Int(chunks) * ChunkRun.tagSize
        var object = header + [UInt8](repeating: 0, count: sealedSize - headerSize)
        try plaintext.withUnsafeBytes { input in
            try object.withUnsafeMutableBytes { output in
                for chunk in 0..<chunks {
                    let plain = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
                    let offset = headerSize + Int(chunk) * ChunkRun.sealedChunkSize
                    try cipher.seal(
                        index: chunk, isLast: chunk == chunks - 1,
                        plaintext: UnsafeRawBufferPointer(rebasing: input[Int(plain.lowerBound)..<Int(plain.upperBound)]),
                        into: UnsafeMutableRawBufferPointer(
                            rebasing: output[offset..<(offset + plain.count + ChunkRun.tagSize)]))
                }
            }
        }
        return object
    }

    /// Verifies and decrypts a store object sealed under `storeKey`.
    ///
    /// The chunk structure follows from the object's length, and every chunk is authenticated
    /// with its index and final flag, so truncation, extension, reordering and any altered byte
    /// (header and salt included) fail.
    ///
    /// - Parameters:
    ///   - sealed: the whole store object.
    ///   - storeKey: the store's 32-byte key.
    /// - Returns: the plaintext.
    /// - Throws: ``CovenError`` `.integrity` when the object is too short, is not a store object
    ///   ("COVENS"), has a length no plaintext maps to, or fails authentication (including under
    ///   the wrong store key); `.updateRequired` when its version or algorithm is newer than this
    ///   code knows; `.internal` when libgcrypt fails.
    public static func open(_ sealed: [UInt8], storeKey: FileKey) throws -> [UInt8] {
        try sealed.withUnsafeBytes { sealed in
            try ObjectHeader.check(sealed, magic: ObjectHeader.storeMagic)
            guard sealed.count >= headerSize,
                let size = ObjectLayout.payloadPlaintextSize(Int64(sealed.count - headerSize))
            else {
                throw CovenError(
                    .integrity, "encrypted store object has an invalid length", cause: "\(sealed.count.counted("byte"))",
                    details: ["reason": "length"])
            }
            let header = UnsafeRawBufferPointer(rebasing: sealed[0..<headerSize])
            let salt = UnsafeRawBufferPointer(rebasing: sealed[ObjectHeader.prefixSize..<headerSize])
            let cipher = try ChunkCipher(key: payloadKey(storeKey: storeKey, salt: salt), associatedData: Array(header))
            let chunks = ObjectLayout.chunkCount(plaintextSize: size)
            var plaintext = [UInt8](repeating: 0, count: Int(size))
            try plaintext.withUnsafeMutableBytes { output in
                for chunk in 0..<chunks {
                    let plain = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
                    let offset = headerSize + Int(chunk) * ChunkRun.sealedChunkSize
                    try cipher.open(
                        index: chunk, isLast: chunk == chunks - 1,
                        sealed: UnsafeRawBufferPointer(rebasing: sealed[offset..<(offset + plain.count + ChunkRun.tagSize)]),
                        into: UnsafeMutableRawBufferPointer(
                            rebasing: output[Int(plain.lowerBound)..<Int(plain.upperBound)]))
                }
            }
            return plaintext
        }
    }

    /// The payload key of the store object with `salt`.
    static func payloadKey(storeKey: FileKey, salt: UnsafeRawBufferPointer) throws -> FileKey {
        try info.withUnsafeBytes { info in try HKDF.deriveKey(ikm: storeKey, salt: salt, info: info) }
    }

    /// The payload key of the store object with `salt`.
    static func payloadKey(storeKey: FileKey, salt: [UInt8]) throws -> FileKey {
        try salt.withUnsafeBytes { try payloadKey(storeKey: storeKey, salt: $0) }
    }
}

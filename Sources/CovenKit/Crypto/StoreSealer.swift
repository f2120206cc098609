/// Seals and opens store objects: changes, snapshots and device-registry entries.
///
/// A store object is "COVENS", version 0x01, algorithm 0x01 and a 32-byte random salt, followed
/// by the chunked STREAM payload sealed under
/// `HKDF-SHA256(IKM: store key, salt: salt, info: "coven store object v1", L: 32)` with the whole
/// 40-byte header as associated data (docs/format.md, section 5). The fresh salt gives every
/// object its own payload key, so the store key never meets AES-GCM directly and sealing the same
/// plaintext twice gives unrelated objects.
///
/// An object may be **bound to a path**, its name in storage (`changes/<device>/<seq>`): the
/// path's UTF-8 bytes then follow the header in every chunk's associated data, so the object
/// opens only under that name and cannot be moved, swapped or replayed under another. An object
/// bound to no path (the empty path) has the header alone as associated data.
///
/// Sealing goes through the one ``ObjectSealer``, opening through the one ``ChunkFramer``.
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
    ///   - path: the storage path the object is bound to (docs/format.md, section 5), or empty
    ///     for none.
    /// - Returns: the store object, `40 + n + 16 · max(1, ceil(n / 65536))` bytes.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    public static func seal(_ plaintext: [UInt8], storeKey: FileKey, boundTo path: String = "") throws -> [UInt8] {
        try seal(plaintext, storeKey: storeKey, salt: SecureRandom.bytes(ObjectHeader.saltSize), boundTo: path)
    }

    /// Seals with a given salt: for known-answer vectors only; real objects need a random salt.
    static func seal(_ plaintext: [UInt8], storeKey: FileKey, salt: [UInt8], boundTo path: String = "") throws
        -> [UInt8]
    {
        precondition(salt.count == ObjectHeader.saltSize, "internal error: a store object salt is 32 bytes")
        let header = ObjectHeader.storeMagic + [ObjectHeader.version, ObjectHeader.algorithm] + salt
        let lanes = plaintext.count > 4 * Int(ObjectLayout.chunkSize) ? ChunkRun.threads : 1
        let sealer = try ObjectSealer(
            key: payloadKey(storeKey: storeKey, salt: salt), header: header,
            associatedData: header + Array(path.utf8), lanes: lanes)
        return try sealer.sealObject(plaintext)
    }

    /// Verifies and decrypts a store object sealed under `storeKey`.
    ///
    /// The chunk structure follows from the object's length, and every chunk is authenticated
    /// with its index and final flag, so truncation, extension, reordering and any altered byte
    /// (header and salt included) fail; so does an object bound to another path.
    ///
    /// - Parameters:
    ///   - sealed: the whole store object.
    ///   - storeKey: the store's 32-byte key.
    ///   - path: the storage path the object was bound to when sealed, or empty for none.
    /// - Returns: the plaintext.
    /// - Throws: ``CovenError`` `.integrity` when the object is too short, is not a store object
    ///   ("COVENS"), has a length no plaintext maps to, or fails authentication (under the wrong
    ///   store key, or bound to another path); `.updateRequired` when its version or algorithm is
    ///   newer than this code knows; `.internal` when libgcrypt fails.
    public static func open(_ sealed: [UInt8], storeKey: FileKey, boundTo path: String = "") throws -> [UInt8] {
        try open(sealed[...], storeKey: storeKey, boundTo: path)
    }

    /// ``open(_:storeKey:boundTo:)`` of a part of a larger buffer (a change's section), read in
    /// place: no copy of the sealed bytes.
    public static func open(_ sealed: ArraySlice<UInt8>, storeKey: FileKey, boundTo path: String = "") throws -> [UInt8] {
        try sealed.withUnsafeBytes { sealed in
            try ObjectHeader.check(sealed, magic: ObjectHeader.storeMagic)
            guard sealed.count >= headerSize,
                let size = ObjectLayout.payloadPlaintextSize(Int64(sealed.count - headerSize))
            else {
                throw CovenError(
                    .integrity, "encrypted store object has an invalid length", cause: "\(sealed.count.counted("byte"))",
                    details: ["reason": "length"])
            }
            let header = Array(UnsafeRawBufferPointer(rebasing: sealed[0..<headerSize]))
            let salt = UnsafeRawBufferPointer(rebasing: sealed[ObjectHeader.prefixSize..<headerSize])
            let cipher = try ChunkCipher(
                key: payloadKey(storeKey: storeKey, salt: salt), associatedData: header + Array(path.utf8))
            var plaintext = [UInt8](repeating: 0, count: Int(size))
            let carry = UnsafeMutableRawBufferPointer.allocate(byteCount: ChunkRun.sealedChunkSize, alignment: 16)
            defer { carry.deallocate() }
            var framer = ChunkFramer(
                headerSize: 0, layout: .known(plaintextSize: size, chunks: 0..<ObjectLayout.chunkCount(plaintextSize: size)),
                carry: carry)
            do {
                try plaintext.withUnsafeMutableBytes { output in
                    let open = { (index: Int64, isLast: Bool, chunk: UnsafeRawBufferPointer) throws in
                        let plain = ObjectLayout.plaintextRange(chunk: index, plaintextSize: size)
                        try cipher.open(
                            index: index, isLast: isLast, sealed: chunk,
                            into: UnsafeMutableRawBufferPointer(
                                rebasing: output[Int(plain.lowerBound)..<Int(plain.upperBound)]))
                    }
                    try framer.feed(UnsafeRawBufferPointer(rebasing: sealed[headerSize...]), header: { _ in }, chunk: open)
                    try framer.finish(chunk: open)
                }
            } catch is ChunkFramer.Violation {
                // Unreachable: the length was checked above to be exactly the object's chunks.
                throw CovenError(
                    .integrity, "encrypted store object has an invalid length", cause: "\(sealed.count.counted("byte"))",
                    details: ["reason": "length"])
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

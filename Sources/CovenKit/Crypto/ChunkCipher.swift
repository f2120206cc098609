import CGcrypt

/// Seals and opens single STREAM chunks with AES-256-GCM under one key.
///
/// Chunk `i` uses the nonce `BE_11(i) ‖ flag` (flag 0x01 on an object's final chunk) and the
/// object's header as associated data (docs/format.md, section 3). A sealed chunk is its
/// ciphertext followed by the 16-byte tag.
///
/// One `ChunkCipher` owns one libgcrypt cipher handle (allocated in secure memory, so the expanded
/// key stays there) and closes it in `deinit`. A handle carries per-operation state, so a cipher
/// is confined to one thread at a time: use one per thread. Sealing and opening allocate nothing;
/// the nonce lives in a buffer reused for every chunk.
///
/// Related documentation: libgcrypt manual, "Working with cipher handles" (`gcry_cipher_setiv`,
/// `gcry_cipher_authenticate`, `gcry_cipher_gettag`, `gcry_cipher_checktag`).
public final class ChunkCipher {
    private let handle: gcry_cipher_hd_t
    /// 12 bytes of nonce followed by the associated data, allocated once.
    private let scratch: UnsafeMutableRawPointer
    private let associatedDataCount: Int

    private static let nonceSize = 12
    private static let tagSize = Int(ObjectLayout.tagSize)
    private static let chunkSize = Int(ObjectLayout.chunkSize)

    /// Creates a cipher for the chunks of a file object sealed under `key`.
    ///
    /// The associated data is the 8-byte v1 file header.
    ///
    /// - Parameter key: the file's key.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open or key the cipher.
    public convenience init(key: FileKey) throws {
        try self.init(key: key, associatedData: ObjectHeader.file)
    }

    /// Creates a cipher whose every chunk authenticates `associatedData` (an object's header).
    init(key: FileKey, associatedData: [UInt8]) throws {
        try Gcrypt.ensure()
        var opened: gcry_cipher_hd_t?
        let code = gcry_cipher_open(
            &opened, Int32(GCRY_CIPHER_AES256.rawValue), Int32(GCRY_CIPHER_MODE_GCM.rawValue),
            UInt32(GCRY_CIPHER_SECURE.rawValue))
        guard code == 0, let opened else { throw Gcrypt.error(code, "open an AES-256-GCM cipher") }
        let keyCode = key.withUnsafeBytes { gcry_cipher_setkey(opened, $0.baseAddress, $0.count) }
        guard keyCode == 0 else {
            gcry_cipher_close(opened)
            throw Gcrypt.error(keyCode, "set an AES-256 key")
        }
        handle = opened
        associatedDataCount = associatedData.count
        scratch = UnsafeMutableRawPointer.allocate(
            byteCount: Self.nonceSize + associatedData.count, alignment: MemoryLayout<UInt64>.alignment)
        scratch.initializeMemory(as: UInt8.self, repeating: 0, count: Self.nonceSize)
        associatedData.withUnsafeBytes { bytes in
            if let base = bytes.baseAddress {
                (scratch + Self.nonceSize).copyMemory(from: base, byteCount: bytes.count)
            }
        }
    }

    /// Puts `key` in place of the cipher's key, keeping its handle and associated data: a
    /// sender sealing one object after another under their keys opens one handle, not one an
    /// object (each open allocates in libgcrypt's secure memory, under one lock for the whole
    /// process: 16 senders waited there 1.5 s of an upload of 10,000 small files).
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot set the key.
    func rekey(_ key: FileKey) throws {
        let code = key.withUnsafeBytes { gcry_cipher_setkey(handle, $0.baseAddress, $0.count) }
        try Gcrypt.check(code, "set an AES-256 key")
    }

    deinit {
        gcry_cipher_close(handle)
        scratch.deallocate()
    }

    // MARK: - Sealing

    /// Seals one chunk: writes its ciphertext and then its 16-byte tag into `output`.
    ///
    /// - Parameters:
    ///   - index: the chunk's index in its object, at least 0.
    ///   - isLast: whether this is the object's final chunk.
    ///   - plaintext: the chunk's plaintext, at most 65536 bytes.
    ///   - output: at least `plaintext.count + 16` bytes; the first `plaintext.count + 16` are
    ///     written. It must not overlap `plaintext` unless it starts at the same address.
    /// - Throws: ``CovenError`` `.internal` when a libgcrypt call fails.
    public func seal(
        index: Int64, isLast: Bool, plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) throws {
        let count = plaintext.count
        precondition(count <= Self.chunkSize, "internal error: a chunk holds at most 65536 bytes")
        precondition(output.count >= count + Self.tagSize, "internal error: sealed chunk buffer too small")
        guard let out = output.baseAddress else { preconditionFailure("internal error: no output buffer") }
        try start(index: index, isLast: isLast)
        if count > 0, let input = plaintext.baseAddress {
            try Gcrypt.check(gcry_cipher_encrypt(handle, out, count, input, count), "encrypt chunk \(index)")
        }
        try Gcrypt.check(gcry_cipher_gettag(handle, out + count, Self.tagSize), "compute the tag of chunk \(index)")
    }

    // MARK: - Opening

    /// Verifies and decrypts one sealed chunk into `output`.
    ///
    /// The plaintext is decrypted into `output` and then the tag is checked; on a mismatch the
    /// decrypted bytes are zeroed before the error is thrown, so unauthenticated plaintext is never
    /// left visible.
    ///
    /// - Parameters:
    ///   - index: the chunk's index in its object.
    ///   - isLast: whether this chunk must be the object's final one.
    ///   - sealed: ciphertext followed by the 16-byte tag, 16 to 65552 bytes.
    ///   - output: at least `sealed.count - 16` bytes; the first `sealed.count - 16` are written.
    ///     It must not overlap `sealed` unless it starts at the same address.
    /// - Throws: ``CovenError`` `.integrity` when the chunk is shorter than a tag, longer than a
    ///   sealed chunk, or fails authentication (wrong key, index, flag, header or bytes);
    ///   `.internal` when a libgcrypt call fails otherwise.
    public func open(
        index: Int64, isLast: Bool, sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) throws {
        guard sealed.count >= Self.tagSize, sealed.count <= Self.chunkSize + Self.tagSize,
            let input = sealed.baseAddress
        else {
            throw CovenError(
                .integrity, "chunk \(index) of an encrypted object has an invalid length",
                cause: "\(sealed.count) sealed bytes", details: ["chunk": String(index), "reason": "length"])
        }
        let count = sealed.count - Self.tagSize
        precondition(output.count >= count, "internal error: plaintext chunk buffer too small")
        let out = output.baseAddress
        do {
            try start(index: index, isLast: isLast)
            if count > 0, let out {
                try Gcrypt.check(gcry_cipher_decrypt(handle, out, count, input, count), "decrypt chunk \(index)")
            }
            let code = gcry_cipher_checktag(handle, input + count, Self.tagSize)
            if code != 0 {
                if gcry_err_code(code) == GPG_ERR_CHECKSUM {
                    throw CovenError(
                        .integrity, "chunk \(index) of an encrypted object failed authentication",
                        hint: nil, cause: "the object is corrupt, truncated, reordered or under another key",
                        details: ["chunk": String(index), "reason": "authentication"])
                }
                throw Gcrypt.error(code, "check the tag of chunk \(index)")
            }
        } catch {
            if count > 0, let out { out.initializeMemory(as: UInt8.self, repeating: 0, count: count) }
            throw error
        }
    }

    // MARK: - Per-chunk state

    /// Resets the GCM state for chunk `index`: new nonce, then the associated data.
    ///
    /// `gcry_cipher_setiv` starts a fresh GCM operation (tag, lengths and counters are reset), so
    /// no separate `gcry_cipher_reset` is needed between chunks.
    @inline(__always)
    private func start(index: Int64, isLast: Bool) throws {
        precondition(index >= 0, "internal error: negative chunk index")
        // BE_11(index): bytes 0–2 stay zero; bytes 3–10 are the 64-bit index.
        scratch.storeBytes(of: UInt64(index).bigEndian, toByteOffset: 3, as: UInt64.self)
        scratch.storeBytes(of: isLast ? 1 : 0, toByteOffset: 11, as: UInt8.self)
        try Gcrypt.check(gcry_cipher_setiv(handle, scratch, Self.nonceSize), "set the nonce of chunk \(index)")
        try Gcrypt.check(
            gcry_cipher_authenticate(handle, scratch + Self.nonceSize, associatedDataCount),
            "authenticate the header for chunk \(index)")
    }
}

@available(*, unavailable, message: "a ChunkCipher holds per-operation state: use one per thread")
extension ChunkCipher: Sendable {}

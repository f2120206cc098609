/// The size arithmetic of a v1 encrypted file object.
///
/// An object is an 8-byte header followed by sealed chunks: plaintext chunk `i` covers bytes
/// `i·65536 ..< min((i+1)·65536, n)` and is stored as its ciphertext plus a 16-byte tag at
/// `8 + i·65552` (docs/format.md, section 3.5). The encrypted size is therefore a pure function of
/// the plaintext size `n`, and a ranged read can fetch exactly the chunks it needs.
///
/// All sizes and offsets are `Int64`. Arguments outside the documented domain (a negative size, a
/// chunk past the end) are programming errors and stop the process with an internal error.
public enum ObjectLayout {
    /// Bytes of header before the first chunk: 8 ("COVENF", version, algorithm).
    public static let headerSize: Int64 = 8
    /// Plaintext bytes per chunk: 65536.
    public static let chunkSize: Int64 = 65536
    /// Bytes of AES-GCM tag after each chunk's ciphertext: 16.
    public static let tagSize: Int64 = 16
    /// Bytes of one full sealed chunk: 65552 (``chunkSize`` + ``tagSize``).
    public static let sealedChunkSize: Int64 = 65552

    /// The number of chunks a plaintext of `plaintextSize` bytes is cut into; at least 1.
    ///
    /// An empty plaintext is one empty final chunk; otherwise `ceil(n / 65536)`.
    ///
    /// - Parameter plaintextSize: the plaintext size, at least 0.
    /// - Returns: `max(1, ceil(plaintextSize / 65536))`.
    public static func chunkCount(plaintextSize: Int64) -> Int64 {
        precondition(plaintextSize >= 0, "internal error: negative plaintext size")
        guard plaintextSize > 0 else { return 1 }
        return plaintextSize / chunkSize + (plaintextSize % chunkSize == 0 ? 0 : 1)
    }

    /// The size of the encrypted object holding `plaintextSize` bytes.
    ///
    /// `8 + n + 16 · chunkCount(n)`.
    ///
    /// - Parameter plaintextSize: the plaintext size, at least 0.
    /// - Returns: the object's size in bytes, at least 24.
    public static func encryptedSize(plaintextSize: Int64) -> Int64 {
        headerSize + plaintextSize + tagSize * chunkCount(plaintextSize: plaintextSize)
    }

    /// The plaintext bytes chunk `chunk` covers.
    ///
    /// - Parameters:
    ///   - chunk: a chunk index, `0 ..< chunkCount(plaintextSize:)`.
    ///   - plaintextSize: the plaintext size.
    /// - Returns: `chunk·65536 ..< min((chunk+1)·65536, plaintextSize)`; empty only for the single
    ///   chunk of an empty plaintext.
    public static func plaintextRange(chunk: Int64, plaintextSize: Int64) -> Range<Int64> {
        precondition(
            chunk >= 0 && chunk < chunkCount(plaintextSize: plaintextSize),
            "internal error: chunk \(chunk) is outside a plaintext of \(plaintextSize) bytes")
        let lower = chunk * chunkSize
        return lower..<min(lower + chunkSize, plaintextSize)
    }

    /// The bytes of the encrypted object holding chunk `chunk` (ciphertext and tag).
    ///
    /// - Parameters:
    ///   - chunk: a chunk index, `0 ..< chunkCount(plaintextSize:)`.
    ///   - plaintextSize: the plaintext size.
    /// - Returns: `8 + chunk·65552 ..< 8 + chunk·65552 + plaintextRange.count + 16`.
    public static func encryptedRange(chunk: Int64, plaintextSize: Int64) -> Range<Int64> {
        let plain = plaintextRange(chunk: chunk, plaintextSize: plaintextSize)
        let lower = headerSize + chunk * sealedChunkSize
        return lower..<(lower + Int64(plain.count) + tagSize)
    }

    /// The chunks holding the plaintext bytes `range`.
    ///
    /// Their sealed bytes are contiguous: from `encryptedRange(chunk: result.lowerBound).lowerBound`
    /// to `encryptedRange(chunk: result.upperBound - 1).upperBound`. An empty `range` needs no
    /// chunk and gives an empty result positioned at the chunk that would hold its offset.
    ///
    /// - Parameters:
    ///   - range: plaintext byte offsets within `0 ... plaintextSize`.
    ///   - plaintextSize: the plaintext size.
    /// - Returns: `⌊a/65536⌋ ..< ⌊(b−1)/65536⌋ + 1` for `range = a ..< b`.
    public static func chunks(covering range: Range<Int64>, plaintextSize: Int64) -> Range<Int64> {
        precondition(
            range.lowerBound >= 0 && range.upperBound <= plaintextSize,
            "internal error: range \(range) is outside a plaintext of \(plaintextSize) bytes")
        let first = range.lowerBound / chunkSize
        guard !range.isEmpty else {
            let position = min(first, chunkCount(plaintextSize: plaintextSize))
            return position..<position
        }
        return first..<((range.upperBound - 1) / chunkSize + 1)
    }

    /// The plaintext size an encrypted object of `encryptedSize` bytes holds, if any.
    ///
    /// The inverse of ``encryptedSize(plaintextSize:)``: sizes no plaintext maps to (shorter than
    /// 24 bytes, a final chunk shorter than its tag, or an empty final chunk after full ones)
    /// give nil (docs/format.md, section 3.5).
    ///
    /// - Parameter encryptedSize: an object's size in bytes.
    /// - Returns: the plaintext size, or nil when no well-formed object has this size.
    public static func plaintextSize(encryptedSize: Int64) -> Int64? {
        payloadPlaintextSize(encryptedSize - headerSize)
    }

    /// The plaintext size a STREAM payload of `payloadSize` sealed bytes holds, if any.
    ///
    /// Shared by file objects (header 8) and store objects (header 40).
    static func payloadPlaintextSize(_ payloadSize: Int64) -> Int64? {
        guard payloadSize >= tagSize else { return nil }
        let full = payloadSize / sealedChunkSize
        let rest = payloadSize % sealedChunkSize
        if rest == 0 { return full * chunkSize }  // full >= 1 here, since payloadSize >= 16
        if rest < tagSize { return nil }
        if rest == tagSize { return full == 0 ? 0 : nil }
        return full * chunkSize + rest - tagSize
    }
}

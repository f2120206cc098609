/// Verifies and decrypts runs of chunks of a file object, on both cores.
///
/// For ranged reads: fetch the object bytes of ``ObjectLayout/chunks(covering:plaintextSize:)``
/// and pass them to ``openChunks(firstChunk:sealed:totalPlaintextSize:into:)`` with the plaintext
/// size from the file's record. That size comes from authenticated metadata, so each chunk's
/// last-flag is known and a truncated or extended object fails (docs/format.md, section 4,
/// "Ranged reads"). To read a whole object as a stream, use ``ObjectReader``.
///
/// The opener owns one ``ChunkCipher`` per thread it uses, so it is not `Sendable`: use one per
/// task.
public final class ObjectOpener {
    private let ciphers: [ChunkCipher]

    /// Creates an opener for the file sealed under `key`.
    ///
    /// - Parameter key: the file's key.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open a cipher.
    public init(key: FileKey) throws {
        ciphers = try (0..<ChunkRun.threads).map { _ in try ChunkCipher(key: key) }
    }

    /// Checks the 8-byte header that starts a file object.
    ///
    /// Only the first 8 bytes are read; more may be passed.
    ///
    /// - Parameter bytes: the start of the object.
    /// - Throws: ``CovenError`` `.integrity` when there are fewer than 8 bytes, the magic is not
    ///   "COVENF", or the version or algorithm byte is 0; `.updateRequired` when the version or
    ///   algorithm is newer than this code knows (docs/format.md, section 4, "Reading").
    public static func checkHeader(_ bytes: UnsafeRawBufferPointer) throws {
        try ObjectHeader.check(bytes, magic: ObjectHeader.fileMagic)
    }

    /// Checks the 8-byte header that starts a file object.
    ///
    /// - Parameter bytes: the start of the object.
    /// - Throws: as the `UnsafeRawBufferPointer` overload.
    public static func checkHeader(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try checkHeader($0) }
    }

    /// Verifies and decrypts a run of consecutive sealed chunks into `output`.
    ///
    /// `sealed` holds the object's bytes from ``ObjectLayout/encryptedRange(chunk:plaintextSize:)``
    /// of `firstChunk` to the end of some later (or the same) chunk; the run's length must be
    /// exactly that. The file's final chunk is opened as final, every other as non-final. Runs
    /// of four chunks or more are split in two halves verified concurrently.
    ///
    /// If any chunk fails, all of `output`'s run bytes are zeroed before the error is thrown:
    /// no plaintext of a failed run is ever visible.
    ///
    /// The run's chunk count is inferred from `sealed.count`, so a fetch cut short exactly at a
    /// chunk boundary is a valid shorter run: check the returned count against what you asked
    /// for, or use ``openChunks(_:sealed:totalPlaintextSize:into:)``, which does.
    ///
    /// - Parameters:
    ///   - firstChunk: the index of the run's first chunk in the file.
    ///   - sealed: the sealed chunks, back to back.
    ///   - totalPlaintextSize: the file's plaintext size, from its authenticated record.
    ///   - output: room for the run's plaintext, `sealed.count − 16 · chunks` bytes; must not
    ///     overlap `sealed`.
    /// - Returns: the number of plaintext bytes written to `output`.
    /// - Throws: ``CovenError`` `.integrity` when `sealed` is not the exact length of a run of
    ///   chunks or any chunk fails authentication; `.internal` when `firstChunk` is outside the
    ///   file, `output` is too small, or libgcrypt fails.
    public func openChunks(
        firstChunk: Int64, sealed: UnsafeRawBufferPointer, totalPlaintextSize: Int64,
        into output: UnsafeMutableRawBufferPointer
    ) throws -> Int {
        let run = try ChunkRun(firstChunk: firstChunk, sealedCount: sealed.count, totalPlaintextSize: totalPlaintextSize)
        guard output.count >= run.plaintextCount else {
            throw CovenError(
                .internal, "the buffer for opened chunks is too small",
                cause: "\(output.count.counted("byte")) for \(run.plaintextCount)")
        }
        guard let input = sealed.baseAddress else {
            preconditionFailure("internal error: a sealed run of \(sealed.count) bytes has no address")
        }
        let out = output.baseAddress
        do {
            try run.forEachSlice(parts: ciphers.count) { slice, chunks in
                let cipher = ciphers[slice]
                for k in chunks {
                    let (plainOffset, plainCount, sealedOffset) = run.chunk(k)
                    let index = run.firstChunk + Int64(k)
                    try cipher.open(
                        index: index, isLast: index == run.finalChunk,
                        sealed: UnsafeRawBufferPointer(start: input + sealedOffset, count: plainCount + ChunkRun.tagSize),
                        into: UnsafeMutableRawBufferPointer(start: out.map { $0 + plainOffset }, count: plainCount))
                }
            }
        } catch {
            if run.plaintextCount > 0, let out {
                out.initializeMemory(as: UInt8.self, repeating: 0, count: run.plaintextCount)
            }
            throw error
        }
        return run.plaintextCount
    }

    /// Verifies and decrypts exactly the chunks `chunks` of a file into `output`.
    ///
    /// The form for ranged reads: pass ``ObjectLayout/chunks(covering:plaintextSize:)`` and the
    /// bytes fetched for it. `sealed` must be exactly the sealed bytes of those chunks; anything
    /// shorter or longer (a truncated or extended object answering the range request) fails.
    /// Otherwise as ``openChunks(firstChunk:sealed:totalPlaintextSize:into:)``.
    ///
    /// - Parameters:
    ///   - chunks: the chunk indexes to open, non-empty and within the file.
    ///   - sealed: the sealed chunks, back to back.
    ///   - totalPlaintextSize: the file's plaintext size, from its authenticated record.
    ///   - output: room for the chunks' plaintext; must not overlap `sealed`.
    /// - Returns: the number of plaintext bytes written to `output`: the size of the chunks'
    ///   plaintext ranges.
    /// - Throws: ``CovenError`` `.integrity` when `sealed` is not exactly those chunks' sealed bytes
    ///   or a chunk fails authentication; `.internal` when `chunks` is empty or outside the file,
    ///   `output` is too small, or libgcrypt fails.
    @discardableResult
    public func openChunks(
        _ chunks: Range<Int64>, sealed: UnsafeRawBufferPointer, totalPlaintextSize: Int64,
        into output: UnsafeMutableRawBufferPointer
    ) throws -> Int {
        guard !chunks.isEmpty, chunks.lowerBound >= 0, totalPlaintextSize >= 0,
            chunks.upperBound <= ObjectLayout.chunkCount(plaintextSize: totalPlaintextSize)
        else {
            throw CovenError(
                .internal, "chunks \(chunks) are not within the file", cause: "a \(totalPlaintextSize)-byte file")
        }
        let expected = ObjectLayout.encryptedRange(chunk: chunks.upperBound - 1, plaintextSize: totalPlaintextSize)
            .upperBound - ObjectLayout.encryptedRange(chunk: chunks.lowerBound, plaintextSize: totalPlaintextSize).lowerBound
        guard Int64(sealed.count) == expected else {
            throw CovenError(
                .integrity, "encrypted chunks have the wrong length",
                cause: "\(sealed.count) sealed bytes for chunks \(chunks), expected \(expected)",
                details: ["chunk": String(chunks.lowerBound), "reason": "length"])
        }
        return try openChunks(
            firstChunk: chunks.lowerBound, sealed: sealed, totalPlaintextSize: totalPlaintextSize, into: output)
    }
}

@available(*, unavailable, message: "an ObjectOpener owns cipher handles: use one per task")
extension ObjectOpener: Sendable {}

/// Encrypts a file object, run by run, on both cores.
///
/// A caller streaming a file writes ``header()`` and then the sealed chunks, in order, produced by
/// ``sealChunks(firstChunk:plaintext:totalPlaintextSize:into:)`` for consecutive runs of the
/// plaintext (for example one 8 MiB upload part at a time). The result is the v1 file object of
/// docs/format.md, section 4; its size is ``ObjectLayout/encryptedSize(plaintextSize:)``.
///
/// The sealer owns one ``ChunkCipher`` per thread it uses, so it is not `Sendable`: use one per
/// task. Each call splits its run in two halves sealed concurrently.
///
/// A file key MUST NOT seal two different plaintexts: if the file's bytes may have changed since a
/// previous attempt, seal under a new ``FileKey``. Sealing the same bytes again is deterministic
/// and safe (a retried part is byte-identical).
public final class ObjectSealer {
    private let ciphers: [ChunkCipher]

    /// Creates a sealer for the file sealed under `key`.
    ///
    /// - Parameter key: the file's key.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open a cipher.
    public init(key: FileKey) throws {
        ciphers = try (0..<ChunkRun.threads).map { _ in try ChunkCipher(key: key) }
    }

    /// The 8-byte v1 file object header: "COVENF", version 0x01, algorithm 0x01.
    ///
    /// - Returns: the bytes that precede the first sealed chunk.
    public func header() -> [UInt8] {
        ObjectHeader.file
    }

    /// Seals a run of consecutive chunks of the file into `output`.
    ///
    /// `plaintext` holds the file's bytes from offset `firstChunk · 65536`: a whole number of
    /// 64 KiB chunks, or a run that ends exactly at the end of the file (whose final chunk may be
    /// short, and which is flagged as final). For an empty file, seal `firstChunk` 0 with an empty
    /// `plaintext`: it produces the single empty final chunk. `output` receives the sealed chunks
    /// back to back, `plaintext.count + 16 · chunks` bytes, which are exactly the object's bytes
    /// from ``ObjectLayout/encryptedRange(chunk:plaintextSize:)`` of `firstChunk` onward.
    ///
    /// Runs of four chunks or more are split in two halves sealed concurrently on two threads.
    ///
    /// - Parameters:
    ///   - firstChunk: the index of the run's first chunk in the file.
    ///   - plaintext: the run's plaintext.
    ///   - totalPlaintextSize: the size of the whole file, which decides the final chunk.
    ///   - output: room for the sealed run; must not overlap `plaintext`.
    /// - Returns: the number of bytes written to `output`.
    /// - Throws: ``CovenError`` `.internal` when the run is not whole chunks of the file, `output`
    ///   is too small, or libgcrypt fails.
    @discardableResult
    public func sealChunks(
        firstChunk: Int64, plaintext: UnsafeRawBufferPointer, totalPlaintextSize: Int64,
        into output: UnsafeMutableRawBufferPointer
    ) throws -> Int {
        let run = try ChunkRun(
            firstChunk: firstChunk, plaintextCount: plaintext.count, totalPlaintextSize: totalPlaintextSize)
        guard output.count >= run.sealedCount, let out = output.baseAddress else {
            throw CovenError(
                .internal, "the buffer for sealed chunks is too small",
                cause: "\(output.count.counted("byte")) for \(run.sealedCount)")
        }
        let input = plaintext.baseAddress
        try run.forEachSlice(parts: ciphers.count) { slice, chunks in
            let cipher = ciphers[slice]
            for k in chunks {
                let (plainOffset, plainCount, sealedOffset) = run.chunk(k)
                let index = run.firstChunk + Int64(k)
                try cipher.seal(
                    index: index, isLast: index == run.finalChunk,
                    plaintext: UnsafeRawBufferPointer(start: input.map { $0 + plainOffset }, count: plainCount),
                    into: UnsafeMutableRawBufferPointer(start: out + sealedOffset, count: plainCount + ChunkRun.tagSize))
            }
        }
        return run.sealedCount
    }
}

@available(*, unavailable, message: "an ObjectSealer owns cipher handles: use one per task")
extension ObjectSealer: Sendable {}

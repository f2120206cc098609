/// Encrypts the chunks of an object, run by run, on both cores: the one sealer every writer uses.
///
/// Uploads seal file objects with it (``sealRun(_:plaintextSize:into:fill:check:)``: each chunk is read
/// straight into the place its ciphertext goes, checked by the caller, then sealed in place), and
/// ``StoreSealer`` seals store objects with it. A caller streaming an object writes ``header`` and
/// then the sealed runs, in order; the result is the v1 object of docs/format.md (section 4 for a
/// file object, section 5 for a store object), whose size is
/// ``ObjectLayout/encryptedSize(plaintextSize:)`` for a file.
///
/// A run is cut into up to ``maximumLanes`` slices of consecutive chunks, each with its own
/// ``ChunkCipher``, that the cores take in turn; each slice fills, checks and seals one chunk at a
/// time (two when the caller checks them: they are hashed together), so a chunk is still in the
/// core's cache when it is sealed, and a core that something else
/// interrupted does not leave the other idle at the end of the run (measured on uploads: 1.69 cores
/// busy instead of 1.55 with one slice per core).
///
/// The sealer owns its cipher handles, so it is not `Sendable`: use one per task.
///
/// A file key MUST NOT seal two different plaintexts: if the file's bytes may have changed since a
/// previous attempt, seal under a new ``FileKey``. Sealing the same bytes again is deterministic
/// and safe (a retried part is byte-identical).
public final class ObjectSealer {
    /// The bytes that precede the first sealed chunk: the 8-byte file header, or a store
    /// object's 40-byte header.
    public let header: [UInt8]
    private let ciphers: [ChunkCipher]

    /// The most slices a run is cut into: more slices than cores let the cores share a run evenly
    /// while an upload's send also wants one.
    public static let maximumLanes = 8

    /// Creates a sealer for the file object sealed under `key`.
    ///
    /// - Parameter key: the file's key.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open a cipher.
    public convenience init(key: FileKey) throws {
        try self.init(
            key: key, header: ObjectHeader.file, associatedData: ObjectHeader.file,
            lanes: ChunkRun.threads > 1 ? Self.maximumLanes : 1)
    }

    /// Creates a sealer for the file object sealed under `key` with `lanes` cipher handles: 1
    /// seals every run on the calling thread (a pipeline whose threads each seal runs of their
    /// own).
    convenience init(key: FileKey, lanes: Int) throws {
        try self.init(key: key, header: ObjectHeader.file, associatedData: ObjectHeader.file, lanes: lanes)
    }

    /// Creates a sealer whose chunks authenticate `associatedData`, for objects that start with
    /// `header`.
    ///
    /// - Parameter lanes: cipher handles, so the most slices a run is cut into (1 for small
    ///   objects, where a second thread costs more than it saves).
    init(key: FileKey, header: [UInt8], associatedData: [UInt8], lanes: Int) throws {
        self.header = header
        ciphers = try (0..<max(1, lanes)).map { _ in try ChunkCipher(key: key, associatedData: associatedData) }
    }

    /// Seals under `key` from now on: the next object of a sender that seals one object after
    /// another, with the same header, on the same handles (``ChunkCipher/rekey(_:)``).
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot set the key.
    func rekey(_ key: FileKey) throws {
        for cipher in ciphers { try cipher.rekey(key) }
    }

    // MARK: - Sealing

    /// Seals chunks `chunks` of an object of `plaintextSize` bytes into `output`, filling each
    /// chunk's plaintext with `fill` first.
    ///
    /// `fill(chunk, place)` must write exactly chunk `chunk`'s plaintext into `place` (its
    /// `ObjectLayout.plaintextRange` count of bytes; the place its ciphertext goes in `output`),
    /// or throw; only once it returns is the chunk sealed, in place, so a chunk the caller finds
    /// wrong is never encrypted. `fill` runs on several threads at once (for different chunks):
    /// it must only read shared state. After a failure the slice it happened in stops; the error
    /// of the lowest failing chunk's slice is thrown once every slice has finished.
    ///
    /// `output` receives the sealed chunks back to back, which are exactly the object's bytes
    /// from ``ObjectLayout/encryptedRange(chunk:plaintextSize:)`` of `chunks.lowerBound` onward
    /// (offsets after the header). The object's final chunk is sealed as final.
    ///
    /// - Parameters:
    ///   - chunks: consecutive chunks of the object, non-empty.
    ///   - plaintextSize: the size of the whole object's plaintext, which decides its final chunk.
    ///   - output: room for the run's sealed bytes.
    ///   - fill: writes one chunk's plaintext into its place.
    ///   - check: when given, sees the plaintext `fill` wrote before any of it is sealed, two
    ///     chunks at a time (`chunk` and, when its slice goes on, `chunk + 1` as `next`), so a
    ///     caller hashes them together (``SHA256/hashPair(_:_:into:_:)``); it throws to refuse
    ///     them, as `fill` may.
    /// - Returns: the number of sealed bytes written.
    /// - Throws: whatever `fill` or `check` throws; ``CovenError`` `.internal` when the chunks
    ///   are not within the object, `output` is too small, or libgcrypt fails.
    @discardableResult
    public func sealRun(
        _ chunks: Range<Int64>, plaintextSize: Int64, into output: UnsafeMutableRawBufferPointer,
        fill: (_ chunk: Int64, _ place: UnsafeMutableRawBufferPointer) throws -> Void,
        check: ((_ chunk: Int64, _ plaintext: UnsafeRawBufferPointer, _ next: UnsafeRawBufferPointer?) throws -> Void)? = nil
    ) throws -> Int {
        guard !chunks.isEmpty, chunks.lowerBound >= 0, plaintextSize >= 0,
            chunks.upperBound <= ObjectLayout.chunkCount(plaintextSize: plaintextSize)
        else {
            throw CovenError(
                .internal, "chunks \(chunks) are not within the object", cause: "\(plaintextSize.counted("byte")) of plaintext")
        }
        let first = ObjectLayout.plaintextRange(chunk: chunks.lowerBound, plaintextSize: plaintextSize).lowerBound
        let end = ObjectLayout.plaintextRange(chunk: chunks.upperBound - 1, plaintextSize: plaintextSize).upperBound
        let run = try ChunkRun(
            firstChunk: chunks.lowerBound, plaintextCount: Int(end - first), totalPlaintextSize: plaintextSize)
        guard output.count >= run.sealedCount, let base = output.baseAddress else {
            throw CovenError(
                .internal, "the buffer for sealed chunks is too small",
                cause: "\(output.count.counted("byte")) for \(run.sealedCount)")
        }
        let lanes = min(ciphers.count, max(2, run.count / 16))
        try run.forEachSlice(parts: lanes) { slice, indexes in
            let cipher = ciphers[slice]
            var k = indexes.lowerBound
            while k < indexes.upperBound {
                let pair = check != nil && k + 1 < indexes.upperBound ? k..<(k + 2) : k..<(k + 1)
                var plaintexts: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?) = (UnsafeRawBufferPointer(start: nil, count: 0), nil)
                for j in pair {
                    let (_, plainCount, sealedOffset) = run.chunk(j)
                    let place = UnsafeMutableRawBufferPointer(start: base + sealedOffset, count: plainCount)
                    try fill(run.firstChunk + Int64(j), place)
                    if j == k { plaintexts.0 = UnsafeRawBufferPointer(place) } else { plaintexts.1 = UnsafeRawBufferPointer(place) }
                }
                if let check { try check(run.firstChunk + Int64(k), plaintexts.0, plaintexts.1) }
                for j in pair {
                    let (_, plainCount, sealedOffset) = run.chunk(j)
                    let index = run.firstChunk + Int64(j)
                    let at = base + sealedOffset
                    // In place: libgcrypt encrypts a buffer onto itself.
                    try cipher.seal(
                        index: index, isLast: index == run.finalChunk,
                        plaintext: UnsafeRawBufferPointer(start: at, count: plainCount),
                        into: UnsafeMutableRawBufferPointer(start: at, count: plainCount + ChunkRun.tagSize))
                }
                k = pair.upperBound
            }
        }
        return run.sealedCount
    }

    /// Seals a run of consecutive chunks of an object from a plaintext buffer into `output`.
    ///
    /// `plaintext` holds the object's bytes from offset `firstChunk · 65536`: a whole number of
    /// 64 KiB chunks, or a run that ends exactly at the end of the object (whose final chunk may
    /// be short, and which is flagged as final). For an empty object, seal `firstChunk` 0 with an
    /// empty `plaintext`: it produces the single empty final chunk. Otherwise as
    /// ``sealRun(_:plaintextSize:into:fill:check:)``, whose path this is (each chunk copied into place,
    /// then sealed there).
    ///
    /// - Parameters:
    ///   - firstChunk: the index of the run's first chunk in the object.
    ///   - plaintext: the run's plaintext.
    ///   - totalPlaintextSize: the size of the whole object, which decides the final chunk.
    ///   - output: room for the sealed run; must not overlap `plaintext`.
    /// - Returns: the number of bytes written to `output`.
    /// - Throws: ``CovenError`` `.internal` when the run is not whole chunks of the object,
    ///   `output` is too small, or libgcrypt fails.
    @discardableResult
    public func sealChunks(
        firstChunk: Int64, plaintext: UnsafeRawBufferPointer, totalPlaintextSize: Int64,
        into output: UnsafeMutableRawBufferPointer
    ) throws -> Int {
        let run = try ChunkRun(
            firstChunk: firstChunk, plaintextCount: plaintext.count, totalPlaintextSize: totalPlaintextSize)
        let input = plaintext.baseAddress
        let start = ObjectLayout.plaintextRange(chunk: firstChunk, plaintextSize: totalPlaintextSize).lowerBound
        return try sealRun(
            firstChunk..<(firstChunk + Int64(run.count)), plaintextSize: totalPlaintextSize, into: output
        ) { chunk, place in
            guard let input, let to = place.baseAddress, place.count > 0 else { return }
            let offset = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: totalPlaintextSize).lowerBound - start
            to.copyMemory(from: input + Int(offset), byteCount: place.count)
        }
    }

    /// Seals a whole object held in memory: ``header`` followed by every chunk.
    ///
    /// - Parameter plaintext: the object's plaintext, any size (empty included).
    /// - Returns: the object, `header.count + n + 16 · max(1, ceil(n / 65536))` bytes.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    func sealObject(_ plaintext: [UInt8]) throws -> [UInt8] {
        let size = Int64(plaintext.count)
        let chunks = ObjectLayout.chunkCount(plaintextSize: size)
        let payload = plaintext.count + Int(chunks) * ChunkRun.tagSize
        var object = header + [UInt8](repeating: 0, count: payload)
        let headerCount = header.count
        try plaintext.withUnsafeBytes { input in
            try object.withUnsafeMutableBytes { output in
                _ = try sealChunks(
                    firstChunk: 0, plaintext: input, totalPlaintextSize: size,
                    into: UnsafeMutableRawBufferPointer(rebasing: output[headerCount...]))
            }
        }
        return object
    }
}

@available(*, unavailable, message: "an ObjectSealer owns cipher handles: use one per task")
extension ObjectSealer: Sendable {}

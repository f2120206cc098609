/// Verifies and decrypts a whole file object fed in pieces of any size.
///
/// Push the object's bytes as they arrive (a download body, a file read in blocks) with
/// ``feed(_:emit:)``; each chunk's plaintext is passed to `emit` once the chunk is authenticated,
/// and never before. Call ``finish(emit:)`` at end of input. The reader enforces the STREAM rules
/// of docs/format.md, section 3.4:
///
/// - the header is checked first (`.integrity` for another magic, `.updateRequired` for a newer
///   version or algorithm);
/// - end of input before the final (flagged) chunk is truncation: `.integrity`;
/// - any byte after the final chunk is trailing data: `.integrity`;
/// - a reordered, dropped, duplicated or altered chunk fails authentication: `.integrity`;
/// - errors are sticky: after one, every call throws it again and nothing more is emitted.
///
/// When the plaintext size is known (from the file's record, which is authenticated), pass it:
/// the reader then knows every chunk's length and flag, emits the final chunk as soon as it is
/// complete, and rejects trailing bytes as they arrive. Without it, a full-size chunk is known
/// to be non-final only once a further byte arrives, so the last chunk's plaintext is emitted
/// by ``finish(emit:)``.
///
/// The bytes are cut into chunks by the one ``ChunkFramer`` every reader uses; a reader made with
/// ``init(key:plaintextSize:chunks:)`` opens a run of chunks for a ranged read instead of a whole
/// object.
///
/// Memory is one sealed chunk and one plaintext chunk (128 KiB), allocated once. A caller that
/// has a place for the plaintext (the block it writes out) sets ``plaintextTarget`` and chunks
/// decrypt straight into it. Not `Sendable`: one owner.
public final class ObjectReader {
    private let cipher: ChunkCipher
    private var framer: ChunkFramer
    /// One sealed chunk of room for the framer, then one chunk of plaintext.
    private let buffers: UnsafeMutableRawBufferPointer
    private let plainBuffer: UnsafeMutableRawPointer
    private var finished = false
    private var failure: (any Error)?

    /// Where the next chunk's plaintext goes: room for 65536 bytes, the caller's until `emit`
    /// returns; nil, or a nil answer, uses the reader's own buffer. Asked once per chunk, just
    /// before it is decrypted.
    public var plaintextTarget: (() -> UnsafeMutableRawPointer?)?

    private static let chunkSize = Int(ObjectLayout.chunkSize)
    private static let sealedChunkSize = Int(ObjectLayout.sealedChunkSize)
    private static let tagSize = Int(ObjectLayout.tagSize)

    /// Creates a reader for a whole file object sealed under `key`.
    ///
    /// - Parameters:
    ///   - key: the file's key.
    ///   - plaintextSize: the file's size from its authenticated record, or nil to accept any
    ///     size the object authenticates.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open a cipher or the size is
    ///   negative.
    public convenience init(key: FileKey, plaintextSize: Int64? = nil) throws {
        if let plaintextSize {
            guard plaintextSize >= 0 else {
                throw CovenError(.internal, "a file cannot have a negative size", cause: String(plaintextSize))
            }
            try self.init(
                key: key, layout: .known(plaintextSize: plaintextSize, chunks: 0..<ObjectLayout.chunkCount(plaintextSize: plaintextSize)),
                headerSize: Int(ObjectLayout.headerSize))
        } else {
            try self.init(key: key, layout: .streamed, headerSize: Int(ObjectLayout.headerSize))
        }
    }

    /// Creates a reader for a ranged read: the sealed bytes of chunks `chunks` of a file object.
    ///
    /// Feed it the object's bytes from ``ObjectLayout/encryptedRange(chunk:plaintextSize:)`` of
    /// `chunks.lowerBound` (from offset 0, header included, when the run starts at chunk 0) to
    /// the end of chunk `chunks.upperBound − 1`, for example the body of one ranged GET. The
    /// file's final chunk is opened as final, every other as non-final; bytes beyond the run are
    /// trailing data and input ending early is truncation (docs/format.md, section 4, "Ranged
    /// reads").
    ///
    /// - Parameters:
    ///   - key: the file's key.
    ///   - plaintextSize: the file's size from its authenticated record.
    ///   - chunks: the chunks to open, from ``ObjectLayout/chunks(covering:plaintextSize:)``.
    /// - Throws: ``CovenError`` `.internal` when the chunks are empty or outside the file, or
    ///   libgcrypt cannot open a cipher.
    public convenience init(key: FileKey, plaintextSize: Int64, chunks: Range<Int64>) throws {
        guard plaintextSize >= 0, !chunks.isEmpty, chunks.lowerBound >= 0,
            chunks.upperBound <= ObjectLayout.chunkCount(plaintextSize: plaintextSize)
        else {
            throw CovenError(.internal, "chunks \(chunks) are not within the file", cause: "a \(plaintextSize)-byte file")
        }
        try self.init(
            key: key, layout: .known(plaintextSize: plaintextSize, chunks: chunks),
            headerSize: chunks.lowerBound == 0 ? Int(ObjectLayout.headerSize) : 0)
    }

    private init(key: FileKey, layout: ChunkFramer.Layout, headerSize: Int) throws {
        cipher = try ChunkCipher(key: key)
        buffers = .allocate(byteCount: Self.sealedChunkSize + Self.chunkSize, alignment: 64)
        guard let base = buffers.baseAddress else { preconditionFailure("internal error: no reader buffer") }
        plainBuffer = base + Self.sealedChunkSize
        framer = ChunkFramer(
            headerSize: headerSize, layout: layout,
            carry: UnsafeMutableRawBufferPointer(rebasing: buffers[0..<Self.sealedChunkSize]))
    }

    deinit {
        buffers.deallocate()
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

    // MARK: - Input

    /// Consumes the next bytes of the object, emitting the plaintext of every chunk they complete.
    ///
    /// `emit` is called zero or more times, in order, each time with one authenticated chunk's
    /// plaintext (1 to 65536 bytes; the buffer is reused, so copy what you keep). An error thrown by
    /// `emit` stops the reader and is rethrown (sticky, like any other).
    ///
    /// - Parameters:
    ///   - bytes: the next bytes of the object, any count including 0.
    ///   - emit: receives authenticated plaintext.
    /// - Throws: ``CovenError`` `.integrity` (bad magic, failed chunk, trailing data),
    ///   `.updateRequired` (newer header), `.internal` (used after ``finish(emit:)``), the error
    ///   `emit` threw, or the first error this reader threw.
    public func feed(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        if let failure { throw failure }
        guard !finished else {
            throw CovenError(.internal, "bytes fed to an object reader after it finished")
        }
        do {
            try framer.feed(bytes, header: Self.checkHeader) { index, isLast, sealed in
                try openChunk(index, isLast: isLast, sealed, emit: emit)
            }
        } catch {
            let reported = Self.reported(error)
            failure = reported
            throw reported
        }
    }

    /// Consumes the next bytes of the object; see the `UnsafeRawBufferPointer` overload.
    ///
    /// - Parameters:
    ///   - bytes: the next bytes of the object.
    ///   - emit: receives authenticated plaintext.
    /// - Throws: as the `UnsafeRawBufferPointer` overload.
    public func feed(_ bytes: [UInt8], emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        try bytes.withUnsafeBytes { try feed($0, emit: emit) }
    }

    /// Ends the input: checks the object was complete and emits the final chunk if still held.
    ///
    /// Without a known plaintext size the final chunk is only identified here, so its plaintext
    /// is emitted by this call. Calling `finish` again after success does nothing.
    ///
    /// - Parameter emit: receives the final chunk's authenticated plaintext, if any remains.
    /// - Throws: ``CovenError`` `.integrity` when the object is truncated (no header, or input
    ///   ended before the flagged final chunk, or before the last chunk of a ranged read) or the
    ///   final chunk fails authentication; the error `emit` threw; or the first error this
    ///   reader threw.
    public func finish(emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        if let failure { throw failure }
        guard !finished else { return }
        do {
            try framer.finish { index, isLast, sealed in
                try openChunk(index, isLast: isLast, sealed, emit: emit)
            }
            finished = true
        } catch {
            let reported = Self.reported(error)
            failure = reported
            throw reported
        }
    }

    // MARK: - Chunks

    /// Authenticates and decrypts one chunk into the plaintext target, then emits it.
    private func openChunk(
        _ index: Int64, isLast: Bool, _ sealed: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let target = plaintextTarget?() ?? plainBuffer
        try cipher.open(
            index: index, isLast: isLast, sealed: sealed,
            into: UnsafeMutableRawBufferPointer(start: target, count: Self.chunkSize))
        let count = sealed.count - Self.tagSize
        if count > 0 { try emit(UnsafeRawBufferPointer(start: target, count: count)) }
    }

    /// A framing violation in this reader's words; any other error as it is.
    private static func reported(_ error: any Error) -> any Error {
        guard let violation = error as? ChunkFramer.Violation else { return error }
        switch violation {
        case .truncated(let chunk):
            return CovenError(
                .integrity, "encrypted file object is truncated",
                cause: "input ended after \(chunk) authenticated chunks, before the final chunk",
                details: ["chunk": String(chunk), "reason": "truncated"])
        case .trailingData(let chunk):
            return CovenError(
                .integrity, "encrypted file object has trailing data",
                cause: "bytes after the final chunk \(chunk)",
                details: ["chunk": String(chunk), "reason": "trailing_data"])
        case .emptyFinalChunk(let chunk):
            return CovenError(
                .integrity, "encrypted file object ends with an empty chunk",
                details: ["chunk": String(chunk), "reason": "empty_final_chunk"])
        }
    }
}

@available(*, unavailable, message: "an ObjectReader holds stream state: use it from one task")
extension ObjectReader: Sendable {}

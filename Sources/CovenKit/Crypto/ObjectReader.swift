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
/// Memory is one sealed chunk and one plaintext chunk (128 KiB), allocated once. A caller that
/// has a place for the plaintext (the block it writes out) sets ``plaintextTarget`` and chunks
/// decrypt straight into it. Not `Sendable`: one owner.
public final class ObjectReader {
    private let cipher: ChunkCipher
    /// The plaintext size and chunk count, when the caller knows the size.
    private let expected: (plaintextSize: Int64, chunkCount: Int64)?
    private let headerBuffer: UnsafeMutableRawPointer
    private var headerCount = 0
    private let sealedBuffer: UnsafeMutableRawPointer
    private var buffered = 0
    private let plainBuffer: UnsafeMutableRawPointer
    private var nextChunk: Int64 = 0
    private var sawFinalChunk = false
    private var finished = false
    private var failure: (any Error)?

    /// Where the next chunk's plaintext goes: room for 65536 bytes, the caller's until `emit`
    /// returns; nil, or a nil answer, uses the reader's own buffer. Asked once per chunk, just
    /// before it is decrypted.
    public var plaintextTarget: (() -> UnsafeMutableRawPointer?)?

    private static let headerSize = Int(ObjectLayout.headerSize)
    private static let chunkSize = Int(ObjectLayout.chunkSize)
    private static let sealedChunkSize = Int(ObjectLayout.sealedChunkSize)
    private static let tagSize = Int(ObjectLayout.tagSize)

    /// Creates a reader for a file object sealed under `key`.
    ///
    /// - Parameters:
    ///   - key: the file's key.
    ///   - plaintextSize: the file's size from its authenticated record, or nil to accept any
    ///     size the object authenticates.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt cannot open a cipher or the size is
    ///   negative.
    public init(key: FileKey, plaintextSize: Int64? = nil) throws {
        if let plaintextSize, plaintextSize < 0 {
            throw CovenError(.internal, "a file cannot have a negative size", cause: String(plaintextSize))
        }
        cipher = try ChunkCipher(key: key)
        expected = plaintextSize.map { ($0, ObjectLayout.chunkCount(plaintextSize: $0)) }
        headerBuffer = .allocate(byteCount: Self.headerSize, alignment: 8)
        sealedBuffer = .allocate(byteCount: Self.sealedChunkSize, alignment: 16)
        plainBuffer = .allocate(byteCount: Self.chunkSize, alignment: 16)
    }

    deinit {
        headerBuffer.deallocate()
        sealedBuffer.deallocate()
        plainBuffer.deallocate()
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
            try consume(bytes, emit: emit)
        } catch {
            failure = error
            throw error
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
    ///   ended before the flagged final chunk) or the final chunk fails authentication; the error
    ///   `emit` threw; or the first error this reader threw.
    public func finish(emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        if let failure { throw failure }
        guard !finished else { return }
        do {
            guard headerCount == Self.headerSize else { throw truncated() }
            if expected != nil {
                guard sawFinalChunk else { throw truncated() }
            } else {
                guard buffered >= Self.tagSize else { throw truncated() }
                let count = buffered
                buffered = 0
                try openChunk(UnsafeRawBufferPointer(start: sealedBuffer, count: count), isLast: true, emit: emit)
            }
            finished = true
        } catch {
            failure = error
            throw error
        }
    }

    // MARK: - The state machine

    private func consume(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard var pointer = bytes.baseAddress else { return }
        var remaining = bytes.count

        if headerCount < Self.headerSize {
            let take = min(Self.headerSize - headerCount, remaining)
            (headerBuffer + headerCount).copyMemory(from: pointer, byteCount: take)
            headerCount += take
            pointer += take
            remaining -= take
            guard headerCount == Self.headerSize else { return }
            try ObjectOpener.checkHeader(UnsafeRawBufferPointer(start: headerBuffer, count: Self.headerSize))
        }

        while remaining > 0 {
            if let expected {
                // Known size: every chunk's sealed length and flag are fixed in advance.
                guard !sawFinalChunk else { throw trailingData() }
                let need = Int(ObjectLayout.encryptedRange(chunk: nextChunk, plaintextSize: expected.plaintextSize).count)
                let isLast = nextChunk == expected.chunkCount - 1
                if buffered == 0 && remaining >= need {
                    try openChunk(UnsafeRawBufferPointer(start: pointer, count: need), isLast: isLast, emit: emit)
                    pointer += need
                    remaining -= need
                } else {
                    let take = min(need - buffered, remaining)
                    (sealedBuffer + buffered).copyMemory(from: pointer, byteCount: take)
                    buffered += take
                    pointer += take
                    remaining -= take
                    if buffered == need {
                        buffered = 0
                        try openChunk(UnsafeRawBufferPointer(start: sealedBuffer, count: need), isLast: isLast, emit: emit)
                    }
                }
            } else if buffered == 0 && remaining > Self.sealedChunkSize {
                // A full chunk with bytes after it in the same piece: non-final, open in place.
                try openChunk(
                    UnsafeRawBufferPointer(start: pointer, count: Self.sealedChunkSize), isLast: false, emit: emit)
                pointer += Self.sealedChunkSize
                remaining -= Self.sealedChunkSize
            } else if buffered == Self.sealedChunkSize {
                // A held full chunk and at least one more byte: it was not the final chunk.
                buffered = 0
                try openChunk(
                    UnsafeRawBufferPointer(start: sealedBuffer, count: Self.sealedChunkSize), isLast: false, emit: emit)
            } else {
                let take = min(Self.sealedChunkSize - buffered, remaining)
                (sealedBuffer + buffered).copyMemory(from: pointer, byteCount: take)
                buffered += take
                pointer += take
                remaining -= take
            }
        }
    }

    /// Authenticates and decrypts one chunk into the plaintext buffer, then emits it.
    private func openChunk(
        _ sealed: UnsafeRawBufferPointer, isLast: Bool, emit: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let index = nextChunk
        let target = plaintextTarget?() ?? plainBuffer
        let output = UnsafeMutableRawBufferPointer(start: target, count: Self.chunkSize)
        try cipher.open(index: index, isLast: isLast, sealed: sealed, into: output)
        let count = sealed.count - Self.tagSize
        if isLast && count == 0 && index > 0 {
            // Only an empty file ends with an empty chunk (docs/format.md, section 3.1).
            throw CovenError(
                .integrity, "encrypted file object ends with an empty chunk",
                details: ["chunk": String(index), "reason": "empty_final_chunk"])
        }
        nextChunk += 1
        sawFinalChunk = isLast
        if count > 0 { try emit(UnsafeRawBufferPointer(start: target, count: count)) }
    }

    private func truncated() -> CovenError {
        CovenError(
            .integrity, "encrypted file object is truncated",
            cause: "input ended after \(nextChunk) authenticated chunks, before the final chunk",
            details: ["chunk": String(nextChunk), "reason": "truncated"])
    }

    private func trailingData() -> CovenError {
        CovenError(
            .integrity, "encrypted file object has trailing data",
            cause: "bytes after the final chunk \(nextChunk - 1)",
            details: ["chunk": String(nextChunk - 1), "reason": "trailing_data"])
    }
}

@available(*, unavailable, message: "an ObjectReader holds stream state: use it from one task")
extension ObjectReader: Sendable {}

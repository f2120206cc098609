// MARK: - Cutting an object's bytes into chunks

/// Cuts the bytes of an encrypted object, arriving in pieces of any size, into its header and
/// its sealed chunks, and enforces the STREAM rules that need no key (docs/format.md, 3.4).
///
/// Every reader of sealed chunks frames them here: ``ObjectReader`` (whole file objects, and
/// ranged runs), the read path's fetches (``Prefetcher``) and ``StoreSealer/open(_:storeKey:context:)``.
/// The framer hands each complete sealed chunk to the caller with its index and last-chunk flag;
/// the caller authenticates it. A chunk that arrives whole inside one piece is handed over where
/// it lies; one split across pieces is gathered in `carry` first, so nothing is copied but what
/// must be.
///
/// Two layouts:
///
/// - ``Layout/known(plaintextSize:chunks:)``: the plaintext size comes from authenticated
///   metadata, so every chunk's sealed length and flag are known in advance: the final chunk is
///   handed over as soon as it is complete, a byte after the last chunk wanted is trailing data,
///   and input that ends early is truncated. The bytes may be a run of chunks from the middle of
///   the object (a ranged read); only a run starting at chunk 0 starts with the header.
/// - ``Layout/streamed``: the whole object, size unknown. A full-size chunk is known to be
///   non-final only once a further byte arrives, so the final chunk is handed over by
///   ``finish(chunk:)``.
///
/// The framer is a value with no resources: `carry` is the caller's (one sealed chunk of room,
/// reused run after run). Structural failures are thrown as ``ChunkFramer/Violation`` for the
/// caller to report in its own words; errors thrown by the callbacks pass through unchanged.
struct ChunkFramer {
    /// Which chunks the bytes hold.
    enum Layout {
        /// Chunks `chunks` (non-empty, within the object) of an object of `plaintextSize` bytes.
        case known(plaintextSize: Int64, chunks: Range<Int64>)
        /// The whole object, of a size only its end tells.
        case streamed
    }

    /// A broken framing rule: the object is truncated, extended, or ends in an empty chunk.
    enum Violation: Error {
        /// Input ended before the chunk `chunk` was complete (or before the header was).
        case truncated(chunk: Int64)
        /// A byte arrived after the last chunk, `chunk`.
        case trailingData(chunk: Int64)
        /// The object ends with an empty chunk `chunk` after full ones (only an empty
        /// plaintext has an empty chunk, section 3.1).
        case emptyFinalChunk(chunk: Int64)
    }

    static let tagSize = Int(ObjectLayout.tagSize)
    static let sealedChunkSize = Int(ObjectLayout.sealedChunkSize)

    private let headerSize: Int
    private let carry: UnsafeMutableRawPointer
    /// Known layout: the plaintext size, the end of the run and the object's final chunk.
    private let known: (plaintextSize: Int64, end: Int64, finalChunk: Int64)?
    private var headerCount = 0
    /// Bytes of the next chunk gathered in `carry`.
    private var held = 0
    /// The chunk handed over next.
    private(set) var nextChunk: Int64
    /// Whether the final chunk (known layout: the run's last) has been handed over.
    private(set) var isComplete = false

    /// - Parameters:
    ///   - headerSize: bytes of header that precede the first chunk: the object's header size
    ///     when the bytes start at the object's start (a whole object, a run from chunk 0),
    ///     otherwise 0.
    ///   - layout: the chunks the bytes hold.
    ///   - carry: room for one sealed chunk (65552 bytes) and for the header; the caller's,
    ///     valid for the framer's life.
    init(headerSize: Int, layout: Layout, carry: UnsafeMutableRawBufferPointer) {
        precondition(
            carry.count >= max(Self.sealedChunkSize, headerSize),
            "internal error: a chunk framer needs room for one sealed chunk")
        guard let base = carry.baseAddress else { preconditionFailure("internal error: no carry buffer") }
        self.headerSize = headerSize
        self.carry = base
        switch layout {
        case .known(let plaintextSize, let chunks):
            let count = ObjectLayout.chunkCount(plaintextSize: plaintextSize)
            precondition(
                !chunks.isEmpty && chunks.lowerBound >= 0 && chunks.upperBound <= count,
                "internal error: chunks \(chunks) are not within a \(plaintextSize)-byte object")
            known = (plaintextSize, chunks.upperBound, count - 1)
            nextChunk = chunks.lowerBound
        case .streamed:
            known = nil
            nextChunk = 0
        }
    }

    /// Consumes the next bytes: the header (once complete, passed to `header`), then every chunk
    /// they complete, in order, passed to `chunk`.
    ///
    /// - Parameters:
    ///   - bytes: the next bytes, any count including 0.
    ///   - header: receives the complete header once, before any chunk; it checks it (and may
    ///     set up the cipher it implies).
    ///   - chunk: receives `(index, isLast, sealed)` for each complete sealed chunk (16 to 65552
    ///     bytes, valid only during the call).
    /// - Throws: ``Violation/trailingData(chunk:)`` for a byte after the last chunk; whatever
    ///   `header` or `chunk` throw.
    mutating func feed(
        _ bytes: UnsafeRawBufferPointer,
        header: (UnsafeRawBufferPointer) throws -> Void,
        chunk: (_ index: Int64, _ isLast: Bool, _ sealed: UnsafeRawBufferPointer) throws -> Void
    ) throws {
        guard var pointer = bytes.baseAddress else { return }
        var remaining = bytes.count

        if headerCount < headerSize {
            let take = min(headerSize - headerCount, remaining)
            (carry + headerCount).copyMemory(from: pointer, byteCount: take)
            headerCount += take
            pointer += take
            remaining -= take
            guard headerCount == headerSize else { return }
            try header(UnsafeRawBufferPointer(start: carry, count: headerSize))
        }

        while remaining > 0 {
            if let known {
                // Every chunk's sealed length and flag are fixed in advance.
                guard !isComplete else { throw Violation.trailingData(chunk: nextChunk - 1) }
                let need = ObjectLayout.plaintextRange(chunk: nextChunk, plaintextSize: known.plaintextSize).count
                    + Self.tagSize
                if held == 0 && remaining >= need {
                    try deliver(UnsafeRawBufferPointer(start: pointer, count: need), chunk)
                    pointer += need
                    remaining -= need
                } else {
                    let take = min(need - held, remaining)
                    (carry + held).copyMemory(from: pointer, byteCount: take)
                    held += take
                    pointer += take
                    remaining -= take
                    if held == need {
                        held = 0
                        try deliver(UnsafeRawBufferPointer(start: carry, count: need), chunk)
                    }
                }
            } else if held == 0 && remaining > Self.sealedChunkSize {
                // A full chunk with bytes after it in the same piece: non-final, handed over in place.
                try deliver(UnsafeRawBufferPointer(start: pointer, count: Self.sealedChunkSize), isLast: false, chunk)
                pointer += Self.sealedChunkSize
                remaining -= Self.sealedChunkSize
            } else if held == Self.sealedChunkSize {
                // A held full chunk and at least one more byte: it was not the final chunk.
                held = 0
                try deliver(UnsafeRawBufferPointer(start: carry, count: Self.sealedChunkSize), isLast: false, chunk)
            } else {
                let take = min(Self.sealedChunkSize - held, remaining)
                (carry + held).copyMemory(from: pointer, byteCount: take)
                held += take
                pointer += take
                remaining -= take
            }
        }
    }

    /// Ends the input: checks it was complete, and in the streamed layout hands over the final
    /// chunk still held.
    ///
    /// - Parameter chunk: receives the final chunk (streamed layout only).
    /// - Throws: ``Violation/truncated(chunk:)`` when the header or a chunk is incomplete (the
    ///   streamed layout: fewer than 16 bytes remain); ``Violation/emptyFinalChunk(chunk:)``;
    ///   whatever `chunk` throws.
    mutating func finish(
        chunk: (_ index: Int64, _ isLast: Bool, _ sealed: UnsafeRawBufferPointer) throws -> Void
    ) throws {
        guard headerCount == headerSize else { throw Violation.truncated(chunk: nextChunk) }
        if known != nil {
            guard isComplete else { throw Violation.truncated(chunk: nextChunk) }
            return
        }
        guard !isComplete else { return }
        guard held >= Self.tagSize else { throw Violation.truncated(chunk: nextChunk) }
        let count = held
        held = 0
        try deliver(UnsafeRawBufferPointer(start: carry, count: count), isLast: true, chunk)
    }

    /// Hands over the next chunk of the known layout.
    private mutating func deliver(
        _ sealed: UnsafeRawBufferPointer, _ chunk: (Int64, Bool, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        guard let known else { preconditionFailure("internal error: no known layout") }
        let index = nextChunk
        nextChunk += 1
        isComplete = nextChunk == known.end
        try chunk(index, index == known.finalChunk, sealed)
    }

    /// Hands over the next chunk of the streamed layout.
    private mutating func deliver(
        _ sealed: UnsafeRawBufferPointer, isLast: Bool, _ chunk: (Int64, Bool, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let index = nextChunk
        if isLast && index > 0 && sealed.count == Self.tagSize {
            throw Violation.emptyFinalChunk(chunk: index)
        }
        nextChunk += 1
        isComplete = isLast
        try chunk(index, isLast, sealed)
    }
}

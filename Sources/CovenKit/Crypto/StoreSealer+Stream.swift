// MARK: - Store objects as streams

extension StoreSealer {
    /// Seals a store object piece by piece, for objects too large to hold (snapshots): the
    /// same bytes ``StoreSealer/seal(_:storeKey:boundTo:)`` makes of the whole plaintext
    /// (docs/format.md, section 5), written to a sink as they are sealed.
    ///
    /// The plaintext's size need not be known: one chunk is held back until more bytes arrive
    /// or ``finish()`` says it is the last, so the final chunk is the one flagged final (a
    /// plaintext that is a whole number of chunks ends with a full final chunk; an empty one is
    /// one empty final chunk). At most one 64 KiB chunk and its sealed form are held.
    ///
    /// Owns a cipher handle: not `Sendable`.
    final class StreamWriter {
        private let cipher: ChunkCipher
        private let sink: (UnsafeRawBufferPointer) throws -> Void
        private let pending: UnsafeMutableRawBufferPointer
        private let sealed: UnsafeMutableRawBufferPointer
        private var held = 0
        private var index: Int64 = 0
        private var finished = false
        /// Bytes of plaintext taken, and of the object written to the sink.
        private(set) var plaintextCount: Int64 = 0
        private(set) var objectCount: Int64 = 0

        /// Starts an object bound to `path` (empty for none): its 40-byte header goes to `sink`
        /// at once.
        ///
        /// - Throws: ``CovenError`` `.internal` when libgcrypt fails; the sink's error.
        init(storeKey: FileKey, boundTo path: String, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
            let salt = try SecureRandom.bytes(ObjectHeader.saltSize)
            let header = ObjectHeader.storeMagic + [ObjectHeader.version, ObjectHeader.algorithm] + salt
            cipher = try ChunkCipher(key: payloadKey(storeKey: storeKey, salt: salt), associatedData: header + Array(path.utf8))
            self.sink = sink
            pending = .allocate(byteCount: Int(ObjectLayout.chunkSize), alignment: 16)
            sealed = .allocate(byteCount: ChunkRun.sealedChunkSize, alignment: 16)
            try header.withUnsafeBytes { try sink($0) }
            objectCount = Int64(header.count)
        }

        deinit {
            pending.initializeMemory(as: UInt8.self, repeating: 0)
            pending.deallocate()
            sealed.deallocate()
        }

        /// Takes the next bytes of the plaintext.
        ///
        /// - Throws: ``CovenError`` `.internal` after ``finish()`` or when libgcrypt fails; the
        ///   sink's error.
        func write(_ bytes: UnsafeRawBufferPointer) throws {
            guard !finished else { throw CovenError(.internal, "bytes written to a finished store object") }
            guard let base = bytes.baseAddress, let room = pending.baseAddress else { return }
            var at = 0
            while at < bytes.count {
                if held == pending.count { try sealHeld(isLast: false) }
                let take = min(pending.count - held, bytes.count - at)
                (room + held).copyMemory(from: base + at, byteCount: take)
                held += take
                at += take
            }
            plaintextCount += Int64(bytes.count)
        }

        /// Seals the held chunk as the final one and sends it: the object is complete.
        ///
        /// - Throws: ``CovenError`` `.internal` when libgcrypt fails; the sink's error.
        func finish() throws {
            guard !finished else { return }
            try sealHeld(isLast: true)
            finished = true
        }

        private func sealHeld(isLast: Bool) throws {
            try cipher.seal(index: index, isLast: isLast, plaintext: UnsafeRawBufferPointer(rebasing: pending[0..<held]), into: sealed)
            let count = held + ChunkRun.tagSize
            try sink(UnsafeRawBufferPointer(rebasing: sealed[0..<count]))
            objectCount += Int64(count)
            index += 1
            held = 0
        }
    }

    /// Opens a store object of a known size chunk by chunk, as its bytes are read: every chunk
    /// is authenticated (with its index and the final flag its place in the object decides)
    /// before its plaintext is handed out, so truncation, extension, reordering and any altered
    /// byte fail with `.integrity`, as ``StoreSealer/open(_:storeKey:boundTo:)``.
    ///
    /// Owns a cipher handle: not `Sendable`.
    final class StreamReader {
        private let cipher: ChunkCipher
        private let read: (UnsafeMutableRawBufferPointer) throws -> Int
        private let plaintextSize: Int64
        private let chunks: Int64
        private var index: Int64 = 0
        private let sealed: UnsafeMutableRawBufferPointer
        private let plain: UnsafeMutableRawBufferPointer

        /// Starts opening an object of `sealedSize` bytes bound to `path`, whose bytes `read`
        /// gives in order (filling the buffer it is handed, or fewer only at the end).
        ///
        /// - Throws: ``CovenError`` `.integrity` when the header is not a store object's or the
        ///   size is not one an object can have; `.updateRequired` for a newer format.
        init(storeKey: FileKey, boundTo path: String, sealedSize: Int64, read: @escaping (UnsafeMutableRawBufferPointer) throws -> Int) throws {
            self.read = read
            sealed = .allocate(byteCount: ChunkRun.sealedChunkSize, alignment: 16)
            plain = .allocate(byteCount: Int(ObjectLayout.chunkSize), alignment: 16)
            let header = UnsafeMutableRawBufferPointer(rebasing: sealed[0..<headerSize])
            let got = try Self.fill(header, read)
            try ObjectHeader.check(UnsafeRawBufferPointer(rebasing: header[0..<got]), magic: ObjectHeader.storeMagic)
            guard got == headerSize, let size = ObjectLayout.payloadPlaintextSize(sealedSize - Int64(headerSize)) else {
                throw CovenError(.integrity, "encrypted store object has an invalid length", cause: "\(sealedSize.counted("byte"))",
                                 details: ["reason": "length"])
            }
            plaintextSize = size
            chunks = ObjectLayout.chunkCount(plaintextSize: size)
            let headerBytes = Array(UnsafeRawBufferPointer(header))
            cipher = try ChunkCipher(
                key: payloadKey(storeKey: storeKey, salt: UnsafeRawBufferPointer(rebasing: header[ObjectHeader.prefixSize...])),
                associatedData: headerBytes + Array(path.utf8))
        }

        deinit {
            plain.initializeMemory(as: UInt8.self, repeating: 0)
            plain.deallocate()
            sealed.deallocate()
        }

        /// The plaintext of the next chunk (valid until the next call), or nil after the last.
        ///
        /// - Throws: ``CovenError`` `.integrity` when the object ends early (truncated), has
        ///   bytes past its end, or a chunk fails authentication; the read's error.
        func nextChunk() throws -> UnsafeRawBufferPointer? {
            guard index < chunks else {
                if index == chunks {
                    index += 1
                    if try read(UnsafeMutableRawBufferPointer(rebasing: sealed[0..<1])) > 0 {
                        throw CovenError(.integrity, "encrypted store object has bytes past its end", details: ["reason": "trailing"])
                    }
                }
                return nil
            }
            let count = Int(ObjectLayout.plaintextRange(chunk: index, plaintextSize: plaintextSize).count)
            let want = UnsafeMutableRawBufferPointer(rebasing: sealed[0..<(count + ChunkRun.tagSize)])
            guard try Self.fill(want, read) == want.count else {
                throw CovenError(.integrity, "encrypted store object is truncated", cause: "chunk \(index) of \(chunks) ends early",
                                 details: ["reason": "truncated", "chunk": String(index)])
            }
            try cipher.open(index: index, isLast: index == chunks - 1, sealed: UnsafeRawBufferPointer(want), into: plain)
            index += 1
            return UnsafeRawBufferPointer(rebasing: plain[0..<count])
        }

        /// Reads until `buffer` is full or the bytes end; returns how many were read.
        private static func fill(_ buffer: UnsafeMutableRawBufferPointer, _ read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> Int {
            var got = 0
            while got < buffer.count {
                let count = try read(UnsafeMutableRawBufferPointer(rebasing: buffer[got...]))
                if count <= 0 { break }
                got += count
            }
            return got
        }
    }
}

import Foundation

/// A run of chunks fetched from storage (or read from the cache) and checked: their plaintext
/// and each chunk's tag, in buffers allocated once and reused run after run, so a read of any
/// size touches a few MiB of memory.
final class RunBuffer {
    /// Room for one run's plaintext (16 chunks: 1 MiB).
    let plaintext: UnsafeMutableRawBufferPointer
    /// Room for one run's tags (16 bytes per chunk).
    let tags: UnsafeMutableRawBufferPointer
    /// The chunks it holds, consecutive.
    var chunks: Range<Int64> = 0..<0
    /// Plaintext bytes held.
    var plainCount = 0
    /// Sealed bytes transferred for them.
    var transferred: Int64 = 0

    init(chunks capacity: Int64) {
        plaintext = .allocate(byteCount: Int(capacity * ObjectLayout.chunkSize), alignment: 64)
        tags = .allocate(byteCount: Int(capacity * ObjectLayout.tagSize), alignment: 16)
    }

    deinit {
        plaintext.deallocate()
        tags.deallocate()
    }

    /// The plaintext held.
    var plainBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: plaintext[0..<plainCount]) }
    /// The tags held.
    var tagBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: tags[0..<(chunks.count * 16)]) }
}

/// Fetches runs of chunks of one stored object on a thread of its own, ahead of the reader.
///
/// The reader plans the runs (neighbouring missing chunks, up to 1 MiB of ciphertext per
/// request) and takes them in order with ``next()``, handing each buffer back with
/// ``recycle(_:)``; the fetcher keeps up to ``depth`` runs ready, so the network overlaps with
/// the reader's output and cache writes. Each run is authenticated chunk by chunk on the
/// fetcher's thread before the reader sees it: unchecked bytes never leave here.
///
/// The fetcher makes its own provider (one curl handle per thread) and its own cipher handles.
final class Prefetcher: @unchecked Sendable {
    private let connector: StorageConnector
    private let object: String
    private let keyHex: String
    private let size: Int64
    private let runs: [Range<Int64>]
    private let condition = NSCondition()
    private var ready: [Result<RunBuffer, CovenError>] = []
    private var free: [RunBuffer]
    private var stopped = false
    private var finished = false

    /// - Parameters:
    ///   - runs: the chunk runs to fetch, in the order the reader takes them.
    ///   - depth: how many runs may wait for the reader.
    init(connector: StorageConnector, object: String, keyHex: String, size: Int64, runs: [Range<Int64>], depth: Int = 4) {
        self.connector = connector
        self.object = object
        self.keyHex = keyHex
        self.size = size
        self.runs = runs
        free = runs.isEmpty ? [] : (0..<min(depth, runs.count)).map { _ in RunBuffer(chunks: StoredRead.runChunks) }
    }

    /// Starts fetching.
    func start() {
        guard !runs.isEmpty else { return }
        let thread = Thread { [self] in self.work() }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The next run, in order, waiting for it; throws the fetch's error.
    func next() throws -> RunBuffer {
        condition.lock()
        defer { condition.unlock() }
        while ready.isEmpty { condition.wait() }
        return try ready.removeFirst().get()
    }

    /// Hands a buffer back for the next fetch.
    func recycle(_ buffer: RunBuffer) {
        condition.lock()
        free.append(buffer)
        condition.broadcast()
        condition.unlock()
    }

    /// Stops fetching (the reader is done or failed) and waits for the fetcher's thread to
    /// let go of its buffers.
    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        while !finished && !runs.isEmpty { condition.wait() }
        condition.unlock()
    }

    private func takeBuffer() -> RunBuffer? {
        condition.lock()
        defer { condition.unlock() }
        while free.isEmpty && !stopped { condition.wait() }
        return stopped ? nil : free.removeLast()
    }

    private func deliver(_ result: Result<RunBuffer, CovenError>) {
        condition.lock()
        defer { condition.unlock() }
        ready.append(result)
        condition.broadcast()
    }

    private func work() {
        defer {
            condition.lock()
            finished = true
            condition.broadcast()
            condition.unlock()
        }
        do {
            let provider = try connector.connect()
            let key = try FileKey(hex: keyHex)
            let opener = try ObjectOpener(key: key)
            let sealed = UnsafeMutableRawBufferPointer.allocate(
                byteCount: Int(ObjectLayout.headerSize + StoredRead.runChunks * ObjectLayout.sealedChunkSize), alignment: 64)
            defer { sealed.deallocate() }
            for run in runs {
                guard let buffer = takeBuffer() else { return }
                try Prefetcher.fetch(run, object: object, size: size, provider: provider, opener: opener, sealed: sealed, into: buffer)
                deliver(.success(buffer))
            }
        } catch {
            deliver(.failure(error.asCovenError))
        }
    }

    /// Fetches one run with one ranged GET and authenticates it into `buffer`.
    ///
    /// A run that starts at chunk 0 also fetches the 8-byte header and checks it, so a newer
    /// format fails with `update_required`.
    ///
    /// - Parameter sealed: scratch room for the run's sealed bytes and the header.
    /// - Throws: `.integrity` when the object is shorter or longer than the record says or a
    ///   chunk fails its tag; `.missing` when storage confirms nothing at the path; `.storage`.
    static func fetch(
        _ run: Range<Int64>, object: String, size: Int64, provider: StorageProvider, opener: ObjectOpener,
        sealed: UnsafeMutableRawBufferPointer, into buffer: RunBuffer
    ) throws {
        let first = ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: size)
        let last = ObjectLayout.encryptedRange(chunk: run.upperBound - 1, plaintextSize: size)
        let withHeader = run.lowerBound == 0
        let lower = withHeader ? 0 : first.lowerBound
        let wanted = Int(last.upperBound - lower)
        precondition(wanted <= sealed.count, "internal error: a run larger than its buffer")
        var received = 0
        do {
            try provider.get(object, range: lower..<last.upperBound) { bytes in
                guard received + bytes.count <= wanted, let base = sealed.baseAddress, let from = bytes.baseAddress else {
                    if bytes.isEmpty { return }
                    throw CovenError(.integrity, "the stored object '\(object)' is longer than its record says", details: ["key": object, "reason": "length"])
                }
                (base + received).copyMemory(from: from, byteCount: bytes.count)
                received += bytes.count
            }
        } catch let error as CovenError where error.code == .rangeOutOfBounds {
            throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says", cause: error.cause, details: ["key": object, "reason": "length"])
        }
        var offset = 0
        if withHeader {
            guard received >= Int(ObjectLayout.headerSize) else {
                throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says", details: ["key": object, "reason": "length"])
            }
            try ObjectOpener.checkHeader(UnsafeRawBufferPointer(rebasing: sealed[0..<8]))
            offset = Int(ObjectLayout.headerSize)
        }
        let body = UnsafeRawBufferPointer(rebasing: sealed[offset..<received])
        buffer.chunks = run
        buffer.transferred = Int64(received)
        buffer.plainCount = try opener.openChunks(run, sealed: body, totalPlaintextSize: size, into: buffer.plaintext)
        // Keep each chunk's tag for the cache (the run holds at least one tag: openChunks checked).
        guard let tagBase = buffer.tags.baseAddress, let bodyBase = body.baseAddress else {
            throw CovenError(.internal, "no room for the tags of chunks \(run)")
        }
        var position = 0
        for k in 0..<run.count {
            position += ObjectLayout.plaintextRange(chunk: run.lowerBound + Int64(k), plaintextSize: size).count
            (tagBase + k * 16).copyMemory(from: bodyBase + position, byteCount: 16)
            position += 16
        }
    }
}

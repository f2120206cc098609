import CLinux
import Dispatch
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
    /// Whether they came from the cache (otherwise they were fetched).
    var fromCache = false
    /// Whether the fetched chunks were written to the cache files (not yet recorded).
    var stored = false
    /// Whether the disk had no room for them (a read that need not keep its bytes goes on
    /// without writing to the cache).
    var noRoom = false
    /// Cached chunks of the run that failed their tag and were fetched again: the reader
    /// forgets them, then writes them to the cache again.
    var refetched: [Int64] = []

    /// The producer thread that holds it, while it does.
    var owner = 0

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

/// What a worker reading file after file (fetch-kept's, a `get` of many's, make-device-only's) keeps from one read
/// to the next: its storage connection (one curl handle, whose connection to the server is
/// reused rather than opened again for each file), a chunk's carry and a run buffer, whose
/// pages stay touched. Used by one read at a time, and within it by one producer (the first).
final class ReadSession {
    let connector: StorageConnector
    private var provider: StorageProvider?
    /// A sealed chunk's room, for a fetch's partial chunk between two reads of the network.
    let carry: UnsafeMutableRawBufferPointer
    /// Run buffers a read uses first (by default one: a small file's read needs no more, and a
    /// large one's others are its own).
    let buffers: [RunBuffer]

    init(connector: StorageConnector, buffers: Int = 1) {
        self.connector = connector
        carry = .allocate(byteCount: Int(ObjectLayout.sealedChunkSize), alignment: 64)
        self.buffers = (0..<max(1, buffers)).map { _ in RunBuffer(chunks: StoredRead.runChunks) }
    }

    deinit { carry.deallocate() }

    /// The session's connection, made at first need.
    func connected() throws -> StorageProvider {
        if let provider { return provider }
        let made = try connector.connect()
        provider = made
        return made
    }
}

/// One run of a read's plan: chunks held in the cache, or missing ones to fetch.
enum ReadStep: Sendable {
    case cached(Range<Int64>)
    case fetch(Range<Int64>)
}

/// Produces the runs of a read on a thread of its own, ahead of the reader: cached runs are
/// read from the cache files and checked against their tags, missing ones fetched from storage
/// (neighbouring chunks together, up to 1 MiB of ciphertext per request) and authenticated.
///
/// The reader takes the runs in order with ``next()`` and hands each buffer back with
/// ``recycle(_:)``; up to `depth` runs wait ready, so checking and the network overlap with the
/// reader's hashing and output. Unchecked bytes never leave here: a cached chunk that fails its
/// tag is fetched again (and listed in ``RunBuffer/refetched``), a fetched one that fails is an
/// `integrity` error.
///
/// A fetched run is written to the cache here, before it is handed over (``CacheWriting``), so
/// the reader's thread only hashes and writes the output: on two cores the cache writes (whose
/// fresh page-cache pages cost as much as hashing) run beside the hash. The reader records the
/// chunks of a run only after taking it, so a chunk's bit is never set before its bytes and tag
/// are written.
///
/// How the work spreads over the cores (`threads`): beside a reader that hashes, one thread
/// does everything (the hash keeps the other core busy). Otherwise, when every run is cached
/// (a warm read), the reader and one producer thread take alternate runs, each reading and
/// checking its run alone: two threads on the two cores, and the reader waits only when the
/// other falls behind (with a third thread, waking the reader for every run preempted a
/// checker and cost a fifth of the read). A read that fetches has one producer
/// thread, which checks cached runs in two halves at once. A fetched run is opened chunk by
/// chunk as its bytes arrive (``fetch(_:object:size:provider:cipher:carry:into:)``); a cached
/// run is checked by sealing each chunk again into a chunk-sized scratch and comparing the tag
/// with the stored one. The producers share three run buffers, so a read holds about 4 MiB
/// whatever its size.
///
/// The producers read and write the cache files through the reader's descriptors (`pread`,
/// `pwrite`), and each makes its own provider (one curl handle per thread) and cipher handles.
final class Prefetcher: @unchecked Sendable {
    /// Where fetched runs go: the cache entry's files, by path for messages, and whether to start
    /// their writeback at once (for a read that syncs them at the end, ``Device/holdFile(_:stop:)``).
    struct CacheWriting {
        var dataPath: String
        var tagsPath: String
        var startWriteback: Bool
        /// Whether the read must keep every byte (`coven get`): then a disk with no room fails
        /// it with `no_room`; otherwise (`coven cat`) the producer stops writing to the cache
        /// and the read goes on, its bytes checked as ever.
        var required: Bool
    }

    private let connector: StorageConnector
    /// The reading worker's connection and carry, used by the first producer (nil: each
    /// producer makes its own).
    private let session: ReadSession?
    private let object: String
    private let keyHex: String
    private let size: Int64
    private let steps: [ReadStep]
    private let dataFD: Int32
    private let tagsFD: Int32
    private let writing: CacheWriting?
    /// Producers: each takes the steps whose index modulo `workers` is its own.
    private let workers: Int
    /// Whether producer 0 is the reader itself (a warm read): it checks its runs in ``next()``
    /// on its own thread, so two threads share the two cores and no third one wakes per run.
    private let readerProduces: Bool
    /// The reader's own producer state, made at its first run.
    private var readerProducer: Producer?
    /// Threads each producer uses to check one cached run.
    private let threadsPerRun: Int
    /// Guards the state below; the reader waits on ``Wait/reader`` for its next run (or for the
    /// producers to stop), the producers on ``Wait/producer`` for a free buffer (or a stop).
    private let monitor = Monitor(conditions: 2)
    private enum Wait { static let reader = 0, producer = 1 }
    /// Finished runs by step index, until the reader takes them.
    private var ready: [Int: Result<RunBuffer, CovenError>] = [:]
    /// The step the reader takes next.
    private var taken = 0
    /// The free buffers, shared by the producers.
    private var free: [RunBuffer]
    /// Buffers each producer holds (filling, or ready and not yet taken).
    private var held: [Int]
    /// The most buffers one producer may hold: with two, each may hold all but one, so the one
    /// whose run the reader waits for always finds a buffer.
    private let holdLimit: Int
    private var stopped = false
    private var running = 0
    /// The disk had no room for a fetched run: later runs are not written either. Only the one
    /// producer of a read that fetches writes to the cache.
    private var cacheFull = false

    /// - Parameters:
    ///   - steps: the runs, in the order the reader takes them.
    ///   - dataFD, tagsFD: the cache entry's files, open for reading and writing.
    ///   - writing: where fetched runs are written before they are handed over (nil: not written).
    ///   - threads: how many cores the producers may keep busy: 1 when the reader keeps the
    ///     other core busy (hashing), so the threads never queue for one core.
    ///   - depth: how many buffers the producers share (runs waiting for the reader, or filling).
    ///   - reusing: buffers to use first, instead of allocating new ones (a caller reading many
    ///     files in a row keeps its buffers' pages from file to file).
    init(connector: StorageConnector, object: String, keyHex: String, size: Int64, steps: [ReadStep],
         dataFD: Int32, tagsFD: Int32, writing: CacheWriting?, threads: Int = ChunkRun.threads, depth: Int = 3,
         reusing spare: [RunBuffer] = [], session: ReadSession? = nil) {
        self.connector = connector
        self.session = session
        self.object = object
        self.keyHex = keyHex
        self.size = size
        self.steps = steps
        self.dataFD = dataFD
        self.tagsFD = tagsFD
        self.writing = writing
        let allCached = steps.allSatisfy { if case .cached = $0 { return true } else { return false } }
        let threads = max(1, min(threads, ChunkRun.threads))
        workers = allCached && steps.count > 1 ? threads : 1
        threadsPerRun = workers > 1 ? 1 : threads
        // A read of one run (a file of up to 1 MiB) has nothing to overlap within it: the reader
        // fetches it itself, rather than starting a thread for it (many small files a second).
        readerProduces = workers > 1 || steps.count == 1
        // Two producers need a buffer each and one the reader holds; one producer may work with
        // a single buffer (no overlap within the read: a caller running reads side by side).
        let count = min(max(depth, workers > 1 ? workers + 1 : 1), steps.count)
        free = (0..<count).map { index in index < spare.count ? spare[index] : RunBuffer(chunks: StoredRead.runChunks) }
        held = [Int](repeating: 0, count: workers)
        holdLimit = workers > 1 ? count - 1 : count
    }

    /// Starts producing.
    func start() {
        guard !steps.isEmpty else { return }
        let first = readerProduces ? 1 : 0
        monitor.withLock { running = workers - first }
        for worker in first..<workers {
            let thread = Thread { [self] in self.work(worker) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// The next run, in order, waiting for it; throws the run's error.
    func next() throws -> RunBuffer {
        if readerProduces && taken % workers == 0 {
            // The reader's own run. A buffer is always free here: the reader has handed back
            // its last one, and the other producer holds at most all but one.
            let index = taken
            guard let buffer = takeBuffer(0) else { throw CovenError(.internal, "no run buffer") }
            monitor.withLock { taken += 1 }
            do {
                if readerProducer == nil { readerProducer = try Producer(key: FileKey(hex: keyHex), threads: threadsPerRun, session: session) }
                guard let producer = readerProducer else { throw CovenError(.internal, "no producer") }
                try produce(index, into: buffer, with: producer)
            } catch {
                recycle(buffer)
                throw error
            }
            return buffer
        }
        monitor.lock()
        defer { monitor.unlock() }
        while ready[taken] == nil { monitor.wait(Wait.reader) }
        let result = ready.removeValue(forKey: taken)
        taken += 1
        guard let result else { throw CovenError(.internal, "no run") }
        return try result.get()
    }

    /// Hands a buffer back for a later run.
    func recycle(_ buffer: RunBuffer) {
        monitor.withLock {
            held[buffer.owner] -= 1
            free.append(buffer)
        }
        monitor.broadcast(Wait.producer)
    }

    /// Stops producing (the reader is done or failed) and waits for the producers' threads to
    /// let go of their buffers and the descriptors.
    func stop() {
        monitor.lock()
        stopped = true
        monitor.broadcast(Wait.producer)
        while running > 0 { monitor.wait(Wait.reader) }
        monitor.unlock()
    }

    private func takeBuffer(_ worker: Int) -> RunBuffer? {
        monitor.lock()
        defer { monitor.unlock() }
        while (free.isEmpty || held[worker] >= holdLimit) && !stopped { monitor.wait(Wait.producer) }
        guard !stopped else { return nil }
        let buffer = free.removeLast()
        buffer.owner = worker
        held[worker] += 1
        return buffer
    }

    private func deliver(_ step: Int, _ result: Result<RunBuffer, CovenError>) {
        // Only the run the reader takes next can wake it.
        let wanted = monitor.withLock {
            ready[step] = result
            return step == taken
        }
        if wanted { monitor.signal(Wait.reader) }
    }

    /// What one producer keeps from run to run: its cipher handles, its storage connection (one
    /// curl handle per thread, or the reading worker's, kept from file to file) and its
    /// scratch, each made at first need.
    private final class Producer {
        let key: FileKey
        let threads: Int
        let session: ReadSession?
        var cipher: ChunkCipher?
        var checker: TagChecker?
        var provider: StorageProvider?
        var carry: UnsafeMutableRawBufferPointer?
        var spare: RunBuffer?

        init(key: FileKey, threads: Int, session: ReadSession? = nil) {
            self.key = key
            self.threads = threads
            self.session = session
        }

        deinit { if session == nil { carry?.deallocate() } }

        func connected(_ connector: StorageConnector) throws -> (StorageProvider, ChunkCipher, UnsafeMutableRawBufferPointer) {
            if provider == nil { provider = try session?.connected() ?? connector.connect() }
            if cipher == nil { cipher = try ChunkCipher(key: key) }
            if carry == nil { carry = session?.carry ?? .allocate(byteCount: Int(ObjectLayout.sealedChunkSize), alignment: 64) }
            guard let provider, let cipher, let carry else { throw CovenError(.internal, "no storage provider") }
            return (provider, cipher, carry)
        }

        func tagChecker() throws -> TagChecker {
            if checker == nil { checker = try TagChecker(key: key, threads: threads) }
            guard let checker else { throw CovenError(.internal, "no cipher") }
            return checker
        }
    }

    private func work(_ worker: Int) {
        defer {
            monitor.withLock { running -= 1 }
            monitor.signal(Wait.reader)
        }
        var index = worker
        do {
            // The session's connection goes to the first producer alone (one user at a time).
            let producer = try Producer(key: FileKey(hex: keyHex), threads: threadsPerRun, session: worker == 0 ? session : nil)
            while index < steps.count {
                guard let buffer = takeBuffer(worker) else { return }
                try produce(index, into: buffer, with: producer)
                deliver(index, .success(buffer))
                index += workers
            }
        } catch {
            // The reader stops at this step; the other producer's later runs are never taken.
            deliver(index, .failure(error.asCovenError))
        }
    }

    /// Fills `buffer` with step `index`: fetched, or read from the cache and checked (a cached
    /// chunk that fails its tag is fetched again).
    private func produce(_ index: Int, into buffer: RunBuffer, with producer: Producer) throws {
        switch steps[index] {
        case .fetch(let run):
            let (provider, cipher, carry) = try producer.connected(connector)
            try Prefetcher.fetch(run, object: object, size: size, provider: provider, cipher: cipher, carry: carry, into: buffer)
            buffer.fromCache = false
            buffer.refetched = []
            buffer.stored = false
            buffer.noRoom = false
            if let writing {
                if !cacheFull {
                    do {
                        try write(buffer, to: writing)
                        buffer.stored = true
                    } catch let error as CovenError where error.code == .noRoom && !writing.required {
                        // Give back what part of the run was written, so the chunks written
                        // before it can still be recorded.
                        let base = ObjectLayout.plaintextRange(chunk: run.lowerBound, plaintextSize: size).lowerBound
                        _ = coven_punch_hole(dataFD, base, Int64(buffer.plainCount))
                        cacheFull = true
                    }
                }
                buffer.noRoom = cacheFull
            }
        case .cached(let run):
            let bad = try producer.tagChecker().readCached(run, size: size, dataFD: dataFD, tagsFD: tagsFD, into: buffer)
            buffer.fromCache = true
            buffer.stored = false
            buffer.noRoom = false
            buffer.refetched = bad
            buffer.transferred = 0
            if !bad.isEmpty {
                let (provider, cipher, carry) = try producer.connected(connector)
                if producer.spare == nil { producer.spare = RunBuffer(chunks: StoredRead.runChunks) }
                guard let fetched = producer.spare else { throw CovenError(.internal, "no buffer") }
                try Prefetcher.patch(bad, in: buffer, object: object, size: size, provider: provider, cipher: cipher, carry: carry, scratch: fetched)
            }
        }
    }

    /// Writes a fetched run's plaintext and tags to the cache files (recorded later by the
    /// reader, once it takes the run).
    private func write(_ run: RunBuffer, to writing: CacheWriting) throws {
        let base = ObjectLayout.plaintextRange(chunk: run.chunks.lowerBound, plaintextSize: size).lowerBound
        // Allocating the run's blocks first makes the write about a third cheaper on ext4 (no
        // per-page delayed allocation). Only a help: a failure (no room) shows at the write.
        if run.plainCount > 0 { _ = coven_preallocate(dataFD, base, Int64(run.plainCount)) }
        try pwriteAll(dataFD, run.plainBytes, at: base, path: writing.dataPath)
        try pwriteAll(tagsFD, run.tagBytes, at: run.chunks.lowerBound * 16, path: writing.tagsPath)
        // Start writing back now, so the sync that completes the entry has little left.
        if writing.startWriteback { _ = coven_start_writeback(dataFD, base, Int64(run.plainCount)) }
    }

    /// Fetches the `bad` chunks of a cached run again and patches their plaintext and tags in.
    static func patch(
        _ bad: [Int64], in buffer: RunBuffer, object: String, size: Int64, provider: StorageProvider,
        cipher: ChunkCipher, carry: UnsafeMutableRawBufferPointer, scratch: RunBuffer
    ) throws {
        let base = ObjectLayout.plaintextRange(chunk: buffer.chunks.lowerBound, plaintextSize: size).lowerBound
        var index = 0
        while index < bad.count {
            var end = index + 1
            while end < bad.count, bad[end] == bad[end - 1] + 1 { end += 1 }
            try fetch(bad[index]..<(bad[end - 1] + 1), object: object, size: size, provider: provider, cipher: cipher, carry: carry, into: scratch)
            buffer.transferred += scratch.transferred
            let offset = Int(ObjectLayout.plaintextRange(chunk: scratch.chunks.lowerBound, plaintextSize: size).lowerBound - base)
            UnsafeMutableRawBufferPointer(rebasing: buffer.plaintext[offset..<(offset + scratch.plainCount)]).copyMemory(from: scratch.plainBytes)
            let tagOffset = Int(scratch.chunks.lowerBound - buffer.chunks.lowerBound) * 16
            UnsafeMutableRawBufferPointer(rebasing: buffer.tags[tagOffset..<(tagOffset + scratch.chunks.count * 16)]).copyMemory(from: scratch.tagBytes)
            index = end
        }
    }

    /// Fetches one run with one ranged GET and authenticates it into `buffer`, chunk by chunk as
    /// the bytes arrive, framed by the one ``ChunkFramer``: a chunk that arrives whole in one piece
    /// is opened where it lies, one split across pieces is gathered in `carry` (one sealed chunk)
    /// first. So no run of sealed bytes is held, and nothing is copied on the way but the
    /// plaintext out.
    ///
    /// A run that starts at chunk 0 also fetches the 8-byte header and checks it, so a newer
    /// format fails with `update_required`.
    ///
    /// The plaintext of a run that fails is never handed over (the failure is).
    ///
    /// - Parameter carry: scratch room for one sealed chunk.
    /// - Throws: `.integrity` when the object is shorter or longer than the record says or a
    ///   chunk fails its tag; `.missing` when storage confirms nothing at the path; `.storage`.
    static func fetch(
        _ run: Range<Int64>, object: String, size: Int64, provider: StorageProvider, cipher: ChunkCipher,
        carry: UnsafeMutableRawBufferPointer, into buffer: RunBuffer
    ) throws {
        let first = ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: size)
        let last = ObjectLayout.encryptedRange(chunk: run.upperBound - 1, plaintextSize: size)
        let withHeader = run.lowerBound == 0
        let lower = withHeader ? 0 : first.lowerBound
        let wanted = Int(last.upperBound - lower)
        buffer.chunks = run
        buffer.plainCount = 0
        var received = 0
        var plainOffset = 0
        guard let plainBase = buffer.plaintext.baseAddress, let tagBase = buffer.tags.baseAddress else {
            throw CovenError(.internal, "no room for chunks \(run)")
        }
        var framer = ChunkFramer(
            headerSize: withHeader ? Int(ObjectLayout.headerSize) : 0, layout: .known(plaintextSize: size, chunks: run),
            carry: carry)
        func open(_ chunk: Int64, _ isLast: Bool, _ sealed: UnsafeRawBufferPointer) throws {
            let plain = sealed.count - 16
            try cipher.open(index: chunk, isLast: isLast, sealed: sealed,
                            into: UnsafeMutableRawBufferPointer(start: plainBase + plainOffset, count: plain))
            // Keep each chunk's tag for the cache.
            if let tag = sealed.baseAddress { (tagBase + Int(chunk - run.lowerBound) * 16).copyMemory(from: tag + plain, byteCount: 16) }
            plainOffset += plain
        }
        let longer = CovenError(.integrity, "the stored object '\(object)' is longer than its record says", details: ["key": object, "reason": "length"])
        do {
            let total = try provider.get(object, range: lower..<last.upperBound) { bytes in
                received += bytes.count
                try framer.feed(bytes, header: ObjectReader.checkHeader, chunk: open)
            }
            // "An object of any other size at the path is damage" (spec/files.md), whichever
            // chunks a read needs: the answer says the object's size (Content-Range, the file's
            // size), and it must be the record's.
            try Self.checkSize(total, object: object, plaintextSize: size)
            try framer.finish(chunk: open)
        } catch let error as CovenError where error.code == .rangeOutOfBounds {
            throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says", cause: error.cause, details: ["key": object, "reason": "length", "short": "true"])
        } catch ChunkFramer.Violation.trailingData {
            throw longer
        } catch is ChunkFramer.Violation {
            throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says",
                             cause: "\(received) of \(wanted.counted("byte"))", details: ["key": object, "reason": "length", "short": "true"])
        }
        buffer.transferred = Int64(received)
        buffer.plainCount = plainOffset
    }
}

extension Prefetcher {
    /// Checks the total size a storage answer gave for `object` (nil: it gave none) against the
    /// encrypted size of a `plaintextSize`-byte file.
    ///
    /// - Throws: `.integrity` (details `key`, `reason` `length`) for any other size.
    static func checkSize(_ total: Int64?, object: String, plaintextSize: Int64) throws {
        let expected = ObjectLayout.encryptedSize(plaintextSize: plaintextSize)
        guard let total, total != expected else { return }
        var details = ["key": object, "reason": "length"]
        if total < expected { details["short"] = "true" }
        throw CovenError(.integrity, "the stored object '\(object)' is \(total.counted("byte")), not \(expected) as its record says",
                         details: details)
    }
}

/// Checks cached chunks against their tags on both cores: sealing a chunk's plaintext again
/// under the file's key and nonce gives its tag, which must equal the stored one.
///
/// Owns one cipher handle and one chunk-sized scratch per thread; confined to the producer.
final class TagChecker {
    private let ciphers: [ChunkCipher]
    private let scratch: [UnsafeMutableRawBufferPointer]

    init(key: FileKey, threads: Int) throws {
        ciphers = try (0..<max(1, min(threads, ChunkRun.threads))).map { _ in try ChunkCipher(key: key) }
        scratch = ciphers.map { _ in .allocate(byteCount: Int(ObjectLayout.sealedChunkSize), alignment: 64) }
    }

    deinit { scratch.forEach { $0.deallocate() } }

    /// Chunks read from the cache file at once (256 KiB).
    static let readChunks = 4

    /// Reads cached chunks into `buffer` and checks each against its tag, the run's halves at
    /// once. Returns the chunks that failed (or that the cache files are too short to hold).
    func readCached(_ run: Range<Int64>, size: Int64, dataFD: Int32, tagsFD: Int32, into buffer: RunBuffer) throws -> [Int64] {
        let lower = ObjectLayout.plaintextRange(chunk: run.lowerBound, plaintextSize: size).lowerBound
        let upper = ObjectLayout.plaintextRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
        let count = Int(upper - lower)
        buffer.chunks = run
        buffer.plainCount = count
        let gotTags = preadAll(tagsFD, UnsafeMutableRawBufferPointer(rebasing: buffer.tags[0..<(run.count * 16)]), at: run.lowerBound * 16)
        guard gotTags == run.count * 16 else { return Array(run) }
        let chunks = try ChunkRun(firstChunk: run.lowerBound, plaintextCount: count, totalPlaintextSize: size)
        let failed = UnsafeMutableBufferPointer<Bool>.allocate(capacity: run.count)
        failed.initialize(repeating: false)
        defer { failed.deallocate() }
        let plaintext = buffer.plaintext
        let tags = buffer.tags
        try chunks.forEachSlice(parts: ciphers.count) { slice, indexes in
            let cipher = ciphers[slice]
            let out = scratch[slice]
            // This half's bytes, a few chunks per read, each sealed again while still in the
            // core's cache.
            var k = indexes.lowerBound
            while k < indexes.upperBound {
                let end = min(k + TagChecker.readChunks, indexes.upperBound)
                let from = chunks.chunk(k).plainOffset
                let last = chunks.chunk(end - 1)
                let to = last.plainOffset + last.plainCount
                let got = preadAll(dataFD, UnsafeMutableRawBufferPointer(rebasing: plaintext[from..<to]), at: lower + Int64(from))
                for k in k..<end {
                    let (offset, plainCount, _) = chunks.chunk(k)
                    guard offset + plainCount <= from + got else {
                        failed[k] = true
                        continue
                    }
                    let index = chunks.firstChunk + Int64(k)
                    try cipher.seal(index: index, isLast: index == chunks.finalChunk,
                                    plaintext: UnsafeRawBufferPointer(rebasing: plaintext[offset..<(offset + plainCount)]), into: out)
                    let computed = UnsafeRawBufferPointer(rebasing: out[plainCount..<(plainCount + 16)])
                    let stored = UnsafeRawBufferPointer(rebasing: tags[(k * 16)..<(k * 16 + 16)])
                    if !computed.elementsEqual(stored) { failed[k] = true }
                }
                k = end
            }
        }
        return run.enumerated().compactMap { failed[$0.offset] ? $0.element : nil }
    }
}

import Foundation
import Synchronization

/// The hashes coven records for a file's bytes: the whole-file SHA-256 and a SHA-256 of each
/// 64 KiB chunk (an empty file has one chunk, the empty one). Every upload attempt checks each
/// chunk against these before encrypting it.
public struct ContentDigests: Sendable, Equatable {
    /// The size read.
    public var size: Int64
    /// SHA-256 of all bytes.
    public var content: [UInt8]
    /// SHA-256 of each 64 KiB chunk, 32 bytes each, in order.
    public var chunks: [UInt8]

    /// The chunk size the chunk hashes cover.
    public static let chunkSize = 65536

    /// The recorded hash of chunk `index`.
    public func chunk(_ index: Int) -> ArraySlice<UInt8> { chunks[(index * 32)..<(index * 32 + 32)] }
}

/// Reads a stream once, hashing it whole on one core and chunk by chunk on the other, and
/// optionally writing it out as it goes (coven's copy of app bytes).
///
/// Memory is two 1 MiB blocks plus 32 bytes per 64 KiB of input, whatever the file's size.
/// (1 MiB keeps handing a block between the lanes cheap next to its hashing, while peak memory
/// stays small: bench/bench-stage.sh measures both.)
final class ContentHasher {
    static let blockSize = 1 << 20
    /// A last block up to this size is hashed on the calling thread alone.
    static let inlineLimit = 256 << 10

    /// Fills `buffer` as far as the source allows; returns the count (less only at the end).
    typealias Reader = (UnsafeMutableRawBufferPointer) throws -> Int
    /// Takes one block of the bytes read, in order.
    typealias Writer = (UnsafeRawBufferPointer) throws -> Void

    /// Hashes a file from its start to its end, reading at offsets (the descriptor's own
    /// position is left alone).
    static func run(file: FileHandleFD, sizeHint: Int64? = nil, stop: Stop? = nil, progress: ((Int64) -> Void)? = nil) throws -> ContentDigests {
        var offset: Int64 = 0
        return try run(read: { buffer in
            try stop?.check("stage")
            let got = try file.read(into: buffer, at: offset)
            offset += Int64(got)
            return got
        }, write: nil, sizeHint: sizeHint, progress: progress)
    }

    /// Hashes everything `read` gives, passing each block to `write` too.
    ///
    /// `sizeHint`, the size the source is expected to have (a regular file's), sizes the chunk
    /// hashes up front so they never grow by copying; the hashes are of what is read whatever
    /// the hint says.
    ///
    /// A source of more than one short block is hashed on two lanes: this thread reads each
    /// block and hashes its chunks, but for its last few, while ``WholeLane`` hashes the whole
    /// file (and writes) a block behind, then those last chunks, so that both lanes take as
    /// long (``PipelineState``). With two blocks, each lane can run up to a block ahead of the
    /// other: neither waits on a block the other was a little slower at, only on a slower lane.
    static func run(read: Reader, write: Writer?, sizeHint: Int64? = nil, progress: ((Int64) -> Void)?) throws -> ContentDigests {
        let whole = try SHA256()
        let capacity = blockCapacity(sizeHint: sizeHint)
        let blocks = [UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 4096),
                      UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 4096)]
        defer { blocks.forEach { $0.deallocate() } }
        var chunkHashes: [UInt8] = []
        if let sizeHint, sizeHint > 0, sizeHint < Int64(Int.max / 2) {
            chunkHashes.reserveCapacity(Int((sizeHint + Int64(ContentDigests.chunkSize) - 1) / Int64(ContentDigests.chunkSize)) * 32 + 32)
        }
        var total: Int64 = 0
        var index = 0
        var count = try fill(blocks[0], read)
        // The whole-file lane's thread, from the first block hashed on two lanes to the end.
        var lane: WholeLane?
        defer { lane?.stop() }
        var state = PipelineState()
        repeat {
            let block = UnsafeRawBufferPointer(rebasing: blocks[index % 2][0..<count])
            let chunkCount = max(1, (count + ContentDigests.chunkSize - 1) / ContentDigests.chunkSize)
            let start = chunkHashes.count
            chunkHashes.append(contentsOf: repeatElement(0, count: chunkCount * 32))
            let isLast = count < capacity
            if isLast && total == 0 && chunkCount == 1 {
                // A file of one chunk: its chunk hash is its whole-file hash, computed once.
                hashChunks(block, into: &chunkHashes, at: start)
                try write?(block)
                total = Int64(count)
                progress?(total)
                return ContentDigests(size: total, content: Array(chunkHashes[start..<(start + 32)]), chunks: chunkHashes)
            }
            if isLast && lane == nil && count <= Self.inlineLimit {
                // One short last block (a small file's only one): hashing it on this thread is
                // cheaper than handing it to two.
                hashChunks(block, into: &chunkHashes, at: start)
                whole.update(block)
                try write?(block)
                total += Int64(count)
                progress?(total)
                break
            }
            let wholeLane = lane ?? WholeLane(whole: whole, write: write, chunkCapacity: capacity / ContentDigests.chunkSize)
            lane = wholeLane
            let started = DispatchTime.now().uptimeNanoseconds
            let handOver = isLast ? 0 : min(state.handOver, chunkCount / 2)
            wholeLane.post(index, block: block, chunks: (chunkCount - handOver)..<chunkCount, hashesAt: start)
            chunkHashes.withUnsafeMutableBytes { hashes in
                guard let base = hashes.baseAddress else { return }
                hashChunks(of: block, 0..<(chunkCount - handOver), into: base + start)
            }
            total += Int64(count)
            progress?(total)
            var busy = DispatchTime.now().uptimeNanoseconds - started
            if isLast { break }
            // The next block goes where the block before this one was: the whole-file lane
            // must have ended it.
            if index > 0 {
                let elapsed = try wholeLane.collect(index - 1, into: &chunkHashes)
                state.balance(whole: elapsed, reading: state.readingElapsed, chunkCount: chunkCount)
            }
            let reading = DispatchTime.now().uptimeNanoseconds
            count = try fill(blocks[(index + 1) % 2], read)
            busy += DispatchTime.now().uptimeNanoseconds - reading
            state.readingElapsed = busy
            index += 1
            // A source ending exactly on a block boundary: the last block read is empty.
            if count == 0 { break }
        } while true
        if let lane {
            try lane.collectAll(into: &chunkHashes)
        }
        // An empty file, or one ending exactly on a chunk boundary: hashes are already right for
        // the empty case (one chunk, SHA-256 of nothing); a full final block needs no extra chunk.
        return ContentDigests(size: total, content: whole.finish(), chunks: chunkHashes)
    }

    /// The size of each of the two blocks. A small source expected whole in one block gets
    /// blocks its size (rounded up to whole chunks, plus one, so its end is seen without a
    /// second read), not 1 MiB: staging many small files then costs no more memory than their
    /// bytes. Blocks stay whole chunks, so a source that grows past its hint is still hashed in
    /// the right 64 KiB chunks.
    private static func blockCapacity(sizeHint: Int64?) -> Int {
        guard let sizeHint, sizeHint >= 0, sizeHint < Int64(blockSize) else { return blockSize }
        let chunk = ContentDigests.chunkSize
        return min(blockSize, (Int(sizeHint) / chunk + 1) * chunk)
    }

    /// Hashes each 64 KiB chunk of `block` on this thread into `hashes` from byte `start`.
    private static func hashChunks(_ block: UnsafeRawBufferPointer, into hashes: inout [UInt8], at start: Int) {
        let chunkCount = max(1, (block.count + ContentDigests.chunkSize - 1) / ContentDigests.chunkSize)
        hashes.withUnsafeMutableBytes { hashes in
            guard let first = hashes.baseAddress else { return }
            hashChunks(of: block, 0..<chunkCount, into: first + start)
        }
    }


    /// Hashes the 64 KiB chunks `chunks` of `block`, each into its 32 bytes from `base`, two at
    /// a time (``SHA256/hashPair(_:_:into:_:)``).
    fileprivate static func hashChunks(of block: UnsafeRawBufferPointer, _ chunks: Range<Int>, into base: UnsafeMutableRawPointer) {
        SHA256.hashEach(chunks.count, { offset in
            let lower = (chunks.lowerBound + offset) * ContentDigests.chunkSize
            let upper = min(lower + ContentDigests.chunkSize, block.count)
            return UnsafeRawBufferPointer(rebasing: block[lower..<upper])
        }, into: { offset in base + (chunks.lowerBound + offset) * 32 })
    }

    /// Reads until `buffer` is full or the source ends.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer, _ read: Reader) throws -> Int {
        var filled = 0
        while filled < buffer.count {
            let got = try read(UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
            if got == 0 { break }
            filled += got
        }
        return filled
    }
}

/// How the two lanes share each block's chunks (this thread's part of ``ContentHasher/run``).
private struct PipelineState {
    /// How many chunks of each block the whole-file lane hashes, from the block's end.
    var handOver = 0
    /// The reading lane's time on the last block: its chunks, and reading the next one.
    var readingElapsed: UInt64 = 0

    /// Moves one chunk toward the lane that took less time on a block, when the other took
    /// over 1% longer. Each lane may run a block ahead of the other, so a block a chunk more
    /// on one side and the next a chunk more on the other cost neither a wait.
    mutating func balance(whole: UInt64, reading: UInt64, chunkCount: Int) {
        if reading > whole + whole / 100, handOver < chunkCount / 2 {
            handOver += 1
        } else if whole > reading + reading / 100, handOver > 0 {
            handOver -= 1
        }
    }
}

/// The whole-file lane of one source's hashing (``ContentHasher/run``): a thread of its own,
/// from the first block hashed on two lanes to the end, that hashes each block into the
/// whole-file hash, writes it, then hashes the block's last chunks the reading lane left it.
/// Blocks are handed over by their index (each of the two buffers holds every other one) and
/// collected in order.
///
/// A lane that waits for the other would lose some tens of microseconds a block (of about
/// 0.6 ms) to being woken from a sleep: so while its source is the only one hashed on two lanes
/// in the process, and there are two cores, it spins for up to ``spinNanoseconds`` first, each
/// lane then on a core of its own. Sources hashed side by side (a batch's) sleep at once: their
/// lanes share the cores.
private final class WholeLane: @unchecked Sendable {
    /// One block's part: the block, the chunks of it to hash, and where their hashes go in the
    /// source's (`hashesAt`; the lane writes them in its own buffer, copied by `collect`).
    private struct Job {
        var block: SendableRawBuffer
        var chunks: Range<Int>
        var hashesAt: Int
    }

    /// How long a lane spins before it sleeps (a block takes about 600 µs).
    static let spinNanoseconds: UInt64 = 100_000
    /// Sources hashed on two lanes in the process now.
    private static let running = Atomic<Int>(0)
    private static let cores = ProcessInfo.processInfo.activeProcessorCount

    /// A block in hand: its part (nil ends the thread), and what the lane made of it. Each
    /// is written by one thread at a time, the counters saying which.
    private struct Slot {
        var job: Job?
        var elapsed: UInt64 = 0
        /// The lane's error on this block or one before it (it skips the blocks after one).
        var error: Error?
    }

    private let whole: SHA256
    private let write: ContentHasher.Writer?
    /// The blocks in hand, by index modulo 2 (memory of their own: each thread writes its own).
    private let slots: UnsafeMutablePointer<Slot>
    /// The chunk hashes the lane made, by block index modulo 2, 32 bytes a chunk of the block.
    private let hashes: [UnsafeMutableRawPointer]
    /// Blocks handed over (this thread's count), and ended (the lane's): each moves after what
    /// it publishes is written, and its semaphore is signalled once a move.
    private let posted = Atomic<Int>(0)
    private let ended = Atomic<Int>(0)
    private let postedSignal = DispatchSemaphore(value: 0)
    private let endedSignal = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    private var handed = 0
    private var collected = 0

    init(whole: SHA256, write: ContentHasher.Writer?, chunkCapacity: Int) {
        self.whole = whole
        self.write = write
        hashes = (0..<2).map { _ in UnsafeMutableRawPointer.allocate(byteCount: max(1, chunkCapacity) * 32, alignment: 16) }
        slots = .allocate(capacity: 2)
        slots.initialize(repeating: Slot(), count: 2)
        Self.running.add(1, ordering: .relaxed)
        let thread = Thread { [self] in run() }
        thread.name = "coven-hash-whole"
        thread.start()
    }

    deinit {
        hashes.forEach { $0.deallocate() }
        slots.deinitialize(count: 2)
        slots.deallocate()
    }

    /// Hands the lane block `index` (the next): it hashes `block` whole, writes it, and hashes
    /// its chunks `chunks`, whose hashes go from byte `hashesAt` of the source's.
    func post(_ index: Int, block: UnsafeRawBufferPointer, chunks: Range<Int>, hashesAt: Int) {
        precondition(index == handed && index - collected < 2, "blocks are handed in order, two at most in hand")
        slots[index % 2] = Slot(job: Job(block: SendableRawBuffer(block), chunks: chunks, hashesAt: hashesAt))
        hand()
    }

    /// Waits until the lane ended block `index` (the oldest in hand), and copies its chunk
    /// hashes into `chunkHashes`: the block's buffer is free again.
    ///
    /// - Returns: the lane's time on the block.
    /// - Throws: the lane's error (a write's).
    func collect(_ index: Int, into chunkHashes: inout [UInt8]) throws -> UInt64 {
        precondition(index == collected && index < handed, "blocks are collected in order")
        Self.wait(until: index + 1, on: ended, or: endedSignal)
        collected += 1
        let slot = slots[index % 2]
        if let error = slot.error { throw error }
        guard let job = slot.job else { return 0 }
        let from = hashes[index % 2]
        chunkHashes.withUnsafeMutableBytes { target in
            guard let base = target.baseAddress else { return }
            (base + job.hashesAt + job.chunks.lowerBound * 32)
                .copyMemory(from: from + job.chunks.lowerBound * 32, byteCount: job.chunks.count * 32)
        }
        return slot.elapsed
    }

    /// Collects every block still in hand (``collect(_:into:)``).
    func collectAll(into chunkHashes: inout [UInt8]) throws {
        while collected < handed { _ = try collect(collected, into: &chunkHashes) }
    }

    /// Ends the thread once it ended every block in hand, and waits for it.
    func stop() {
        while collected < handed {
            Self.wait(until: collected + 1, on: ended, or: endedSignal)
            collected += 1
        }
        slots[handed % 2] = Slot()
        hand()
        exited.wait()
        Self.running.subtract(1, ordering: .relaxed)
    }

    private func hand() {
        handed += 1
        posted.store(handed, ordering: .releasing)
        postedSignal.signal()
    }

    private func run() {
        var index = 0
        var failed: Error?
        while true {
            Self.wait(until: index + 1, on: posted, or: postedSignal)
            guard let job = slots[index % 2].job else { break }
            let started = DispatchTime.now().uptimeNanoseconds
            if failed == nil {
                do {
                    whole.update(job.block.buffer)
                    try write?(job.block.buffer)
                    ContentHasher.hashChunks(of: job.block.buffer, job.chunks, into: hashes[index % 2])
                } catch {
                    failed = error
                }
            }
            slots[index % 2].error = failed
            slots[index % 2].elapsed = DispatchTime.now().uptimeNanoseconds - started
            index += 1
            ended.store(index, ordering: .releasing)
            endedSignal.signal()
        }
        exited.signal()
    }

    /// Waits until `counter` reaches `value`: spinning first while this is the only source on
    /// two lanes and there are two cores, then on `signal`, which is signalled once for each
    /// move of the counter (so each wait takes its own signal, at once if the spin saw it).
    private static func wait(until value: Int, on counter: borrowing Atomic<Int>, or signal: DispatchSemaphore) {
        if cores >= 2, running.load(ordering: .relaxed) == 1 {
            let deadline = DispatchTime.now().uptimeNanoseconds + spinNanoseconds
            var round = 0
            while counter.load(ordering: .acquiring) < value {
                round &+= 1
                if round & 63 == 0, DispatchTime.now().uptimeNanoseconds > deadline { break }
            }
        }
        signal.wait()
    }
}

/// Pointers handed to another thread, which touches bytes this one does not meanwhile.
struct SendableRawBuffer: @unchecked Sendable { let buffer: UnsafeRawBufferPointer; init(_ b: UnsafeRawBufferPointer) { buffer = b } }
struct SendableMutableRawBuffer: @unchecked Sendable { let buffer: UnsafeMutableRawBufferPointer; init(_ b: UnsafeMutableRawBufferPointer) { buffer = b } }

// MARK: - Reading files by their OS bytes

/// An open file descriptor, closed when released.
final class FileHandleFD {
    let fd: Int32
    let path: String

    /// Opens `path` (a String that may carry escaped non-UTF-8 bytes) read-only.
    ///
    /// Non-blocking, so that a FIFO where an original should be is refused as "not a regular
    /// file" instead of waiting for a writer forever (regular files ignore the flag).
    init(reading path: String) throws {
        let fd = PathText.withCString(path) { open($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT || code == ENOTDIR {
                throw CovenError(.userFileMissing, "'\(PathText.display(path))' is missing", cause: String(cString: strerror(code)), details: ["path": PathText.display(path)])
            }
            throw CovenError.posix("open", path: PathText.display(path), errno: code)
        }
        self.fd = fd
        self.path = path
    }

    init(descriptor: Int32, path: String) {
        self.fd = descriptor
        self.path = path
    }

    deinit { close(fd) }

    /// `fstat` of the open file.
    func status() throws -> stat {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw CovenError.posix("stat", path: PathText.display(path)) }
        return info
    }

    /// Reads at the current position, retrying EINTR (unless a signal asked the process to
    /// stop: `.interrupted`).
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while true {
            let got = Foundation.read(fd, buffer.baseAddress, buffer.count)
            if got >= 0 { return got }
            // A signal that asks the process to stop ends a read waiting on a pipe.
            if errno == EINTR { try Stop.process.check("reading '\(PathText.display(path))'"); continue }
            throw CovenError.posix("read", path: PathText.display(path))
        }
    }

    /// Reads at `offset`, retrying EINTR.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        while true {
            let got = pread(fd, buffer.baseAddress, buffer.count, off_t(offset))
            if got >= 0 { return got }
            if errno == EINTR { continue }
            throw CovenError.posix("read", path: PathText.display(path))
        }
    }
}

import Foundation

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
/// (1 MiB keeps the two lanes' sync points cheap, well under a percent of a block's hashing,
/// while peak memory stays small: bench/bench-stage.sh measures both.)
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
    static func run(read: @escaping Reader, write: Writer?, sizeHint: Int64? = nil, progress: ((Int64) -> Void)?) throws -> ContentDigests {
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
        var current = 0
        var count = try fill(blocks[0], read)
        let state = PipelineState()
        let lanes = Lanes(whole: whole, write: write, read: read)
        repeat {
            let block = UnsafeRawBufferPointer(rebasing: blocks[current][0..<count])
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
            if isLast && count <= Self.inlineLimit {
                // One short last block (a small file's only one): hashing it on this thread is
                // cheaper than handing it to two.
                hashChunks(block, into: &chunkHashes, at: start)
                whole.update(block)
                try write?(block)
                total += Int64(count)
                progress?(total)
                break
            }
            try hashOnTwoLanes(block, readingInto: blocks[1 - current], isLast: isLast, hashes: &chunkHashes, at: start,
                               state: state, lanes: lanes)
            total += Int64(count)
            progress?(total)
            if isLast { break }
            count = state.nextCount
            current = 1 - current
            // A source ending exactly on a block boundary: the last block read is empty.
            if count == 0 { break }
        } while true
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
            let base = first + start
            for index in 0..<chunkCount {
                let lower = index * ContentDigests.chunkSize
                let upper = min(lower + ContentDigests.chunkSize, block.count)
                SHA256.hash(UnsafeRawBufferPointer(rebasing: block[lower..<upper]), into: base + index * 32)
            }
        }
    }

    /// Hashes `block` on two lanes at once: lane 0 hashes the whole file (and writes); lane 1
    /// reads the next block into `next` (unless `isLast`; its count is `state.nextCount`) and
    /// hashes the chunks, but for the last `state.handOver` of them, which lane 0 takes so that
    /// both lanes end together (reading costs lane 1 what writing costs lane 0). Throws the
    /// first lane's error, after both ended.
    private static func hashOnTwoLanes(_ block: UnsafeRawBufferPointer, readingInto next: UnsafeMutableRawBufferPointer, isLast: Bool,
                                       hashes chunkHashes: inout [UInt8], at start: Int, state: PipelineState, lanes: Lanes) throws {
        let blockCount = block.count
        let chunkCount = max(1, (blockCount + ContentDigests.chunkSize - 1) / ContentDigests.chunkSize)
        chunkHashes.withUnsafeMutableBytes { hashes in
            guard let first = hashes.baseAddress else { return }
            let hashBase = SendablePointer(first + start)
            let blockBase = SendableRawBuffer(block)
            let nextBase = SendableMutableRawBuffer(next)
            let handOver = isLast ? 0 : min(state.handOver, chunkCount / 2)
            DispatchQueue.concurrentPerform(iterations: 2) { lane in
                let started = DispatchTime.now().uptimeNanoseconds
                do {
                    let chunks = lane == 0 ? (chunkCount - handOver)..<chunkCount : 0..<(chunkCount - handOver)
                    if lane == 0 {
                        lanes.whole.update(blockBase.buffer)
                        try lanes.write?(blockBase.buffer)
                    }
                    for index in chunks {
                        let lower = index * ContentDigests.chunkSize
                        let upper = min(lower + ContentDigests.chunkSize, blockCount)
                        SHA256.hash(UnsafeRawBufferPointer(rebasing: blockBase.buffer[lower..<upper]), into: hashBase.pointer + index * 32)
                    }
                    if lane == 1, !isLast { state.nextCount = try fill(nextBase.buffer, lanes.read) }
                } catch {
                    state.record(error)
                }
                let took = DispatchTime.now().uptimeNanoseconds - started
                if lane == 0 { state.elapsed0 = took } else { state.elapsed1 = took }
            }
        }
        if let error = state.error { throw error }
        state.balance(chunkCount: chunkCount)
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

/// State shared by the two lanes of one block (one writes, the other reads it after the join).
private final class PipelineState: @unchecked Sendable {
    var nextCount = 0
    /// How many chunks of each block lane 0 hashes, from the block's end.
    var handOver = 0
    /// Each lane's time on the last block (each lane writes only its own, before the join).
    var elapsed0: UInt64 = 0
    var elapsed1: UInt64 = 0

    /// Moves one chunk toward the lane that finished first, when the other took over 5% longer.
    func balance(chunkCount: Int) {
        let (first, second) = (elapsed0, elapsed1)
        if second > first + first / 20, handOver < chunkCount / 2 {
            handOver += 1
        } else if first > second + second / 20, handOver > 0 {
            handOver -= 1
        }
    }
    private let lock = NSLock()
    private(set) var error: Error?

    func record(_ error: Error) {
        lock.lock()
        defer { lock.unlock() }
        if self.error == nil { self.error = error }
    }
}

/// What the two lanes use, each its own part: the whole-file hash and the writer on lane 0,
/// the reader on lane 1.
private final class Lanes: @unchecked Sendable {
    let whole: SHA256
    let write: ContentHasher.Writer?
    let read: ContentHasher.Reader

    init(whole: SHA256, write: ContentHasher.Writer?, read: @escaping ContentHasher.Reader) {
        self.whole = whole
        self.write = write
        self.read = read
    }
}

/// Pointers handed to the two lanes of `concurrentPerform`, which touch disjoint bytes.
struct SendablePointer: @unchecked Sendable { let pointer: UnsafeMutableRawPointer; init(_ p: UnsafeMutableRawPointer) { pointer = p } }
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

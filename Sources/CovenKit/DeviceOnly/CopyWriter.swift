import CLinux
import Foundation

/// Writes one copy's bytes into a new file, straight from its own memory to the disk where the
/// file system allows (O_DIRECT), and syncs it.
///
/// A copy is synced before anything names it, so a page cache copy of its bytes buys nothing:
/// writing around the cache spares the copy into it, the writeback of it and the cost of
/// finding pages for it, which on two cores is CPU the downloads and their hashes need
/// (bench/bench-device-only.sh). Bytes gather in one aligned block written whole; the last
/// block's tail, which need not be a whole sector, is written through the page cache. A file
/// system refusing O_DIRECT (at the open, or at a write) gets every byte through the page
/// cache instead, with its writeback started every MiB so the final fsync has little left.
///
/// The block is the caller's (``CopyBlock``, one per download thread, so its pages are touched
/// once, not once a file), and the caller may put bytes straight into it (``room``) instead of
/// handing them over to copy. Not `Sendable`: one owner.
final class CopyWriter {
    static let blockSize = CopyBlock.size
    /// The alignment of the block's memory and of every direct write's offset and length
    /// (any logical sector size up to 4 KiB).
    static let alignment = CopyBlock.alignment

    let path: String
    private var fd: Int32
    private(set) var direct: Bool
    /// Keeps `block` alive.
    private let owner: CopyBlock
    private let block: UnsafeMutableRawPointer
    private var filled = 0
    /// Bytes handed to the kernel so far.
    private var flushed: Int64 = 0
    /// Through the page cache: where writeback was last started.
    private var writebackStart: Int64 = 0

    /// Creates `path`, which must not exist, to be written through `block` (used by nothing
    /// else until this writer is done); `direct: false` writes through the page cache.
    init(creating path: String, block: CopyBlock, direct: Bool = true) throws {
        self.path = path
        let flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC
        var descriptor = PathText.withCString(path) { open($0, flags | (direct ? coven_o_direct() : 0), 0o666) }
        var direct = direct
        if descriptor < 0 && direct && errno == EINVAL {
            // A file system without O_DIRECT refuses the flag at the open, before creating.
            descriptor = PathText.withCString(path) { open($0, flags, 0o666) }
            direct = false
        }
        guard descriptor >= 0 else { throw CovenError.posix("create", path: PathText.display(path)) }
        fd = descriptor
        self.direct = direct
        owner = block
        self.block = block.pointer
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Where the next bytes go, when at least 64 KiB of the block is free: bytes put there are
    /// taken by an ``append(_:)`` of exactly that place, without a copy.
    var room: UnsafeMutableRawPointer? {
        Self.blockSize - filled >= ContentDigests.chunkSize ? block + filled : nil
    }

    /// The bytes taken so far, written or not yet.
    var count: Int64 { flushed + Int64(filled) }

    /// Takes the next bytes of the file.
    func append(_ bytes: UnsafeRawBufferPointer) throws {
        guard var source = bytes.baseAddress else { return }
        if UnsafeRawPointer(block + filled) == source, bytes.count <= Self.blockSize - filled {
            // Put in place through `room`.
            filled += bytes.count
            if filled == Self.blockSize { try flush(Self.blockSize) }
            return
        }
        var remaining = bytes.count
        while remaining > 0 {
            let take = min(Self.blockSize - filled, remaining)
            (block + filled).copyMemory(from: source, byteCount: take)
            filled += take
            source += take
            remaining -= take
            if filled == Self.blockSize { try flush(Self.blockSize) }
        }
    }

    /// Writes what is left, syncs the file (unless `sync` is false: the caller syncs a batch of
    /// files at once before anything names them) and closes it.
    func finish(sync: Bool = true) throws {
        // Whole sectors still go direct; the tail through the page cache.
        let aligned = direct ? filled & ~(Self.alignment - 1) : 0
        if aligned > 0 { try flush(aligned) }
        if filled > 0 {
            try leaveDirect()
            try flush(filled)
        }
        if sync { guard fsync(fd) == 0 else { throw CovenError.posix("sync", path: PathText.display(path)) } }
        let descriptor = fd
        fd = -1
        guard close(descriptor) == 0 else { throw CovenError.posix("close", path: PathText.display(path)) }
    }

    /// Writes the block's first `count` bytes and moves the rest to its start.
    private func flush(_ count: Int) throws {
        var offset = 0
        while offset < count {
            let written = Foundation.write(fd, block + offset, count - offset)
            if written < 0 {
                let failure = errno
                if failure == EINTR { continue }
                if failure == EINVAL && direct {
                    // The file system took the flag but refuses these writes: go through the
                    // page cache from here on.
                    try leaveDirect()
                    continue
                }
                throw CovenError.posix("write", path: PathText.display(path), errno: failure)
            }
            offset += written
            flushed += Int64(written)
        }
        filled -= count
        if filled > 0 { block.copyMemory(from: block + count, byteCount: filled) }
        if !direct && flushed - writebackStart >= 1 << 20 {
            _ = coven_start_writeback(fd, writebackStart, flushed - writebackStart)
            writebackStart = flushed
        }
    }

    /// Writes through the page cache from here on.
    private func leaveDirect() throws {
        guard direct else { return }
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags & ~coven_o_direct()) == 0 else {
            throw CovenError.posix("write", path: PathText.display(path))
        }
        direct = false
    }
}

/// One download thread's block for its ``CopyWriter``s: 512 KiB, aligned for direct writes.
final class CopyBlock {
    static let size = 512 << 10
    static let alignment = 4096
    let pointer: UnsafeMutableRawPointer

    init() {
        pointer = .allocate(byteCount: Self.size, alignment: Self.alignment)
    }

    deinit { pointer.deallocate() }
}

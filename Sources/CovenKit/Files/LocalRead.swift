import Foundation

// MARK: - Reading local bytes, every chunk checked

/// A read of a file's local bytes (the person's original, or coven's own copy of app bytes,
/// before upload), checked the way a read of storage is: each 64 KiB chunk it serves is
/// hashed and compared with the SHA-256 recorded for it at staging before any of its bytes
/// go out, so a damaged copy never releases a wrong byte, even in a range.
///
/// Local bytes with no chunk hashes recorded (a copy make-device-only wrote, whose content
/// hash was checked) are read whole once and compared with the content hash; the chunk hashes
/// derived then are recorded (``CheckedBytes/recordDerivedChunkHashes(object:content:chunks:)``), so
/// the next read checks chunk by chunk, and nothing is served before that whole check.
struct LocalRead {
    let fd: Int32
    let size: Int64
    let chunkHashes: [UInt8]
    /// The failure for bytes that are not the recorded ones (chunk index, or nil for the
    /// whole file).
    let changed: (Int64?) -> CovenError
    let stop: Stop

    /// Chunks read, checked and served at a time: 1 MiB.
    static let runChunks: Int64 = 16

    /// Whether the recorded chunk hashes cover the file.
    var hasChunkHashes: Bool {
        Int64(chunkHashes.count) == ObjectLayout.chunkCount(plaintextSize: size) * 32
    }

    /// Reads `wanted`, checking each chunk it covers before serving any of its bytes.
    ///
    /// - Throws: ``changed`` for a chunk that differs or a short read; `.io`; `.interrupted`;
    ///   what `output` throws.
    func read(_ wanted: Range<Int64>, output: (UnsafeRawBufferPointer) throws -> Void) throws {
        precondition(hasChunkHashes, "internal error: a checked local read without chunk hashes")
        guard !wanted.isEmpty else { return }
        let chunk = ObjectLayout.chunkSize
        let first = wanted.lowerBound / chunk
        let last = (wanted.upperBound - 1) / chunk
        var buffer = [UInt8](repeating: 0, count: Int(Self.runChunks * chunk))
        var digests = [UInt8](repeating: 0, count: Int(Self.runChunks) * 32)
        var run = first
        while run <= last {
            try stop.check("the read")
            let end = min(last + 1, run + Self.runChunks)
            let start = run * chunk
            let stopAt = min(size, end * chunk)
            let count = Int(stopAt - start)
            let got = buffer.withUnsafeMutableBytes { preadAll(fd, UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), at: start) }
            // Shorter than recorded: the file shrank since it was opened.
            if got < count { throw changed((start + Int64(got)) / chunk) }
            try buffer.withUnsafeBytes { raw in
                digests.withUnsafeMutableBytes { out in
                    guard let base = out.baseAddress else { return }
                    SHA256.hashEach(Int(end - run), { offset in
                        let from = offset * Int(chunk)
                        let to = Int(min(stopAt, (run + Int64(offset) + 1) * chunk) - start)
                        return UnsafeRawBufferPointer(rebasing: raw[from..<to])
                    }, into: { base + $0 * 32 })
                }
                for index in run..<end {
                    let digest = digests[Int(index - run) * 32..<Int(index - run) * 32 + 32]
                    let recorded = chunkHashes[Int(index * 32)..<Int(index * 32 + 32)]
                    guard digest.elementsEqual(recorded) else { throw changed(index) }
                }
                let lower = Int(max(wanted.lowerBound, start) - start)
                let upper = Int(min(wanted.upperBound, stopAt) - start)
                if lower < upper { try output(UnsafeRawBufferPointer(rebasing: raw[lower..<upper])) }
            }
            run = end
        }
    }

    /// Hashes the whole file once (no byte served) and returns its chunk hashes when it
    /// matches `contentHash`.
    ///
    /// - Throws: ``changed`` (nil chunk) when it does not; `.io`; `.interrupted`.
    static func deriveChunkHashes(fd: Int32, path: String, size: Int64, contentHash: [UInt8], stop: Stop, changed: (Int64?) -> CovenError) throws -> [UInt8] {
        let file = FileHandleFD(descriptor: dup(fd), path: path)
        let digests = try ContentHasher.run(file: file, sizeHint: size, stop: stop)
        guard digests.size == size, digests.content == contentHash else { throw changed(nil) }
        return digests.chunks
    }
}

// MARK: - Proofs that bytes were checked

/// What `fstat` says of a file that shows whether it was written since: device, inode, size,
/// modification and change times (a write moves both; nothing but the kernel sets ctime).
struct FileStamp: Equatable {
    let text: String

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        text = "\(info.st_dev):\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec):\(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
    }
}

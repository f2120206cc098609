import Foundation

// MARK: - zstd through libarchive

/// zstd compression of whole buffers, for objects of a few MiB (change objects, snapshots'
/// pieces), over the streaming ``ZstdWriter`` and ``ZstdReader``.
///
/// libarchive (3.6.2 on Debian 12) provides zstd as a filter over an archive format; the "raw"
/// format writes exactly one entry's data with no framing of its own, so a raw archive through
/// the zstd filter is a plain zstd stream, byte for byte what `zstd` writes (and reads). coven
/// links no zstd library of its own; ``CompressedStream`` holds the libarchive handles.
public enum Zstd {
    /// The compression level used unless another is asked for: 3, zstd's own default.
    public static let defaultLevel = 3

    /// The zstd stream of `bytes`.
    ///
    /// - Parameters:
    ///   - bytes: the data, any size (empty included).
    ///   - level: a zstd level, 1 to 19.
    /// - Returns: one zstd frame holding `bytes`.
    /// - Throws: ``CovenError`` `.internal` when libarchive fails.
    public static func compress(_ bytes: [UInt8], level: Int = defaultLevel) throws -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count / 3 + 64)
        let writer = try ZstdWriter(level: level) { output.append(contentsOf: $0) }
        try writer.write(bytes)
        try writer.finish()
        return output
    }

    /// The data of a zstd stream, refusing more than `maximumSize` bytes of it.
    ///
    /// - Parameters:
    ///   - bytes: one or more zstd frames.
    ///   - maximumSize: the most bytes the data may have; a stream that holds more (a
    ///     decompression bomb) fails as soon as it passes the limit, having produced at most
    ///     about that much.
    /// - Returns: the data.
    /// - Throws: ``CovenError`` `.decoding` when `bytes` is not zstd, is truncated or corrupt,
    ///   or holds more than `maximumSize` bytes; `.internal` when libarchive fails otherwise.
    ///
    /// `sized`: the stream is read twice, first only to count its bytes, so the data is made at
    /// its size, not grown by doubling (which holds up to three times its size at once): for a
    /// change of several MiB, whose peak memory matters more than a few milliseconds.
    public static func decompress(_ bytes: [UInt8], maximumSize: Int, sized: Bool = false) throws -> [UInt8] {
        try bytes.withUnsafeBytes { input in
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
            defer { scratch.deallocate() }
            func read(_ piece: (UnsafeRawBufferPointer) -> Void) throws {
                var given = false
                let reader = try ZstdReader(maximumSize: maximumSize) {
                    defer { given = true }
                    return given ? nil : input
                }
                while true {
                    let count = try reader.read(into: scratch)
                    if count == 0 { break }
                    piece(UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
                }
            }
            var output: [UInt8] = []
            if sized {
                var size = 0
                try read { size += $0.count }
                output.reserveCapacity(size)
            }
            try read { output.append(contentsOf: $0) }
            return output
        }
    }
}

// MARK: - Compressing

/// Compresses a byte stream with zstd into a sink, piece by piece (libarchive: raw format, zstd
/// filter, unblocked output).
///
/// Write the data with ``write(_:)-(UnsafeRawBufferPointer)`` in pieces of any size; compressed
/// bytes reach `sink` as zstd produces them, so neither the data nor the compressed stream is
/// ever held whole. ``finish()`` ends the frame: it is the flushing close and its error matters.
///
/// Owns one libarchive write handle through ``CompressedStream/Writer``, freed with it; not
/// `Sendable`.
///
/// Related documentation: libarchive, `archive_write_set_format_raw(3)`,
/// `archive_write_add_filter_zstd(3)`, `archive_write_open2(3)`.
public final class ZstdWriter {
    private let stream: CompressedStream.Writer

    /// Starts a zstd stream whose compressed bytes go to `sink`.
    ///
    /// - Parameters:
    ///   - level: a zstd level, 1 to 19 (3 by default).
    ///   - sink: receives the compressed bytes, in order, in pieces (valid during the call). An
    ///     error it throws fails the write or finish that caused it, and is rethrown there.
    /// - Throws: ``CovenError`` `.internal` when libarchive cannot set up the stream (a level it
    ///   refuses, zstd support missing).
    public init(level: Int = Zstd.defaultLevel, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        stream = try CompressedStream.Writer(layout: .raw, level: level, sink: sink)
    }

    /// Compresses the next bytes of the data.
    ///
    /// - Parameter bytes: the next bytes, any count including 0.
    /// - Throws: the error the sink threw; ``CovenError`` `.internal` when libarchive fails or
    ///   the writer was finished; after a failure, the same error again.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if let failure = stream.failure { throw failure }
        guard !stream.closed else { throw CovenError(.internal, "bytes written to a finished zstd stream") }
        try stream.write(bytes)
    }

    /// Compresses the next bytes of the data; see the `UnsafeRawBufferPointer` overload.
    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Ends the stream: the last compressed bytes and the frame's end go to the sink.
    ///
    /// Calling it again after success does nothing.
    ///
    /// - Throws: the error the sink threw; ``CovenError`` `.internal` when libarchive fails.
    public func finish() throws {
        if let failure = stream.failure { throw failure }
        guard !stream.closed else { return }
        try stream.close()
    }
}

@available(*, unavailable, message: "a ZstdWriter owns a libarchive handle: use it from one task")
extension ZstdWriter: Sendable {}

// MARK: - Decompressing

/// Decompresses a zstd stream read from a source, up to a maximum size (libarchive: raw format,
/// zstd filter).
///
/// `source` is asked for compressed bytes as the reader needs them; ``read(into:)`` fills the
/// caller's buffer with data. Input that is not zstd, is truncated or corrupt, or holds more
/// than `maximumSize` bytes of data fails with `.decoding`.
///
/// Owns one libarchive read handle through ``CompressedStream/Reader``, freed with it; not
/// `Sendable`.
///
/// Related documentation: libarchive, `archive_read_support_format_raw(3)`,
/// `archive_read_support_filter_zstd(3)`, `archive_read_open(3)`.
public final class ZstdReader {
    private let stream: CompressedStream.Reader
    private let maximumSize: Int
    private var produced = 0
    private var ended: Bool

    /// Starts reading the zstd stream `source` gives.
    ///
    /// - Parameters:
    ///   - maximumSize: the most bytes of data the stream may hold.
    ///   - source: gives the next compressed bytes, or nil (or an empty buffer) at the end; what
    ///     it returns must stay valid until it is called again or the reader is gone. An error it
    ///     throws is rethrown by the call that needed the bytes.
    /// - Throws: ``CovenError`` `.decoding` when the input is empty or not a zstd stream; the
    ///   error `source` threw; `.internal` when libarchive fails otherwise.
    public init(maximumSize: Int, source: @escaping () throws -> UnsafeRawBufferPointer?) throws {
        self.maximumSize = maximumSize
        stream = try CompressedStream.Reader(layout: .raw, source: source)
        ended = stream.holdsNoData
    }

    /// Reads the next data into `buffer`.
    ///
    /// - Parameter buffer: room for data, at least 1 byte.
    /// - Returns: the bytes written, 0 only at the end of the stream.
    /// - Throws: ``CovenError`` `.decoding` when the stream is truncated or corrupt or holds more
    ///   than the maximum size; the error the source threw; after a failure, the same error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if let failure = stream.failure { throw failure }
        guard !ended, let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        // Ask for at most one byte past the limit: enough to tell the stream is too large.
        let room = min(buffer.count, maximumSize - produced + 1)
        let count: Int
        do {
            count = try stream.read(into: base, count: room)
            produced += count
            guard produced <= maximumSize else {
                throw stream.fail(
                    CovenError(
                        .decoding, "cannot read a zstd stream", cause: "it holds more than \(maximumSize) bytes",
                        details: ["reason": "too_large"]))
            }
        } catch {
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            throw error
        }
        if count == 0 { ended = true }
        return count
    }
}

@available(*, unavailable, message: "a ZstdReader owns a libarchive handle: use it from one task")
extension ZstdReader: Sendable {}

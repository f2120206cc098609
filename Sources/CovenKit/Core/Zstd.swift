import CArchive
import Foundation

// MARK: - zstd through libarchive

/// zstd compression of whole buffers, for objects of a few MiB (change objects, snapshots'
/// pieces), over the streaming ``ZstdWriter`` and ``ZstdReader``.
///
/// libarchive (3.6.2 on Debian 12) provides zstd as a filter over an archive format; the "raw"
/// format writes exactly one entry's data with no framing of its own, so a raw archive through
/// the zstd filter is a plain zstd stream, byte for byte what `zstd` writes (and reads). coven
/// links no zstd library of its own.
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
    public static func decompress(_ bytes: [UInt8], maximumSize: Int) throws -> [UInt8] {
        try bytes.withUnsafeBytes { input in
            var given = false
            let reader = try ZstdReader(maximumSize: maximumSize) {
                defer { given = true }
                return given ? nil : input
            }
            var output: [UInt8] = []
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
            defer { scratch.deallocate() }
            while true {
                let count = try reader.read(into: scratch)
                if count == 0 { break }
                output.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
            }
            return output
        }
    }

    /// The error for a failed libarchive call on `archive`.
    static func failure(_ archive: OpaquePointer, _ code: ErrorCode, _ operation: String, reason: String) -> CovenError {
        let text = archive_error_string(archive).map { String(cString: $0) } ?? "libarchive error \(archive_errno(archive))"
        return CovenError(code, "cannot \(operation)", cause: text, details: ["reason": reason])
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
/// One owner of one libarchive write handle, freed in `deinit`; not `Sendable`.
///
/// Related documentation: libarchive, `archive_write_set_format_raw(3)`,
/// `archive_write_add_filter_zstd(3)`, `archive_write_open2(3)`.
public final class ZstdWriter {
    private let archive: OpaquePointer
    private let client: Client
    private var finished = false
    private var failure: CovenError?

    private final class Client {
        let sink: (UnsafeRawBufferPointer) throws -> Void
        var error: (any Error)?
        /// Set when the writer goes away unfinished: what freeing the handle flushes is dropped.
        var discarding = false
        init(_ sink: @escaping (UnsafeRawBufferPointer) throws -> Void) { self.sink = sink }
    }

    /// Starts a zstd stream whose compressed bytes go to `sink`.
    ///
    /// - Parameters:
    ///   - level: a zstd level, 1 to 19 (3 by default).
    ///   - sink: receives the compressed bytes, in order, in pieces (valid during the call). An
    ///     error it throws fails the write or finish that caused it, and is rethrown there.
    /// - Throws: ``CovenError`` `.internal` when libarchive cannot set up the stream (a level it
    ///   refuses, zstd support missing).
    public init(level: Int = Zstd.defaultLevel, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let archive = archive_write_new() else { throw CovenError(.internal, "libarchive cannot allocate a writer") }
        self.archive = archive
        client = Client(sink)
        func check(_ code: Int32, _ operation: String) throws {
            guard code == ARCHIVE_OK else { throw Zstd.failure(archive, .internal, operation, reason: "setup") }
        }
        try check(archive_write_set_format_raw(archive), "set up a raw archive")
        try check(archive_write_add_filter_zstd(archive), "set up zstd compression")
        try check(archive_write_set_filter_option(archive, "zstd", "compression-level", String(level)), "set zstd level \(level)")
        // Unblocked: every piece the filter writes goes straight to the sink, unpadded.
        try check(archive_write_set_bytes_per_block(archive, 0), "set up unblocked output")
        let opened = archive_write_open2(
            archive, Unmanaged.passUnretained(client).toOpaque(), nil,
            { _, data, buffer, length in
                guard let data else { return -1 }
                let client = Unmanaged<Client>.fromOpaque(data).takeUnretainedValue()
                if client.discarding { return length }
                do {
                    try client.sink(UnsafeRawBufferPointer(start: buffer, count: length))
                    return length
                } catch {
                    client.error = error
                    return -1
                }
            }, nil, nil)
        try check(opened, "start a zstd stream")
        // The raw format holds exactly one entry, a regular file; its name is not written.
        guard let entry = archive_entry_new() else { throw CovenError(.internal, "libarchive cannot allocate an entry") }
        defer { archive_entry_free(entry) }
        archive_entry_set_filetype(entry, 0o100000)  // AE_IFREG
        archive_entry_set_pathname(entry, "data")
        try check(archive_write_header(archive, entry), "start a zstd stream")
    }

    deinit {
        // An unfinished stream is abandoned, not completed: the sink gets nothing more.
        client.discarding = true
        archive_write_free(archive)
    }

    /// Compresses the next bytes of the data.
    ///
    /// - Parameter bytes: the next bytes, any count including 0.
    /// - Throws: the error the sink threw; ``CovenError`` `.internal` when libarchive fails or
    ///   the writer was finished; after a failure, the same error again.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if let failure { throw failure }
        guard !finished else { throw CovenError(.internal, "bytes written to a finished zstd stream") }
        guard var pointer = bytes.baseAddress else { return }
        var left = bytes.count
        while left > 0 {
            let written = archive_write_data(archive, pointer, left)
            guard written > 0 else { throw fail("compress with zstd") }
            pointer += written
            left -= written
        }
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
        if let failure { throw failure }
        guard !finished else { return }
        guard archive_write_close(archive) == ARCHIVE_OK else { throw fail("finish a zstd stream") }
        finished = true
    }

    /// Records and returns the failure of the last call: the sink's error, or libarchive's.
    private func fail(_ operation: String) -> any Error {
        if let error = client.error {
            failure = error.asCovenError
            return error
        }
        let error = Zstd.failure(archive, .internal, operation, reason: "write")
        failure = error
        return error
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
/// One owner of one libarchive read handle, freed in `deinit`; not `Sendable`.
///
/// Related documentation: libarchive, `archive_read_support_format_raw(3)`,
/// `archive_read_support_filter_zstd(3)`, `archive_read_open(3)`.
public final class ZstdReader {
    private let archive: OpaquePointer
    private let client: Client
    private let maximumSize: Int
    private var produced = 0
    private var ended = false
    private var failure: (any Error)?

    private final class Client {
        let source: () throws -> UnsafeRawBufferPointer?
        var error: (any Error)?
        var gaveBytes = false
        init(_ source: @escaping () throws -> UnsafeRawBufferPointer?) { self.source = source }
    }

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
        guard let archive = archive_read_new() else { throw CovenError(.internal, "libarchive cannot allocate a reader") }
        self.archive = archive
        self.maximumSize = maximumSize
        client = Client(source)
        guard archive_read_support_filter_zstd(archive) == ARCHIVE_OK,
            archive_read_support_format_raw(archive) == ARCHIVE_OK
        else { throw Zstd.failure(archive, .internal, "set up zstd decompression", reason: "setup") }
        let opened = archive_read_open(
            archive, Unmanaged.passUnretained(client).toOpaque(), nil,
            { _, data, buffer in
                guard let data, let buffer else { return -1 }
                let client = Unmanaged<Client>.fromOpaque(data).takeUnretainedValue()
                do {
                    guard let bytes = try client.source(), let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
                    client.gaveBytes = true
                    buffer.pointee = base
                    return bytes.count
                } catch {
                    client.error = error
                    return -1
                }
            }, nil)
        if let error = client.error { throw error }
        guard opened == ARCHIVE_OK else {
            // A whole zstd stream of no data leaves the raw format nothing to recognize: the
            // zstd filter is in place and the format check alone failed. A truncated or corrupt
            // stream fails in the filter instead ("Truncated zstd input").
            if archive_filter_count(archive) == 2, archive_filter_code(archive, 0) == ARCHIVE_FILTER_ZSTD,
                archive_errno(archive) == EILSEQ
            {
                ended = true
                return
            }
            if archive_filter_count(archive) == 1, !client.gaveBytes {
                throw CovenError(.decoding, "cannot read a zstd stream", cause: "the input is empty", details: ["reason": "empty"])
            }
            throw Zstd.failure(archive, .decoding, "read a zstd stream", reason: "corrupt")
        }
        var entry: OpaquePointer?
        let header = archive_read_next_header(archive, &entry)
        if let error = client.error { throw error }
        guard header == ARCHIVE_OK else {
            throw CovenError(.decoding, "cannot read a zstd stream", cause: "the input is empty", details: ["reason": "empty"])
        }
        // The raw format accepts any bytes: only a zstd filter makes them a zstd stream.
        guard archive_filter_count(archive) == 2, archive_filter_code(archive, 0) == ARCHIVE_FILTER_ZSTD else {
            throw CovenError(.decoding, "cannot read a zstd stream", cause: "the input is not zstd", details: ["reason": "not_zstd"])
        }
    }

    deinit { archive_read_free(archive) }

    /// Reads the next data into `buffer`.
    ///
    /// - Parameter buffer: room for data, at least 1 byte.
    /// - Returns: the bytes written, 0 only at the end of the stream.
    /// - Throws: ``CovenError`` `.decoding` when the stream is truncated or corrupt or holds more
    ///   than the maximum size; the error the source threw; after a failure, the same error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if let failure { throw failure }
        guard !ended, let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        // Ask for at most one byte past the limit: enough to tell the stream is too large.
        let room = min(buffer.count, maximumSize - produced + 1)
        let count = archive_read_data(archive, base, room)
        do {
            if let error = client.error { throw error }
            guard count >= 0 else { throw Zstd.failure(archive, .decoding, "read a zstd stream", reason: "corrupt") }
            produced += count
            guard produced <= maximumSize else {
                throw CovenError(
                    .decoding, "cannot read a zstd stream", cause: "it holds more than \(maximumSize) bytes",
                    details: ["reason": "too_large"])
            }
        } catch {
            failure = error
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            throw error
        }
        if count == 0 { ended = true }
        return count
    }
}

@available(*, unavailable, message: "a ZstdReader owns a libarchive handle: use it from one task")
extension ZstdReader: Sendable {}

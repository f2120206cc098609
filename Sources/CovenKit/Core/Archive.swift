import Foundation

// MARK: - tar + zstd through libarchive

/// Writes a tar archive compressed with zstd into a sink, entry by entry (libarchive: pax
/// restricted format, zstd filter, unblocked output), as a snapshot packs its pieces.
///
/// Start an entry with ``beginEntry(name:size:)``, write exactly `size` bytes of it with
/// ``write(_:)``, and end the archive with ``finish()``, the flushing close whose error matters.
/// Compressed bytes reach `sink` as zstd produces them: neither an entry nor the archive is ever
/// held whole. Entries carry a fixed mode (0600) and time (0), so the archive depends only on
/// the names and the bytes.
///
/// Owns one libarchive write handle through ``CompressedStream/Writer``, freed with it; not
/// `Sendable`.
///
/// Related documentation: libarchive, `archive_write_set_format_pax_restricted(3)`,
/// `archive_write_add_filter_zstd(3)`, `archive_write_open2(3)`.
public final class ArchiveWriter {
    private let stream: CompressedStream.Writer
    /// Bytes still owed to the current entry.
    private var owed: Int64 = 0

    /// Starts an archive whose compressed bytes go to `sink`.
    ///
    /// - Parameters:
    ///   - level: a zstd level, 1 to 19.
    ///   - sink: receives the compressed bytes, in order, in pieces valid during the call; an
    ///     error it throws fails the call that caused it, and is rethrown there.
    /// - Throws: ``CovenError`` `.internal` when libarchive cannot set up the archive.
    public init(level: Int = Zstd.defaultLevel, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        stream = try CompressedStream.Writer(layout: .tar, level: level, sink: sink)
    }

    /// Starts the next entry, a regular file of `size` bytes named `name`.
    ///
    /// - Throws: ``CovenError`` `.internal` when the previous entry is short, the archive is
    ///   finished, or libarchive fails; the sink's error.
    public func beginEntry(name: String, size: Int64) throws {
        if let failure = stream.failure { throw failure }
        guard !stream.closed, owed == 0 else {
            throw CovenError(.internal, "a tar entry was started before the previous one was complete")
        }
        try stream.writeHeader(name: name, size: size)
        owed = size
    }

    /// Writes the next bytes of the current entry.
    ///
    /// - Throws: ``CovenError`` `.internal` for more bytes than the entry's size, or when
    ///   libarchive fails; the sink's error; after a failure, the same error again.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if let failure = stream.failure { throw failure }
        guard Int64(bytes.count) <= owed else { throw CovenError(.internal, "more bytes written than a tar entry holds") }
        try stream.write(bytes)
        owed -= Int64(bytes.count)
    }

    /// Writes the next bytes of the current entry; see the `UnsafeRawBufferPointer` overload.
    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Ends the archive: the last compressed bytes and the end of the zstd frame go to the sink.
    ///
    /// - Throws: ``CovenError`` `.internal` when the last entry is short or libarchive fails;
    ///   the sink's error.
    public func finish() throws {
        if let failure = stream.failure { throw failure }
        guard !stream.closed else { return }
        guard owed == 0 else { throw CovenError(.internal, "a tar archive was finished inside an entry") }
        try stream.close()
    }
}

@available(*, unavailable, message: "an ArchiveWriter owns a libarchive handle: use it from one task")
extension ArchiveWriter: Sendable {}

/// Reads a tar archive compressed with zstd from a source, entry by entry (libarchive: tar
/// format, zstd filter only).
///
/// `source` is asked for compressed bytes as the reader needs them. Input that is not zstd, not
/// tar, or is truncated or corrupt fails with `.decoding`.
///
/// Owns one libarchive read handle through ``CompressedStream/Reader``, freed with it; not
/// `Sendable`.
public final class ArchiveReader {
    private let stream: CompressedStream.Reader

    /// One entry of the archive.
    public struct Entry: Sendable, Equatable {
        /// The entry's path in the archive.
        public var name: String
        /// Its size in bytes.
        public var size: Int64
    }

    /// Starts reading the archive `source` gives.
    ///
    /// - Parameter source: gives the next compressed bytes, or nil at the end; what it returns
    ///   must stay valid until it is called again. An error it throws is rethrown by the call
    ///   that needed the bytes.
    /// - Throws: ``CovenError`` `.decoding` when the input is not zstd; the source's error;
    ///   `.internal` when libarchive fails otherwise.
    public init(source: @escaping () throws -> UnsafeRawBufferPointer?) throws {
        stream = try CompressedStream.Reader(layout: .tar, source: source)
    }

    /// The next entry's header, or nil at the end of the archive.
    ///
    /// - Throws: ``CovenError`` `.decoding` when the archive is not tar + zstd, is truncated or
    ///   corrupt; the source's error.
    public func nextEntry() throws -> Entry? {
        if let failure = stream.failure { throw failure }
        return try stream.nextEntry().map { Entry(name: $0.name, size: $0.size) }
    }

    /// Reads the next bytes of the current entry into `buffer`.
    ///
    /// - Returns: the bytes written, 0 only at the end of the entry.
    /// - Throws: ``CovenError`` `.decoding` when the archive is truncated or corrupt; the
    ///   source's error; after a failure, the same error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if let failure = stream.failure { throw failure }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        return try stream.read(into: base, count: buffer.count)
    }

    /// The rest of the current entry, refusing more than `maximumSize` bytes.
    ///
    /// - Throws: ``CovenError`` `.decoding` when the entry holds more; as ``read(into:)``.
    public func readAll(maximumSize: Int) throws -> [UInt8] {
        var output: [UInt8] = []
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { scratch.deallocate() }
        while true {
            let count = try read(into: scratch)
            if count == 0 { return output }
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
            guard output.count <= maximumSize else {
                throw CovenError(.decoding, "a tar entry holds more than \(maximumSize) bytes", details: ["reason": "too_large"])
            }
        }
    }
}

@available(*, unavailable, message: "an ArchiveReader owns a libarchive handle: use it from one task")
extension ArchiveReader: Sendable {}

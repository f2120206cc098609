import CArchive
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
/// The one owner of a libarchive write handle for archives, freed in `deinit`; not `Sendable`.
///
/// Related documentation: libarchive, `archive_write_set_format_pax_restricted(3)`,
/// `archive_write_add_filter_zstd(3)`, `archive_write_open2(3)`.
public final class ArchiveWriter {
    private let archive: OpaquePointer
    private let client: Client
    private var finished = false
    private var failure: CovenError?
    /// Bytes still owed to the current entry.
    private var owed: Int64 = 0

    private final class Client {
        let sink: (UnsafeRawBufferPointer) throws -> Void
        var error: (any Error)?
        var discarding = false
        init(_ sink: @escaping (UnsafeRawBufferPointer) throws -> Void) { self.sink = sink }
    }

    /// Starts an archive whose compressed bytes go to `sink`.
    ///
    /// - Parameters:
    ///   - level: a zstd level, 1 to 19.
    ///   - sink: receives the compressed bytes, in order, in pieces valid during the call; an
    ///     error it throws fails the call that caused it, and is rethrown there.
    /// - Throws: ``CovenError`` `.internal` when libarchive cannot set up the archive.
    public init(level: Int = Zstd.defaultLevel, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let archive = archive_write_new() else { throw CovenError(.internal, "libarchive cannot allocate a writer") }
        self.archive = archive
        client = Client(sink)
        func check(_ code: Int32, _ operation: String) throws {
            guard code == ARCHIVE_OK else { throw Zstd.failure(archive, .internal, operation, reason: "setup") }
        }
        try check(archive_write_set_format_pax_restricted(archive), "set up a tar archive")
        try check(archive_write_add_filter_zstd(archive), "set up zstd compression")
        try check(archive_write_set_filter_option(archive, "zstd", "compression-level", String(level)), "set zstd level \(level)")
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
        try check(opened, "start a tar archive")
    }

    deinit {
        // An unfinished archive is abandoned: the sink gets nothing more.
        client.discarding = true
        archive_write_free(archive)
    }

    /// Starts the next entry, a regular file of `size` bytes named `name`.
    ///
    /// - Throws: ``CovenError`` `.internal` when the previous entry is short, the archive is
    ///   finished, or libarchive fails; the sink's error.
    public func beginEntry(name: String, size: Int64) throws {
        if let failure { throw failure }
        guard !finished, owed == 0 else {
            throw CovenError(.internal, "a tar entry was started before the previous one was complete")
        }
        guard let entry = archive_entry_new() else { throw CovenError(.internal, "libarchive cannot allocate an entry") }
        defer { archive_entry_free(entry) }
        archive_entry_set_pathname(entry, name)
        archive_entry_set_filetype(entry, 0o100000)  // AE_IFREG
        archive_entry_set_perm(entry, 0o600)
        archive_entry_set_size(entry, size)
        archive_entry_set_mtime(entry, 0, 0)
        guard archive_write_header(archive, entry) == ARCHIVE_OK else { throw fail("write the tar header of '\(name)'") }
        owed = size
    }

    /// Writes the next bytes of the current entry.
    ///
    /// - Throws: ``CovenError`` `.internal` for more bytes than the entry's size, or when
    ///   libarchive fails; the sink's error; after a failure, the same error again.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if let failure { throw failure }
        guard Int64(bytes.count) <= owed else { throw CovenError(.internal, "more bytes written than a tar entry holds") }
        guard var pointer = bytes.baseAddress else { return }
        var left = bytes.count
        while left > 0 {
            let written = archive_write_data(archive, pointer, left)
            guard written > 0 else { throw fail("write a tar entry") }
            pointer += written
            left -= written
        }
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
        if let failure { throw failure }
        guard !finished else { return }
        guard owed == 0 else { throw CovenError(.internal, "a tar archive was finished inside an entry") }
        guard archive_write_close(archive) == ARCHIVE_OK else { throw fail("finish a tar archive") }
        finished = true
    }

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

@available(*, unavailable, message: "an ArchiveWriter owns a libarchive handle: use it from one task")
extension ArchiveWriter: Sendable {}

/// Reads a tar archive compressed with zstd from a source, entry by entry (libarchive: tar
/// format, zstd filter only).
///
/// `source` is asked for compressed bytes as the reader needs them. Input that is not zstd, not
/// tar, or is truncated or corrupt fails with `.decoding`.
///
/// The one owner of a libarchive read handle for archives, freed in `deinit`; not `Sendable`.
public final class ArchiveReader {
    private let archive: OpaquePointer
    private let client: Client
    private var failure: (any Error)?

    private final class Client {
        let source: () throws -> UnsafeRawBufferPointer?
        var error: (any Error)?
        init(_ source: @escaping () throws -> UnsafeRawBufferPointer?) { self.source = source }
    }

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
        guard let archive = archive_read_new() else { throw CovenError(.internal, "libarchive cannot allocate a reader") }
        self.archive = archive
        client = Client(source)
        guard archive_read_support_filter_zstd(archive) == ARCHIVE_OK,
            archive_read_support_format_tar(archive) == ARCHIVE_OK
        else { throw Zstd.failure(archive, .internal, "set up tar and zstd", reason: "setup") }
        let opened = archive_read_open(
            archive, Unmanaged.passUnretained(client).toOpaque(), nil,
            { _, data, buffer in
                guard let data, let buffer else { return -1 }
                let client = Unmanaged<Client>.fromOpaque(data).takeUnretainedValue()
                do {
                    guard let bytes = try client.source(), let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
                    buffer.pointee = base
                    return bytes.count
                } catch {
                    client.error = error
                    return -1
                }
            }, nil)
        if let error = client.error { throw error }
        guard opened == ARCHIVE_OK else { throw Zstd.failure(archive, .decoding, "read a tar archive", reason: "corrupt") }
        // Only a zstd filter makes these bytes an archive coven wrote (the filters are known
        // once the archive is open).
        guard archive_filter_count(archive) == 2, archive_filter_code(archive, 0) == ARCHIVE_FILTER_ZSTD else {
            throw CovenError(.decoding, "cannot read a tar archive", cause: "it is not compressed with zstd", details: ["reason": "not_zstd"])
        }
    }

    deinit { archive_read_free(archive) }

    /// The next entry's header, or nil at the end of the archive.
    ///
    /// - Throws: ``CovenError`` `.decoding` when the archive is not tar + zstd, is truncated or
    ///   corrupt; the source's error.
    public func nextEntry() throws -> Entry? {
        if let failure { throw failure }
        var entry: OpaquePointer?
        let code = archive_read_next_header(archive, &entry)
        do {
            if let error = client.error { throw error }
            if code == ARCHIVE_EOF { return nil }
            guard code == ARCHIVE_OK || code == ARCHIVE_WARN, let entry else {
                throw Zstd.failure(archive, .decoding, "read a tar archive", reason: "corrupt")
            }
            let name = archive_entry_pathname(entry).map { String(cString: $0) } ?? ""
            return Entry(name: name, size: archive_entry_size(entry))
        } catch {
            failure = error
            throw error
        }
    }

    /// Reads the next bytes of the current entry into `buffer`.
    ///
    /// - Returns: the bytes written, 0 only at the end of the entry.
    /// - Throws: ``CovenError`` `.decoding` when the archive is truncated or corrupt; the
    ///   source's error; after a failure, the same error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if let failure { throw failure }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let count = archive_read_data(archive, base, buffer.count)
        do {
            if let error = client.error { throw error }
            guard count >= 0 else { throw Zstd.failure(archive, .decoding, "read a tar archive", reason: "corrupt") }
        } catch {
            failure = error
            throw error
        }
        return count
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

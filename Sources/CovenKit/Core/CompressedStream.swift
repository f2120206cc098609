import CArchive
import Foundation

// MARK: - zstd streams through libarchive

/// A zstd stream through libarchive, as coven writes and reads it: the one owner of libarchive
/// handles, shared by the tar + zstd archives of snapshots (``ArchiveWriter``,
/// ``ArchiveReader``) and the plain zstd streams of change objects (``ZstdWriter``,
/// ``ZstdReader``).
///
/// libarchive (3.6.2 on Debian 12) provides zstd only as a filter over an archive format, so both
/// kinds are the same handle with a different format under the filter (``Layout``): pax tar for
/// archives, "raw" (exactly one entry's data, no framing of its own) for plain streams. The
/// ``Writer`` and ``Reader`` here hold the handle, the callbacks that move bytes between it and
/// the caller's sink or source, and the mapping of libarchive's failures to ``CovenError``; the
/// public types keep only what their layout adds (entries and their sizes, a size limit).
///
/// Related documentation: libarchive, `archive_write_open2(3)`, `archive_read_open(3)`,
/// `archive_write_add_filter_zstd(3)`, `archive_read_support_filter_zstd(3)`.
enum CompressedStream {
    /// What the zstd stream holds.
    enum Layout {
        /// A tar archive of entries (pax restricted when written): snapshots.
        case tar
        /// The bytes of one entry and nothing else, so the stream is byte for byte what `zstd`
        /// writes and reads: change objects.
        case raw

        /// The stream as its errors name it.
        var name: String { self == .tar ? "a tar archive" : "a zstd stream" }
    }

    /// The error for a failed libarchive call on `archive`: `operation` failed, with
    /// libarchive's message (or its errno) as the cause and `reason` in the details.
    static func failure(_ archive: OpaquePointer, _ code: ErrorCode, _ operation: String, reason: String) -> CovenError {
        let text = archive_error_string(archive).map { String(cString: $0) } ?? "libarchive error \(archive_errno(archive))"
        return CovenError(code, "cannot \(operation)", cause: text, details: ["reason": reason])
    }

    // MARK: - Writing

    /// A libarchive write handle whose zstd output goes to a sink as it is produced (zstd
    /// filter, unblocked output).
    ///
    /// A failed call's error is kept in ``failure``, which callers check first and throw again:
    /// a stream that failed is not written to again. Freeing an unclosed handle abandons the
    /// stream: what libarchive flushes then is dropped, not given to the sink. Freed in
    /// `deinit`; not `Sendable`.
    final class Writer {
        private let archive: OpaquePointer
        private let client: Client
        private let layout: Layout
        /// The first failure of a write, header or close, as ``CovenError``.
        private(set) var failure: CovenError?
        /// Set once ``close()`` succeeded.
        private(set) var closed = false

        /// The sink and what the write callback reports back, reached through the callback's
        /// context pointer.
        private final class Client {
            let sink: (UnsafeRawBufferPointer) throws -> Void
            /// The error the sink threw, for the call whose bytes it refused.
            var error: (any Error)?
            /// Set when the writer goes away unclosed: what freeing the handle flushes is dropped.
            var discarding = false
            init(_ sink: @escaping (UnsafeRawBufferPointer) throws -> Void) { self.sink = sink }
        }

        /// Opens a zstd stream of `layout` whose compressed bytes go to `sink`.
        ///
        /// A raw stream's one entry is started here (its name is not written); a tar archive's
        /// entries are started with ``writeHeader(name:size:)``.
        ///
        /// - Parameters:
        ///   - layout: tar entries, or raw data.
        ///   - level: a zstd level, 1 to 19.
        ///   - sink: receives the compressed bytes, in order, in pieces valid during the call; an
        ///     error it throws fails the call that caused it, and is rethrown there.
        /// - Throws: ``CovenError`` `.internal` (reason `setup`) when libarchive cannot set up
        ///   the stream (a level it refuses, zstd support missing).
        init(layout: Layout, level: Int, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
            guard let archive = archive_write_new() else { throw CovenError(.internal, "libarchive cannot allocate a writer") }
            self.archive = archive
            self.layout = layout
            client = Client(sink)
            func check(_ code: Int32, _ operation: String) throws {
                guard code == ARCHIVE_OK else { throw CompressedStream.failure(archive, .internal, operation, reason: "setup") }
            }
            switch layout {
            case .tar: try check(archive_write_set_format_pax_restricted(archive), "set up a tar archive")
            case .raw: try check(archive_write_set_format_raw(archive), "set up a raw archive")
            }
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
            try check(opened, "start \(layout.name)")
            if layout == .raw {
                // The raw format holds exactly one entry, a regular file; its name is not written.
                guard let entry = archive_entry_new() else { throw CovenError(.internal, "libarchive cannot allocate an entry") }
                defer { archive_entry_free(entry) }
                archive_entry_set_filetype(entry, 0o100000)  // AE_IFREG
                archive_entry_set_pathname(entry, "data")
                try check(archive_write_header(archive, entry), "start a zstd stream")
            }
        }

        deinit {
            // An unclosed stream is abandoned, not completed: the sink gets nothing more.
            client.discarding = true
            archive_write_free(archive)
        }

        /// Starts the next tar entry, a regular file of `size` bytes named `name`, with a fixed
        /// mode (0600) and time (0), so the archive depends only on the names and the bytes.
        ///
        /// - Throws: the sink's error; ``CovenError`` `.internal` when libarchive fails (kept as
        ///   ``failure``) or cannot allocate the entry.
        func writeHeader(name: String, size: Int64) throws {
            precondition(layout == .tar, "internal error: a header written to a raw zstd stream")
            guard let entry = archive_entry_new() else { throw CovenError(.internal, "libarchive cannot allocate an entry") }
            defer { archive_entry_free(entry) }
            archive_entry_set_pathname(entry, name)
            archive_entry_set_filetype(entry, 0o100000)  // AE_IFREG
            archive_entry_set_perm(entry, 0o600)
            archive_entry_set_size(entry, size)
            archive_entry_set_mtime(entry, 0, 0)
            guard archive_write_header(archive, entry) == ARCHIVE_OK else { throw fail("write the tar header of '\(name)'") }
        }

        /// Writes all of `bytes` through the filter: the current tar entry's next bytes, or the
        /// raw stream's next data.
        ///
        /// - Throws: the sink's error; ``CovenError`` `.internal` when libarchive fails; either
        ///   kept as ``failure``.
        func write(_ bytes: UnsafeRawBufferPointer) throws {
            guard var pointer = bytes.baseAddress else { return }
            var left = bytes.count
            while left > 0 {
                let written = archive_write_data(archive, pointer, left)
                guard written > 0 else { throw fail(layout == .tar ? "write a tar entry" : "compress with zstd") }
                pointer += written
                left -= written
            }
        }

        /// Ends the stream, the flushing close whose error matters: the last compressed bytes
        /// and the end of the zstd frame go to the sink. Sets ``closed`` when it succeeds.
        ///
        /// - Throws: the sink's error; ``CovenError`` `.internal` when libarchive fails; either
        ///   kept as ``failure``.
        func close() throws {
            guard archive_write_close(archive) == ARCHIVE_OK else { throw fail("finish \(layout.name)") }
            closed = true
        }

        /// Records and returns the failure of the last call: the sink's error (kept as
        /// ``CovenError``, returned as thrown), or libarchive's.
        private func fail(_ operation: String) -> any Error {
            if let error = client.error {
                failure = error.asCovenError
                return error
            }
            let error = CompressedStream.failure(archive, .internal, operation, reason: "write")
            failure = error
            return error
        }
    }

    // MARK: - Reading

    /// A libarchive read handle that asks a source for zstd bytes as it needs them (zstd filter
    /// only, then the layout's format).
    ///
    /// Opening checks that the input is zstd and, for a raw stream, reads its one entry's
    /// header. A failed ``nextEntry()`` or ``read(into:count:)`` is kept: callers check
    /// ``failure`` first and throw it again; ``fail(_:)`` keeps a failure of their own. Freed in
    /// `deinit`; not `Sendable`.
    final class Reader {
        private let archive: OpaquePointer
        private let client: Client
        private let layout: Layout
        /// The first failure of a read (the source's error or libarchive's), or the one given
        /// to ``fail(_:)``.
        private(set) var failure: (any Error)?
        /// Set when a raw stream is a whole zstd frame of no data: there is nothing to read.
        private(set) var holdsNoData = false

        /// The source and what the read callback reports back, reached through the callback's
        /// context pointer.
        private final class Client {
            let source: () throws -> UnsafeRawBufferPointer?
            /// The error the source threw, for the call that needed the bytes.
            var error: (any Error)?
            /// Set once the source gave any bytes: tells empty input from input that is not zstd.
            var gaveBytes = false
            init(_ source: @escaping () throws -> UnsafeRawBufferPointer?) { self.source = source }
        }

        /// Opens the zstd stream of `layout` that `source` gives.
        ///
        /// - Parameters:
        ///   - layout: tar entries, or raw data.
        ///   - source: gives the next compressed bytes, or nil (or an empty buffer) at the end;
        ///     what it returns must stay valid until it is called again or the reader is gone. An
        ///     error it throws is rethrown by the call that needed the bytes.
        /// - Throws: ``CovenError`` `.decoding` when the input is not zstd (reason `not_zstd`),
        ///   is empty (`empty`, raw only) or is corrupt (`corrupt`); the source's error;
        ///   `.internal` when libarchive fails otherwise.
        init(layout: Layout, source: @escaping () throws -> UnsafeRawBufferPointer?) throws {
            guard let archive = archive_read_new() else { throw CovenError(.internal, "libarchive cannot allocate a reader") }
            self.archive = archive
            self.layout = layout
            client = Client(source)
            guard archive_read_support_filter_zstd(archive) == ARCHIVE_OK,
                (layout == .tar ? archive_read_support_format_tar(archive) : archive_read_support_format_raw(archive)) == ARCHIVE_OK
            else {
                let operation = layout == .tar ? "set up tar and zstd" : "set up zstd decompression"
                throw CompressedStream.failure(archive, .internal, operation, reason: "setup")
            }
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
            switch layout {
            case .tar:
                guard opened == ARCHIVE_OK else { throw corrupt() }
                // Only a zstd filter makes these bytes an archive coven wrote (the filters are
                // known once the archive is open).
                guard isZstd else {
                    throw CovenError(
                        .decoding, "cannot read a tar archive", cause: "it is not compressed with zstd", details: ["reason": "not_zstd"])
                }
            case .raw:
                guard opened == ARCHIVE_OK else {
                    // A whole zstd stream of no data leaves the raw format nothing to recognize:
                    // the zstd filter is in place and the format check alone failed. A truncated
                    // or corrupt stream fails in the filter instead ("Truncated zstd input").
                    if isZstd, archive_errno(archive) == EILSEQ {
                        holdsNoData = true
                        return
                    }
                    if archive_filter_count(archive) == 1, !client.gaveBytes { throw Self.empty() }
                    throw corrupt()
                }
                var entry: OpaquePointer?
                let header = archive_read_next_header(archive, &entry)
                if let error = client.error { throw error }
                guard header == ARCHIVE_OK else { throw Self.empty() }
                // The raw format accepts any bytes: only a zstd filter makes them a zstd stream.
                guard isZstd else {
                    throw CovenError(.decoding, "cannot read a zstd stream", cause: "the input is not zstd", details: ["reason": "not_zstd"])
                }
            }
        }

        deinit { archive_read_free(archive) }

        /// Whether the bytes went through exactly one filter, zstd, before the format.
        private var isZstd: Bool {
            archive_filter_count(archive) == 2 && archive_filter_code(archive, 0) == ARCHIVE_FILTER_ZSTD
        }

        /// The error for input that holds no zstd stream at all.
        private static func empty() -> CovenError {
            CovenError(.decoding, "cannot read a zstd stream", cause: "the input is empty", details: ["reason": "empty"])
        }

        /// The error for a stream libarchive refuses as truncated or corrupt.
        private func corrupt() -> CovenError {
            CompressedStream.failure(archive, .decoding, "read \(layout.name)", reason: "corrupt")
        }

        /// The next tar entry's name and size, or nil at the end of the archive.
        ///
        /// - Throws: ``CovenError`` `.decoding` when the archive is truncated or corrupt; the
        ///   source's error; either kept as ``failure``.
        func nextEntry() throws -> (name: String, size: Int64)? {
            precondition(layout == .tar, "internal error: entries read from a raw zstd stream")
            var entry: OpaquePointer?
            let code = archive_read_next_header(archive, &entry)
            do {
                if let error = client.error { throw error }
                if code == ARCHIVE_EOF { return nil }
                guard code == ARCHIVE_OK || code == ARCHIVE_WARN, let entry else { throw corrupt() }
                let name = archive_entry_pathname(entry).map { String(cString: $0) } ?? ""
                return (name, archive_entry_size(entry))
            } catch {
                throw fail(error)
            }
        }

        /// Reads at most `count` (at least 1) next bytes of data, of the current tar entry or of
        /// the raw stream, to `base`.
        ///
        /// - Returns: the bytes written, 0 only at the end of the entry or stream.
        /// - Throws: ``CovenError`` `.decoding` when the stream is truncated or corrupt; the
        ///   source's error; either kept as ``failure``.
        func read(into base: UnsafeMutableRawPointer, count: Int) throws -> Int {
            let read = archive_read_data(archive, base, count)
            do {
                if let error = client.error { throw error }
                guard read >= 0 else { throw corrupt() }
            } catch {
                throw fail(error)
            }
            return read
        }

        /// Keeps `error` as ``failure`` and returns it: for a failure the caller finds in what it
        /// read (a stream larger than it allows).
        func fail(_ error: any Error) -> any Error {
            failure = error
            return error
        }
    }
}

@available(*, unavailable, message: "a CompressedStream.Writer owns a libarchive handle: use it from one task")
extension CompressedStream.Writer: Sendable {}

@available(*, unavailable, message: "a CompressedStream.Reader owns a libarchive handle: use it from one task")
extension CompressedStream.Reader: Sendable {}

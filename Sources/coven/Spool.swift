import CovenKit
import Foundation

/// An unlinked file of `folder`, open for reading and writing: what a spool keeps past memory
/// (gone with the process, whatever ends it).
enum Spool {
    static func unlinkedFile(in folder: String, for purpose: String) throws -> Int32 {
        var template = Array((folder + "/coven-spool-XXXXXX").utf8CString)
        var file = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if file < 0, errno == ENOENT, mkdir(folder, 0o700) == 0 {
            file = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        }
        guard file >= 0 else { throw CovenError.posix(purpose, path: folder) }
        _ = fcntl(file, F_SETFD, FD_CLOEXEC)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        return file
    }

    /// Writes all of `bytes` to `file`.
    static func writeAll(_ bytes: UnsafeRawBufferPointer, to file: Int32, for purpose: String, folder: String) throws {
        var offset = 0
        while offset < bytes.count {
            let written = Foundation.write(file, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { throw CovenError.posix(purpose, path: folder) }
            offset += written
        }
    }

    /// A descriptor of all of `descriptor`'s input at its start: a regular file's own, or for a
    /// pipe (or a terminal) an unlinked file of `folder` it was read into to its end. A
    /// command that takes the device lock reads a pipe to its end first: the command writing
    /// into the pipe may be a coven command that takes the lock between its writes
    /// (`coven stage --json ... | coven write --each - ...`), and would wait forever.
    ///
    /// - Returns: the descriptor, and whether it is a new one (the caller closes it).
    static func drained(_ descriptor: Int32, name: String, folder: String) throws -> (descriptor: Int32, new: Bool) {
        var info = stat()
        if fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { return (descriptor, false) }
        let purpose = "keep \(name) in the device's temporary folder"
        let file = try unlinkedFile(in: folder, for: purpose)
        do {
            var block = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let got = block.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress, $0.count) }
                if got < 0, errno == EINTR { try Stop.process.check("reading \(name)"); continue }
                guard got >= 0 else { throw CovenError.posix("read", path: name) }
                if got == 0 { break }
                try block.withUnsafeBytes { try writeAll(UnsafeRawBufferPointer(rebasing: $0[..<got]), to: file, for: purpose, folder: folder) }
            }
            guard lseek(file, 0, SEEK_SET) == 0 else { throw CovenError.posix("read back", path: name) }
        } catch {
            close(file)
            throw error
        }
        return (file, true)
    }
}

/// Text a command learns an item at a time and prints once the rest of its output is known
/// (fetch-kept's `fetched` list, of 100,000 files, or its lines of failures after its
/// summary): kept in memory up to a MiB and past that in an unlinked file of `folder` (the
/// device's temporary folder), never as values.
final class OutputSpool {
    private static let inMemory = 1 << 20
    private var buffer: [UInt8] = []
    private var file: Int32 = -1
    private(set) var count = 0
    /// Past the MiB: the text is in the file.
    var spilled: Bool { file >= 0 }
    /// Written between two items.
    private let separator: String
    private let folder: String

    init(separator: String, folder: String) {
        self.separator = separator
        self.folder = folder
    }

    deinit { if file >= 0 { close(file) } }

    /// Adds an item's text.
    func append(_ text: String) throws {
        if count > 0 { buffer.append(contentsOf: separator.utf8) }
        buffer.append(contentsOf: text.utf8)
        count += 1
        if buffer.count >= Self.inMemory { try spill() }
    }

    /// Writes the items to `out`.
    func write(to out: OutputStream) throws {
        if file >= 0 {
            try spill()
            guard lseek(file, 0, SEEK_SET) == 0 else { throw CovenError.posix("read back a spooled list", path: folder) }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let read = chunk.withUnsafeMutableBytes { Foundation.read(file, $0.baseAddress, $0.count) }
                if read < 0, errno == EINTR { continue }
                guard read >= 0 else { throw CovenError.posix("read back a spooled list", path: folder) }
                if read == 0 { break }
                out.write(Array(chunk[..<read]))
            }
        } else {
            out.write(buffer)
        }
    }

    private func spill() throws {
        let purpose = "spool a long list in the device's temporary folder"
        if file < 0 { file = try Spool.unlinkedFile(in: folder, for: purpose) }
        try buffer.withUnsafeBytes { try Spool.writeAll($0, to: file, for: purpose, folder: folder) }
        buffer.removeAll(keepingCapacity: true)
    }
}

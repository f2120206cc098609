import CovenKit
import Foundation

/// Text a command learns an item at a time and prints once the rest of its output is known
/// (fetch-kept's `fetched` list, of 100,000 files, or its lines of failures after its
/// summary): kept in memory up to a MiB and past that in an unlinked file of the temporary
/// folder, never as values.
final class OutputSpool {
    private static let inMemory = 1 << 20
    private var buffer: [UInt8] = []
    private var file: Int32 = -1
    private(set) var count = 0
    /// Past the MiB: the text is in the file.
    var spilled: Bool { file >= 0 }
    /// Written between two items.
    private let separator: String

    init(separator: String) {
        self.separator = separator
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
            guard lseek(file, 0, SEEK_SET) == 0 else { throw CovenError.posix("read back a spooled list", path: Self.folder) }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let read = chunk.withUnsafeMutableBytes { Foundation.read(file, $0.baseAddress, $0.count) }
                if read < 0, errno == EINTR { continue }
                guard read >= 0 else { throw CovenError.posix("read back a spooled list", path: Self.folder) }
                if read == 0 { break }
                out.write(Array(chunk[..<read]))
            }
        } else {
            out.write(buffer)
        }
    }

    private static var folder: String { ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp" }

    private func spill() throws {
        if file < 0 {
            var template = Array((Self.folder + "/coven-list-XXXXXX").utf8CString)
            file = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            guard file >= 0 else { throw CovenError.posix("spool a long list in the temporary folder", path: Self.folder) }
            _ = fcntl(file, F_SETFD, FD_CLOEXEC)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        }
        var offset = 0
        while offset < buffer.count {
            let written = buffer[offset...].withUnsafeBytes { Foundation.write(file, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { throw CovenError.posix("spool a long list in the temporary folder", path: Self.folder) }
            offset += written
        }
        buffer.removeAll(keepingCapacity: true)
    }
}

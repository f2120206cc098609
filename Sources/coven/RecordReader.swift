import CovenKit
import Foundation

/// Reads the records of a stream, each ended by `separator` (the last may end at the end of the
/// stream), a block at a time: never the whole input. `stage --files-from` reads paths with it,
/// `write --each` JSON lines.
final class RecordReader {
    private let descriptor: Int32
    private let name: String
    private let separator: UInt8
    /// What a signal interrupts, for its message (`stage`, `write`).
    private let command: String
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEnd = false

    init(descriptor: Int32, name: String, separator: UInt8, command: String) {
        self.descriptor = descriptor
        self.name = name
        self.separator = separator
        self.command = command
    }

    /// The next record's bytes, without its separator (empty records included); nil at the end.
    func next() throws -> [UInt8]? {
        while true {
            if let end = buffer[start...].firstIndex(of: separator) {
                let bytes = Array(buffer[start..<end])
                start = end + 1
                return bytes
            }
            if atEnd {
                guard start < buffer.count else { return nil }
                let bytes = Array(buffer[start...])
                start = buffer.count
                return bytes
            }
            buffer.removeSubrange(0..<start)
            start = 0
            var block = [UInt8](repeating: 0, count: 65536)
            let got = block.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress, $0.count) }
            if got < 0 {
                if errno == EINTR { try Stop.process.check(command); continue }
                throw CovenError.posix("read", path: name)
            }
            if got == 0 { atEnd = true } else { buffer.append(contentsOf: block[0..<got]) }
        }
    }
}

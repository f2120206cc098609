import Foundation

/// Wakes a reader each time another process commits to a device database (`coven sql --watch`,
/// `coven uploads --watch`): a file watch (inotify) on the database and its write-ahead log,
/// confirmed by SQLite's `PRAGMA data_version`, which moves only when another connection
/// committed. Never a busy poll: between changes the thread sleeps in `poll(2)`, waking once
/// a second to notice a stop.
public final class DatabaseWatch {
    private let database: Database
    private let descriptor: Int32
    private let names: Set<String>
    private var version: Int64

    /// Watches the database `device` reads.
    ///
    /// - Throws: `.io` when the file watch cannot be set up.
    public init(_ device: Device) throws {
        database = device.database
        let path = device.paths.database
        let folder = (path as NSString).deletingLastPathComponent
        let base = (path as NSString).lastPathComponent
        names = [base, base + "-wal"]
        descriptor = inotify_init1(O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw CovenError.posix("watch", path: folder) }
        let mask = UInt32(IN_MODIFY) | UInt32(IN_CREATE) | UInt32(IN_MOVED_TO) | UInt32(IN_CLOSE_WRITE)
        guard inotify_add_watch(descriptor, folder.isEmpty ? "." : folder, mask) >= 0 else {
            let error = CovenError.posix("watch", path: folder)
            close(descriptor)
            throw error
        }
        version = try database.scalar("PRAGMA data_version").intValue ?? 0
    }

    deinit { close(descriptor) }

    /// Waits until another process committed to the database, or a stop is asked.
    ///
    /// - Throws: `.interrupted` once `stop` is asked; `.io`.
    public func next(stop: Stop) throws {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            try stop.check("the watch")
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, 1000)
            if ready < 0 && errno != EINTR { throw CovenError.posix("watch", path: database.path) }
            try stop.check("the watch")
            guard ready > 0 else {
                // A second without an event: a cheap look at the version all the same (a change
                // whose event was missed, a folder watched through a link).
                if try changed() { return }
                continue
            }
            var relevant = false
            while true {
                let got = buffer.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress, $0.count) }
                guard got > 0 else { break }
                var offset = 0
                while offset + MemoryLayout<inotify_event>.size <= got {
                    let length = buffer.withUnsafeBytes { Int($0.load(fromByteOffset: offset + 12, as: UInt32.self)) }
                    let nameStart = offset + MemoryLayout<inotify_event>.size
                    let nameBytes = buffer[nameStart..<min(got, nameStart + length)].prefix { $0 != 0 }
                    if names.contains(String(decoding: nameBytes, as: UTF8.self)) { relevant = true }
                    offset = nameStart + length
                }
            }
            if relevant, try changed() { return }
        }
    }

    private func changed() throws -> Bool {
        let now = try database.scalar("PRAGMA data_version").intValue ?? 0
        guard now != version else { return false }
        version = now
        return true
    }
}

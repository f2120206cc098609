import Foundation

/// Crash-safe file writes: write a temporary file, fsync it, rename it over the target, fsync
/// the folder. A reader sees the old file or the new one, never part of one.
public enum AtomicFile {
    /// Writes `bytes` to `path` atomically with `mode`.
    ///
    /// - Throws: `.noRoom` when the disk is full, `.io` otherwise.
    public static func write(_ path: String, bytes: [UInt8], mode: mode_t = 0o644) throws {
        let folder = (path as NSString).deletingLastPathComponent
        let temporary = folder + "/.tmp-" + Identifier.objectName()
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw CovenError.posix("create", path: temporary) }
        var ok = false
        defer {
            close(fd)
            if !ok { unlink(temporary) }
        }
        try writeAll(fd, bytes, path: temporary)
        guard fsync(fd) == 0 else { throw CovenError.posix("sync", path: temporary) }
        guard rename(temporary, path) == 0 else { throw CovenError.posix("rename into", path: path) }
        ok = true
        try syncFolder(folder)
    }

    /// Writes every byte, retrying short writes and EINTR.
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { try writeAll(fd, $0, path: path) }
    }

    /// Writes every byte, retrying short writes and EINTR.
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let written = Foundation.write(fd, base + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                throw CovenError.posix("write", path: path)
            }
            offset += written
        }
    }

    /// fsyncs a folder so a rename or create in it is durable.
    public static func syncFolder(_ folder: String) throws {
        let fd = open(folder.isEmpty ? "." : folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CovenError.posix("open folder", path: folder) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw CovenError.posix("sync folder", path: folder) }
    }
}

extension AtomicFile {
    static func makeFolder(_ path: String, mode: mode_t) throws {
        if mkdir(path, mode) != 0 && errno != EEXIST {
            // Create parents as needed.
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: Int(mode)])
            } catch {
                throw CovenError.posix("create folder", path: path)
            }
        }
    }
}

import Foundation

extension Device {
    /// The record of a file, or nil when this device has none.
    public func fileRecord(_ id: String) throws -> FileRecord? {
        guard let row = try database.queryOneCached("SELECT * FROM coven_files WHERE id = ?1", [id]) else { return nil }
        return try FileRecord(row: row)
    }

    /// The record of a file.
    ///
    /// - Throws: `.fileAbsent` when this device has no record of it.
    public func requireFile(_ id: String) throws -> FileRecord {
        guard let record = try fileRecord(id) else {
            throw CovenError(.fileAbsent, "no file '\(id)' on this device", details: ["file": id])
        }
        return record
    }
}

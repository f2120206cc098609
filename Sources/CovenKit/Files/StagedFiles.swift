import Foundation

/// The one writer of `coven_staged`: the files staged (app bytes copied into coven's own copy)
/// or prepared (a person's original, read where it is) that no write has put yet. Staging and
/// preparing record them (Stager), the write that puts one forgets it (WriteSession), and
/// ``Device/discardStaged(_:)`` takes one back; they call this, never its SQL.
///
/// Every method runs inside the caller's transaction; their statements stay prepared, as a
/// batch staging or a write of many files runs them once per file.
struct StagedFiles {
    let database: Database

    /// The row of staged file `id` (every column), or nil when no staged file has the id.
    func row(_ id: String) throws -> Row? {
        try database.queryOneCached("SELECT * FROM coven_staged WHERE id = ?1", [id])
    }

    /// Records a person's original prepared where it is: its path, how it looked when it was
    /// read (``OriginalIdentity``) and its hashes (the chunk hashes bound where they are: 32
    /// bytes a 64 KiB chunk, 2 MiB at 4 GiB).
    func addOriginal(id: String, namespace: String, place: Place, path: [UInt8], identity: OriginalIdentity,
                     contentHash: [UInt8], chunkHashes: [UInt8]) throws {
        try database.runCached("""
            INSERT INTO coven_staged (id, kind, namespace, place, path, size, modified_seconds, modified_nanos, change_stamp, content_hash, chunk_hashes, created_at)
            VALUES (?1, 'user', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
            """, [id, namespace, place.rawValue, path, identity.size, identity.modifiedSeconds, identity.modifiedNanos, identity.changeStamp,
                  contentHash, SQLValue.null, Timestamp.iso8601(Date())], inPlace: chunkHashes, at: 10)
    }

    /// Records staged app bytes, held in coven's copy `copy` (a path under the device folder).
    func addCopy(id: String, namespace: String, place: Place, copy: String, size: Int64, contentHash: [UInt8], chunkHashes: [UInt8]) throws {
        try database.runCached("""
            INSERT INTO coven_staged (id, kind, namespace, place, copy, size, content_hash, chunk_hashes, created_at)
            VALUES (?1, 'app', ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            """, [id, namespace, place.rawValue, copy, size, contentHash, SQLValue.null, Timestamp.iso8601(Date())], inPlace: chunkHashes, at: 7)
    }

    /// Forgets staged file `id`: a write put it, or its staging was taken back.
    func remove(_ id: String) throws {
        try database.runCached("DELETE FROM coven_staged WHERE id = ?1", [id])
    }

    /// Forgets every staged file a write put (``remove(_:)`` of each, in one statement).
    func removePut(_ puts: PutIntents) throws {
        try database.run("DELETE FROM coven_staged WHERE id IN (SELECT staged FROM \(PutIntents.table) WHERE staged IS NOT NULL)")
    }
}

extension Device {
    /// The owner of this device's staged and prepared files.
    var stagedFiles: StagedFiles { StagedFiles(database: database) }
}

import CSQLite
import Foundation

/// The files a write puts (``PutIntent``) and the file references it sets and drops, kept in
/// temporary tables of the connection rather than in memory, so that a write of 100,000 files
/// (`coven write --each`) holds no state per file: the one owner of `temp.coven_write_puts` and
/// `temp.coven_write_references`.
///
/// The tables are `TEMP` (this connection only, nothing in the device's schema), cleared when a
/// write begins (``begin()``) and after one that fails or lists its files in its result; they
/// change inside the write's transaction. After a write made with `listsFiles: false` commits
/// they still hold its puts, until the next write on the connection:
/// ``Device/forEachFilePut(_:)`` reads them.
///
/// Written from coven's SQL functions while the app's SQL runs: the write's authorizer lets
/// only statements prepared inside those functions write them (``WriteSession/Permit``).
struct PutIntents {
    let database: Database

    /// Rows read at a time.
    static let pageSize = 500

    /// The table of puts, for the owners of the tables a put changes to read in one statement
    /// (``FileRecords/insertPuts(_:stamp:)``, ``FileRecords/recordLocalBytesOfPuts(_:)``,
    /// ``UploadQueue/enqueuePuts(_:move:)``, ``StagedFiles/removePut(_:)``): its columns are
    /// `seq` (the order of the puts), `file`, `staged` (null for a new record over an existing
    /// file), `record_audience` and `record_hash` (that record's), `coordinates` (the new
    /// record's, as text), `namespace`, `kind`, `place`, `size`, `object` and `upload_bytes`
    /// (the stored size of a staged file's upload the write queues, else null).
    static let table = "temp.coven_write_puts"

    /// Makes the tables unless there, and empties them: a write begins.
    func begin() throws {
        try database.execute("""
            CREATE TEMP TABLE IF NOT EXISTS coven_write_puts (
                seq INTEGER PRIMARY KEY,
                file TEXT NOT NULL UNIQUE,
                staged TEXT UNIQUE,
                record_audience TEXT,
                record_hash TEXT,
                coordinates TEXT NOT NULL,
                namespace TEXT NOT NULL,
                kind TEXT NOT NULL,
                place TEXT NOT NULL,
                size INTEGER NOT NULL,
                object TEXT NOT NULL,
                upload_bytes INTEGER,
                audience TEXT
            );
            CREATE TEMP TABLE IF NOT EXISTS coven_write_references (
                file TEXT PRIMARY KEY,
                named INTEGER NOT NULL DEFAULT 0,
                released INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            DELETE FROM temp.coven_write_puts;
            DELETE FROM temp.coven_write_references;
            """)
    }

    /// Empties the tables (a write's files were read), keeping them for the next write.
    func clear() throws {
        try database.execute("DELETE FROM temp.coven_write_puts; DELETE FROM temp.coven_write_references")
    }

    // MARK: Puts

    /// Records a file the write puts, after those already put.
    ///
    /// - Throws: `.notFound` for a staged file the write put already.
    func add(_ intent: PutIntent) throws {
        var staged: String?
        var record: FileRecord?
        switch intent.source {
        case .staged(let id): staged = id
        case .existing(let existing): record = existing
        }
        let uploadBytes = intent.queuesUpload ? ObjectLayout.encryptedSize(plaintextSize: intent.size) : nil
        do {
            try database.runCached("""
                INSERT INTO temp.coven_write_puts (file, staged, record_audience, record_hash, coordinates, namespace, kind, place, size, object, upload_bytes)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                """, [intent.fileID, staged, record?.audience, record?.hash, intent.coordinates.json, intent.namespace,
                      intent.kind.rawValue, intent.place.rawValue, intent.size, intent.coordinates.object, uploadBytes])
        } catch let error as CovenError where error.sqliteCode == SQLITE_CONSTRAINT | (8 << 8) { // SQLITE_CONSTRAINT_UNIQUE
            guard let staged else { throw error }
            throw CovenError(.notFound, "staged file '\(staged)' is already put in this write", details: ["staged": staged])
        }
    }

    /// The first staged file the write put that no longer is, if any (none: nothing but the
    /// write forgets a staged file, and it does when it applies the puts).
    func firstStagedGone() throws -> String? {
        try database.queryOne("""
            SELECT p.staged FROM temp.coven_write_puts p
            WHERE p.staged IS NOT NULL AND NOT EXISTS (SELECT 1 FROM coven_staged s WHERE s.id = p.staged)
            ORDER BY p.seq LIMIT 1
            """)?.string("staged")
    }

    /// Whether a put of the write queues an upload (``PutIntent/queuesUpload``).
    func queuesUploads() throws -> Bool {
        try database.queryOne("SELECT 1 FROM temp.coven_write_puts WHERE upload_bytes IS NOT NULL LIMIT 1") != nil
    }

    /// Whether the write put the file `fileID`.
    func contains(file fileID: String) throws -> Bool {
        try database.queryOneCached("SELECT 1 FROM temp.coven_write_puts WHERE file = ?1", [fileID]) != nil
    }

    /// The intent that put file `fileID` in this write, if one did.
    func intent(for fileID: String) throws -> PutIntent? {
        try database.queryOneCached("SELECT * FROM temp.coven_write_puts WHERE file = ?1", [fileID]).map(Self.intent)
    }

    /// Calls `body` with each put file's id and the staged id it came from (nil for a new
    /// record over an existing file), in the order the write made them, a page at a time.
    func forEachFile(_ body: (_ file: String, _ staged: String?) throws -> Void) throws {
        var after: Int64 = 0
        while true {
            let rows = try database.query("SELECT seq, file, staged FROM temp.coven_write_puts WHERE seq > ?1 ORDER BY seq LIMIT ?2", [after, Self.pageSize])
            guard let last = rows.last else { return }
            after = last.int("seq") ?? after
            for row in rows { try body(row.string("file") ?? "", row.string("staged")) }
            if rows.count < Self.pageSize { return }
        }
    }

    /// Records that a row of `audience` names file `fileID`, if the write put it: the first such
    /// row gives it its audience.
    ///
    /// - Returns: the audience of the first row that named it (`audience` when this is it), or
    ///   nil when the write did not put the file.
    func nameAudience(_ fileID: String, _ audience: String) throws -> String? {
        try database.queryOneCached("UPDATE temp.coven_write_puts SET audience = coalesce(audience, ?2) WHERE file = ?1 RETURNING audience",
                                    [fileID, audience])?.string("audience")
    }

    private static func intent(_ row: Row) throws -> PutIntent {
        let fileID = row.string("file") ?? ""
        let source: PutIntent.Source
        if let staged = row.string("staged") {
            source = .staged(staged)
        } else {
            source = .existing(try FileRecord(row: Row(
                columns: ["id", "audience", "namespace", "size", "hash", "coordinates"],
                values: [.text(fileID), row["record_audience"], row["namespace"], row["size"], row["record_hash"], row["coordinates"]])))
        }
        return PutIntent(
            fileID: fileID, source: source, namespace: row.string("namespace") ?? "",
            kind: FileKind(rawValue: row.string("kind") ?? "") ?? .app, place: Place(rawValue: row.string("place") ?? "") ?? .cloud,
            size: row.int("size") ?? 0, coordinates: try Coordinates(json: row.string("coordinates") ?? ""))
    }

    // MARK: References

    /// A row the write left names file `fileID`.
    func named(_ fileID: String) throws {
        try database.runCached("""
            INSERT INTO temp.coven_write_references (file, named) VALUES (?1, 1) ON CONFLICT (file) DO UPDATE SET named = 1
            """, [fileID])
    }

    /// A row stopped naming file `fileID` (deleted, or its column changed).
    func released(_ fileID: String) throws {
        try database.runCached("""
            INSERT INTO temp.coven_write_references (file, released) VALUES (?1, 1) ON CONFLICT (file) DO UPDATE SET released = 1
            """, [fileID])
    }

    /// The first file the write put (in its order) that no row it left names, if any.
    func firstUnnamed() throws -> String? {
        try database.queryOne("""
            SELECT p.file FROM temp.coven_write_puts p
            WHERE NOT EXISTS (SELECT 1 FROM temp.coven_write_references r WHERE r.file = p.file AND r.named = 1)
            ORDER BY p.seq LIMIT 1
            """)?.string("file")
    }

    /// Up to `limit` files some row stopped naming and no row the write touched names now,
    /// in id order after `after`.
    func releasedNotNamed(after: String, limit: Int) throws -> [String] {
        try database.query("""
            SELECT file FROM temp.coven_write_references WHERE released = 1 AND named = 0 AND file > ?1 ORDER BY file LIMIT ?2
            """, [after, limit]).compactMap { $0.string("file") }
    }
}

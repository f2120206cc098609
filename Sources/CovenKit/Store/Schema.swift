import Foundation

/// coven's own tables and views inside the device database.
///
/// `coven_files` is the one synced table of coven's (spec/files.md "Files and references"); the
/// rest is this device's state and never leaves it. The upload queue, local bytes and cache are
/// keyed by *object* (the storage key `files/<device>/<name>`), not by file id, because several
/// file records can name one object (`coven_existing_file`), and the bytes, the upload and the
/// cache belong to the object.
enum Schema {
    /// The device schema's version, in `PRAGMA user_version`: the number of ``steps`` applied.
    static var version: Int64 { Int64(steps.count) }

    /// The numbered migrations of coven's own schema: step *n* takes a device from version
    /// *n − 1* to *n*, inside one transaction with the `user_version` update. A step, once
    /// released, never changes: a new release adds a step at the end.
    static let steps: [@Sendable (Database) throws -> Void] = [
        // 1: the schema of the first releases.
        { database in try database.execute(version1) },
        // 2: row images in the outbox instead of session changesets.
        upgradeTo2,
        // 3: sync: tombstones, what was published and applied, lost values, the devices' keys.
        { database in try database.execute(syncTables) },
        // 4: coordinates decoded once, in generated columns of coven_files.
        upgradeTo4,
        // 5: gates: the rows this device's peers hold (Sync/PublishedRows.swift).
        upgradeTo5,
        // 6: gc: the candidates for deletion, and the objects each device's last change held.
        { database in try database.execute(gcTables) },
        // 7: the tombstones of rows peers never held, which stay on this device (snapshots too).
        { database in try database.execute("ALTER TABLE coven_tombstones ADD COLUMN private INTEGER NOT NULL DEFAULT 0") },
        // 8: how many writes a frozen change holds (`status` counts them as not yet published;
        // NULL for a change frozen before).
        { database in try database.execute("ALTER TABLE coven_push ADD COLUMN writes INTEGER") },
        // 9: the images of deleted file records, which a winning row naming one brings back.
        { database in try database.execute(deletedFilesTable) },
        // 10: lost values of entries an authorizer refused (`not_authorized`, `not_owner`).
        { database in try database.execute(lostReasonsWidened) },
        // 11: fsck: when each stored object, change and snapshot was last verified (Fsck/FsckLedger.swift).
        { database in
            try database.execute("""
                CREATE TABLE coven_fsck_verified (
                    key TEXT PRIMARY KEY,
                    kind TEXT NOT NULL CHECK (kind IN ('object', 'change', 'snapshot', 'cache', 'local')),
                    verified_at REAL NOT NULL,
                    bytes INTEGER NOT NULL DEFAULT 0,
                    result TEXT NOT NULL
                ) STRICT;
                CREATE INDEX coven_fsck_verified_at ON coven_fsck_verified (kind, verified_at);
                """)
        },
        // 12: the upload queue read in claim order without a sort, and a move's uploads found
        // without a scan (a library of 100,000 files: Upload/).
        { database in try database.execute(uploadQueueIndexes) },
        // 13: members: the member each device belongs to, as its entry says, and the rosters
        // of the store audience's key generations this device learned (Keys/Keyring.swift).
        { database in try database.execute(membersTables) },
        // 14: a row's lost values found without a scan: a pull that brings back many rows taken
        // out (their parent or file record in a later change) marks each restored (Sync/).
        { database in try database.execute("CREATE INDEX coven_lost_values_row ON coven_lost_values (tbl, row_id)") },
        // 15: circles: each circle's chain as this device last read it (Members/Circles.swift),
        // and the circles' sections of every change published or applied here (Sync/CircleSections.swift).
        { database in try database.execute(circlesTables) },
        // 16: the audience of each tombstone (the row's when it was deleted): a circle's delete
        // goes in its section, and a snapshot's part of each audience holds its own; and the
        // audience peers hold each published row in, where a gate's retract of it goes.
        { database in
            try database.execute("""
                ALTER TABLE coven_tombstones ADD COLUMN audience TEXT NOT NULL DEFAULT 'store';
                ALTER TABLE coven_published ADD COLUMN audience TEXT;
                """)
        },
        // 17: the retracts a device publishes for a move that crossed a write in the audience
        // the row left (Sync/CrossedMoves.swift), which go whatever the gate says.
        { database in try database.execute("ALTER TABLE coven_audience_moves ADD COLUMN crossed INTEGER NOT NULL DEFAULT 0") },
        // 18: the audience each row of this device's was in when its gate kept it back, never
        // published (Sync/PublishedRows.swift): a pull that makes it kept sends it there only.
        { database in
            try database.execute("""
                CREATE TABLE coven_private_rows (tbl TEXT NOT NULL, id TEXT NOT NULL, audience TEXT NOT NULL, PRIMARY KEY (tbl, id)) STRICT, WITHOUT ROWID
                """)
        },
        // 19: whether a tombstone is a retract's (the row lives on where this device does not read it: SyncState).
        { database in try database.execute("ALTER TABLE coven_tombstones ADD COLUMN retracted INTEGER NOT NULL DEFAULT 0") },
        // 20: the notes a frozen change goes with: where this device holds the bytes of the
        // files it places on itself, sealed for it alone (Sync/OwnNotes.swift).
        { database in try database.execute("ALTER TABLE coven_push ADD COLUMN notes BLOB") },
        // 21: the trash: the last image of every row deleted on any device, who deleted it in
        // which change, and the files it named, kept for the store's retention window (Trash/Trash.swift);
        // and the store's settings, an admin's, published as rows (Sync/StoreSettings.swift).
        // The trash is written once per row a pull deletes, so it holds one b-tree: its rows by
        // (table, id), without a rowid, and no index but the partial one of the rows deleted
        // with a parent. A listing sorts what it reads; `--change` and the window scan.
        { database in try database.execute("""
                CREATE TABLE coven_trash (
                    tbl        TEXT NOT NULL,
                    id         TEXT NOT NULL,
                    image      BLOB NOT NULL,
                    stamp      TEXT NOT NULL,
                    deleted_at TEXT NOT NULL,
                    device     TEXT NOT NULL,
                    seq        INTEGER,
                    audience   TEXT NOT NULL DEFAULT 'store',
                    owner      TEXT,
                    parent_tbl TEXT,
                    parent_id  TEXT,
                    files      TEXT NOT NULL DEFAULT '[]',
                    PRIMARY KEY (tbl, id)
                ) STRICT, WITHOUT ROWID;
                CREATE INDEX coven_trash_parent ON coven_trash (parent_tbl, parent_id) WHERE parent_tbl IS NOT NULL;
                CREATE TABLE coven_trash_files (
                    tbl    TEXT NOT NULL,
                    id     TEXT NOT NULL,
                    file   TEXT NOT NULL,
                    object TEXT,
                    size   INTEGER NOT NULL,
                    PRIMARY KEY (tbl, id, file)
                ) STRICT, WITHOUT ROWID;
                CREATE INDEX coven_trash_files_object ON coven_trash_files (object);
                CREATE TABLE coven_store_settings (
                    id          TEXT PRIMARY KEY,
                    value       TEXT,
                    _updated_at TEXT NOT NULL
                ) STRICT;
            """) },
        // 22: coven_meta holds the device's settings only. The journals features kept there under
        // a prefix move to tables of their own, each written by one owner through ``Journal``:
        // released copies and make-device-only's copies (Files), checked bytes (CheckedBytes),
        // uncache notes (Cache), fetch failures (KeptFiles), clocks ahead (HybridClock), gc's
        // floors of deleted changes (GC); and sync's flags and last times go to coven_sync_flags
        // (Sync/SyncFlags.swift).
        { database in try database.execute("""
                CREATE TABLE coven_released_copies (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_released_copies (key, value) SELECT substr(key, 9), value FROM coven_meta WHERE substr(key, 1, 8) = 'release:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 8) = 'release:';
                CREATE TABLE coven_made_copies (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_made_copies (key, value) SELECT substr(key, 11), value FROM coven_meta WHERE substr(key, 1, 10) = 'made-copy:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 10) = 'made-copy:';
                CREATE TABLE coven_checked (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_checked (key, value) SELECT substr(key, 9), value FROM coven_meta WHERE substr(key, 1, 8) = 'checked:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 8) = 'checked:';
                CREATE TABLE coven_uncache (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_uncache (key, value) SELECT substr(key, 9), value FROM coven_meta WHERE substr(key, 1, 8) = 'uncache:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 8) = 'uncache:';
                CREATE TABLE coven_fetch_failures (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_fetch_failures (key, value) SELECT substr(key, 14), value FROM coven_meta WHERE substr(key, 1, 13) = 'fetch_failed:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 13) = 'fetch_failed:';
                CREATE TABLE coven_clock_ahead (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_clock_ahead (key, value) SELECT substr(key, 13), value FROM coven_meta WHERE substr(key, 1, 12) = 'clock_ahead:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 12) = 'clock_ahead:';
                CREATE TABLE coven_gc_floors (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_gc_floors (key, value) SELECT substr(key, 20), value FROM coven_meta WHERE substr(key, 1, 19) = 'gc_changes_deleted:' AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE substr(key, 1, 19) = 'gc_changes_deleted:';
                CREATE TABLE coven_sync_flags (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
                INSERT INTO coven_sync_flags (key, value) SELECT CASE key
                    WHEN 'sync_frontier_due' THEN 'frontier_due'
                    WHEN 'sync_gate_due' THEN 'gate_due'
                    WHEN 'sync_key_unavailable' THEN 'key_unavailable'
                    WHEN 'sync_problems' THEN 'problems'
                    WHEN 'sync_republish' THEN 'republish'
                    WHEN 'sync_refused_removals' THEN 'refused_removals'
                    WHEN 'key_chains_behind' THEN 'key_chains_behind'
                    WHEN 'last_push' THEN 'last_push'
                    WHEN 'last_pull' THEN 'last_pull'
                    WHEN 'trash_last_mass_delete' THEN 'last_mass_delete'
                    END, value FROM coven_meta WHERE key IN ('sync_frontier_due', 'sync_gate_due', 'sync_key_unavailable', 'sync_problems', 'sync_republish', 'sync_refused_removals', 'key_chains_behind', 'last_push', 'last_pull', 'trash_last_mass_delete') AND value IS NOT NULL;
                DELETE FROM coven_meta WHERE key IN ('sync_frontier_due', 'sync_gate_due', 'sync_key_unavailable', 'sync_problems', 'sync_republish', 'sync_refused_removals', 'key_chains_behind', 'last_push', 'last_pull', 'trash_last_mass_delete');
            """) },
        // 23: the trash's rows by rowid, in the order deletes arrive, with a unique index on
        // (table, id) (Trash/Trash.swift): a pull's deletes come in no key order, and a table
        // keyed by (table, id) was written a page per row again and again as they landed all
        // over it (a pull of 100,000 deletes wrote 2.7 times the bytes of one without the trash;
        // appended, each page is written once and only the index takes them in key order).
        // The same columns; the rows are copied over.
        { database in try database.execute("""
                CREATE TABLE coven_trash_rows (
                    tbl        TEXT NOT NULL,
                    id         TEXT NOT NULL,
                    image      BLOB NOT NULL,
                    stamp      TEXT NOT NULL,
                    deleted_at TEXT NOT NULL,
                    device     TEXT NOT NULL,
                    seq        INTEGER,
                    audience   TEXT NOT NULL DEFAULT 'store',
                    owner      TEXT,
                    parent_tbl TEXT,
                    parent_id  TEXT,
                    files      TEXT NOT NULL DEFAULT '[]'
                ) STRICT;
                INSERT INTO coven_trash_rows (tbl, id, image, stamp, deleted_at, device, seq, audience, owner, parent_tbl, parent_id, files)
                    SELECT tbl, id, image, stamp, deleted_at, device, seq, audience, owner, parent_tbl, parent_id, files FROM coven_trash;
                DROP TABLE coven_trash;
                ALTER TABLE coven_trash_rows RENAME TO coven_trash;
                CREATE UNIQUE INDEX coven_trash_row ON coven_trash (tbl, id);
                CREATE INDEX coven_trash_parent ON coven_trash (parent_tbl, parent_id) WHERE parent_tbl IS NOT NULL;
            """) },
        // 24: the trash in pages (Store/TrashPage.swift): the images of the rows one change
        // deleted, compressed together in rows of coven_trash_pages, each row's tombstone
        // naming its page (coven_tombstones.trash). A row per trashed row, with its image, key
        // and index entries, made a pull of 100,000 deletes write 88 MiB more and take 1.4 times
        // as long as one without the trash; pages write what the images compress to, and
        // nothing per row but the tombstone every delete writes anyway. coven_trash's rows move
        // into pages; coven_trash_files stays as it is.
        { database in try TrashPage.migrate(database) },
    ]

    /// Version 15: the circles this device's member knows of, owned by ``Circles``: every
    /// audience of storage but the store's, the newest generation read, the newest this member
    /// opened (0: it was never on a roster) and whether it is on the newest roster; and the
    /// circles' sections of every change this device published or applied, opened or not
    /// (owned by ``CircleSections``): what a key learned later opens, what gc keeps; and the
    /// rows a write moved out of an audience, until the change retracting them there is
    /// frozen (owned by ``AudienceMoves``).
    static let circlesTables = """
    CREATE TABLE coven_circles (
        audience   TEXT PRIMARY KEY,
        name       TEXT,
        generation INTEGER NOT NULL,
        opened     INTEGER NOT NULL DEFAULT 0,
        member     INTEGER NOT NULL DEFAULT 0 CHECK (member IN (0, 1))
    ) STRICT;
    CREATE TABLE coven_change_sections (
        device     TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        audience   TEXT NOT NULL,
        generation INTEGER NOT NULL,
        opened     INTEGER NOT NULL CHECK (opened IN (0, 1)),
        PRIMARY KEY (device, seq, audience)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX coven_change_sections_unread ON coven_change_sections (device, seq) WHERE opened = 0;
    CREATE TABLE coven_audience_moves (
        tbl          TEXT NOT NULL,
        id           TEXT NOT NULL,
        stamp        TEXT NOT NULL,
        old_audience TEXT NOT NULL,
        PRIMARY KEY (tbl, id, stamp)
    ) STRICT, WITHOUT ROWID;
    """

    /// Version 13: the member of every device, with the member key's signature over its key,
    /// checked against the roster of a generation when its changes are applied; and the
    /// rosters of the audiences' key generations, owned by the keyring, which learns them with
    /// their keys.
    static let membersTables = """
    ALTER TABLE coven_device_registry ADD COLUMN member TEXT;
    ALTER TABLE coven_device_registry ADD COLUMN member_signature TEXT;
    CREATE TABLE coven_audience_rosters (
        audience   TEXT NOT NULL,
        generation INTEGER NOT NULL,
        member     TEXT NOT NULL,
        position   INTEGER NOT NULL,
        name       TEXT NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
        recipient  TEXT NOT NULL,
        signer     TEXT NOT NULL,
        PRIMARY KEY (audience, generation, member)
    ) STRICT, WITHOUT ROWID;
    """

    /// Version 12: indexes of the upload queue. A claim reads the queue's unsent uploads in its
    /// order a row at a time and stops once its batch is full; each stored upload of a move
    /// counts the move's unsent ones.
    static let uploadQueueIndexes = """
    CREATE INDEX coven_upload_queue_claim ON coven_upload_queue (uploaded, bound DESC, position);
    CREATE INDEX coven_upload_queue_move ON coven_upload_queue (move, uploaded);
    """

    /// Version 10: `coven_lost_values` takes two more reasons, the entries a receiver refused
    /// (Sync/Authorizer.swift). SQLite cannot change a CHECK: the table is made again, its rows,
    /// ids and next id kept (an id `coven lost drop` forgot is never given again).
    static let lostReasonsWidened = """
    CREATE TABLE coven_lost_values_10 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tbl TEXT NOT NULL,
        row_id TEXT NOT NULL,
        entry BLOB NOT NULL,
        stamp TEXT NOT NULL,
        device TEXT NOT NULL,
        winner_stamp TEXT,
        lost_at TEXT NOT NULL,
        why TEXT NOT NULL CHECK (why IN ('concurrent', 'parent_deleted', 'file_deleted', 'not_authorized', 'not_owner')),
        restored_at TEXT
    ) STRICT;
    INSERT INTO coven_lost_values_10 SELECT * FROM coven_lost_values;
    DELETE FROM sqlite_sequence WHERE name = 'coven_lost_values_10';
    INSERT INTO sqlite_sequence (name, seq) SELECT 'coven_lost_values_10', seq FROM sqlite_sequence WHERE name = 'coven_lost_values';
    DROP TABLE coven_lost_values;
    ALTER TABLE coven_lost_values_10 RENAME TO coven_lost_values;
    """

    /// Version 9: the last image of each file record deleted here or by an applied change,
    /// kept while its bytes may exist (gc drops it with them): a later write of a row naming
    /// the record, which wins over the delete, brings the record back with it
    /// (Files/FileRecords.swift).
    static let deletedFilesTable = """
    CREATE TABLE coven_deleted_files (
        id TEXT PRIMARY KEY,
        audience TEXT NOT NULL,
        namespace TEXT NOT NULL,
        size INTEGER NOT NULL,
        hash TEXT,
        coordinates TEXT NOT NULL CHECK (json_valid(coordinates)),
        _updated_at TEXT NOT NULL,
        object TEXT GENERATED ALWAYS AS (json_extract(coordinates, '$.object')) VIRTUAL
    ) STRICT;
    CREATE INDEX coven_deleted_files_object ON coven_deleted_files (object);
    """

    /// Version 6: what gc keeps (GC/).
    static let gcTables = """
    -- Stored objects that may have lost their last reference: a stored record naming one
    -- deleted or switched device-only by this device, a cancelled move's upload, a retired
    -- upload (`device` this one); and records deleted by another device's change (`device`
    -- that one, `seq` its change): gc judges an object by all of them. `stamp` is the write that made the candidate; `seq`, for this device's own, the
    -- change that published it, once known (GC/Candidates.swift).
    CREATE TABLE coven_gc_candidates (
        object TEXT NOT NULL,
        device TEXT NOT NULL,
        stamp TEXT NOT NULL,
        seq INTEGER,
        why TEXT NOT NULL CHECK (why IN ('deleted', 'device_only', 'move_cancelled', 'upload_retired', 'deleted_elsewhere')),
        files TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(files)),
        made_at TEXT NOT NULL,
        PRIMARY KEY (object, device)
    ) STRICT;

    -- The objects another device's latest change says its unpublished records name.
    ALTER TABLE coven_device_registry ADD COLUMN held_objects TEXT NOT NULL DEFAULT '[]';
    """

    /// Version 3: what sync keeps (Sync/).
    static let syncTables = """
    -- The stamp of every row deleted here or by an applied change: last writer wins over a
    -- delete too (Sync/SyncState.swift).
    CREATE TABLE coven_tombstones (
        tbl TEXT NOT NULL,
        id TEXT NOT NULL,
        stamp TEXT NOT NULL,
        PRIMARY KEY (tbl, id)
    ) STRICT, WITHOUT ROWID;

    -- Every change published here or applied from another device: its newest stamp and the
    -- frontier it carried, which say whether a row's writer had seen another write.
    CREATE TABLE coven_sync_log (
        device TEXT NOT NULL,
        seq INTEGER NOT NULL,
        max_stamp TEXT NOT NULL,
        frontier TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(frontier)),
        applied_at TEXT NOT NULL,
        PRIMARY KEY (device, seq)
    ) STRICT;
    CREATE INDEX coven_sync_log_stamp ON coven_sync_log (device, max_stamp);

    -- A change frozen for publishing: the exact bytes sent again after a crash.
    CREATE TABLE coven_push (
        seq INTEGER PRIMARY KEY,
        object BLOB NOT NULL,
        max_stamp TEXT NOT NULL,
        frontier TEXT NOT NULL,
        entries INTEGER NOT NULL,
        frozen_at TEXT NOT NULL
    ) STRICT;

    -- The losing values of concurrent edits, and rows taken out (their parent or file gone).
    CREATE TABLE coven_lost_values (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tbl TEXT NOT NULL,
        row_id TEXT NOT NULL,
        entry BLOB NOT NULL,
        stamp TEXT NOT NULL,
        device TEXT NOT NULL,
        winner_stamp TEXT,
        lost_at TEXT NOT NULL,
        why TEXT NOT NULL CHECK (why IN ('concurrent', 'parent_deleted', 'file_deleted')),
        restored_at TEXT
    ) STRICT;

    ALTER TABLE coven_device_registry ADD COLUMN public_key TEXT;
    ALTER TABLE coven_device_registry ADD COLUMN applied_seq INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE coven_device_registry ADD COLUMN frontier TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE coven_device_registry ADD COLUMN gone_at TEXT;
    """

    /// Brings the schema of `database` from `version` to ``version``: the steps not yet applied,
    /// in order, in one transaction (`PRAGMA user_version` set in it, so a crash applies all or
    /// nothing).
    static func migrate(_ database: Database, from version: Int64) throws {
        guard version < Self.version else { return }
        try database.transaction {
            // Another process may have migrated since `version` was read.
            let version = try database.scalar("PRAGMA user_version").intValue ?? 0
            guard version < Self.version else { return }
            for step in steps[Int(version)...] { try step(database) }
            try database.execute("PRAGMA user_version = \(Self.version)")
        }
    }

    /// Version 2: the outbox holds row images and tombstones (Store/RowEntry.swift), which is
    /// what changes publish, instead of the session changesets of version 1.
    ///
    /// Devices of version 1 published nothing (sync came later), so their rows are recorded
    /// anew: one write of every row of the synced tables and `coven_files`, as they are, with
    /// their own stamps. The first releases of version 1 lacked later tables and the upload
    /// queue's `uploaded` column: version 1's text (all IF NOT EXISTS) and the column are
    /// applied first.
    static func upgradeTo2(_ database: Database) throws {
        try database.execute(version1)
        if try database.scalar("SELECT count(*) FROM pragma_table_info('coven_upload_queue') WHERE name = 'uploaded'").intValue ?? 0 == 0 {
            try database.execute("ALTER TABLE coven_upload_queue ADD COLUMN uploaded INTEGER NOT NULL DEFAULT 0")
        }
        try database.execute("""
            DROP TABLE coven_outbox;
            -- Writes recorded for publishing, in commit order: row images and tombstones in
            -- RowEntryCodec's form, a piece of one write per row (Store/Outbox.swift).
            CREATE TABLE coven_outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                hlc TEXT NOT NULL,
                entries BLOB NOT NULL,
                rows INTEGER NOT NULL,
                waits_for TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(waits_for)),
                created_at TEXT NOT NULL
            ) STRICT;
            """)
        guard let manifestJSON = try database.scalar("SELECT value FROM coven_meta WHERE key = 'manifest'").textValue else { return }
        let manifest = try Manifest(json: Data(manifestJSON.utf8))
        let outbox = Outbox(database: database)
        let stamp = try database.scalar("SELECT value FROM coven_meta WHERE key = 'hlc'").textValue ?? ""
        for table in manifest.tables.map(\.name) + ["coven_files"] {
            guard try database.hasTable(table) else { continue }
            let names = try database.storedColumns(table)
            guard let updated = names.firstIndex(of: "_updated_at") else { continue }
            let statement = try database.prepare("SELECT \(names.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(table)) ORDER BY _updated_at, id")
            var piece = Outbox.Piece()
            while let row = try statement.next() {
                guard let id = row["id"].textValue else { continue }
                piece.add(RowEntry(kind: .upsert, table: table, id: id, stamp: row[updated].textValue ?? stamp, columns: names, values: row.values))
                if piece.bytes.count >= Outbox.pieceBytes {
                    try outbox.append(piece, stamp: stamp, waitsFor: [])
                    piece = Outbox.Piece()
                }
            }
            if piece.count > 0 { try outbox.append(piece, stamp: stamp, waitsFor: []) }
        }
    }

    /// Version 4: `coven_files` decodes its coordinates once, in three VIRTUAL generated
    /// columns that every query reads instead of extracting from the JSON: `place` (`$.at`:
    /// `device` or `stored`), `device` (`$.device`, NULL once stored) and `object` (`$.object`),
    /// and the object index moves to the `object` column.
    ///
    /// Generated columns are computed by each device and never published (``RecordedWrite``
    /// publishes the columns whose `hidden` is 0 in `pragma_table_xinfo`), so what `coven_files`
    /// publishes is unchanged. A VIRTUAL column is computed when read: adding one rewrites no row.
    static func upgradeTo4(_ database: Database) throws {
        try database.execute("""
            ALTER TABLE coven_files ADD COLUMN place TEXT GENERATED ALWAYS AS (json_extract(coordinates, '$.at')) VIRTUAL;
            ALTER TABLE coven_files ADD COLUMN device TEXT GENERATED ALWAYS AS (json_extract(coordinates, '$.device')) VIRTUAL;
            ALTER TABLE coven_files ADD COLUMN object TEXT GENERATED ALWAYS AS (json_extract(coordinates, '$.object')) VIRTUAL;
            DROP INDEX IF EXISTS coven_files_object;
            CREATE INDEX coven_files_object ON coven_files (object);
            """)
    }

    /// Version 5: `coven_published`, the rows of gated tables (and file records) that this
    /// device's peers hold, so a push sends a row that became kept whole and retracts one that
    /// stopped being kept (Sync/PublishedRows.swift).
    ///
    /// Before gates, every row was published: a device that has published anything marks every
    /// row of its gated tables held, so the next push that touches them retracts what is not kept.
    static func upgradeTo5(_ database: Database) throws {
        try database.execute(publishedTable)
        guard let manifestJSON = try database.scalar("SELECT value FROM coven_meta WHERE key = 'manifest'").textValue,
              try database.hasTable("coven_device_registry"),
              try database.scalar("SELECT count(*) FROM coven_sync_log").intValue ?? 0 > 0 else { return }
        let manifest = try Manifest(json: Data(manifestJSON.utf8))
        let graph = try SchemaGraph(manifest: manifest, database: database)
        for table in graph.gatedTables where try database.hasTable(table) {
            try database.run("INSERT OR IGNORE INTO coven_published (tbl, id, retracted) SELECT ?1, id, 0 FROM main.\(RowCapture.quote(table))", [table])
        }
    }

    static let publishedTable = """
    -- Rows of gated tables and file records that peers hold (retracted = 0) or were told to
    -- delete (retracted = 1, a re-share stamps them afresh).
    CREATE TABLE coven_published (
        tbl TEXT NOT NULL,
        id TEXT NOT NULL,
        retracted INTEGER NOT NULL DEFAULT 0 CHECK (retracted IN (0, 1)),
        PRIMARY KEY (tbl, id)
    ) STRICT, WITHOUT ROWID;
    """

    /// The views app SQL and `coven sql` read. Recreated at every open, so they can change
    /// compatibly with new versions.
    ///
    /// Each joins coven_files last, with CROSS JOIN, through its index on the generated `object`
    /// column. Otherwise every file record was scanned to find the few queued or local rows:
    /// `coven uploads` on a library of 100,000 files took 80 ms instead of 10.
    static let views = """
    DROP VIEW IF EXISTS coven_user_files;
    CREATE VIEW coven_user_files AS
        SELECT f.id AS file, l.path AS path, l.size AS size,
               l.modified_seconds AS modified_seconds, l.modified_nanos AS modified_nanos
        FROM coven_local AS l
        CROSS JOIN coven_files AS f ON f.object = l.object
        WHERE l.kind = 'user'
          AND f.place = \(Coordinates.Place.device.sql)
          AND f.device = (SELECT value FROM coven_meta WHERE key = 'device_id');

    DROP VIEW IF EXISTS coven_uploads;
    CREATE VIEW coven_uploads AS
        SELECT f.id AS file, q.position AS position, q.move AS move,
               (q.state = \(UploadState.sending.sql) AND q.lease_until > ((julianday('now') - 2440587.5) * 86400.0)) AS sending,
               q.bytes_confirmed AS bytes_confirmed, q.bytes_total AS bytes_total,
               CASE
                 WHEN q.state = \(UploadState.failed.sql) THEN 'failed'
                 WHEN q.state = \(UploadState.retired.sql) THEN 'retire'
                 WHEN q.state = \(UploadState.sending.sql) AND q.lease_until > ((julianday('now') - 2440587.5) * 86400.0) THEN 'sending'
                 WHEN q.uploaded = 1 THEN 'move'
                 WHEN q.last_error_code IN ('user_file_missing', 'user_file_changed', 'file_unavailable') THEN 'source'
                 WHEN q.bound = 0 AND coalesce((SELECT value FROM coven_meta WHERE key = 'uploads_paused'), '0') = '1' THEN 'pause'
                 WHEN q.bound = 0 AND coalesce((SELECT value FROM coven_meta WHERE key = 'unmetered_only'), '0') = '1'
                      AND coalesce((SELECT value FROM coven_meta WHERE key = 'network_metered'), '0') = '1' THEN 'network'
                 WHEN q.next_attempt_at > ((julianday('now') - 2440587.5) * 86400.0) THEN 'retry'
                 ELSE 'storage'
               END AS waiting_for,
               q.state AS state, q.bound AS bound, q.attempts AS attempts,
               q.last_error_code AS error, q.last_error AS error_message, q.object AS object
        FROM coven_upload_queue AS q
        CROSS JOIN coven_files AS f ON f.object = q.object;

    DROP VIEW IF EXISTS coven_sending;
    CREATE VIEW coven_sending AS
        SELECT file, bytes_confirmed, bytes_total FROM coven_uploads WHERE sending;

    DROP VIEW IF EXISTS coven_upload_pause;
    CREATE VIEW coven_upload_pause AS
        SELECT coalesce((SELECT value FROM coven_meta WHERE key = 'uploads_paused'), '0') = '1' AS paused,
               (SELECT count(*) FROM coven_upload_queue WHERE state IN (\(UploadState.queued.sql), \(UploadState.sending.sql)) AND bound = 0) AS queued;

    DROP VIEW IF EXISTS coven_network;
    CREATE VIEW coven_network AS
        SELECT coalesce((SELECT value FROM coven_meta WHERE key = 'network_metered'), '0') = '1' AS metered,
               coalesce((SELECT value FROM coven_meta WHERE key = 'unmetered_only'), '0') = '1' AS unmetered_only;

    DROP VIEW IF EXISTS coven_moves;
    CREATE VIEW coven_moves AS
        SELECT m.id AS move, m.state AS state, f.id AS file, m.created_at AS created_at,
               m.error_code AS error, m.error AS error_message, m.error_file AS error_file
        FROM coven_move_state AS m
        CROSS JOIN coven_upload_queue AS q ON q.move = m.id
        CROSS JOIN coven_files AS f ON f.object = q.object
        WHERE m.state IN (\(MoveState.moving.sql), \(MoveState.failed.sql));

    DROP VIEW IF EXISTS coven_devices;
    CREATE VIEW coven_devices AS
        SELECT device, name, joined_at, gone,
               device = (SELECT value FROM coven_meta WHERE key = 'device_id') AS this_device,
               applied_seq AS seq, frontier, gone_at
        FROM coven_device_registry;
    """
}

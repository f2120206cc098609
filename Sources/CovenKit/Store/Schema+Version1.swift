import Foundation

extension Schema {
    /// Version 1, as released: never edit (add a step instead).
    static let version1 = """
    CREATE TABLE IF NOT EXISTS coven_meta (
        key TEXT PRIMARY KEY,
        value TEXT
    ) STRICT;

    CREATE TABLE IF NOT EXISTS coven_migrations (
        position INTEGER PRIMARY KEY,
        sha256 TEXT NOT NULL,
        applied_at TEXT NOT NULL
    ) STRICT;

    -- The synced file records the app's SQL reads and joins.
    CREATE TABLE IF NOT EXISTS coven_files (
        id TEXT PRIMARY KEY,
        audience TEXT NOT NULL,
        namespace TEXT NOT NULL,
        size INTEGER NOT NULL,
        hash TEXT,
        coordinates TEXT NOT NULL CHECK (json_valid(coordinates)),
        _updated_at TEXT NOT NULL
    ) STRICT;
    CREATE INDEX IF NOT EXISTS coven_files_object ON coven_files (json_extract(coordinates, '$.object'));

    -- Staged app bytes and prepared originals, until a write puts them in rows.
    CREATE TABLE IF NOT EXISTS coven_staged (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('user', 'app')),
        namespace TEXT NOT NULL,
        place TEXT NOT NULL CHECK (place IN ('cloud', 'device-only')),
        path BLOB,
        copy TEXT,
        size INTEGER NOT NULL,
        modified_seconds INTEGER,
        modified_nanos INTEGER,
        change_stamp TEXT,
        content_hash BLOB NOT NULL,
        chunk_hashes BLOB NOT NULL,
        created_at TEXT NOT NULL
    ) STRICT;

    -- This device's bytes of an object: the person's original, or coven's own copy of app bytes.
    -- chunk_hashes: the SHA-256 of each 64 KiB chunk, back to back; empty when not recorded (a
    -- copy make-device-only wrote, whose content hash was checked), derived by an upload from
    -- the bytes once they match content_hash.
    CREATE TABLE IF NOT EXISTS coven_local (
        object TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('user', 'app')),
        path BLOB,
        copy TEXT,
        size INTEGER NOT NULL,
        modified_seconds INTEGER,
        modified_nanos INTEGER,
        change_stamp TEXT,
        content_hash BLOB NOT NULL,
        chunk_hashes BLOB NOT NULL
    ) STRICT;

    -- Uploads of this device, oldest first.
    CREATE TABLE IF NOT EXISTS coven_upload_queue (
        object TEXT PRIMARY KEY,
        position INTEGER NOT NULL UNIQUE,
        move TEXT,
        bound INTEGER NOT NULL DEFAULT 0,
        state TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'sending', 'failed', 'retired')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL DEFAULT 0,
        last_error TEXT,
        last_error_code TEXT,
        upload_id TEXT,
        part_size INTEGER,
        bytes_confirmed INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER NOT NULL,
        worker TEXT,
        lease_until REAL,
        -- Upload: 1 once storage holds the object while its move waits for its other files.
        uploaded INTEGER NOT NULL DEFAULT 0
    ) STRICT;

    CREATE TABLE IF NOT EXISTS coven_upload_parts (
        object TEXT NOT NULL,
        number INTEGER NOT NULL,
        etag TEXT NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (object, number)
    ) STRICT;

    -- Moves of device-only files to the cloud.
    CREATE TABLE IF NOT EXISTS coven_move_state (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL CHECK (state IN ('moving', 'failed', 'done', 'cancelled')),
        created_at TEXT NOT NULL,
        error TEXT,
        error_code TEXT,
        error_file TEXT
    ) STRICT;

    -- make-device-only: what each call created until its switch commits (DeviceOnlyJournal).
    CREATE TABLE IF NOT EXISTS coven_device_only_made (
        call TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('folder', 'temporary', 'file')),
        path BLOB NOT NULL,
        pair BLOB,
        made INTEGER NOT NULL DEFAULT 0,
        pid INTEGER NOT NULL,
        pid_start TEXT NOT NULL,
        committed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (call, seq)
    ) STRICT;

    -- Writes recorded for publishing (SQLite session changesets), in commit order.
    CREATE TABLE IF NOT EXISTS coven_outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        hlc TEXT NOT NULL,
        changeset BLOB NOT NULL,
        waits_for TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(waits_for)),
        created_at TEXT NOT NULL
    ) STRICT;

    -- Known devices of the store (this one at least).
    CREATE TABLE IF NOT EXISTS coven_device_registry (
        device TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        joined_at TEXT NOT NULL,
        gone INTEGER NOT NULL DEFAULT 0
    ) STRICT;

    -- Cached bytes of stored objects, chunk by chunk.
    CREATE TABLE IF NOT EXISTS coven_cache (
        object TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        chunks BLOB NOT NULL,
        bytes INTEGER NOT NULL DEFAULT 0,
        complete INTEGER NOT NULL DEFAULT 0,
        last_read REAL NOT NULL,
        touched REAL NOT NULL
    ) STRICT;
    -- Partials, which every writable open looks over (the seven-day cleanup): few rows whatever
    -- the cache holds, so the open does not read the whole table.
    CREATE INDEX IF NOT EXISTS coven_cache_partial ON coven_cache (object) WHERE complete = 0;
    -- Trims take the entries read longest ago first.
    CREATE INDEX IF NOT EXISTS coven_cache_last_read ON coven_cache (last_read, object);

    -- The bytes coven_cache holds, kept by its triggers, so the budget check after every read
    -- costs the same whatever the number of entries (a sum over 100,000 rows takes 8 ms).
    CREATE TABLE IF NOT EXISTS coven_cache_total (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        bytes INTEGER NOT NULL
    ) STRICT;
    INSERT OR IGNORE INTO coven_cache_total (id, bytes) SELECT 1, coalesce(sum(bytes), 0) FROM coven_cache;
    CREATE TRIGGER IF NOT EXISTS coven_cache_total_insert AFTER INSERT ON coven_cache BEGIN
        UPDATE coven_cache_total SET bytes = bytes + NEW.bytes WHERE id = 1;
    END;
    CREATE TRIGGER IF NOT EXISTS coven_cache_total_delete AFTER DELETE ON coven_cache BEGIN
        UPDATE coven_cache_total SET bytes = bytes - OLD.bytes WHERE id = 1;
    END;
    CREATE TRIGGER IF NOT EXISTS coven_cache_total_update AFTER UPDATE OF bytes ON coven_cache BEGIN
        UPDATE coven_cache_total SET bytes = bytes + NEW.bytes - OLD.bytes WHERE id = 1;
    END;

    CREATE TABLE IF NOT EXISTS coven_pins (
        file TEXT PRIMARY KEY,
        pinned_at TEXT NOT NULL
    ) STRICT;
    """
}

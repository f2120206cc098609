import Foundation

/// Why a stored object became a candidate for deletion.
public enum CandidateReason: String, Sendable, Equatable {
    /// This device deleted the last record naming it.
    case deleted
    /// This device switched the last record naming it to device-only.
    case deviceOnly = "device_only"
    /// A move of this device was cancelled while its upload may have reached storage.
    case moveCancelled = "move_cancelled"
    /// An upload of this device was retired with a provider session.
    case uploadRetired = "upload_retired"
    /// Another device's applied change deleted a record naming it, or switched it to
    /// device-only: judged here as this device's own deletes are (and it keeps a gone
    /// device's folder from being cleaned too early).
    case deletedElsewhere = "deleted_elsewhere"
}

/// One row of `coven_gc_candidates`.
struct Candidate: Equatable {
    var object: String
    /// The device whose write made it a candidate.
    var device: String
    var stamp: String
    /// That device's change holding the write, once known.
    var seq: Int64?
    var why: CandidateReason
    /// The record ids whose deletion made it a candidate (lost values name records by id).
    var files: [String]
}

/// The one owner of `coven_gc_candidates` (DESIGN.md "Deleting stored bytes"): the code paths
/// that can leave a stored object without a reference call ``add(object:stamp:why:file:)``
/// (FileRecords on a delete or a switch to device-only, Moves on a cancel, UploadQueue on a
/// retire), pull records other devices' deletes with ``addElsewhere(object:device:seq:stamp:file:)``,
/// and gc reads them by object (``byObject()``), settles and drops them. Every method runs inside the caller's transaction.
struct Candidates {
    let device: Device
    var database: Database { device.database }

    /// Makes `object` a candidate of this device's write `stamp` (nil: the newest stamp this
    /// device issued, for a write that records no row). A newer write replaces an older one's
    /// stamp, and its publication is looked for again.
    func add(object: String, stamp: String?, why: CandidateReason, file: String?) throws {
        guard object.hasPrefix("files/") else { return }
        let stamp = try stamp ?? device.setting("hlc") ?? ""
        try database.run("""
            INSERT INTO coven_gc_candidates (object, device, stamp, seq, why, files, made_at)
            VALUES (?1, ?2, ?3, NULL, ?4, CASE WHEN ?5 IS NULL THEN '[]' ELSE json_array(?5) END, ?6)
            ON CONFLICT (object, device) DO UPDATE SET
                stamp = max(stamp, excluded.stamp), seq = NULL, why = excluded.why,
                files = CASE WHEN ?5 IS NULL OR EXISTS (SELECT 1 FROM json_each(files) WHERE value = ?5) THEN files
                             ELSE json_insert(files, '$[#]', ?5) END
            """, [object, device.deviceID, stamp, why.rawValue, file, Timestamp.iso8601(Date())])
    }

    /// Records that `device`'s change `seq` deleted (or switched away) a record naming
    /// `object`.
    func addElsewhere(object: String, device other: String, seq: Int64, stamp: String, file: String) throws {
        guard object.hasPrefix("files/"), other != device.deviceID else { return }
        try database.run("""
            INSERT INTO coven_gc_candidates (object, device, stamp, seq, why, files, made_at)
            VALUES (?1, ?2, ?3, ?4, 'deleted_elsewhere', json_array(?5), ?6)
            ON CONFLICT (object, device) DO UPDATE SET stamp = max(stamp, excluded.stamp), seq = max(coalesce(seq, 0), excluded.seq),
                files = CASE WHEN EXISTS (SELECT 1 FROM json_each(files) WHERE value = ?5) THEN files ELSE json_insert(files, '$[#]', ?5) END
            """, [object, other, stamp, seq, file, Timestamp.iso8601(Date())])
    }

    /// The candidates of up to `limit` objects after `after` (nil: from the first), grouped by
    /// object: objects in key order, each one's rows oldest first. Empty past the last.
    func byObject(after: String?, limit: Int) throws -> [(object: String, rows: [Candidate])] {
        var groups: [(object: String, rows: [Candidate])] = []
        for row in try rows("""
            WHERE object IN (SELECT DISTINCT object FROM coven_gc_candidates WHERE object > ?1 ORDER BY object LIMIT ?2)
            ORDER BY object, stamp, device
            """, [after ?? "", limit]) {
            if groups.last?.object == row.object {
                groups[groups.count - 1].rows.append(row)
            } else {
                groups.append((row.object, [row]))
            }
        }
        return groups
    }

    /// Every candidate naming `object` (this device's and other devices' deletes).
    func naming(_ object: String) throws -> [Candidate] {
        try rows("WHERE object = ?1", [object])
    }

    /// The candidates `tail` selects, read a row at a time (a page of 4,000 read whole as rows
    /// first held 12 MiB at once).
    private func rows(_ tail: String, _ arguments: [SQLBindable]) throws -> [Candidate] {
        let statement = try database.prepare("SELECT object, device, stamp, seq, why, files FROM coven_gc_candidates " + tail)
        try statement.bind(arguments)
        var candidates: [Candidate] = []
        while let row = try statement.next() {
            let files = (try? JSONSerialization.jsonObject(with: Data((row.string("files") ?? "[]").utf8))) as? [String] ?? []
            candidates.append(Candidate(object: row.string("object") ?? "", device: row.string("device") ?? "", stamp: row.string("stamp") ?? "",
                                        seq: row.int("seq"), why: CandidateReason(rawValue: row.string("why") ?? "") ?? .deleted, files: files))
        }
        return candidates
    }

    /// Records the change of this device that published a candidate's write.
    func setSeq(object: String, seq: Int64) throws {
        try database.run("UPDATE coven_gc_candidates SET seq = ?3 WHERE object = ?1 AND device = ?2", [object, device.deviceID, seq])
    }

    /// Drops a candidate of `device` (deleted, or named again).
    func remove(object: String, device other: String) throws {
        try database.run("DELETE FROM coven_gc_candidates WHERE object = ?1 AND device = ?2", [object, other])
    }

    /// Drops every candidate naming `object` (it is gone from storage).
    func removeAll(object: String) throws {
        try database.run("DELETE FROM coven_gc_candidates WHERE object = ?1", [object])
    }
}

extension Device {
    /// The owner of the gc candidates.
    var candidates: Candidates { Candidates(device: self) }
}

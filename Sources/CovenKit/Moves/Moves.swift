import Foundation

// MARK: - Moves of device-only files to the cloud

/// What a write asked of moves, applied in call order after its SQL has run (the SQL itself may
/// change only app tables, so coven's functions record intents and the write applies them).
struct MoveIntents {
    enum Operation {
        /// `coven_move_to_cloud(files…)`: the files, as given, and the new move's id.
        case move(id: String, files: [String])
        /// `coven_cancel_move(id)`.
        case cancel(id: String)
    }

    var operations: [Operation] = []
}

/// Where a move is, in `coven_move_state.state`.
public enum MoveState: String, Sendable, CaseIterable {
    /// Its files upload; none switches until every one is stored.
    case moving
    /// A changed original failed it: no file of it switches.
    case failed
    /// Every file of it is stored, switched in one write.
    case done
    /// Cancelled: its files stay on this device only.
    case cancelled

    /// The state as an SQL string literal, for SQL text.
    var sql: String { "'\(rawValue)'" }
}

/// The one writer of `coven_move_state`: the moves a write begins, the upload worker ends
/// (done, failed) and a cancel cancels. Every method runs inside the caller's transaction.
struct MoveRecords {
    let database: Database

    /// The state of move `id`, or nil for no such move.
    func state(_ id: String) throws -> MoveState? {
        try database.scalar("SELECT state FROM coven_move_state WHERE id = ?1", [id]).textValue.flatMap(MoveState.init(rawValue:))
    }

    /// Records a new move, under way.
    func begin(_ id: String) throws {
        try database.run("INSERT INTO coven_move_state (id, state, created_at) VALUES (?1, ?2, ?3)",
                         [id, MoveState.moving.rawValue, Timestamp.iso8601(Date())])
    }

    /// Records a move whose every file is stored and switched.
    func markDone(_ id: String) throws {
        try database.run("""
            INSERT INTO coven_move_state (id, state, created_at) VALUES (?1, ?2, ?3)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state
            """, [id, MoveState.done.rawValue, Timestamp.iso8601(Date())])
    }

    /// Records a move failed by `error`, naming the file whose original it concerns.
    func markFailed(_ id: String, error: CovenError, file: String?) throws {
        try database.run("""
            INSERT INTO coven_move_state (id, state, created_at, error, error_code, error_file) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, error = excluded.error, error_code = excluded.error_code,
                error_file = excluded.error_file
            """, [id, MoveState.failed.rawValue, Timestamp.iso8601(Date()), error.description, error.code.rawValue, file])
    }

    /// Records a move cancelled.
    func markCancelled(_ id: String) throws {
        try database.run("UPDATE coven_move_state SET state = ?2 WHERE id = ?1", [id, MoveState.cancelled.rawValue])
    }
}

extension Device {
    /// The owner of this device's moves.
    var moveRecords: MoveRecords { MoveRecords(database: database) }
}

/// One file of a move, as `coven moves` lists it.
public struct MoveListing: Sendable, Equatable {
    /// The move's id.
    public var move: String
    /// ``MoveState/moving`` or ``MoveState/failed``.
    public var state: MoveState
    /// A file of the move.
    public var file: String
    /// The path of the file's original on this device, as text (`coven_path_text`), or nil for
    /// an app file (read from coven's copy).
    public var path: String?
    /// The error code that failed the move (`user_file_changed`), if it failed.
    public var error: String?
    /// The failure's message.
    public var errorMessage: String?
    /// The original the failure names, as text.
    public var errorFile: String?
    /// When the move was made.
    public var createdAt: String
}

extension WriteSession {
    // MARK: SQL functions

    /// Installs `coven_move_to_cloud(file, …)` and `coven_cancel_move(id)` for this write.
    func installMoveFunctions() throws {
        try database.createFunction("coven_move_to_cloud", arguments: -1, deterministic: false) { [unowned self] args in
            var files: [String] = []
            for argument in args {
                guard let text = argument.textValue else {
                    throw CovenError(.usage, "coven_move_to_cloud() takes file ids, or JSON arrays of them, not NULL")
                }
                files.append(contentsOf: try Self.fileIDs(in: text))
            }
            guard !files.isEmpty else {
                throw CovenError(.usage, "coven_move_to_cloud() needs at least one file id")
            }
            let id = Identifier.uuid7()
            self.moveIntents.operations.append(.move(id: id, files: files))
            return .text(id)
        }
        try database.createFunction("coven_cancel_move", arguments: 1, deterministic: false) { [unowned self] args in
            guard let id = args[0].textValue, !id.isEmpty else {
                throw CovenError(.usage, "coven_cancel_move() takes a move id")
            }
            self.moveIntents.operations.append(.cancel(id: id))
            return .text(id)
        }
    }

    /// The file ids of one argument: an id, or a JSON array of ids (`json_group_array(file)`).
    static func fileIDs(in text: String) throws -> [String] {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("[") else { return [trimmed] }
        guard let array = try? JSONSerialization.jsonObject(with: Data(trimmed.utf8)) as? [Any],
              let ids = array as? [String] else {
            throw CovenError(.usage, "coven_move_to_cloud() takes a JSON array of file ids as text, not '\(text.prefix(80))'")
        }
        return ids
    }

    // MARK: Applying

    /// Applies the moves and cancels the SQL asked for, in order, inside the write's
    /// transaction. Call after the write's own files are applied and released.
    ///
    /// - Throws: `.fileAbsent`, `.notThisDevice`, `.notDeviceOnlyHere`, `.fileInMove`,
    ///   `.bytesAbsent` for a move; `.notFound`, `.invalidState` for a cancel.
    func applyMoveIntents() throws {
        for operation in moveIntents.operations {
            switch operation {
            case .move(let id, let files):
                try applyMove(id: id, files: files)
            case .cancel(let id):
                try Moves(device).cancelMoveInTransaction(id)
            }
        }
    }

    private func applyMove(id: String, files: [String]) throws {
        let now = Date().timeIntervalSince1970
        let queue = device.uploadQueue
        var objects: [(object: String, size: Int64)] = []
        var seen: [String: String] = [:] // object → the file that brought it
        for file in files {
            guard let record = try device.fileRecord(file) else {
                if try puts.contains(file: file) {
                    throw CovenError(.usage, "file '\(file)' is put by this same write", hint: "put it with place 'cloud' instead of moving it", details: ["file": file])
                }
                throw CovenError(.fileAbsent, "no file '\(file)' on this device", details: ["file": file])
            }
            let coordinates = record.coordinates
            guard coordinates.at == .device else {
                throw CovenError(.notDeviceOnlyHere, "file '\(file)' is already in the cloud", details: ["file": file])
            }
            guard coordinates.device == device.deviceID else {
                throw CovenError(.notThisDevice, "file '\(file)' is on another device only", details: ["file": file, "device": coordinates.device ?? ""])
            }
            let object = coordinates.object
            if let other = seen[object] {
                guard other != file else { continue } // named twice: one upload
                continue // another record over the same bytes: one upload serves both
            }
            if let queued = try database.queryOne("""
                SELECT q.move, q.state, m.state AS move_state,
                       (SELECT count(*) FROM coven_upload_queue WHERE object = ?1 AND \(UploadQueue.idleCondition)) AS idle
                FROM coven_upload_queue AS q LEFT JOIN coven_move_state AS m ON m.id = q.move WHERE q.object = ?1
                """, [object, now]) {
                let move = queued.string("move")
                let ended = queued.string("state") == UploadState.retired.rawValue || queued.string("move_state") == MoveState.cancelled.rawValue
                if let move, move != moveID, !ended {
                    throw CovenError(.fileInMove, "file '\(file)' is already in move '\(move)'",
                                     hint: "cancel it with 'coven move --cancel \(move)' first", details: ["file": file, "move": move])
                } else if let move, move == moveID {
                    throw CovenError(.fileInMove, "file '\(file)' is already in move '\(move)' of this write", details: ["file": file, "move": move])
                } else if !ended {
                    throw CovenError(.notDeviceOnlyHere, "file '\(file)' is already uploading for a bound reference", details: ["file": file])
                } else if queued.int("idle") == 0 {
                    throw CovenError(.fileInMove, "file '\(file)' is still in the upload of cancelled move '\(move ?? "")'",
                                     hint: "let 'coven upload-worker' end that upload, then move the file again",
                                     details: ["file": file, "move": move ?? ""])
                }
                // An upload of a cancelled move that sent nothing: the new move takes its place.
                try queue.remove(object)
            }
            guard let size = try database.scalar("SELECT size FROM coven_local WHERE object = ?1", [object]).intValue else {
                throw CovenError(.bytesAbsent, "this device holds no bytes of file '\(file)'", details: ["file": file])
            }
            seen[object] = file
            objects.append((object, size))
        }
        for (object, size) in objects {
            try queue.enqueue(object, move: id, bytesTotal: ObjectLayout.encryptedSize(plaintextSize: size))
        }
        try device.moveRecords.begin(id)
    }
}

/// Moves of device-only files to the cloud, as writes of their own: starting one, cancelling
/// one, and the listing of those under way or failed (`coven move`, `coven moves`). The
/// records are ``MoveRecords``'; the uploads the queue's.
///
/// ```swift
/// let move = try Moves(device).moveToCloud(files: ids)
/// ```
public struct Moves {
    let device: Device

    public init(_ device: Device) {
        self.device = device
    }

    // MARK: Moves as writes of their own

    /// Moves files that are on this device only to the cloud, as one move, in a write of its
    /// own: none of them switches until every one is stored, then one write switches them all
    /// (the upload worker's part). Nothing is read now: each upload checks its source against
    /// what staging recorded.
    ///
    /// - Parameter files: file ids of this device's device-only files.
    /// - Returns: the move's id.
    /// - Throws: `.fileAbsent`, `.notThisDevice`, `.notDeviceOnlyHere`, `.fileInMove` (naming
    ///   the move in `details["move"]`), `.bytesAbsent`, `.usage` for no files.
    public func moveToCloud(files: [String]) throws -> String {
        guard !files.isEmpty else { throw CovenError(.usage, "no file to move") }
        let json = String(decoding: try JSONSerialization.data(withJSONObject: files), as: UTF8.self)
        let result = try device.write(sql: "SELECT coven_move_to_cloud(:files) AS move", parameters: ["files": .text(json)])
        guard let move = result.rows.first?.string("move") else {
            throw CovenError(.internal, "the move write returned no move id")
        }
        return move
    }

    /// Cancels a move that is under way or failed, in a write of its own: its files stay on
    /// this device only, and its uploads end (the worker aborts one it began).
    ///
    /// - Throws: `.notFound` for no such move; `.invalidState` for one already cancelled or
    ///   done.
    public func cancelMove(_ id: String) throws {
        _ = try device.write(sql: "SELECT coven_cancel_move(:id)", parameters: ["id": .text(id)])
    }

    /// Cancels a move inside the caller's transaction.
    func cancelMoveInTransaction(_ id: String) throws {
        guard let state = try device.moveRecords.state(id) else {
            throw CovenError(.notFound, "no move '\(id)'", hint: "'coven moves' lists the moves under way or failed", details: ["move": id])
        }
        switch state {
        case .moving, .failed:
            break
        case .cancelled:
            throw CovenError(.invalidState, "move '\(id)' is already cancelled", details: ["move": id, "state": state.rawValue])
        case .done:
            throw CovenError(.invalidState, "move '\(id)' is done: its files are stored", details: ["move": id, "state": state.rawValue])
        }
        try device.moveRecords.markCancelled(id)
        // Whatever of its uploads reached storage is named by no stored record: gc's to delete.
        for object in try device.database.query("SELECT object FROM coven_upload_queue WHERE move = ?1", [id]).compactMap({ $0.string("object") }) {
            try device.candidates.add(object: object, stamp: nil, why: .moveCancelled, file: nil)
        }
        // Uploads nothing was sent for go at once. One with a provider session, being sent or
        // already stored stays for the upload worker, which sees its move cancelled: it aborts
        // the session and drops the upload, switching nothing. The local bytes stay either way:
        // the files stay on this device only.
        try device.uploadQueue.removeIdle(move: id)
    }

    // MARK: Listing

    /// The moves under way or failed, one entry per file, oldest move first and its files in
    /// upload order (the `coven_moves` view, with each original's path as text).
    public func moves() throws -> [MoveListing] {
        try device.database.query("""
            SELECT m.move, m.state, m.file, m.error, m.error_message, m.created_at,
                   -- The original the failure names, as text: error_file holds a path, or the
                   -- id of the file whose original it is.
                   coalesce((SELECT coven_path_text(l2.path) FROM coven_files AS f2
                             JOIN coven_local AS l2 ON l2.object = f2.object
                             WHERE f2.id = m.error_file AND l2.kind = 'user'), m.error_file) AS error_file,
                   CASE WHEN l.kind = 'user' THEN coven_path_text(l.path) END AS path
            FROM coven_moves AS m
            JOIN coven_files AS f ON f.id = m.file
            LEFT JOIN coven_local AS l ON l.object = f.object
            LEFT JOIN coven_upload_queue AS q ON q.object = f.object
            ORDER BY m.created_at, m.move, q.position, m.file
            """).map { row in
            MoveListing(move: row.string("move") ?? "", state: MoveState(rawValue: row.string("state") ?? "") ?? .moving, file: row.string("file") ?? "",
                        path: row.string("path"), error: row.string("error"), errorMessage: row.string("error_message"),
                        errorFile: row.string("error_file"), createdAt: row.string("created_at") ?? "")
        }
    }
}

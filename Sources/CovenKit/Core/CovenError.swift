import Foundation

// MARK: - Error codes

/// The snake_case name of every failure coven reports.
///
/// The raw value is a contract: it appears in `--json` errors, in `coven: error:` lines, in
/// docs/exit-codes.md and in scripts that match on it. Cases are only ever added. The names the
/// spec gives (files.md, keep-files-on-a-device.md) are kept exactly; the rest name coven's own
/// failures (a bad manifest, a busy device, an unreadable file).
public enum ErrorCode: String, Sendable, CaseIterable, Codable {
    // The spec's names.
    case fileUnknown = "file_unknown"
    case fileUnreferenced = "file_unreferenced"
    case fileWriteOnce = "file_write_once"
    case boundFileTooLarge = "bound_file_too_large"
    case namespaceKind = "namespace_kind"
    case undeclaredNamespace = "undeclared_namespace"
    case deviceOnly = "device_only"
    case notThisDevice = "not_this_device"
    case notDeviceOnlyHere = "not_device_only_here"
    case fileInMove = "file_in_move"
    case notInCloud = "not_in_cloud"
    case fileAbsent = "file_absent"
    case noStorage = "no_storage"
    case storage = "storage"
    case missing = "missing"
    case userFileMissing = "user_file_missing"
    case userFileChanged = "user_file_changed"
    case fileUnavailable = "file_unavailable"
    case integrity = "integrity"
    case rangeOutOfBounds = "range_out_of_bounds"
    case updateRequired = "update_required"
    case notUnicode = "not_unicode"
    case link = "link"
    case exists = "exists"
    case clash = "clash"
    case empty = "empty"
    case noRoom = "no_room"
    case storageFull = "storage_full"
    case bytesAbsent = "bytes_absent"
    case decoding = "decoding"
    // The spec's names for sync.
    /// A second copy of this device (a restored backup, a copied database) published.
    case deviceConflict = "device_conflict"
    /// This device was removed from the store for good.
    case deviceGone = "device_gone"
    // Members (DESIGN.md "Members and circles").
    /// Only an admin of the store may do that (add, remove, change a role).
    case notAdmin = "not_admin"
    /// The request breaks a rule of the store's members: the owner removed by another admin,
    /// the last admin leaving, a member added twice.
    case refused = "refused"
    /// What is asked for is sealed under a key generation this device does not hold.
    case keyUnavailable = "key_unavailable"
    /// A row of an owner-only table written by a device of another member than its owner (an
    /// admin's included), or its owner column changed.
    case notOwner = "not_owner"
    /// A row written into a circle the writer's member is not in (never was, or was removed
    /// from), or a file of such a circle made device-only.
    case notInCircle = "not_in_circle"
    // coven's own.
    /// The command line is wrong: an unknown option, a missing argument, a bad value.
    case usage = "usage"
    /// The manifest is not valid JSON, has an unknown key, or declares something impossible.
    case manifest = "manifest"
    /// A synced table breaks a convention checked at open (STRICT, `id`, `_updated_at`, …).
    case schema = "schema"
    /// A migration changed or is missing: the manifest disagrees with what the device applied.
    case migration = "migration"
    /// The app's SQL failed (syntax, constraint, a write through `coven sql`).
    case sql = "sql"
    /// A row id is not what its table's identity mode requires.
    case invalidId = "invalid_id"
    /// A file of a remote root's row (or of its descendants) would be on one device only: such
    /// files are in the cloud by construction (spec/local-data.md "Remote roots").
    case remoteRoot = "remote_root"
    /// No device database at the path given.
    case noDevice = "no_device"
    /// A store or device already exists where `init` would create one.
    case alreadyExists = "already_exists"
    /// Another coven process holds the device lock and `--no-wait` was given.
    case busy = "busy"
    /// An id (staged, prepared, move, file) names nothing.
    case notFound = "not_found"
    /// An upload or move was refused because of its state (already cancelled, not failed, …).
    case invalidState = "invalid_state"
    /// A local read or write failed (permissions, a missing folder, an I/O error).
    case io = "io"
    /// A signal stopped the command; what it finished stays.
    case interrupted = "interrupted"
    /// One or more items of a batch failed (upload-worker --once, fetch-kept).
    case partial = "partial"
    /// An internal invariant broke: a bug in coven.
    case `internal` = "internal"
}

// MARK: - The error

/// A failure coven reports: a code from ``ErrorCode``, a message for people, and the cause.
///
/// Messages follow git's guidelines: lowercase first word, no final period, the subject quoted
/// (`cannot open 'song.flac'`). `cause` carries the native failure (an errno text, an HTTP status
/// with the provider's error code, a curl error) so it is never lost. `details` holds the values a
/// script needs (`file`, `move`, `path`, `device`), emitted as JSON fields.
public struct CovenError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The stable snake_case code.
    public var code: ErrorCode
    /// One line for people, lowercase, no final period.
    public var message: String
    /// An optional second line suggesting what to do.
    public var hint: String?
    /// The native cause: errno text, HTTP status and provider code, curl error, SQLite message.
    public var cause: String?
    /// Values a script may need, by name (`file`, `move`, `path`, `status`).
    public var details: [String: String]
    /// SQLite's extended result code, when SQLite failed (`SQLITE_AUTH`, `SQLITE_NOTADB`, …):
    /// what callers match on, never the message text.
    public var sqliteCode: Int32?

    /// Creates an error.
    public init(
        _ code: ErrorCode, _ message: String, hint: String? = nil, cause: String? = nil,
        details: [String: String] = [:], sqliteCode: Int32? = nil
    ) {
        self.code = code
        self.message = message
        self.hint = hint
        self.cause = cause
        self.details = details
        self.sqliteCode = sqliteCode
    }

    /// SQLite's primary result code (the low byte of ``sqliteCode``), when SQLite failed.
    public var sqlitePrimaryCode: Int32? { sqliteCode.map { $0 & 0xff } }

    public var description: String {
        var text = message
        if let cause { text += ": \(cause)" }
        return text
    }

    /// Wraps the current `errno` of a failed system call on `path`.
    public static func posix(_ operation: String, path: String, errno code: Int32 = errno) -> CovenError {
        let reason = String(cString: strerror(code))
        switch code {
        case ENOSPC, EDQUOT:
            return CovenError(.noRoom, "cannot \(operation) '\(path)'", cause: reason, details: ["path": path])
        case ENOENT:
            return CovenError(.io, "cannot \(operation) '\(path)'", cause: reason, details: ["path": path, "errno": "ENOENT"])
        case EINTR:
            // A signal stopped the call (signals interrupt system calls: Stop.swift).
            return CovenError(.interrupted, "cannot \(operation) '\(path)': \(Stop.process.reason ?? "interrupted by a signal")", details: ["path": path])
        default:
            return CovenError(.io, "cannot \(operation) '\(path)'", cause: reason, details: ["path": path])
        }
    }
}

extension Error {
    /// This error as a ``CovenError``; anything else is an internal failure carrying its text.
    public var asCovenError: CovenError {
        if let error = self as? CovenError { return error }
        return CovenError(.internal, "unexpected failure", cause: String(describing: self))
    }
}

import Foundation

/// Where a file is, as its record's `coordinates` column holds it (JSON):
///
/// - on one device only: `{"at":"device","device":"<id>","object":"files/<dev>/<name>","key":"<hex>"}`
/// - stored:             `{"at":"stored","object":"files/<dev>/<name>","key":"<hex>"}`
///
/// The object key and the file key are fixed when the file is staged, so a device-only file
/// already knows where it will be stored; several records may name one object.
///
/// This is the one decoder of coordinates in Swift. SQL reads them decoded too, once, from the
/// generated columns of `coven_files` (``Schema/upgradeTo4(_:)``): `place` (`at`), `device` and
/// `object`; no query extracts them from the JSON itself.
public struct Coordinates: Sendable, Equatable, Codable {
    /// Whether the file is on one device or stored.
    public enum Place: String, Sendable, Codable {
        case device, stored

        /// The place as an SQL string literal, for SQL text.
        var sql: String { "'\(rawValue)'" }
    }

    /// Where it is.
    public var at: Place
    /// The device holding it, while ``at`` is `.device`.
    public var device: String?
    /// Its storage key relative to the store.
    public var object: String
    /// The file's key, hex.
    public var key: String

    /// Creates coordinates.
    public init(at: Place, device: String?, object: String, key: String) {
        self.at = at
        self.device = device
        self.object = object
        self.key = key
    }

    /// Parses the JSON text of a record.
    public init(json: String) throws {
        do {
            self = try JSONDecoder().decode(Coordinates.self, from: Data(json.utf8))
        } catch {
            throw CovenError(.decoding, "a file record's coordinates cannot be read", cause: String(describing: error))
        }
        if object.isEmpty || key.isEmpty || (at == .device && (device ?? "").isEmpty) {
            throw CovenError(.decoding, "a file record's coordinates are incomplete")
        }
    }

    /// The JSON text, keys sorted.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? "{}"
    }
}

/// Where a staged file goes when its write commits.
public enum Place: String, Sendable, CaseIterable {
    /// Uploaded, then stored.
    case cloud
    /// Kept on this device only, with no upload.
    case deviceOnly = "device-only"
}

/// A file's record as `coven_files` holds it.
public struct FileRecord: Sendable, Equatable {
    /// The file id.
    public var id: String
    /// Its audience.
    public var audience: String
    /// Its namespace.
    public var namespace: String
    /// Its size in bytes.
    public var size: Int64
    /// The hex SHA-256 of its bytes once stored.
    public var hash: String?
    /// Where it is.
    public var coordinates: Coordinates

    init(row: Row) throws {
        id = row.string("id") ?? ""
        audience = row.string("audience") ?? ""
        namespace = row.string("namespace") ?? ""
        size = row.int("size") ?? 0
        hash = row.string("hash")
        coordinates = try Coordinates(json: row.string("coordinates") ?? "")
    }
}

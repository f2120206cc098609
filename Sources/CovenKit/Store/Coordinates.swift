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
        if let canonical = Self.canonical(json) {
            self = canonical
        } else {
            do {
                self = try JSONDecoder().decode(Coordinates.self, from: Data(json.utf8))
            } catch {
                throw CovenError(.decoding, "a file record's coordinates cannot be read", cause: String(describing: error))
            }
        }
        if object.isEmpty || key.isEmpty || (at == .device && (device ?? "").isEmpty) {
            throw CovenError(.decoding, "a file record's coordinates are incomplete")
        }
    }

    /// The JSON text, keys sorted.
    public var json: String {
        if let plain = plainJSON { return plain }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? "{}"
    }

    // MARK: The canonical text, without Foundation's coders
    //
    // Every record coven writes holds its coordinates as ``json`` makes them: keys sorted, no
    // space, and strings (ids, storage keys, hex) of printable ASCII with nothing to escape.
    // That one layout is written and read here directly, byte for byte what JSONEncoder makes
    // and JSONDecoder reads from it (JSONDecoder took 40 µs a record: a fifth of the upload
    // worker's database time on 10,000 small files). Any other text, valid JSON or not, goes
    // to Foundation's coders as before.

    /// Whether `text` needs no escape in JSON: printable ASCII without `"` or `\`.
    private static func isPlain(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }

    /// ``json`` when every string is plain, else nil.
    private var plainJSON: String? {
        guard Self.isPlain(object), Self.isPlain(key) else { return nil }
        if let device {
            guard Self.isPlain(device) else { return nil }
            return #"{"at":""# + at.rawValue + #"","device":""# + device + #"","key":""# + key + #"","object":""# + object + #""}"#
        }
        return #"{"at":""# + at.rawValue + #"","key":""# + key + #"","object":""# + object + #""}"#
    }

    /// The coordinates of `json` when it is exactly the canonical text of some (plain strings,
    /// keys sorted, no space), else nil.
    static func canonical(_ json: String) -> Coordinates? {
        var json = json
        return json.withUTF8 { bytes -> Coordinates? in
            var at = 0
            func take(_ literal: StaticString) -> Bool {
                let count = literal.utf8CodeUnitCount
                guard at + count <= bytes.count else { return false }
                let start = literal.utf8Start
                for offset in 0..<count where bytes[at + offset] != start[offset] { return false }
                at += count
                return true
            }
            /// A string's bytes up to its closing quote, all plain and at least one.
            func plainString() -> String? {
                let start = at
                while at < bytes.count, bytes[at] != UInt8(ascii: "\"") {
                    let byte = bytes[at]
                    guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") else { return nil }
                    at += 1
                }
                guard at < bytes.count, at > start else { return nil }
                defer { at += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
            }
            guard take(#"{"at":""#), let place = plainString().flatMap(Place.init(rawValue:)) else { return nil }
            var device: String?
            if take(#","device":""#) {
                guard let text = plainString() else { return nil }
                device = text
            }
            guard take(#","key":""#), let key = plainString(),
                  take(#","object":""#), let object = plainString(),
                  take("}"), at == bytes.count else { return nil }
            return Coordinates(at: place, device: device, object: object, key: key)
        }
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

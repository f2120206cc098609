import Foundation

// MARK: - Storage URLs

/// Where a store lives: a plain directory or an S3-compatible bucket.
public enum StorageLocation: Sendable, Equatable, CustomStringConvertible {
    /// `file:///some/dir`: a directory (a disk, a NAS mount).
    case file(directory: String)
    /// `s3://bucket/prefix`: any S3-compatible service. `endpoint` comes from the URL's
    /// `endpoint=` query or `AWS_ENDPOINT_URL`; nil means AWS itself.
    case s3(bucket: String, prefix: String, endpoint: String?, region: String?, pathStyle: Bool?)

    /// Parses a storage URL.
    ///
    /// - Throws: ``CovenError`` `.usage` for anything but `file://` with an absolute path (and
    ///   no query or fragment) or `s3://bucket[/prefix][?endpoint=…&region=…&path_style=true|false]`.
    public init(parsing text: String) throws {
        if text.hasPrefix("file://") {
            var path = String(text.dropFirst("file://".count))
            if path.hasPrefix("localhost/") { path = String(path.dropFirst("localhost".count)) }
            guard path.hasPrefix("/") else {
                throw CovenError(.usage, "storage URL '\(text)' needs an absolute path", hint: "write file:///absolute/path")
            }
            // A file:// URL names a folder and nothing else: a query or a fragment would
            // otherwise become part of the folder's name.
            if let mark = path.firstIndex(where: { $0 == "?" || $0 == "#" }) {
                let what = path[mark] == "?" ? "a query" : "a fragment"
                throw CovenError(.usage, "storage URL '\(text)' has \(what) ('\(path[mark...])'), which a file:// URL does not take",
                                 hint: "write the folder alone, with '?' as %3F and '#' as %23 if its name holds them")
            }
            path = path.removingPercentEncoding ?? path
            while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
            self = .file(directory: path)
            return
        }
        if text.hasPrefix("s3://") {
            var rest = String(text.dropFirst("s3://".count))
            var query: [String: String] = [:]
            if let mark = rest.firstIndex(of: "?") {
                for pair in rest[rest.index(after: mark)...].split(separator: "&") {
                    let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                    let key = parts[0].removingPercentEncoding ?? parts[0]
                    let value = parts.count > 1 ? (parts[1].removingPercentEncoding ?? parts[1]) : ""
                    guard ["endpoint", "region", "path_style"].contains(key) else {
                        throw CovenError(.usage, "unknown storage URL option '\(key)'", hint: "s3 URLs take endpoint=, region= and path_style=")
                    }
                    query[key] = value
                }
                rest = String(rest[..<mark])
            }
            let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            let bucket = parts[0]
            guard bucket.count >= 3, bucket.count <= 63,
                  bucket.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" || $0 == "." }),
                  bucket.first?.isLetter == true || bucket.first?.isNumber == true
            else {
                throw CovenError(.usage, "'\(bucket)' is not a valid S3 bucket name")
            }
            var prefix = parts.count > 1 ? parts[1] : ""
            while prefix.hasSuffix("/") { prefix.removeLast() }
            var pathStyle: Bool?
            if let value = query["path_style"] {
                guard value == "true" || value == "false" else {
                    throw CovenError(.usage, "path_style takes true or false, not '\(value)'")
                }
                pathStyle = value == "true"
            }
            self = .s3(bucket: bucket, prefix: prefix, endpoint: query["endpoint"], region: query["region"], pathStyle: pathStyle)
            return
        }
        throw CovenError(.usage, "unsupported storage URL '\(text)'", hint: "use file:///path or s3://bucket/prefix")
    }

    /// The URL as written back (without credentials, which never appear in one).
    public var description: String {
        switch self {
        case .file(let directory):
            return "file://" + directory
        case .s3(let bucket, let prefix, let endpoint, let region, let pathStyle):
            var text = "s3://" + bucket + (prefix.isEmpty ? "" : "/" + prefix)
            var query: [String] = []
            if let endpoint { query.append("endpoint=" + endpoint) }
            if let region { query.append("region=" + region) }
            if let pathStyle { query.append("path_style=\(pathStyle)") }
            if !query.isEmpty { text += "?" + query.joined(separator: "&") }
            return text
        }
    }
}

// MARK: - What a provider answers

/// An object's key and size, as a listing or HEAD gives them.
public struct ObjectInfo: Sendable, Equatable {
    /// The key relative to the store (`files/<device>/<name>`).
    public var key: String
    /// The size in bytes.
    public var size: Int64

    /// Creates an object description.
    public init(key: String, size: Int64) {
        self.key = key
        self.size = size
    }
}

/// A part the provider confirmed in a resumable (multipart) upload.
public struct UploadedPart: Sendable, Equatable, Codable {
    /// 1-based part number.
    public var number: Int
    /// The provider's tag for the part (S3's ETag), needed to complete.
    public var etag: String
    /// The part's size in bytes.
    public var size: Int64

    /// Creates a part description.
    public init(number: Int, etag: String, size: Int64) {
        self.number = number
        self.etag = etag
        self.size = size
    }
}

/// Why a storage request failed, so callers can tell the network from a refusal.
public enum StorageFailure: String, Sendable {
    /// No connection, a reset, a timeout: the storage could not be reached.
    case network
    /// The provider asked to slow down (503 SlowDown, 429) and maybe how long to wait.
    case throttled
    /// Credentials or permissions were refused (401, 403).
    case denied
    /// The provider is full or refused the size (507, EntityTooLarge, ENOSPC on file://).
    case full
    /// Anything else the provider answered (4xx, 5xx).
    case provider
}

extension CovenError {
    /// A `.storage` error with its failure class, native cause and optional wait.
    public static func storage(
        _ message: String, failure: StorageFailure, cause: String, status: Int? = nil, retryAfter: Double? = nil
    ) -> CovenError {
        var details = ["failure": failure.rawValue]
        if let status { details["status"] = String(status) }
        if let retryAfter { details["retry_after"] = String(retryAfter) }
        let code: ErrorCode = failure == .full ? .storageFull : .storage
        return CovenError(code, message, cause: cause, details: details)
    }

    /// The failure class of a storage error, when it is one.
    public var storageFailure: StorageFailure? {
        guard code == .storage || code == .storageFull, let raw = details["failure"] else { return nil }
        return StorageFailure(rawValue: raw)
    }

    /// The wait the provider asked for, in seconds, when it asked.
    public var retryAfter: Double? { details["retry_after"].flatMap(Double.init) }
}

// MARK: - The protocol

/// Byte storage for one store: random names in, bytes out. Keys are relative to the store
/// (`store.json`, `files/<device>/<name>`, `changes/<device>/<seq>`).
///
/// An instance is not Sendable: each task (each upload job) makes its own with
/// ``StorageConnector/connect()``, so one curl handle serves one task.
///
/// Every method throws ``CovenError`` `.storage` (or `.storageFull`) with the native cause and a
/// ``StorageFailure``; a network failure is never reported as absence.
public protocol StorageProvider: AnyObject {
    /// The largest object one `put` may send (S3: 5 GiB; file://: unlimited).
    var singleRequestLimit: Int64 { get }
    /// The smallest part a multipart upload accepts, but for the last (S3: 5 MiB).
    var minimumPartSize: Int64 { get }

    /// Stores `data` at `key`, replacing any object there, atomically: a reader sees the old
    /// object or the new one, never part of one.
    func put(_ key: String, data: [UInt8]) throws

    /// Stores `data` at `key` only if nothing is there; returns false if something was.
    func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool

    /// Stores `data` at `key` as one object of a batch: atomically, as ``put(_:data:)``, but the
    /// object may be durable, and at `key` at all, only once ``makeDurable(_:)`` of its key has
    /// returned (file:// syncs the filesystem once for a batch's bytes, then renames them into
    /// place and syncs each folder once, not once an object). Nothing may count the object
    /// stored before that.
    func putPending(_ key: String, data: [UInt8]) throws

    /// Makes durable the objects at `keys`, whole ones that ``putPending(_:data:)`` stored or a
    /// run a kill stopped left: file:// syncs each of their folders once; S3 holds every object
    /// it confirmed durably already.
    func makeDurable(_ keys: [String]) throws

    /// Reads the object at `key`, or the bytes `range` of it (clipped to its end by the
    /// provider), handing them to `sink` as they arrive. Returns the object's total size when
    /// the provider says it.
    ///
    /// - Throws: `.missing` (details `key`) when storage confirms nothing is there;
    ///   `.rangeOutOfBounds` when the range starts past the end.
    @discardableResult
    func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64?

    /// The object's size, or nil when storage confirms nothing is at `key`.
    func head(_ key: String) throws -> ObjectInfo?

    /// Deletes the object at `key`; deleting what is not there succeeds.
    func delete(_ key: String) throws

    /// Every object whose key starts with `prefix`, in key order, paging as needed.
    func list(prefix: String) throws -> [ObjectInfo]

    /// The first `limit` objects whose key starts with `prefix` and sorts after `startAfter`,
    /// in key order: one request on S3 (ListObjectsV2 `start-after`, `max-keys`).
    func list(prefix: String, after startAfter: String, limit: Int) throws -> [ObjectInfo]

    /// Starts a resumable upload to `key`; returns its id. `totalSize` and `partSize` let a
    /// provider that writes parts in place (file://) lay the object out.
    func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String

    /// Sends part `number` (1-based) at byte `offset` of the object; returns what the provider
    /// confirmed.
    func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart

    /// The parts the provider holds for an upload, in number order.
    ///
    /// - Throws: `.missing` when the upload no longer exists.
    func listParts(_ key: String, uploadID: String) throws -> [UploadedPart]

    /// Joins the parts into the object at `key`.
    func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws

    /// Abandons an upload and frees its parts; aborting one that is gone succeeds.
    func abortMultipart(_ key: String, uploadID: String) throws

    /// The ids of the uploads to `key` the provider holds, finished or not: what a start whose
    /// id was lost (a kill -9 between the start and its record) left, for the next start to
    /// abort. S3: ListMultipartUploads of the key; file://: the upload folders naming it.
    func uploadsInProgress(_ key: String) throws -> [String]

    /// Deletes the objects at `keys` in as few requests as the provider takes (S3
    /// DeleteObjects: up to 1,000 keys a request); deleting what is not there succeeds.
    ///
    /// - Returns: the keys not deleted, each with why (a refusal is `.storage` with failure
    ///   `denied`). A key is never reported deleted unless the provider said so.
    /// - Throws: `.storage` when a request fails as a whole (nothing of it is taken as deleted).
    func deleteObjects(_ keys: [String]) throws -> [String: CovenError]

    /// ``deleteObjects(_:)``, also saying which keys were not there to delete where the
    /// provider tells (file://; an S3 service that answers `NoSuchKey`). The default tells
    /// none.
    func deleteObjectsNotingAbsent(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>)

    /// Every unfinished upload under `prefix` (S3 ListMultipartUploads; file://: the upload
    /// folders whose key starts with it).
    func uploadsInProgress(prefix: String) throws -> [UploadInProgress]

    /// The temporary files interrupted writes left in the folder `prefix` (ending in `/`):
    /// file:// only (see the extension's default).
    func leftoverTemporaries(prefix: String) throws -> [LeftoverTemporary]

    /// Removes one temporary file ``leftoverTemporaries(prefix:)`` listed.
    func removeLeftoverTemporary(_ key: String) throws
}

/// An unfinished multipart upload a provider holds.
public struct UploadInProgress: Sendable, Equatable {
    /// The key it uploads to, relative to the store.
    public var key: String
    /// The provider's id of the upload.
    public var uploadID: String
    /// When it was started, as the provider says (nil when it does not).
    public var initiated: Date?

    /// Creates an upload description.
    public init(key: String, uploadID: String, initiated: Date? = nil) {
        self.key = key
        self.uploadID = uploadID
        self.initiated = initiated
    }
}

/// A temporary file an interrupted write left in storage (file://: a `.coven-tmp-` name, never
/// listed as an object).
public struct LeftoverTemporary: Sendable, Equatable {
    /// Its path relative to the store (`files/<device>/.coven-tmp-…`).
    public var key: String
    /// When it was last written.
    public var modified: Date

    public init(key: String, modified: Date) {
        self.key = key
        self.modified = modified
    }
}

extension StorageProvider {
    /// ``put(_:data:)``, durable when it returns: for providers whose every confirmed write is.
    public func putPending(_ key: String, data: [UInt8]) throws { try put(key, data: data) }

    /// Nothing to do for providers whose every confirmed write is durable (S3).
    public func makeDurable(_ keys: [String]) throws {}
}

extension StorageProvider {
    /// The temporary files interrupted writes left in the folder `prefix` (ending in `/`):
    /// none for providers whose writes leave none (S3: its unfinished uploads are listed by
    /// ``uploadsInProgress(prefix:)``).
    public func leftoverTemporaries(prefix: String) throws -> [LeftoverTemporary] { [] }

    /// Removes one temporary file ``leftoverTemporaries(prefix:)`` listed; removing what is not
    /// there succeeds.
    public func removeLeftoverTemporary(_ key: String) throws {}
}

extension StorageProvider {
    /// A whole listing cut to what sorts after `startAfter`, for providers without a ranged
    /// listing (file://, whose listing reads one folder).
    public func list(prefix: String, after startAfter: String, limit: Int) throws -> [ObjectInfo] {
        Array(try list(prefix: prefix).lazy.filter { startAfter.utf8.lexicographicallyPrecedes($0.key.utf8) }.prefix(limit))
    }

    public func deleteObjectsNotingAbsent(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>) {
        (try deleteObjects(keys), [])
    }

    /// One DELETE per key, for providers without a batch request (file://).
    public func deleteObjects(_ keys: [String]) throws -> [String: CovenError] {
        var failed: [String: CovenError] = [:]
        for key in keys {
            do {
                try delete(key)
            } catch let error as CovenError {
                failed[key] = error
            }
        }
        return failed
    }
}

/// Makes providers for one store location: one per task that talks to storage.
public struct StorageConnector: Sendable {
    /// The store's location.
    public let location: StorageLocation
    /// Request timeouts and retry settings.
    public let options: StorageOptions
    /// Where S3 settings (`AWS_*`) are read: the process environment unless given.
    public let environment: [String: String]?

    /// Creates a connector.
    public init(location: StorageLocation, options: StorageOptions = StorageOptions(), environment: [String: String]? = nil) {
        self.location = location
        self.options = options
        self.environment = environment
    }
}

/// Timeouts and retries for storage requests.
public struct StorageOptions: Sendable {
    /// Seconds a control request (HEAD, LIST, create/complete multipart, small PUT) may take.
    public var controlTimeout: Double = 30
    /// Seconds a byte request (a part, a GET of chunks) may take.
    public var bytesTimeout: Double = 120
    /// Seconds to wait for a connection.
    public var connectTimeout: Double = 10
    /// How many times one request is retried on a connection failure or 5xx before failing.
    public var requestRetries: Int = 3

    /// Default options, overridden by `COVEN_STORAGE_CONTROL_TIMEOUT`,
    /// `COVEN_STORAGE_BYTES_TIMEOUT`, `COVEN_STORAGE_CONNECT_TIMEOUT` and `COVEN_STORAGE_RETRIES`.
    public init(environment: [String: String]) {
        self.init { environment[$0] }
    }

    /// Default options, overridden by those variables of the process environment, each read
    /// alone (a read of many small files makes options per file: the whole environment as a
    /// dictionary each time cost more than the read's own work).
    public init() {
        self.init { name in getenv(name).map { String(cString: $0) } }
    }

    private init(variable: (String) -> String?) {
        if let v = variable("COVEN_STORAGE_CONTROL_TIMEOUT").flatMap(Double.init) { controlTimeout = v }
        if let v = variable("COVEN_STORAGE_BYTES_TIMEOUT").flatMap(Double.init) { bytesTimeout = v }
        if let v = variable("COVEN_STORAGE_CONNECT_TIMEOUT").flatMap(Double.init) { connectTimeout = v }
        if let v = variable("COVEN_STORAGE_RETRIES").flatMap(Int.init) { requestRetries = v }
    }
}

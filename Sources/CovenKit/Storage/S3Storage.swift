import Foundation

// MARK: - S3 provider

/// An `s3://bucket/prefix` store on any S3-compatible service, over libcurl with coven's own
/// AWS Signature Version 4.
///
/// - Endpoint: the URL's `endpoint=`, else `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else
///   `https://s3.<region>.amazonaws.com`.
/// - Region: the URL's `region=`, else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.
/// - Credentials: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
/// - Addressing: path-style (`endpoint/bucket/key`) when an endpoint is given, when
///   `path_style=true`, or when the bucket name has a dot (TLS certificates do not cover it);
///   virtual-hosted (`bucket.s3.region.amazonaws.com/key`) otherwise.
///
/// Keys are stored under `prefix/`. Bodies of parts and of objects over 1 MiB are sent with
/// `x-amz-content-sha256: UNSIGNED-PAYLOAD` (their integrity is the AEAD's job); smaller bodies
/// are hashed and signed.
///
/// Not Sendable: it owns one ``HTTPClient`` (one curl handle). Make one per task with
/// ``StorageConnector/connect(create:)``.
public final class S3Storage: StorageProvider {
    /// The bucket.
    public let bucket: String
    /// The key prefix of the store inside the bucket, without a trailing `/` (may be empty).
    public let prefix: String
    /// The region of the credential scope.
    public let region: String
    /// True when requests address the bucket in the path rather than the host name.
    public let pathStyle: Bool

    /// S3's limit for one PUT: 5 GiB.
    public var singleRequestLimit: Int64 { 5 * 1024 * 1024 * 1024 }
    /// S3's smallest part but the last: 5 MiB.
    public var minimumPartSize: Int64 { 5 * 1024 * 1024 }

    /// Keys asked for per ListObjectsV2 page (S3's maximum is 1000); lowered by tests to page.
    var listPageSize = 1000
    /// Parts asked for per ListParts page.
    var partsPageSize = 1000

    private let scheme: String
    private let host: String
    private let basePath: String
    private let signer: SigV4Signer
    let client: HTTPClient
    let options: StorageOptions
    /// Set once a HEAD of the bucket succeeded, so a 404 on HEAD of a key means the key.
    private var bucketConfirmed = false

    /// Bodies up to this size are hashed into `x-amz-content-sha256`; larger ones are unsigned.
    private static let hashedBodyLimit = 1024 * 1024

    /// Connects to an `s3://` location.
    ///
    /// Nothing is sent yet; the first request opens the connection.
    ///
    /// - Parameters:
    ///   - location: an ``StorageLocation/s3(bucket:prefix:endpoint:region:pathStyle:)``.
    ///   - options: timeouts and retries.
    ///   - environment: where `AWS_*` settings are read (the process environment by default).
    /// - Throws: ``CovenError`` `.storage` with failure `.denied` when `AWS_ACCESS_KEY_ID` or
    ///   `AWS_SECRET_ACCESS_KEY` is missing; `.usage` for a `file://` location or an endpoint
    ///   that is not an `http(s)://` URL; `.internal` when libcurl cannot start.
    public init(
        location: StorageLocation, options: StorageOptions = StorageOptions(),
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws {
        guard case .s3(let bucket, let prefix, let endpoint, let region, let pathStyle) = location else {
            throw CovenError(.usage, "'\(location)' is not an s3:// location")
        }
        func setting(_ name: String) -> String? {
            guard let value = environment[name], !value.isEmpty else { return nil }
            return value
        }
        guard let accessKey = setting("AWS_ACCESS_KEY_ID"), let secretKey = setting("AWS_SECRET_ACCESS_KEY") else {
            var error = CovenError.storage(
                "no credentials for '\(location)'", failure: .denied,
                cause: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set")
            error.hint = "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)"
            throw error
        }
        let resolvedRegion = region ?? setting("AWS_REGION") ?? setting("AWS_DEFAULT_REGION") ?? "us-east-1"
        let resolvedEndpoint = endpoint ?? setting("AWS_ENDPOINT_URL_S3") ?? setting("AWS_ENDPOINT_URL")
        let usePathStyle = pathStyle ?? (resolvedEndpoint != nil || bucket.contains("."))

        let parsed: (scheme: String, authority: String, path: String)
        if let resolvedEndpoint {
            parsed = try Self.parseEndpoint(resolvedEndpoint)
        } else {
            parsed = ("https", "s3.\(resolvedRegion).amazonaws.com", "")
        }
        self.bucket = bucket
        self.prefix = prefix
        self.region = resolvedRegion
        self.pathStyle = usePathStyle
        self.scheme = parsed.scheme
        self.host = usePathStyle ? parsed.authority : "\(bucket).\(parsed.authority)"
        self.basePath = usePathStyle ? parsed.path + "/" + bucket : parsed.path
        self.options = options
        self.signer = SigV4Signer(
            credentials: SigV4Credentials(accessKeyID: accessKey, secretAccessKey: secretKey, sessionToken: setting("AWS_SESSION_TOKEN")),
            region: resolvedRegion, service: "s3")
        self.client = try HTTPClient(options: options, caBundle: setting("AWS_CA_BUNDLE"))
    }

    /// Splits `http(s)://host[:port][/path]`.
    private static func parseEndpoint(_ text: String) throws -> (scheme: String, authority: String, path: String) {
        let scheme: String
        let rest: Substring
        if text.hasPrefix("https://") {
            scheme = "https"
            rest = text.dropFirst("https://".count)
        } else if text.hasPrefix("http://") {
            scheme = "http"
            rest = text.dropFirst("http://".count)
        } else {
            throw CovenError(.usage, "storage endpoint '\(text)' is not an http:// or https:// URL")
        }
        let authority = rest.prefix { $0 != "/" }
        guard !authority.isEmpty else {
            throw CovenError(.usage, "storage endpoint '\(text)' has no host")
        }
        var path = String(rest.dropFirst(authority.count))
        while path.hasSuffix("/") { path.removeLast() }
        return (scheme, String(authority), path)
    }

    // MARK: - Requests

    /// The object key in the bucket for a store key.
    func objectKey(_ key: String) -> String {
        prefix.isEmpty ? key : prefix + "/" + key
    }

    /// Builds and signs one request. `key` nil addresses the bucket itself.
    func request(
        _ method: String, key: String?, query: [(String, String)] = [], headers extra: [(String, String)] = [],
        payloadHash: String = SigV4Signer.emptyPayloadHash, contentType: String = "application/octet-stream"
    ) throws -> HTTPRequest {
        let path: String
        if let key {
            path = basePath + "/" + objectKey(key)
        } else {
            path = basePath.isEmpty ? "/" : basePath
        }
        let amzDate = SigV4Signer.amzDate()
        var headers: [(String, String)] = [("Host", host), ("x-amz-content-sha256", payloadHash), ("x-amz-date", amzDate)]
        if let token = signer.credentials.sessionToken { headers.append(("x-amz-security-token", token)) }
        headers += extra
        let signature = try signer.sign(
            method: method, path: path, query: query, headers: headers, payloadHash: payloadHash, amzDate: amzDate)
        headers.append(("Authorization", signature.authorization))
        let canonicalQuery = SigV4Signer.canonicalQuery(query)
        let url = scheme + "://" + host + SigV4Signer.encodePath(path) + (canonicalQuery.isEmpty ? "" : "?" + canonicalQuery)
        return HTTPRequest(method: method, url: url, headers: headers, contentType: contentType)
    }

    /// Sends a bodiless control request and collects the answer.
    func control(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [],
        operation: String
    ) throws -> HTTPResponse {
        try client.send(operation: operation, timeout: options.controlTimeout) { _ in
            try request(method, key: key, query: query, headers: headers)
        }
    }

    /// Sends a body.
    func upload(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [],
        body: UnsafeRawBufferPointer, contentType: String = "application/octet-stream", operation: String
    ) throws -> HTTPResponse {
        let payloadHash = body.count <= Self.hashedBodyLimit ? SHA256.digest(body).hex : SigV4Signer.unsignedPayload
        let timeout = body.count <= Self.hashedBodyLimit ? options.controlTimeout : options.bytesTimeout
        return try client.send(operation: operation, timeout: timeout, body: body) { _ in
            try request(method, key: key, query: query, headers: headers, payloadHash: payloadHash, contentType: contentType)
        }
    }

    func missing(_ key: String, _ response: HTTPResponse? = nil) -> CovenError {
        var error = CovenError(.missing, "nothing is stored at '\(key)'", details: ["key": key])
        if let response {
            let code = S3XML(response.body).text("Code")
            error.cause = "HTTP \(response.status)" + (code.map { " \($0)" } ?? "")
        }
        return error
    }

    func providerCode(_ response: HTTPResponse) -> String? {
        let xml = S3XML(response.body)
        return xml.rootName == "Error" ? xml.text("Code") : nil
    }

    /// True when a 404 is about the key (or upload), not the bucket.
    func isKeyNotFound(_ response: HTTPResponse) -> Bool {
        response.status == 404 && providerCode(response) != "NoSuchBucket"
    }

    // MARK: - Objects

    public func put(_ key: String, data: [UInt8]) throws {
        try checkSize(Int64(data.count), key: key)
        let response = try data.withUnsafeBytes { body in
            try upload("PUT", key: key, body: body, operation: "put '\(key)'")
        }
        guard response.isSuccess else { throw HTTPClient.statusError(response, operation: "put '\(key)'") }
    }

    /// Stores `data` at `key` unless something is there.
    ///
    /// The PUT carries `If-None-Match: *`, which S3 (since 2024), SeaweedFS and moto honour
    /// atomically: of two devices racing, one gets 412 (or 409 `ConditionalRequestConflict`
    /// while the other's write is in flight) and learns it lost. A HEAD goes first so a server
    /// that ignores the header still refuses to overwrite an existing object; on such a server
    /// two writers racing between their HEAD and PUT can both "win" (the later PUT replaces the
    /// earlier one). Every server coven is tested against honours the header.
    public func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool {
        if try head(key) != nil { return false }
        try checkSize(Int64(data.count), key: key)
        let operation = "put '\(key)' if absent"
        let response = try data.withUnsafeBytes { body in
            try upload("PUT", key: key, headers: [("If-None-Match", "*")], body: body, operation: operation)
        }
        switch response.status {
        case 200..<300: return true
        case 412, 409: return false
        default: throw HTTPClient.statusError(response, operation: operation)
        }
    }

    private func checkSize(_ size: Int64, key: String) throws {
        guard size <= singleRequestLimit else {
            throw CovenError.storage(
                "cannot put '\(key)' in one request", failure: .provider,
                cause: "\(size.counted("byte")) is more than S3's single-request limit of \(singleRequestLimit)")
        }
    }

    /// Thrown by the GET sink once the wanted range is complete, to stop a server that sends more.
    private struct RangeComplete: Error {}

    @discardableResult
    public func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64? {
        let operation = "get '\(key)'"
        if let range, range.isEmpty {
            // A Range header cannot ask for zero bytes; only check the start.
            guard let info = try head(key) else { throw missing(key) }
            guard range.lowerBound <= info.size else { throw rangeOutOfBounds(key, size: info.size) }
            return info.size
        }
        let wantedEnd = range?.upperBound ?? Int64.max
        var position = range?.lowerBound ?? 0  // the next object byte the caller needs
        var bodyOffset: Int64?  // the object offset of this attempt's next body byte
        var total: Int64?
        let response: HTTPResponse
        do {
            response = try withoutActuallyEscaping(sink) { sink in
                try client.send(
                    operation: operation, timeout: options.bytesTimeout,
                    sink: { head, bytes in
                        if bodyOffset == nil {
                            let (start, size) = Self.bodyStart(head)
                            bodyOffset = start
                            if let size { total = size }
                        }
                        let offset = bodyOffset ?? 0
                        let count = Int64(bytes.count)
                        bodyOffset = offset + count
                        // Hand over the part of these bytes in [position, wantedEnd).
                        let from = max(position, offset)
                        let to = min(wantedEnd, offset + count)
                        if from < to {
                            let slice = UnsafeRawBufferPointer(rebasing: bytes[Int(from - offset)..<Int(to - offset)])
                            try sink(slice)
                            position = to
                        }
                        // A server that sends past the range (a 200 with the whole object) is
                        // stopped; one that sends exactly the range keeps its connection.
                        if position >= wantedEnd, offset + count > wantedEnd { throw RangeComplete() }
                    },
                    incomplete: { response in
                        // An answer must cover the range up to the object's end (a range past it
                        // is clipped): one that stops short, however consistent its own headers,
                        // is a fault of the transfer, never a sign the object is shorter.
                        if total == nil { total = Self.bodyStart(HTTPResponseHead(status: response.status, headers: response.headers)).size }
                        let end = min(wantedEnd, total ?? wantedEnd)
                        guard end != Int64.max, position < end else { return nil }
                        let asked = range.map { "bytes \($0.lowerBound)-\(end - 1)" } ?? "\(end.counted("byte"))"
                        return "ended at byte \(position) of \(asked)" + (total.map { " of a \($0)-byte object" } ?? "")
                    },
                    build: { _ in
                        bodyOffset = nil
                        var headers: [(String, String)] = []
                        if range != nil || position > 0 {
                            let last = wantedEnd == Int64.max ? "" : String(wantedEnd - 1)
                            headers.append(("Range", "bytes=\(position)-\(last)"))
                        }
                        return try request("GET", key: key, headers: headers)
                    })
            }
        } catch is RangeComplete {
            return total
        }
        switch response.status {
        case 200, 206:
            if total == nil { total = Self.bodyStart(HTTPResponseHead(status: response.status, headers: response.headers)).size }
            return total
        case 404 where isKeyNotFound(response):
            throw missing(key, response)
        case 416:
            let size = S3XML(response.body).text("ActualObjectSize").flatMap { Int64($0) }
            throw rangeOutOfBounds(key, size: size)
        default:
            throw HTTPClient.statusError(response, operation: operation)
        }
    }

    /// Where a 200/206 body starts in the object and the object's size, from `Content-Range`
    /// (`bytes a-b/total`) or `Content-Length`.
    private static func bodyStart(_ head: HTTPResponseHead) -> (start: Int64, size: Int64?) {
        if head.status == 206, let range = head.headers["content-range"] {
            // bytes a-b/total
            let spec = range.split(separator: " ").last ?? ""
            let halves = spec.split(separator: "/")
            let start = halves.first.flatMap { $0.split(separator: "-").first }.flatMap { Int64($0) } ?? 0
            let size = halves.count > 1 ? Int64(halves[1]) : nil
            return (start, size)
        }
        return (0, head.headers["content-length"].flatMap { Int64($0) })
    }

    private func rangeOutOfBounds(_ key: String, size: Int64?) -> CovenError {
        var details = ["key": key]
        if let size { details["size"] = String(size) }
        return CovenError(.rangeOutOfBounds, "range starts past the end of '\(key)'", details: details)
    }

    public func head(_ key: String) throws -> ObjectInfo? {
        let response = try control("HEAD", key: key, operation: "look up '\(key)'")
        switch response.status {
        case 200:
            guard let size = response.header("content-length").flatMap({ Int64($0) }) else {
                throw CovenError.storage(
                    "storage gave no size for '\(key)'", failure: .provider, cause: "HEAD without Content-Length",
                    status: response.status)
            }
            return ObjectInfo(key: key, size: size)
        case 404:
            // A HEAD answer has no body to tell NoSuchKey from NoSuchBucket: check the bucket
            // once, so a wrong bucket name is an error rather than "nothing there".
            try confirmBucket()
            return nil
        default:
            throw HTTPClient.statusError(response, operation: "look up '\(key)'")
        }
    }

    private func confirmBucket() throws {
        guard !bucketConfirmed else { return }
        let response = try control("HEAD", key: nil, operation: "look up bucket '\(bucket)'")
        switch response.status {
        case 200:
            bucketConfirmed = true
        case 404:
            throw CovenError.storage(
                "bucket '\(bucket)' does not exist", failure: .provider, cause: "HTTP 404 NoSuchBucket", status: 404)
        default:
            throw HTTPClient.statusError(response, operation: "look up bucket '\(bucket)'")
        }
    }

    public func delete(_ key: String) throws {
        let response = try control("DELETE", key: key, operation: "delete '\(key)'")
        guard response.isSuccess || isKeyNotFound(response) else {
            throw HTTPClient.statusError(response, operation: "delete '\(key)'")
        }
    }

    /// The most keys one DeleteObjects request takes.
    static let deleteBatchLimit = 1000

    /// S3 DeleteObjects, up to 1,000 keys a request, quiet (only failures are answered), with
    /// the Content-MD5 S3 requires of it.
    public func deleteObjects(_ keys: [String]) throws -> [String: CovenError] {
        try deleteObjectsNotingAbsent(keys).failed
    }

    /// ``deleteObjects(_:)``; a key the service answers `NoSuchKey` for is absent (AWS answers
    /// a delete of nothing as done, so there none is).
    public func deleteObjectsNotingAbsent(_ keys: [String]) throws -> (failed: [String: CovenError], absent: Set<String>) {
        var failed: [String: CovenError] = [:]
        var absent: Set<String> = []
        var start = 0
        while start < keys.count {
            let batch = Array(keys[start..<min(keys.count, start + Self.deleteBatchLimit)])
            start += batch.count
            let operation = "delete \(batch.count) objects"
            var xml = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
            for key in batch { xml += "<Object><Key>\(S3XML.escape(objectKey(key)))</Key></Object>" }
            xml += "</Delete>"
            let body = Array(xml.utf8)
            let md5 = Data(MD5.digest(body)).base64EncodedString()
            let response = try body.withUnsafeBytes { bytes in
                try upload("POST", key: nil, query: [("delete", "")], headers: [("Content-MD5", md5)], body: bytes,
                           contentType: "application/xml", operation: operation)
            }
            guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
            let answer = S3XML(response.body)
            guard answer.rootName == "DeleteResult" else {
                throw CovenError.storage("storage gave an unreadable answer to a batch delete", failure: .provider,
                                         cause: "root element \(answer.rootName ?? "none")", status: response.status)
            }
            let storePrefix = prefix.isEmpty ? "" : prefix + "/"
            for block in answer.blocks("Error") {
                guard let name = block.text("Key") else { continue }
                let key = name.hasPrefix(storePrefix) ? String(name.dropFirst(storePrefix.count)) : name
                let code = block.text("Code") ?? ""
                if code == "NoSuchKey" {
                    absent.insert(key)
                    continue
                }
                let failure: StorageFailure = code == "AccessDenied" ? .denied : (code == "SlowDown" || code == "InternalError" ? .throttled : .provider)
                var error = CovenError.storage("storage \(failure == .denied ? "refused" : "failed") to delete '\(key)'", failure: failure,
                                               cause: code + (block.text("Message").map { ": \($0)" } ?? ""))
                error.details["provider_code"] = code
                error.details["key"] = key
                failed[key] = error
            }
        }
        return (failed, absent)
    }

    /// An S3 `Initiated` time (`2026-12-01T15:00:00.000Z`, fractions optional).
    static func parseInitiated(_ text: String) -> Date? {
        let withFractions = ISO8601DateFormatter()
        withFractions.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return withFractions.date(from: text) ?? ISO8601DateFormatter().date(from: text)
    }

    public func uploadsInProgress(prefix uploadsPrefix: String) throws -> [UploadInProgress] {
        let operation = "list the uploads under '\(uploadsPrefix)'"
        let storePrefix = prefix.isEmpty ? "" : prefix + "/"
        var uploads: [UploadInProgress] = []
        var markers: (key: String, upload: String)?
        repeat {
            var query: [(String, String)] = [("uploads", ""), ("prefix", storePrefix + uploadsPrefix)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.upload)] }
            let response = try control("GET", key: nil, query: query, operation: operation)
            guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
            let xml = S3XML(response.body)
            for block in xml.blocks("Upload") {
                guard let name = block.text("Key"), name.hasPrefix(storePrefix), let id = block.text("UploadId"), !id.isEmpty else { continue }
                uploads.append(UploadInProgress(key: String(name.dropFirst(storePrefix.count)), uploadID: id,
                                                initiated: block.text("Initiated").flatMap(Self.parseInitiated)))
            }
            markers = nil
            // moto ignores max-uploads and answers everything at once; S3 pages by 1,000.
            if xml.text("IsTruncated") == "true", let next = xml.text("NextKeyMarker"), let upload = xml.text("NextUploadIdMarker"),
               !(next.isEmpty && upload.isEmpty) {
                markers = (next, upload)
            }
        } while markers != nil
        return uploads
    }

    public func list(prefix listPrefix: String) throws -> [ObjectInfo] {
        try list(prefix: listPrefix, startAfter: nil, limit: nil)
    }

    public func list(prefix listPrefix: String, after startAfter: String, limit: Int) throws -> [ObjectInfo] {
        try list(prefix: listPrefix, startAfter: startAfter, limit: max(1, limit))
    }

    /// ListObjectsV2 of `listPrefix`: every page, or (with `limit`) the first page of at most
    /// `limit` keys after `startAfter`.
    private func list(prefix listPrefix: String, startAfter: String?, limit: Int?) throws -> [ObjectInfo] {
        let storePrefix = prefix.isEmpty ? "" : prefix + "/"
        let operation = "list '\(listPrefix)'"
        var objects: [ObjectInfo] = []
        var token: String?
        repeat {
            var query: [(String, String)] = [
                ("list-type", "2"), ("prefix", storePrefix + listPrefix), ("encoding-type", "url"),
                ("max-keys", String(min(limit ?? listPageSize, listPageSize))),
            ]
            if let startAfter { query.append(("start-after", storePrefix + startAfter)) }
            if let token { query.append(("continuation-token", token)) }
            let response = try control("GET", key: nil, query: query, operation: operation)
            guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
            let xml = S3XML(response.body)
            guard xml.rootName == "ListBucketResult" else {
                throw CovenError.storage(
                    "storage gave an unreadable listing for '\(listPrefix)'", failure: .provider,
                    cause: "root element \(xml.rootName ?? "none")", status: response.status)
            }
            let encoded = xml.text("EncodingType") == "url"
            for block in xml.blocks("Contents") {
                guard var name = block.text("Key"), let size = block.text("Size").flatMap({ Int64($0) }) else { continue }
                if encoded { name = Self.urlDecode(name) }
                guard name.hasPrefix(storePrefix) else { continue }
                objects.append(ObjectInfo(key: String(name.dropFirst(storePrefix.count)), size: size))
            }
            token = try Self.nextPage(xml, marker: "NextContinuationToken", of: "listing", status: response.status)
        } while token != nil && limit == nil
        objects.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        return objects
    }

    /// Where the next page of a paged answer starts (ListObjectsV2, ListParts): nil on the last
    /// page.
    ///
    /// - Throws: `.storage` (provider) for a truncated page that names no next page.
    static func nextPage(_ xml: S3XML, marker: String, of what: String, status: Int) throws -> String? {
        guard xml.text("IsTruncated") == "true" else { return nil }
        guard let next = xml.text(marker), !next.isEmpty else {
            throw CovenError.storage(
                "storage gave a truncated \(what) without \(marker)", failure: .provider,
                cause: "IsTruncated true, no \(marker)", status: status)
        }
        return next
    }

    /// Decodes a key of an `encoding-type=url` listing. AWS and SeaweedFS write a space as `+`
    /// (and `+` as `%2B`), moto writes `%20`: both decode the same way.
    static func urlDecode(_ text: String) -> String {
        let plus = text.replacingOccurrences(of: "+", with: " ")
        return plus.removingPercentEncoding ?? plus
    }

    // MARK: - Bucket

    /// Creates the bucket when it does not exist (for tests and first-time setup).
    ///
    /// Outside us-east-1 the request names the region, as S3 requires.
    ///
    /// - Throws: ``CovenError`` `.storage` when the service refuses (the name is taken by
    ///   someone else, access denied) or cannot be reached.
    public func createBucket() throws {
        let operation = "create bucket '\(bucket)'"
        var body: [UInt8] = []
        if region != "us-east-1" {
            body = Array(("<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                + "<LocationConstraint>\(S3XML.escape(region))</LocationConstraint></CreateBucketConfiguration>").utf8)
        }
        let response = try body.withUnsafeBytes { bytes in
            try upload("PUT", key: nil, body: bytes, contentType: "application/xml", operation: operation)
        }
        if response.isSuccess || providerCode(response) == "BucketAlreadyOwnedByYou" { return }
        throw HTTPClient.statusError(response, operation: operation)
    }
}

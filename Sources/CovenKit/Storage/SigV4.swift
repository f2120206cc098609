import Foundation

// MARK: - Credentials

/// An AWS access key pair, with the session token of temporary credentials.
struct SigV4Credentials: Sendable, Equatable {
    /// `AWS_ACCESS_KEY_ID`.
    var accessKeyID: String
    /// `AWS_SECRET_ACCESS_KEY`.
    var secretAccessKey: String
    /// `AWS_SESSION_TOKEN`, sent as `x-amz-security-token` when present.
    var sessionToken: String?
}

// MARK: - Signer

/// AWS Signature Version 4, computed by coven rather than by libcurl.
///
/// libcurl 7.88's `CURLOPT_AWS_SIGV4` signs the query string as written (unsorted, unencoded)
/// and never sends `x-amz-content-sha256` (see shared/s3/README.md), so coven builds the
/// canonical request itself and sends exactly the path and query it signed.
///
/// The steps, as the AWS documentation names them ("Create a canonical request", "Create a string
/// to sign", "Calculate the signature"):
///
/// ```
/// CanonicalRequest = Method \n CanonicalURI \n CanonicalQuery \n CanonicalHeaders \n
///                    SignedHeaders \n PayloadHash
/// StringToSign     = "AWS4-HMAC-SHA256" \n AmzDate \n Scope \n hex(SHA256(CanonicalRequest))
/// SigningKey       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, Date), Region), Service), "aws4_request")
/// Signature        = hex(HMAC(SigningKey, StringToSign))
/// ```
///
/// S3 does not normalize paths: each key segment is percent-encoded once, `/` kept.
struct SigV4Signer: Sendable {
    /// The key pair that signs.
    var credentials: SigV4Credentials
    /// The region of the credential scope (`us-east-1`).
    var region: String
    /// The service of the credential scope (`s3`).
    var service: String

    /// `x-amz-content-sha256` for a body that is not hashed (parts and large objects).
    static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// The hex SHA-256 of an empty body.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// Everything one signature produced, kept apart so tests can tell which step is wrong.
    struct Signature: Equatable {
        /// The canonical request text.
        var canonicalRequest: String
        /// The string to sign.
        var stringToSign: String
        /// `host;x-amz-date;…`.
        var signedHeaders: String
        /// The hex signature.
        var signature: String
        /// The full `Authorization` header value.
        var authorization: String
    }

    /// Signs a request.
    ///
    /// - Parameters:
    ///   - method: `GET`, `PUT`, …
    ///   - path: the raw path (not yet encoded), starting with `/`; it is encoded with
    ///     ``SigV4Signer/encodePath(_:)``, which is also what must be sent.
    ///   - query: raw (decoded) query pairs; see ``SigV4Signer/canonicalQuery(_:)``.
    ///   - headers: every header to sign, including `host` and `x-amz-date` (any case).
    ///   - payloadHash: the hex SHA-256 of the body, or ``unsignedPayload``.
    ///   - amzDate: the `x-amz-date` value, `yyyyMMdd'T'HHmmss'Z'`.
    /// - Returns: the intermediate strings and the `Authorization` value.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    func sign(
        method: String, path: String, query: [(String, String)], headers: [(String, String)],
        payloadHash: String, amzDate: String
    ) throws -> Signature {
        var canonicalHeaders: [String: String] = [:]
        for (name, value) in headers {
            let key = name.lowercased()
            let trimmed = Self.trimHeaderValue(value)
            if let existing = canonicalHeaders[key] {
                canonicalHeaders[key] = existing + "," + trimmed
            } else {
                canonicalHeaders[key] = trimmed
            }
        }
        let names = canonicalHeaders.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let signedHeaders = names.joined(separator: ";")
        var canonical = method + "\n" + Self.encodePath(path) + "\n" + Self.canonicalQuery(query) + "\n"
        for name in names {
            canonical += name + ":" + (canonicalHeaders[name] ?? "") + "\n"
        }
        canonical += "\n" + signedHeaders + "\n" + payloadHash

        let day = String(amzDate.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = "AWS4-HMAC-SHA256\n\(amzDate)\n\(scope)\n" + SHA256.digest(Array(canonical.utf8)).hex

        var key = try HMACSHA256.authenticate(day, key: Array(("AWS4" + credentials.secretAccessKey).utf8))
        key = try HMACSHA256.authenticate(region, key: key)
        key = try HMACSHA256.authenticate(service, key: key)
        key = try HMACSHA256.authenticate("aws4_request", key: key)
        let signature = try HMACSHA256.authenticate(stringToSign, key: key).hex
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), "
            + "SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signature(
            canonicalRequest: canonical, stringToSign: stringToSign, signedHeaders: signedHeaders,
            signature: signature, authorization: authorization)
    }

    // MARK: - Encoding

    /// Percent-encodes `text` as SigV4 requires: every byte of its UTF-8 form but
    /// `A-Z a-z 0-9 - _ . ~` (and `/` when `keepSlash`) becomes `%XX` with uppercase hex.
    static func percentEncode(_ text: String, keepSlash: Bool) -> String {
        let hex: [UInt8] = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "."), UInt8(ascii: "~"):
                out.append(byte)
            case UInt8(ascii: "/") where keepSlash:
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0f)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The canonical URI of a raw path: each segment encoded once, `/` kept; `/` when empty.
    static func encodePath(_ path: String) -> String {
        path.isEmpty ? "/" : percentEncode(path, keepSlash: true)
    }

    /// The canonical query string: names and values encoded, pairs sorted by encoded name then
    /// value, `name=value` joined by `&` (a bare name gets `=`). Sent exactly so.
    static func canonicalQuery(_ query: [(String, String)]) -> String {
        query.map { (percentEncode($0.0, keepSlash: false), percentEncode($0.1, keepSlash: false)) }
            .sorted { a, b in
                a.0 == b.0 ? a.1.utf8.lexicographicallyPrecedes(b.1.utf8) : a.0.utf8.lexicographicallyPrecedes(b.0.utf8)
            }
            .map { $0.0 + "=" + $0.1 }
            .joined(separator: "&")
    }

    /// A header value with its ends trimmed and inner runs of spaces collapsed to one.
    static func trimHeaderValue(_ value: String) -> String {
        var out = ""
        var pendingSpace = false
        for character in value.trimmingCharacters(in: .whitespaces) {
            if character == " " || character == "\t" {
                pendingSpace = true
                continue
            }
            if pendingSpace { out.append(" ") }
            pendingSpace = false
            out.append(character)
        }
        return out
    }

    /// The `x-amz-date` form of a moment: `yyyyMMdd'T'HHmmss'Z'`, in UTC.
    static func amzDate(_ date: Date = Date()) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }
}

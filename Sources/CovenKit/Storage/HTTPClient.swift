import CCurl
import Foundation

// MARK: - Requests and responses

/// One HTTP request as ``HTTPClient`` sends it.
struct HTTPRequest {
    /// `GET`, `HEAD`, `PUT`, `POST` or `DELETE`.
    var method: String
    /// The full URL, path and query already encoded exactly as signed.
    var url: String
    /// Headers to send, in order (`Host`, `Authorization`, `x-amz-*`, `Range`, …).
    var headers: [(String, String)]
    /// The body's type; always sent for `PUT` and `POST` so libcurl never adds its default
    /// `application/x-www-form-urlencoded` (shared/s3/README.md, deviation 2).
    var contentType: String = "application/octet-stream"
}

/// What the server answered before the body: the status and the headers.
struct HTTPResponseHead {
    /// The HTTP status of the final response (never a 100 Continue).
    var status: Int = 0
    /// Headers by lowercase name (the last one wins).
    var headers: [String: String] = [:]
}

/// A complete answer: head and, unless it was streamed, the body.
struct HTTPResponse {
    /// The HTTP status.
    var status: Int
    /// Headers by lowercase name.
    var headers: [String: String]
    /// The body, when collected (always for errors, up to a limit when streaming).
    var body: [UInt8]

    /// A header's value by case-insensitive name.
    func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// True for 2xx.
    var isSuccess: Bool { (200..<300).contains(status) }
}

/// Receives the body of a 2xx response as it arrives, in the pieces libcurl read.
typealias HTTPBodySink = (HTTPResponseHead, UnsafeRawBufferPointer) throws -> Void

// MARK: - libcurl

/// libcurl, loaded by the first ``HTTPClient`` of the process (Sources/CCurl/shim.h says why it
/// is not linked), then initialized once with `curl_global_init`.
struct CurlLibrary: @unchecked Sendable {
    /// The resolved functions; loaded once and never unloaded, so the pointer stays valid.
    let api: UnsafePointer<coven_curl_api>

    /// The process's libcurl, or why it could not be loaded.
    static let shared: Swift.Result<CurlLibrary, CovenError> = {
        let table = UnsafeMutablePointer<coven_curl_api>.allocate(capacity: 1)
        table.initialize(to: coven_curl_api())
        if let message = coven_curl_load(table) {
            table.deallocate()
            return .failure(CovenError(.internal, "libcurl could not be loaded (install the libcurl4 package)", cause: String(cString: message)))
        }
        let code = coven_curl_global_init(table, Int(CURL_GLOBAL_SSL))
        guard code == CURLE_OK else {
            return .failure(CovenError(.internal, "libcurl failed to initialize", cause: String(cString: coven_curl_easy_strerror(table, code))))
        }
        return .success(CurlLibrary(api: UnsafePointer(table)))
    }()
}

// MARK: - The client

/// An HTTP/1.1 client over one libcurl easy handle, reused across requests so connections are
/// kept alive.
///
/// Not Sendable: one owner (one task). The handle and its error buffer are freed in `deinit`.
///
/// Every request runs under a whole-request timeout (`CURLOPT_TIMEOUT_MS`), a connect timeout,
/// and a low-speed limit, so a stalled transfer fails instead of hanging. Connection failures,
/// 429 and 500/502/503/504 are retried ``StorageOptions/requestRetries`` times with exponential
/// backoff and jitter, honouring `Retry-After` up to ``maximumRetryAfter`` seconds.
///
/// Related documentation: libcurl's `curl_easy_setopt(3)`, `curl_easy_reset(3)` (which keeps
/// live connections), `CURLOPT_ERRORBUFFER`, `CURLOPT_POSTFIELDS`.
final class HTTPClient {
    private let curl: UnsafePointer<coven_curl_api>
    private let handle: UnsafeMutableRawPointer
    private let errorBuffer: UnsafeMutablePointer<CChar>
    /// Timeouts and retries.
    let options: StorageOptions
    /// A CA bundle for TLS (`AWS_CA_BUNDLE`), when set.
    let caBundle: String?
    /// The longest `Retry-After` waited for within one call; a longer one ends the retries and
    /// the caller gets the `.throttled` failure with the wait.
    var maximumRetryAfter: Double = 30
    /// The first backoff delay in seconds; doubled each attempt up to ``maximumBackoff``.
    var initialBackoff: Double = 0.2
    /// The longest backoff delay in seconds.
    var maximumBackoff: Double = 8

    /// Opens an easy handle.
    ///
    /// - Throws: ``CovenError`` `.internal` when libcurl cannot be loaded or initialized.
    init(options: StorageOptions, caBundle: String? = nil) throws {
        let curl = try CurlLibrary.shared.get().api
        self.curl = curl
        guard let handle = coven_curl_easy_init(curl) else {
            throw CovenError(.internal, "libcurl failed to create a handle")
        }
        self.handle = handle
        self.errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        self.errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        self.options = options
        self.caBundle = caBundle
    }

    deinit {
        coven_curl_easy_cleanup(curl, handle)
        errorBuffer.deallocate()
    }

    // MARK: - Sending with retries

    /// Sends a request, retrying connection failures and 429/5xx answers.
    ///
    /// `build` is called before every attempt (so each is signed afresh) with the number of
    /// body bytes already handed to `sink` by earlier attempts: a caller streaming a GET asks
    /// for the rest of the range, so a retry resumes instead of repeating bytes.
    ///
    /// - Parameters:
    ///   - operation: what is being done, for messages (`get 'files/a/b'`).
    ///   - timeout: the whole-request timeout in seconds.
    ///   - body: the request body, sent from this memory without a copy of its own
    ///     (`CURLOPT_POSTFIELDS`); it must stay valid during the call.
    ///   - sink: where a 2xx body goes as it arrives; nil collects it into the response.
    ///   - build: makes the request for one attempt.
    ///   - incomplete: for a 2xx answer, what it lacks when it does not cover what was asked
    ///     (a 206 whose own `Content-Range` and `Content-Length` agree on fewer bytes than the
    ///     range), nil when it does. Such an answer is a fault of the transfer, as a body cut
    ///     short of its `Content-Length` is (which curl reports): retried the same way, the
    ///     next attempt asking for the rest (`build`), and a storage error once the retries
    ///     run out.
    /// - Returns: the final response, whatever its status (after retries for retryable ones).
    /// - Throws: ``CovenError`` `.storage` with failure `.network` (or `.provider` for a bad URL)
    ///   when no response came, carrying the curl error text, or failure `.provider` for an
    ///   answer still incomplete after the retries; the sink's own error, unchanged; what
    ///   `build` throws.
    func send(
        operation: String, timeout: Double, body: UnsafeRawBufferPointer? = nil, sink: HTTPBodySink? = nil,
        incomplete: ((HTTPResponse) -> String?)? = nil,
        build: (_ delivered: Int64) throws -> HTTPRequest
    ) throws -> HTTPResponse {
        var attempt = 0
        var delivered: Int64 = 0
        while true {
            let request = try build(delivered)
            let outcome = try perform(request, timeout: timeout, body: body, sink: sink)
            delivered += outcome.delivered
            if case .response(let response) = outcome.result, response.isSuccess, let lack = incomplete?(response) {
                if attempt < options.requestRetries {
                    try pause(backoff(attempt), operation: operation)
                    attempt += 1
                    continue
                }
                let tries = attempt > 0 ? " after \((attempt + 1).counted("attempt"))" : ""
                var error = CovenError.storage(
                    "storage answered short to \(operation)\(tries)", failure: .provider,
                    cause: "HTTP \(response.status) " + lack)
                error.details["status"] = String(response.status)
                throw error
            }
            switch outcome.result {
            case .failure(let code, let text):
                // A signal ends the request (libcurl's progress callback, or a system call it
                // cut short): the signal's stop, whatever libcurl says.
                if code == CURLE_ABORTED_BY_CALLBACK || Stop.signalled, let reason = Stop.process.reason {
                    throw CovenError(.interrupted, "\(operation) stopped: \(reason)")
                }
                if Self.isRetryable(code), attempt < options.requestRetries {
                    try pause(backoff(attempt), operation: operation)
                    attempt += 1
                    continue
                }
                throw Self.transportError(operation: operation, code: code, text: text, attempts: attempt + 1)
            case .response(let response):
                if Self.isRetryable(status: response.status), attempt < options.requestRetries {
                    let wait: Double
                    if let retryAfter = Self.retryAfter(response.header("retry-after")) {
                        guard retryAfter <= maximumRetryAfter else { return response }
                        wait = retryAfter
                    } else {
                        wait = backoff(attempt)
                    }
                    try pause(wait, operation: operation)
                    attempt += 1
                    continue
                }
                return response
            }
        }
    }

    /// Waits before a retry; a signal ends the wait (and the call) at once.
    ///
    /// - Throws: `.interrupted`.
    private func pause(_ seconds: Double, operation: String) throws {
        if !Stop.process.sleep(seconds) { try Stop.process.check(operation) }
    }

    /// The delay before retry number `attempt + 1`: exponential, with "equal jitter" (half fixed,
    /// half random) so parallel clients spread out.
    private func backoff(_ attempt: Int) -> Double {
        let ceiling = min(maximumBackoff, initialBackoff * pow(2, Double(attempt)))
        return ceiling / 2 + Double.random(in: 0...(ceiling / 2))
    }

    /// Connection-level failures worth another attempt.
    static func isRetryable(_ code: CURLcode) -> Bool {
        [CURLE_COULDNT_CONNECT, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING,
         CURLE_OPERATION_TIMEDOUT, CURLE_PARTIAL_FILE].contains(code)
    }

    /// Statuses worth another attempt: throttling and transient server errors.
    static func isRetryable(status: Int) -> Bool {
        [429, 500, 502, 503, 504].contains(status)
    }

    /// Seconds from a `Retry-After` value: delta seconds or an HTTP date.
    static func retryAfter(_ value: String?) -> Double? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Double(value) { return max(0, seconds) }
        // An IMF-fixdate (RFC 9110 section 5.6.7); rare, so a formatter per call is fine.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let when = formatter.date(from: value) else { return nil }
        return max(0, when.timeIntervalSinceNow)
    }

    // MARK: - Errors

    private static func transportError(operation: String, code: CURLcode, text: String, attempts: Int) -> CovenError {
        let failure: StorageFailure
        switch code {
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT:
            failure = .provider
        default:
            failure = .network
        }
        let tries = attempts > 1 ? " after \(attempts.counted("attempt"))" : ""
        var error = CovenError.storage(
            "cannot reach storage to \(operation)\(tries)", failure: failure,
            cause: "curl error \(code.rawValue): \(text)")
        error.details["curl_code"] = String(code.rawValue)
        return error
    }

    /// The ``CovenError`` for a response the caller did not expect: the status, S3's `<Code>` and
    /// `<Message>`, and the failure class.
    ///
    /// 401/403 are `.denied`; 429 and 503 `.throttled` (with `Retry-After`); 507,
    /// `EntityTooLarge` and `QuotaExceeded` `.full`; 502/504 `.network`; the rest `.provider`.
    static func statusError(_ response: HTTPResponse, operation: String) -> CovenError {
        let xml = S3XML(response.body)
        let code = xml.rootName == "Error" ? xml.text("Code") : nil
        let message = xml.rootName == "Error" ? xml.text("Message") : nil
        var cause = "HTTP \(response.status)"
        if let code { cause += " \(code)" }
        if let message, !message.isEmpty { cause += ": \(message)" }
        let failure: StorageFailure
        switch (response.status, code ?? "") {
        case (401, _), (403, _): failure = .denied
        case (429, _), (503, _), (_, "SlowDown"): failure = .throttled
        case (507, _), (_, "EntityTooLarge"), (_, "QuotaExceeded"): failure = .full
        case (502, _), (504, _): failure = .network
        default: failure = .provider
        }
        let retryAfter = failure == .throttled ? retryAfter(response.header("retry-after")) : nil
        let verb: String
        switch failure {
        case .denied: verb = "storage refused access to"
        case .throttled: verb = "storage asked to slow down to"
        case .full: verb = "storage is full; cannot"
        case .network, .provider: verb = "storage failed to"
        }
        var error = CovenError.storage(
            "\(verb) \(operation)", failure: failure, cause: cause, status: response.status, retryAfter: retryAfter)
        if let code { error.details["provider_code"] = code }
        if failure == .denied {
            error.hint = "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and the bucket's permissions"
        }
        return error
    }

    // MARK: - One attempt

    private enum Result {
        case response(HTTPResponse)
        case failure(CURLcode, String)
    }

    private struct Outcome {
        var result: Result
        var delivered: Int64
    }

    /// Sets one option, checking its code.
    private func set(_ code: CURLcode, _ option: String) throws {
        guard code == CURLE_OK else {
            throw CovenError(.internal, "libcurl refused option \(option)", cause: String(cString: coven_curl_easy_strerror(curl, code)))
        }
    }

    private func perform(
        _ request: HTTPRequest, timeout: Double, body: UnsafeRawBufferPointer?, sink: HTTPBodySink?
    ) throws -> Outcome {
        try setCommonOptions(request, timeout: timeout)
        var list: UnsafeMutablePointer<curl_slist>?
        defer { coven_curl_slist_free_all(curl, list) }
        list = try setMethodAndHeaders(request)
        let empty: [UInt8] = [0]
        let transfer = Transfer(sink: sink)
        return try withExtendedLifetime(transfer) {
            let context = Unmanaged.passUnretained(transfer).toOpaque()
            try set(coven_curl_setopt_callback(curl, handle, CURLOPT_HEADERFUNCTION) { data, size, count, context in
                guard let data, let context else { return 0 }
                let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
                transfer.header(UnsafeRawBufferPointer(start: data, count: size * count))
                return size * count
            }, "HEADERFUNCTION")
            try set(coven_curl_setopt_pointer(curl, handle, CURLOPT_HEADERDATA, context), "HEADERDATA")
            try set(coven_curl_setopt_callback(curl, handle, CURLOPT_WRITEFUNCTION) { data, size, count, context in
                guard let context else { return 0 }
                let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
                return transfer.receive(UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
            }, "WRITEFUNCTION")
            try set(coven_curl_setopt_pointer(curl, handle, CURLOPT_WRITEDATA, context), "WRITEDATA")

            let code: CURLcode = try empty.withUnsafeBytes { emptyBytes in
                if request.method == "PUT" || request.method == "POST" {
                    // The body goes straight from the caller's memory: POSTFIELDS is not copied by
                    // libcurl, and CUSTOMREQUEST turns the POST into a PUT where needed.
                    let bytes = body ?? UnsafeRawBufferPointer(rebasing: emptyBytes[0..<0])
                    let base = bytes.baseAddress ?? emptyBytes.baseAddress
                    try set(coven_curl_setopt_off(curl, handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count)), "POSTFIELDSIZE_LARGE")
                    try set(coven_curl_setopt_pointer(curl, handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: base)), "POSTFIELDS")
                    if request.method == "PUT" {
                        try set(coven_curl_setopt_string(curl, handle, CURLOPT_CUSTOMREQUEST, "PUT"), "CUSTOMREQUEST")
                    }
                }
                return coven_curl_easy_perform(curl, handle)
            }
            if let error = transfer.sinkError { throw error }
            guard code == CURLE_OK else {
                let text = errorBuffer[0] != 0 ? String(cString: errorBuffer) : String(cString: coven_curl_easy_strerror(curl, code))
                return Outcome(result: .failure(code, text), delivered: transfer.delivered)
            }
            var status = 0
            if coven_curl_getinfo_long(curl, handle, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK, status != 0 {
                transfer.head.status = status
            }
            let response = HTTPResponse(status: transfer.head.status, headers: transfer.head.headers, body: transfer.body)
            return Outcome(result: .response(response), delivered: transfer.delivered)
        }
    }

    /// Resets the handle (keeping live connections, so each request starts from defaults) and
    /// sets what every request shares: the URL, timeouts, the stall limit, the signal check,
    /// buffers and the CA bundle.
    private func setCommonOptions(_ request: HTTPRequest, timeout: Double) throws {
        coven_curl_easy_reset(curl, handle)
        errorBuffer[0] = 0
        try set(coven_curl_setopt_pointer(curl, handle, CURLOPT_ERRORBUFFER, errorBuffer), "ERRORBUFFER")
        try request.url.withCString { try set(coven_curl_setopt_string(curl, handle, CURLOPT_URL, $0), "URL") }
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_NOSIGNAL, 1), "NOSIGNAL")
        // Keys may hold "." and ".." segments: send the path exactly as signed.
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_PATH_AS_IS, 1), "PATH_AS_IS")
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(options.connectTimeout)), "CONNECTTIMEOUT_MS")
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_TIMEOUT_MS, Self.milliseconds(timeout)), "TIMEOUT_MS")
        // A transfer slower than 1 byte/s for this long is stalled.
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_LOW_SPEED_LIMIT, 1), "LOW_SPEED_LIMIT")
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_LOW_SPEED_TIME, max(1, Int(min(timeout, 30).rounded(.up)))), "LOW_SPEED_TIME")
        // A signal ends a request in flight, even a stalled one: libcurl calls this at least once
        // a second.
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_NOPROGRESS, 0), "NOPROGRESS")
        try set(coven_curl_setopt_xferinfo(curl, handle) { _, _, _, _, _ in Stop.signalled ? 1 : 0 }, "XFERINFOFUNCTION")
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_BUFFERSIZE, 512 * 1024), "BUFFERSIZE")
        try set(coven_curl_setopt_long(curl, handle, CURLOPT_UPLOAD_BUFFERSIZE, 2 * 1024 * 1024), "UPLOAD_BUFFERSIZE")
        if let caBundle {
            try caBundle.withCString { try set(coven_curl_setopt_string(curl, handle, CURLOPT_CAINFO, $0), "CAINFO") }
        }
    }

    /// Sets the request's method and headers: the header list, which the caller frees after
    /// the transfer.
    private func setMethodAndHeaders(_ request: HTTPRequest) throws -> UnsafeMutablePointer<curl_slist>? {
        var headerLines = request.headers.map { "\($0.0): \($0.1)" }
        // No "Expect: 100-continue" round trip before bodies.
        headerLines.append("Expect:")
        switch request.method {
        case "GET":
            try set(coven_curl_setopt_long(curl, handle, CURLOPT_HTTPGET, 1), "HTTPGET")
        case "HEAD":
            try set(coven_curl_setopt_long(curl, handle, CURLOPT_NOBODY, 1), "NOBODY")
        case "PUT", "POST":
            headerLines.append("Content-Type: \(request.contentType)")
        default:
            try request.method.withCString { try set(coven_curl_setopt_string(curl, handle, CURLOPT_CUSTOMREQUEST, $0), "CUSTOMREQUEST") }
        }
        var list: UnsafeMutablePointer<curl_slist>?
        do {
            for line in headerLines {
                guard let appended = coven_curl_slist_append(curl, list, line) else {
                    throw CovenError(.internal, "libcurl could not add a header")
                }
                list = appended
            }
            try set(coven_curl_setopt_slist(curl, handle, CURLOPT_HTTPHEADER, list), "HTTPHEADER")
        } catch {
            coven_curl_slist_free_all(curl, list)
            throw error
        }
        return list
    }

    private static func milliseconds(_ seconds: Double) -> Int {
        max(1, Int((seconds * 1000).rounded(.up)))
    }
}

// MARK: - Transfer state

/// The state of one attempt, reached from libcurl's callbacks through their user pointer.
private final class Transfer {
    /// Most of an error body kept when a sink streams the 2xx bodies.
    static let errorBodyLimit = 64 * 1024

    var head = HTTPResponseHead()
    var body: [UInt8] = []
    let sink: HTTPBodySink?
    var sinkError: Error?
    var delivered: Int64 = 0

    init(sink: HTTPBodySink?) { self.sink = sink }

    /// One header line (or a status line, which starts a new response: 100 Continue, redirects).
    func header(_ line: UnsafeRawBufferPointer) {
        var text = String(decoding: line, as: UTF8.self)
        while let last = text.last, last.isNewline { text.removeLast() }  // "\r\n" is one Character
        if text.hasPrefix("HTTP/") {
            let fields = text.split(separator: " ", maxSplits: 2)
            head = HTTPResponseHead(status: fields.count > 1 ? Int(fields[1]) ?? 0 : 0, headers: [:])
            body.removeAll(keepingCapacity: true)
            return
        }
        guard let colon = text.firstIndex(of: ":") else { return }
        let name = text[..<colon].lowercased()
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        head.headers[name] = value
    }

    /// Body bytes: to the sink for a 2xx answer, else collected. False stops the transfer.
    func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if let sink, (200..<300).contains(head.status) {
            do {
                try sink(head, bytes)
                delivered += Int64(bytes.count)
                return true
            } catch {
                sinkError = error
                return false
            }
        }
        if sink != nil {
            let room = Self.errorBodyLimit - body.count
            if room > 0 { body.append(contentsOf: bytes.prefix(room)) }
        } else {
            body.append(contentsOf: bytes)
        }
        return true
    }
}

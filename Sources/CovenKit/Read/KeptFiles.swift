import Foundation

// MARK: - Pins

extension Device {
    /// Keeps stored files offline: pinned files stay outside the budget and no trim takes them.
    ///
    /// - Parameter ids: file ids.
    /// - Returns: the ids newly pinned (already pinned ones are left as they are).
    /// - Throws: `.fileAbsent` for an id with no record (nothing is pinned then);
    ///   `.deviceOnly` for a file on another device only.
    @discardableResult
    public func pin(_ ids: [String]) throws -> [String] {
        for id in ids {
            let record = try requireFile(id)
            if record.coordinates.at == .device, record.coordinates.device != deviceID { throw deviceOnlyError(record) }
        }
        var added: [String] = []
        try database.transaction {
            for id in ids {
                if try fileRecords.pin(id) { added.append(id) }
            }
        }
        return added
    }

    /// Stops keeping files offline; their cached bytes count toward the budget again.
    ///
    /// - Returns: the ids that were pinned.
    /// - Throws: `.fileAbsent` for an id with no record and no pin.
    @discardableResult
    public func unpin(_ ids: [String]) throws -> [String] {
        var removed: [String] = []
        try database.transaction {
            for id in ids {
                if try fileRecords.unpin(id) { removed.append(id) } else { _ = try requireFile(id) }
            }
        }
        return removed
    }
}

// MARK: - fetch-kept

/// How `coven fetch-kept` ended.
public enum FetchKeptStop: String, Sendable {
    /// Every kept file is held (some may have failed otherwise: see the failures).
    case done
    /// The disk had no room for the next file.
    case noRoom = "no_room"
    /// Storage could not be reached.
    case offline
    /// The server asked for a wait longer than a minute.
    case throttled
    /// Interrupted (SIGINT).
    case interrupted
}

/// One kept file fetch-kept worked on.
public struct FetchKeptItem: Sendable {
    /// The file id.
    public var file: String
    /// Its size.
    public var size: Int64
    /// Sealed bytes fetched for it.
    public var bytesFetched: Int64
    /// The error that stopped it, if any.
    public var error: CovenError?
}

/// What `coven fetch-kept` did.
public struct FetchKeptResult: Sendable {
    /// Why it ended.
    public var stop: FetchKeptStop = .done
    /// The error that stopped it, for every stop but `.done`.
    public var stopError: CovenError?
    /// Files fetched whole, in order.
    public var fetched: [FetchKeptItem] = []
    /// Files passed over because they failed otherwise.
    public var failed: [FetchKeptItem] = []
    /// Kept files that were already held.
    public var alreadyHeld: Int = 0
    /// Kept files not tried because it stopped first.
    public var remaining: Int = 0
    /// The waits the server asked for and that were waited out, in seconds.
    public var waited: [Double] = []
}

extension Device {
    /// The longest wait a server may ask for that fetch-kept waits out.
    public static let longestWaitedRetry: Double = 60

    /// Kept stored files not held whole, smallest first.
    func keptFilesToFetch() throws -> (toFetch: [FileRecord], held: Int) {
        // Each with its place and its cache entry's state, in the same pass: no query and no
        // JSON decoding per file but for those to fetch (a library of 100,000 kept files all held
        // is looked over in well under a second).
        let rows = try database.query("""
            SELECT f.id, f.place AS at, f.device AS device, f.object AS object, c.complete AS cache_state
            FROM coven_files f
            LEFT JOIN coven_cache c ON c.object = f.object
            WHERE \(Self.keptFile)
            ORDER BY f.size, f.id
            """, [try keptNamespaces()])
        var seen: Set<String> = []
        var toFetch: [FileRecord] = []
        var held = 0
        for row in rows {
            if row.string("at") == Coordinates.Place.device.rawValue {
                if row.string("device") == deviceID { held += 1 }
                continue
            }
            let object = row.string("object") ?? ""
            guard seen.insert(object).inserted else { held += 1; continue }
            let state = row.int("cache_state").flatMap(CacheState.init(rawValue:))
            // Held: complete, and its data file checked and not written since (a file damaged
            // since is read through again by the fetch, every chunk checked).
            let data = cachePaths(object: object).data
            if state == .complete || state == .completeVerified, access(data, R_OK) == 0, isStillChecked("cache:" + object, path: data) {
                held += 1
                continue
            }
            toFetch.append(try requireFile(row.string("id") ?? ""))
        }
        return (toFetch, held)
    }

    /// Fetches every kept file not held, smallest first (spec/keep-files-on-a-device.md
    /// "Keep attachments offline").
    ///
    /// Waits out a server asking for a wait of a minute or less; stops at the first file the
    /// disk has no room for, once storage cannot be reached, or once the server asks for a
    /// longer wait; passes over a file that fails otherwise. `stop` stops it between
    /// runs of chunks; files already fetched stay, and the bytes of the one in flight stay as a
    /// partial. Each failure is recorded for `coven status`.
    ///
    /// - Parameters:
    ///   - stop: polled often; a stop asked ends the fetch.
    ///   - sleep: waits out a server's Retry-After (replaceable in tests).
    /// - Returns: what was fetched, what failed and why it stopped.
    public func fetchKept(
        stop: Stop = Stop(), sleep: (Double) -> Void = { Thread.sleep(forTimeInterval: $0) }
    ) throws -> FetchKeptResult {
        var result = FetchKeptResult()
        let (toFetch, held) = try keptFilesToFetch()
        result.alreadyHeld = held
        var index = 0
        var throttledTries = 0
        while index < toFetch.count {
            let record = toFetch[index]
            if let reason = stop.reason {
                result.stop = .interrupted
                result.stopError = CovenError(.interrupted, "fetch-kept stopped: \(reason)")
                break
            }
            do {
                let (_, report) = try holdFile(record.id, stop: stop)
                try setFetchFailure(record.coordinates.object, nil)
                result.fetched.append(FetchKeptItem(file: record.id, size: record.size, bytesFetched: report.bytesFetched))
                index += 1
                throttledTries = 0
            } catch {
                let error = error.asCovenError
                switch (error.code, error.storageFailure) {
                case (.interrupted, _):
                    result.stop = .interrupted
                case (.noRoom, _):
                    try setFetchFailure(record.coordinates.object, "too_large_for_disk")
                    result.stop = .noRoom
                case (.storage, .network?):
                    result.stop = .offline
                case (.storage, .throttled?):
                    let wait = error.retryAfter ?? 1
                    throttledTries += 1
                    if wait <= Self.longestWaitedRetry && throttledTries <= 5 {
                        result.waited.append(wait)
                        sleep(wait)
                        continue
                    }
                    result.stop = .throttled
                default:
                    try setFetchFailure(record.coordinates.object, error.code == .missing ? "missing" : "failed")
                    result.failed.append(FetchKeptItem(file: record.id, size: record.size, bytesFetched: 0, error: error))
                    index += 1
                    throttledTries = 0
                    continue
                }
                result.stopError = error
                break
            }
        }
        result.remaining = toFetch.count - index - (result.stop == .done ? 0 : 0)
        if result.stop == .done { result.remaining = 0 }
        return result
    }

    /// Records (or clears) why a kept object could not be fetched, for `coven status`.
    func setFetchFailure(_ object: String, _ reason: String?) throws {
        try database.transaction { try setSetting("fetch_failed:" + object, reason) }
    }
}

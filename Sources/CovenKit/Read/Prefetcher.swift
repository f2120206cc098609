import Foundation

/// Chunks fetched from storage and checked: the plaintext of a run and each chunk's tag.
struct FetchedRun {
    /// The chunks, consecutive.
    var chunks: Range<Int64>
    /// Their plaintext, back to back.
    var plaintext: [UInt8]
    /// Their 16-byte tags, back to back.
    var tags: [UInt8]
    /// Sealed bytes transferred for them.
    var transferred: Int64
}

/// Fetches runs of chunks of one stored object on a thread of its own, ahead of the reader.
///
/// The reader plans the runs (neighbouring missing chunks, up to 1 MiB of ciphertext per
/// request) and takes them in order with ``next()``; the fetcher keeps up to ``depth`` runs
/// ready, so the network overlaps with the reader's output and cache writes. Each run is
/// authenticated chunk by chunk on the fetcher's thread before the reader sees it: unchecked
/// bytes never leave here.
///
/// The fetcher makes its own provider (one curl handle per thread) and its own cipher handles.
final class Prefetcher: @unchecked Sendable {
    private let connector: StorageConnector
    private let object: String
    private let keyHex: String
    private let size: Int64
    private let runs: [Range<Int64>]
    private let depth: Int
    private let condition = NSCondition()
    private var ready: [Result<FetchedRun, CovenError>] = []
    private var stopped = false
    private var thread: Thread?

    /// - Parameters:
    ///   - runs: the chunk runs to fetch, in the order the reader takes them.
    ///   - depth: how many runs may wait for the reader.
    init(connector: StorageConnector, object: String, keyHex: String, size: Int64, runs: [Range<Int64>], depth: Int = 4) {
        self.connector = connector
        self.object = object
        self.keyHex = keyHex
        self.size = size
        self.runs = runs
        self.depth = depth
    }

    /// Starts fetching.
    func start() {
        guard !runs.isEmpty else { return }
        let thread = Thread { [self] in self.work() }
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
    }

    /// The next run, in order, waiting for it; throws the fetch's error.
    func next() throws -> FetchedRun {
        condition.lock()
        defer { condition.unlock() }
        while ready.isEmpty { condition.wait() }
        let result = ready.removeFirst()
        condition.broadcast()
        return try result.get()
    }

    /// Stops fetching (the reader is done or failed); runs in flight are dropped.
    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    private func deliver(_ result: Result<FetchedRun, CovenError>) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while ready.count >= depth && !stopped { condition.wait() }
        guard !stopped else { return false }
        ready.append(result)
        condition.broadcast()
        if case .failure = result { stopped = true }
        return true
    }

    private func work() {
        do {
            let provider = try connector.connect()
            let key = try FileKey(hex: keyHex)
            let opener = try ObjectOpener(key: key)
            for run in runs {
                condition.lock()
                let stop = stopped
                condition.unlock()
                if stop { return }
                let fetched = try Prefetcher.fetch(run, object: object, size: size, provider: provider, opener: opener)
                guard deliver(.success(fetched)) else { return }
            }
        } catch {
            _ = deliver(.failure(error.asCovenError))
        }
    }

    /// Fetches one run with one ranged GET and authenticates it.
    ///
    /// A run that starts at chunk 0 also fetches the 8-byte header and checks it, so a newer
    /// format fails with `update_required`.
    ///
    /// - Throws: `.integrity` when the object is shorter or a chunk fails its tag; `.missing`
    ///   when storage confirms nothing at the path; `.storage`.
    static func fetch(
        _ run: Range<Int64>, object: String, size: Int64, provider: StorageProvider, opener: ObjectOpener
    ) throws -> FetchedRun {
        let first = ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: size)
        let last = ObjectLayout.encryptedRange(chunk: run.upperBound - 1, plaintextSize: size)
        let withHeader = run.lowerBound == 0
        let lower = withHeader ? 0 : first.lowerBound
        let wanted = Int(last.upperBound - lower)
        var sealed = [UInt8]()
        sealed.reserveCapacity(wanted)
        do {
            try provider.get(object, range: lower..<last.upperBound) { bytes in
                guard sealed.count + bytes.count <= wanted else {
                    throw CovenError(.integrity, "the stored object is longer than its record says", details: ["key": object, "reason": "length"])
                }
                sealed.append(contentsOf: bytes)
            }
        } catch let error as CovenError where error.code == .rangeOutOfBounds {
            throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says", cause: error.cause, details: ["key": object, "reason": "length"])
        }
        let transferred = Int64(sealed.count)
        var offset = 0
        if withHeader {
            guard sealed.count >= Int(ObjectLayout.headerSize) else {
                throw CovenError(.integrity, "the stored object '\(object)' is shorter than its record says", details: ["key": object, "reason": "length"])
            }
            try sealed.withUnsafeBytes { try ObjectOpener.checkHeader(UnsafeRawBufferPointer(rebasing: $0[0..<8])) }
            offset = Int(ObjectLayout.headerSize)
        }
        let plainCount = Int(ObjectLayout.plaintextRange(chunk: run.upperBound - 1, plaintextSize: size).upperBound
            - ObjectLayout.plaintextRange(chunk: run.lowerBound, plaintextSize: size).lowerBound)
        var plaintext = [UInt8](repeating: 0, count: max(plainCount, 1))
        var tags = [UInt8](repeating: 0, count: run.count * Int(ObjectLayout.tagSize))
        try sealed.withUnsafeBytes { raw in
            let body = UnsafeRawBufferPointer(rebasing: raw[offset...])
            try plaintext.withUnsafeMutableBytes { out in
                try opener.openChunks(run, sealed: body, totalPlaintextSize: size, into: out)
            }
            // Keep each chunk's tag for the cache.
            var position = 0
            for (k, chunk) in run.enumerated() {
                let count = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size).count
                position += count
                for i in 0..<16 { tags[k * 16 + i] = body[position + i] }
                position += 16
            }
        }
        plaintext.removeLast(plaintext.count - plainCount)
        return FetchedRun(chunks: run, plaintext: plaintext, tags: tags, transferred: transferred)
    }
}

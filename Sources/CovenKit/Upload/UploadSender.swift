import Dispatch
import Foundation

// MARK: - The bytes of one upload

/// The local bytes an upload reads: the person's original or coven's own copy, with what was
/// recorded when it was staged.
struct UploadSource {
    let kind: FileKind
    let file: FileHandleFD
    let size: Int64
    let chunkHashes: [UInt8]
    let contentHash: [UInt8]
    /// The path for messages.
    let display: String

    /// What staging recorded of an object's local bytes, read from the database: opened
    /// (``open(_:)``) on any thread, with no database.
    struct Recorded {
        let object: String
        let kind: FileKind
        /// The original's path, or coven's copy's.
        let path: String
        /// The path for messages (an original's text; coven's copy's name in its folder).
        let display: String
        let size: Int64
        var chunkHashes: [UInt8]
        let contentHash: [UInt8]
        /// An original's modification time as staged.
        let modifiedSeconds: Int64?
        let modifiedNanos: Int64?
        /// Whether the chunk hashes are missing (a copy make-device-only wrote): derived from
        /// the bytes once opened (``derivingChunkHashes(object:device:)``, which records them).
        var derive: Bool { chunkHashes.isEmpty && size > 0 }
    }

    /// What staging recorded of `object`'s local bytes.
    ///
    /// - Throws: `.fileUnavailable` when no local bytes are recorded or their chunk hashes do
    ///   not cover their size.
    static func recorded(object: String, device: Device) throws -> Recorded {
        try recorded(object: object, row: recordedRows(objects: [object], device: device)[object], device: device)
    }

    /// The rows of coven_local of `objects`, by object, in one query (a batch's).
    static func recordedRows(objects: [String], device: Device) throws -> [String: Row] {
        var rows: [String: Row] = [:]
        for row in try device.database.query("SELECT * FROM coven_local WHERE object IN (SELECT value FROM json_each(?1))",
                                             [RecordedChanges.json(ids: objects)]) {
            if let object = row.string("object") { rows[object] = row }
        }
        return rows
    }

    /// What staging recorded of `object`'s local bytes, from its row of coven_local (nil: none).
    static func recorded(object: String, row: Row?, device: Device) throws -> Recorded {
        guard let row else {
            throw CovenError(.fileUnavailable, "no local bytes of '\(object)' on this device", details: ["object": object])
        }
        let size = row.int("size") ?? 0
        let recorded = row.bytes("chunk_hashes") ?? []
        let content = row.bytes("content_hash") ?? []
        guard (recorded.isEmpty && size > 0) || recorded.count == Int(ObjectLayout.chunkCount(plaintextSize: size)) * 32 else {
            throw CovenError(.fileUnavailable, "the recorded chunk hashes of '\(object)' do not cover its size", details: ["object": object])
        }
        if row.string("kind") == FileKind.user.rawValue {
            let bytes = row.bytes("path") ?? []
            return Recorded(object: object, kind: .user, path: PathText.string(fromOSBytes: bytes), display: PathText.text(bytes), size: size,
                            chunkHashes: recorded, contentHash: content, modifiedSeconds: row.int("modified_seconds"), modifiedNanos: row.int("modified_nanos"))
        }
        let copy = row.string("copy") ?? ""
        return Recorded(object: object, kind: .app, path: device.paths.folder + "/" + copy, display: copy, size: size,
                        chunkHashes: recorded, contentHash: content, modifiedSeconds: nil, modifiedNanos: nil)
    }

    /// Opens the object's local bytes and checks the source's size (and an original's exact
    /// modification time) against what staging recorded, before any byte is read.
    ///
    /// - Throws: `.userFileMissing` (original gone), `.userFileChanged` (original's size or
    ///   time differs), `.fileUnavailable` (coven's copy missing or of another size).
    static func open(object: String, device: Device) throws -> UploadSource {
        let recorded = try recorded(object: object, device: device)
        let source = try open(recorded)
        return recorded.derive ? try source.derivingChunkHashes(object: object, device: device) : source
    }

    /// Opens recorded local bytes as ``open(object:device:)`` does, touching no database; the
    /// chunk hashes of a source that has none (``Recorded/derive``) are not derived.
    static func open(_ recorded: Recorded) throws -> UploadSource {
        let display = recorded.display
        let size = recorded.size
        switch recorded.kind {
        case .user:
            let file: FileHandleFD
            do {
                file = try FileHandleFD(reading: recorded.path)
            } catch let error as CovenError where error.code == .userFileMissing {
                throw CovenError(.userFileMissing, "the original '\(display)' is missing", cause: error.cause, details: ["path": display])
            }
            let info = try file.status()
            let seconds = Int64(info.st_mtim.tv_sec)
            let nanos = Int64(info.st_mtim.tv_nsec)
            guard (info.st_mode & S_IFMT) == S_IFREG, Int64(info.st_size) == size,
                  seconds == recorded.modifiedSeconds, nanos == recorded.modifiedNanos else {
                throw CovenError(.userFileChanged, "the original '\(display)' changed since it was staged", hint: "stage it again", details: ["path": display])
            }
            posix_fadvise(file.fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
            return UploadSource(kind: .user, file: file, size: size, chunkHashes: recorded.chunkHashes, contentHash: recorded.contentHash, display: display)
        case .app:
            let path = recorded.path
            let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw CovenError(.fileUnavailable, "coven's copy '\(display)' cannot be opened", cause: String(cString: strerror(errno)), details: ["path": path])
            }
            let file = FileHandleFD(descriptor: fd, path: path)
            let info = try file.status()
            guard Int64(info.st_size) == size else {
                throw CovenError(.fileUnavailable, "coven's copy '\(display)' is \(info.st_size.counted("byte")), not \(size)", details: ["path": path])
            }
            posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL))
            return UploadSource(kind: .app, file: file, size: size, chunkHashes: recorded.chunkHashes, contentHash: recorded.contentHash, display: path)
        }
    }

    /// This source with its chunk hashes computed from its bytes, after one read that finds
    /// the whole file matching the recorded content hash; before any byte is sent, so a copy
    /// changed since it was recorded fails here, and one that changes later fails its chunk
    /// check as it is sealed. The hashes are recorded, so a later attempt (a retry, a resumed
    /// multipart upload) checks against them instead of reading the whole file again.
    ///
    /// - Throws: ``changed(chunk:)``-like failures (`.userFileChanged` for an original,
    ///   `.fileUnavailable` for coven's copy) when the bytes are not the recorded ones.
    func derivingChunkHashes(object: String, device: Device) throws -> UploadSource {
        let digests = try ContentHasher.run(file: file, sizeHint: size)
        guard digests.size == size, digests.content == contentHash else {
            let cause = "its SHA-256 is \(digests.content.hex) over \(digests.size.counted("byte")), recorded \(contentHash.hex) over \(size)"
            switch kind {
            case .user:
                throw CovenError(.userFileChanged, "the original '\(display)' changed since it was recorded", hint: "stage it again", cause: cause, details: ["path": display])
            case .app:
                throw CovenError(.fileUnavailable, "coven's copy '\(display)' fails its check", cause: cause, details: ["path": display])
            }
        }
        // Only into the row these bytes were checked against: still without hashes, same content.
        try device.fileRecords.recordChunkHashes(object: object, chunkHashes: digests.chunks, contentHash: contentHash)
        return UploadSource(kind: kind, file: file, size: size, chunkHashes: digests.chunks, contentHash: contentHash, display: display)
    }

    /// The failure for bytes that differ from what was recorded.
    func changed(chunk: Int64) -> CovenError {
        switch kind {
        case .user:
            return CovenError(.userFileChanged, "the original '\(display)' changed since it was staged", hint: "stage it again", cause: "chunk \(chunk) differs from its recorded hash", details: ["path": display, "chunk": String(chunk)])
        case .app:
            return CovenError(.fileUnavailable, "coven's copy '\(display)' fails its check", cause: "chunk \(chunk) differs from its recorded hash", details: ["path": display, "chunk": String(chunk)])
        }
    }

    /// Reads chunks `chunks` straight into their sealed places in `output` (each chunk where its
    /// ciphertext goes, its tag's 16 bytes left free) and checks each chunk against its recorded
    /// hash (two chunks hashed together) and, only once it matched, seals it in place: the fill
    /// and check of
    /// ``ObjectSealer/sealRun(_:plaintextSize:into:fill:check:)``, the one sealer (on both cores for a
    /// sealer of several lanes; on the calling thread alone for one lane, as the parts of a
    /// multipart upload are, each sealer thread a part).
    ///
    /// No plaintext buffer is needed, and a chunk that differs is never encrypted.
    ///
    /// - Parameters:
    ///   - chunks: consecutive chunks of the file.
    ///   - sealer: the file's sealer.
    ///   - output: room for the run's sealed bytes, back to back.
    /// - Returns: the number of sealed bytes written.
    /// - Throws: ``changed(chunk:)`` for a short read or a chunk that differs; nothing is sent
    ///   then.
    func sealRun(_ chunks: Range<Int64>, sealer: ObjectSealer, into output: UnsafeMutableRawBufferPointer) throws -> Int {
        guard !chunks.isEmpty else { return 0 }
        return try chunkHashes.withUnsafeBytes { recorded in
            try sealer.sealRun(chunks, plaintextSize: size, into: output, fill: { chunk, place in
                guard let at = place.baseAddress else { return }
                var filled = 0
                while filled < place.count {
                    let got = try file.read(into: UnsafeMutableRawBufferPointer(start: at + filled, count: place.count - filled),
                                            at: ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size).lowerBound + Int64(filled))
                    // The source ended early: it changed.
                    if got == 0 { throw changed(chunk: chunk) }
                    filled += got
                }
            }, check: { chunk, plaintext, next in
                guard let recordedBase = recorded.baseAddress, recorded.count >= Int(chunk + (next == nil ? 1 : 2)) * 32 else {
                    throw CovenError(.internal, "no recorded chunk hashes for chunk \(chunk) of '\(display)'")
                }
                try withUnsafeTemporaryAllocation(byteCount: 64, alignment: 16) { digests in
                    guard let digestBase = digests.baseAddress else { return }
                    if let next {
                        SHA256.hashPair(plaintext, next, into: digestBase, digestBase + 32)
                    } else {
                        SHA256.hash(plaintext, into: digestBase)
                    }
                    guard memcmp(digestBase, recordedBase + Int(chunk) * 32, 32) == 0 else { throw changed(chunk: chunk) }
                    if next != nil, memcmp(digestBase + 32, recordedBase + Int(chunk + 1) * 32, 32) != 0 {
                        throw changed(chunk: chunk + 1)
                    }
                }
            })
        }
    }
}

// MARK: - One attempt

/// Sends one claimed upload: one request, or a multipart upload resumed from its confirmed
/// parts. Runs on a job's own thread with its own connection and provider.
final class UploadSender {
    let device: Device
    /// The job's providers: the first for control requests, all of them for parts at once.
    let providers: [any StorageProvider]
    var provider: any StorageProvider { providers[0] }
    let settings: UploadSettings
    let worker: WorkerIdentity
    let progress: (_ object: String, _ confirmed: Int64, _ total: Int64) -> Void

    init(device: Device, providers: [any StorageProvider], settings: UploadSettings, worker: WorkerIdentity,
         progress: @escaping (String, Int64, Int64) -> Void) {
        precondition(!providers.isEmpty, "internal error: an upload needs a provider")
        self.device = device
        self.providers = providers
        self.settings = settings
        self.worker = worker
        self.progress = progress
    }

    /// Plaintext chunks per run when filling a single request.
    static let runChunks: Int64 = 64
    /// Sends the claim's object; returns once the provider holds all of it.
    ///
    /// - Throws: ``UploadStop`` when the upload is no longer wanted or no longer this worker's;
    ///   a source failure (`.userFileMissing`, `.userFileChanged`, `.fileUnavailable`); a
    ///   storage failure.
    func send(_ claim: UploadClaim) throws {
        guard let keyHex = try device.fileRecords.coordinates(object: claim.object)?.key else { throw UploadStop.retired }
        let source = try UploadSource.open(object: claim.object, device: device)
        let total = ObjectLayout.encryptedSize(plaintextSize: source.size)
        guard total == claim.bytesTotal else {
            throw CovenError(.internal, "the queued size of '\(claim.object)' disagrees with its local bytes", cause: "\(claim.bytesTotal) queued, \(total) from \(source.size.counted("byte"))")
        }
        let key = try FileKey(hex: keyHex)
        let single = min(provider.singleRequestLimit, settings.singleRequestLimit)
        if total <= single && claim.uploadID == nil {
            try sendWhole(claim, source: source, sealer: try ObjectSealer(key: key), total: total)
        } else {
            try sendParts(claim, source: source, key: key, total: total)
        }
    }

    /// Aborts the uploads to `object` the provider holds that this device never recorded (but
    /// `keeping`): a kill -9 between an upload's start and its record leaves one, a part file the
    /// size of the object on file:// storage, parts on S3. While this worker holds the lease,
    /// nothing else starts an upload to the object (its key is this device's alone), so any
    /// other upload to it is such a leftover. Best effort: one that cannot be listed or aborted
    /// (a policy without ListMultipartUploads) stays, and the upload goes on.
    private func abandonUnrecorded(_ object: String, keeping: String?) {
        guard let ids = try? provider.uploadsInProgress(object) else { return }
        for id in ids where id != keeping {
            try? provider.abortMultipart(object, uploadID: id)
        }
    }

    private func stillWanted(_ object: String) throws {
        if let stop = try Uploads(device).renewLease(object: object, worker: worker, lease: settings.lease) { throw stop }
    }

    // MARK: One request

    private func sendWhole(_ claim: UploadClaim, source: UploadSource, sealer: ObjectSealer, total: Int64) throws {
        let object = try Self.sealWhole(source: source, sealer: sealer, total: total)
        try stillWanted(claim.object)
        try provider.put(claim.object, data: object)
        progress(claim.object, total, total)
    }

    /// The whole sealed object of `source`, `total` bytes: read, checked against its recorded
    /// chunk hashes and sealed a run of chunks at a time. Touches no database.
    static func sealWhole(source: UploadSource, sealer: ObjectSealer, total: Int64) throws -> [UInt8] {
        var object = [UInt8](repeating: 0, count: Int(total))
        let chunkCount = ObjectLayout.chunkCount(plaintextSize: source.size)
        try object.withUnsafeMutableBytes { out in
            for (index, byte) in sealer.header.enumerated() { out[index] = byte }
            var first: Int64 = 0
            while first < chunkCount {
                let run = first..<min(first + Self.runChunks, chunkCount)
                let offset = Int(ObjectLayout.encryptedRange(chunk: run.lowerBound, plaintextSize: source.size).lowerBound)
                _ = try source.sealRun(run, sealer: sealer, into: UnsafeMutableRawBufferPointer(rebasing: out[offset...]))
                first = run.upperBound
            }
        }
        return object
    }

    /// A batch's object, prepared on the job's thread from the database (its key and what
    /// staging recorded of its bytes), for a sender to open, seal and send on its own thread
    /// (``seal()``): a batch of 256 holds no open file and no cipher until its turn.
    struct WholeObject {
        let keyHex: String
        /// Its local bytes as recorded, chunk hashes included.
        let recorded: UploadSource.Recorded
        /// Its encrypted size.
        let total: Int64

        /// Opens its bytes (the checks of ``UploadSource/open(_:)``) and seals them whole, with
        /// `sealer` re-keyed, or a new one left there for the sender's next object.
        func seal(reusing sealer: inout ObjectSealer?) throws -> [UInt8] {
            let source = try UploadSource.open(recorded)
            let key = try FileKey(hex: keyHex)
            // One cipher handle: each sender seals one object at a time on its own thread (a
            // sealer of eight lanes opened eight handles in secure memory for a file of one
            // chunk: half the worker's libgcrypt time on 10,000 small files), and keeps it for
            // the next object.
            if let sealer {
                try sealer.rekey(key)
            } else {
                sealer = try ObjectSealer(key: key, lanes: 1)
            }
            return try sealWhole(source: source, sealer: sealer!, total: total)
        }
    }

    /// Prepares the claims of a batch on the job's thread: the database's part of sending
    /// them, two queries for the batch (a query or two an object were a tenth of the job's
    /// database time), then each claim as ``prepareWhole(_:coordinates:local:device:)``.
    ///
    /// - Returns: per claim, in order, its object or why it cannot be sent.
    static func prepareWhole(_ claims: [UploadClaim], device: Device) throws -> [Result<WholeObject, Error>] {
        let objects = claims.map(\.object)
        let coordinates = try device.fileRecords.coordinatesText(objects: objects)
        let local = try UploadSource.recordedRows(objects: objects, device: device)
        return claims.map { claim in
            Result { try prepareWhole(claim, coordinates: coordinates[claim.object], local: local[claim.object], device: device) }
        }
    }

    /// Prepares a claim of a batch from the text of its coordinates and its row of local bytes.
    ///
    /// - Throws: ``UploadStop/retired`` when no record names the object; the failures of
    ///   ``UploadSource/recorded(object:row:device:)``; for bytes without chunk hashes, those of
    ///   ``UploadSource/open(object:device:)``.
    private static func prepareWhole(_ claim: UploadClaim, coordinates: String?, local: Row?, device: Device) throws -> WholeObject {
        guard let keyHex = try coordinates.map(Coordinates.init(json:))?.key else { throw UploadStop.retired }
        var recorded = try UploadSource.recorded(object: claim.object, row: local, device: device)
        let total = ObjectLayout.encryptedSize(plaintextSize: recorded.size)
        guard total == claim.bytesTotal else {
            throw CovenError(.internal, "the queued size of '\(claim.object)' disagrees with its local bytes", cause: "\(claim.bytesTotal) queued, \(total) from \(recorded.size.counted("byte"))")
        }
        // Bytes without chunk hashes have them derived and recorded here (the database's part);
        // the file is closed again until the sender's turn, which checks each chunk against them.
        if recorded.derive {
            recorded.chunkHashes = try UploadSource.open(recorded).derivingChunkHashes(object: claim.object, device: device).chunkHashes
        }
        return WholeObject(keyHex: keyHex, recorded: recorded, total: total)
    }

    // MARK: Parts

    /// The plaintext chunks of part `number` (1-based) and where its bytes start in the object.
    static func part(_ number: Int, chunksPerPart: Int64, plaintextSize: Int64) -> (chunks: Range<Int64>, offset: Int64) {
        let chunkCount = ObjectLayout.chunkCount(plaintextSize: plaintextSize)
        let first = Int64(number - 1) * chunksPerPart
        let chunks = first..<min(first + chunksPerPart, chunkCount)
        let offset = number == 1 ? 0 : ObjectLayout.encryptedRange(chunk: first, plaintextSize: plaintextSize).lowerBound
        return (chunks, offset)
    }

    private func sendParts(_ claim: UploadClaim, source: UploadSource, key: FileKey, total: Int64) throws {
        let db = device.database
        let session = try resumeOrStartSession(claim, total: total)
        let uploadID = session.uploadID
        var confirmed = session.confirmed
        let chunksPerPart = max(1, session.partPlain / ObjectLayout.chunkSize)
        try db.transaction {
            try device.uploadQueue.replaceParts(claim.object, with: confirmed.values.sorted { $0.number < $1.number })
        }
        // The per-part bookkeeping (a confirmed part's row, the lease) may lose its last commits
        // to a power cut, never to a crash of the process: a part is recorded only after the
        // provider confirmed it durable, and a lost row only means sending that part again
        // (resume keeps the parts both sides agree on). So these commits need not wait for the
        // disk; two WAL syncs per part on the job's thread were a third of a file:// upload's
        // time on disk. The session itself was recorded above with full sync, and full sync is
        // back before the upload completes.
        let chunkCount = ObjectLayout.chunkCount(plaintextSize: source.size)
        let partCount = Int((chunkCount + chunksPerPart - 1) / chunksPerPart)
        var done = confirmed.values.reduce(Int64(0)) { $0 + $1.size }
        progress(claim.object, done, total)
        let waiting = (1...max(1, partCount)).filter { confirmed[$0] == nil }
        try db.withCommitsLosableToPowerCut {
            let pipeline = try PartPipeline(
                object: claim.object, uploadID: uploadID, source: source, key: key, chunksPerPart: chunksPerPart,
                providers: providers, waiting: waiting,
                stillWanted: { [self] in try stillWanted(claim.object) },
                record: { [self] part in
                    let stored: Bool = try db.transaction {
                        try device.uploadQueue.recordPart(claim.object, part, worker: worker.text, leaseUntil: Date().timeIntervalSince1970 + settings.lease)
                    }
                    guard stored else { throw UploadStop.leaseLost }
                    confirmed[part.number] = part
                    done += part.size
                    progress(claim.object, done, total)
                })
            try pipeline.run()
        }
        try stillWanted(claim.object)
        let parts = confirmed.values.sorted { $0.number < $1.number }
        try provider.completeMultipart(claim.object, uploadID: uploadID, parts: parts)
    }

    /// The claim's multipart session: resumed with the parts both sides agree on, or (none
    /// recorded, or storage no longer holds it) a new one, recorded before any part is sent.
    private func resumeOrStartSession(
        _ claim: UploadClaim, total: Int64
    ) throws -> (uploadID: String, partPlain: Int64, confirmed: [Int: UploadedPart]) {
        var uploadID = claim.uploadID
        var partPlain = claim.partSize ?? settings.partSize
        var confirmed: [Int: UploadedPart] = [:]
        if let existing = uploadID {
            // Resume: keep the parts both sides agree on.
            do {
                let remote = Dictionary(try provider.listParts(claim.object, uploadID: existing).map { ($0.number, $0) }) { a, _ in a }
                for recorded in try device.uploadQueue.parts(claim.object) {
                    if let part = remote[recorded.number], part.etag == recorded.etag, part.size == recorded.size {
                        confirmed[recorded.number] = part
                    }
                }
            } catch let error as CovenError where error.code == .missing {
                uploadID = nil
            }
        }
        if let uploadID { return (uploadID, partPlain, confirmed) }
        partPlain = settings.partSize
        try stillWanted(claim.object)
        abandonUnrecorded(claim.object, keeping: claim.uploadID)
        let id = try provider.createMultipart(claim.object, totalSize: total, partSize: partPlain / ObjectLayout.chunkSize * ObjectLayout.sealedChunkSize)
        let kept: Bool = try device.database.transaction {
            try device.uploadQueue.startSession(claim.object, worker: worker.text, uploadID: id, partSize: partPlain)
        }
        guard kept else {
            try? provider.abortMultipart(claim.object, uploadID: id)
            throw UploadStop.leaseLost
        }
        return (id, partPlain, [:])
    }
}


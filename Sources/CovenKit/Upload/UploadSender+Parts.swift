import Dispatch
import Foundation

// MARK: - The parts of one multipart upload in flight

/// A pipeline over the cores, with no barrier between parts: `sealerCount` threads each read a
/// whole part straight into its buffer, check it chunk by chunk against the recorded hashes and
/// seal it in place (a chunk still in the core's cache), one part after another; a sealed part
/// goes out on a free lane of `laneCount` connections while the sealers go on with the next
/// parts. The job thread only hands out parts and records them (its database work no longer
/// holds up a core's sealing), and a sealer never waits for the other at a part's end. A part
/// is recorded as soon as the provider confirms it, whatever the others do (one stalled part
/// holds no other). Memory stays constant: to a local folder, where a send (a write) is quicker
/// than a seal, a buffer per sealer and per lane, so a sealer never waits for the write of a
/// part before it (1 GiB on tmpfs 1.29 → 1.22 s with three buffers against four); over a
/// network, where sends are the slower stage, a buffer per lane and one more, sealed while the
/// lanes send (a fourth took an S3 upload from 63 to 75 MiB, over the 64 MiB of --jobs 1).
///
/// Used by the job's thread alone (``run()``); the sealers and lanes only touch their own
/// buffer and part, and signal `finished` when done.
final class PartPipeline {
    private let object: String
    private let uploadID: String
    private let plaintextSize: Int64
    private let chunksPerPart: Int64
    private let buffers: [UnsafeMutableRawBufferPointer]
    private let queues: [DispatchQueue]
    private let boxes: [ProviderBox]
    private let sealers: [SealerBox]
    private let sealQueues: [DispatchQueue]
    private let finished = DispatchSemaphore(value: 0)
    /// Renews the lease (and checks the upload is still wanted) for each part started.
    private let stillWanted: () throws -> Void
    /// Records a part the provider confirmed.
    private let record: (UploadedPart) throws -> Void

    private var sending: [PartSend] = []
    private var sealing: [PartSeal] = []
    private var sealed: [PartSeal] = []
    private var unrecorded: [PartSend] = []
    private var freeLanes: [Int]
    private var freeSealers: [Int]
    private var freeBuffers: [Int]
    /// The part numbers still to seal, the next one last.
    private var waiting: [Int]

    /// - Parameters:
    ///   - waiting: the part numbers to send, in order.
    init(object: String, uploadID: String, source: UploadSource, key: FileKey, chunksPerPart: Int64,
         providers: [any StorageProvider], waiting: [Int],
         stillWanted: @escaping () throws -> Void, record: @escaping (UploadedPart) throws -> Void) throws {
        self.object = object
        self.uploadID = uploadID
        self.plaintextSize = source.size
        self.chunksPerPart = chunksPerPart
        self.stillWanted = stillWanted
        self.record = record
        let laneCount = providers.count
        let sealerCount = max(1, min(ChunkRun.threads, laneCount))
        let sealedCapacity = Int(chunksPerPart * ObjectLayout.sealedChunkSize + ObjectLayout.headerSize)
        let bufferCount = providers[0] is FileStorage ? sealerCount + laneCount : max(laneCount + 1, sealerCount)
        sealers = try (0..<sealerCount).map { _ in SealerBox(try ObjectSealer(key: key, lanes: 1), source: source) }
        buffers = (0..<bufferCount).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: sealedCapacity, alignment: 4096) }
        queues = (0..<laneCount).map { DispatchQueue(label: "coven.upload.send.\($0)") }
        boxes = providers.map { ProviderBox($0) }
        sealQueues = (0..<sealerCount).map { DispatchQueue(label: "coven.upload.seal.\($0)") }
        freeLanes = Array(0..<laneCount)
        freeSealers = Array(0..<sealerCount)
        freeBuffers = Array(0..<bufferCount)
        self.waiting = waiting.reversed()
    }

    deinit { buffers.forEach { $0.deallocate() } }

    /// Seals, sends and records every waiting part; on a failure, waits for the seals and sends
    /// in flight (never freeing a buffer one still uses), records what the provider confirmed
    /// and throws.
    func run() throws {
        do {
            while true {
                try collectSealed()
                for send in sending where send.group.wait(timeout: .now()) == .success { release(send) }
                // The sealers and lanes are kept busy first; the database's part comes after: a
                // lease renewal (and check that the upload is still wanted) for each part started,
                // before it can be sent, and the record of each part sent.
                startSending()
                for _ in 0..<startSealing() { try stillWanted() }
                for send in unrecorded { try recordSent(send) }
                if waiting.isEmpty && sealing.isEmpty && sealed.isEmpty && sending.isEmpty { break }
                // Something is in flight (or a sealed part waits for a lane a send holds): each
                // end signals once.
                finished.wait()
            }
        } catch {
            for seal in sealing { seal.group.wait() }
            sending.forEach(release)
            for send in unrecorded {
                do { try recordSent(send) } catch { continue }
            }
            throw error
        }
    }

    /// Frees a finished send's lane and buffer (the provider holds its bytes, or failed).
    private func release(_ send: PartSend) {
        send.group.wait()
        sending.removeAll { $0 === send }
        freeLanes.append(send.lane)
        freeBuffers.append(send.buffer)
        unrecorded.append(send)
    }

    /// Records a send the provider confirmed (after ``release(_:)``).
    private func recordSent(_ send: PartSend) throws {
        unrecorded.removeAll { $0 === send }
        try record(try send.result.get())
    }

    /// Takes in every part sealed so far; a failed seal's error is thrown (its buffer freed).
    private func collectSealed() throws {
        for seal in sealing where seal.group.wait(timeout: .now()) == .success {
            sealing.removeAll { $0 === seal }
            freeSealers.append(seal.sealer)
            switch seal.result {
            case .success:
                sealed.append(seal)
            case .failure(let error):
                freeBuffers.append(seal.buffer)
                throw error
            }
        }
    }

    /// Starts sealing parts while a sealer and a buffer are free; how many it started.
    private func startSealing() -> Int {
        var started = 0
        while let number = waiting.last, !freeSealers.isEmpty, !freeBuffers.isEmpty {
            waiting.removeLast()
            started += 1
            let (chunks, offset) = UploadSender.part(number, chunksPerPart: chunksPerPart, plaintextSize: plaintextSize)
            let seal = PartSeal(number: number, offset: offset, sealer: freeSealers.removeLast(), buffer: freeBuffers.removeLast())
            let box = sealers[seal.sealer]
            let buffer = SendableMutableRawBuffer(buffers[seal.buffer])
            let finished = self.finished
            seal.group.enter()
            sealQueues[seal.sealer].async {
                seal.result = Result { try box.seal(number: number, chunks: chunks, into: buffer.buffer) }
                seal.group.leave()
                finished.signal()
            }
            sealing.append(seal)
        }
        return started
    }

    /// Sends sealed parts while a lane is free.
    private func startSending() {
        while !sealed.isEmpty, let lane = freeLanes.popLast() {
            let seal = sealed.removeFirst()
            let length = (try? seal.result.get()) ?? 0
            let send = PartSend(number: seal.number, lane: lane, buffer: seal.buffer)
            let box = boxes[lane]
            let bytes = SendableRawBuffer(UnsafeRawBufferPointer(rebasing: buffers[seal.buffer][0..<length]))
            let (object, uploadID, number, offset) = (object, uploadID, seal.number, seal.offset)
            let finished = self.finished
            send.group.enter()
            queues[lane].async {
                send.result = Result { try box.provider.uploadPart(object, uploadID: uploadID, number: number, offset: offset, data: bytes.buffer) }
                send.group.leave()
                finished.signal()
            }
            sending.append(send)
        }
    }
}

/// One part being sealed on a sealer's queue. @unchecked: `result` is written by the seal block
/// before `group.leave()` and read only after `group.wait()`.
private final class PartSeal: @unchecked Sendable {
    let number: Int
    let offset: Int64
    let sealer: Int
    let buffer: Int
    let group = DispatchGroup()
    /// The part's length in its buffer, once sealed.
    var result: Result<Int, Error> = .failure(CovenError(.internal, "part not sealed"))
    init(number: Int, offset: Int64, sealer: Int, buffer: Int) {
        self.number = number
        self.offset = offset
        self.sealer = sealer
        self.buffer = buffer
    }
}

/// A sealer's own cipher and the upload's source, for its queue. @unchecked: a sealer seals one
/// part at a time (the job thread starts a sealer's next part only after its last one ended),
/// and the source is only read (`pread`, no shared offset).
private final class SealerBox: @unchecked Sendable {
    let sealer: ObjectSealer
    let source: UploadSource
    init(_ sealer: ObjectSealer, source: UploadSource) {
        self.sealer = sealer
        self.source = source
    }

    /// Part `number` (chunks `chunks`), read, checked and sealed into `buffer` (the object's
    /// header first for part 1); its length.
    func seal(number: Int, chunks: Range<Int64>, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var length = 0
        if number == 1 {
            for (index, byte) in sealer.header.enumerated() { buffer[index] = byte }
            length = sealer.header.count
        }
        return length + (try source.sealRun(chunks, sealer: sealer, into: UnsafeMutableRawBufferPointer(rebasing: buffer[length...])))
    }
}

/// One part being sent on the send queue. @unchecked: `result` is written by the send block
/// before `group.leave()` and read only after `group.wait()`.
private final class PartSend: @unchecked Sendable {
    let number: Int
    let lane: Int
    let buffer: Int
    let group = DispatchGroup()
    var result: Result<UploadedPart, Error> = .failure(CovenError(.internal, "part not sent"))
    init(number: Int, lane: Int, buffer: Int) {
        self.number = number
        self.lane = lane
        self.buffer = buffer
    }
}

/// Hands a provider to its send lane. @unchecked: a provider is used by one send at a time
/// (lanes take turns in order, and a lane's next send starts only after its previous one was
/// waited for), and the job thread uses the first provider for control requests only while no
/// send is in flight.
private final class ProviderBox: @unchecked Sendable {
    let provider: any StorageProvider
    init(_ provider: any StorageProvider) { self.provider = provider }
}

import Dispatch
import Foundation

// MARK: - Runs of consecutive chunks

/// A run of consecutive chunks of one file object, located within the file.
///
/// Used by ``ObjectSealer`` and by the read path's tag checks: it validates a caller's (first
/// chunk, byte count, file size) triple once, then maps run-relative chunk numbers to buffer
/// offsets and cuts the run into slices for the cores.
struct ChunkRun {
    /// The file's first chunk in the run.
    let firstChunk: Int64
    /// How many chunks the run holds, at least 1.
    let count: Int
    /// The index of the file's final chunk.
    let finalChunk: Int64
    /// Plaintext bytes in the run.
    let plaintextCount: Int
    /// Sealed bytes in the run.
    let sealedCount: Int

    static let chunkSize = Int(ObjectLayout.chunkSize)
    static let sealedChunkSize = Int(ObjectLayout.sealedChunkSize)
    static let tagSize = Int(ObjectLayout.tagSize)

    /// The run of `plaintextCount` plaintext bytes starting at chunk `firstChunk`.
    ///
    /// - Throws: `.internal` unless the run starts inside the file, is a whole number of chunks,
    ///   and ends either on a chunk boundary or at the end of the file.
    init(firstChunk: Int64, plaintextCount: Int, totalPlaintextSize: Int64) throws {
        try Self.checkFile(firstChunk: firstChunk, totalPlaintextSize: totalPlaintextSize)
        let start = firstChunk * ObjectLayout.chunkSize
        let end = start + Int64(plaintextCount)
        let fileChunks = ObjectLayout.chunkCount(plaintextSize: totalPlaintextSize)
        let count: Int64
        if end == totalPlaintextSize {
            count = fileChunks - firstChunk
        } else if end < totalPlaintextSize, plaintextCount > 0, plaintextCount % Self.chunkSize == 0 {
            count = Int64(plaintextCount / Self.chunkSize)
        } else {
            throw CovenError(
                .internal, "cannot seal a run that is not whole chunks of the file",
                cause: "\(plaintextCount.counted("byte")) from chunk \(firstChunk) of a \(totalPlaintextSize)-byte file")
        }
        self.firstChunk = firstChunk
        self.count = Int(count)
        self.finalChunk = fileChunks - 1
        self.plaintextCount = plaintextCount
        self.sealedCount = plaintextCount + Int(count) * Self.tagSize
    }

    private static func checkFile(firstChunk: Int64, totalPlaintextSize: Int64) throws {
        guard totalPlaintextSize >= 0, firstChunk >= 0,
            firstChunk < ObjectLayout.chunkCount(plaintextSize: totalPlaintextSize)
        else {
            throw CovenError(
                .internal, "chunk \(firstChunk) is outside the file",
                cause: "a \(totalPlaintextSize)-byte file")
        }
    }

    /// Plaintext offset, plaintext length and sealed offset of run chunk `k`.
    @inline(__always)
    func chunk(_ k: Int) -> (plainOffset: Int, plainCount: Int, sealedOffset: Int) {
        let plainOffset = k * Self.chunkSize
        return (plainOffset, min(Self.chunkSize, plaintextCount - plainOffset), k * Self.sealedChunkSize)
    }

    /// Splits the run into at most `parts` contiguous slices of run chunk numbers, and runs
    /// `body` on each slice, concurrently when there is more than one.
    ///
    /// Every slice runs even if another fails; the first error (by slice order) is rethrown.
    func forEachSlice(parts: Int, _ body: (_ slice: Int, _ chunks: Range<Int>) throws -> Void) throws {
        let parts = count >= ChunkRun.parallelThreshold ? max(1, min(parts, count)) : 1
        if parts == 1 {
            try body(0, 0..<count)
            return
        }
        let failures = UnsafeMutableBufferPointer<(any Error)?>.allocate(capacity: parts)
        failures.initialize(repeating: nil)
        defer {
            failures.deinitialize()
            failures.deallocate()
        }
        let count = count
        withoutActuallyEscaping(body) { body in
            let shared = SharedWithSlices((body, failures))
            DispatchQueue.concurrentPerform(iterations: parts) { slice in
                let (body, failures) = shared.value
                let lower = count * slice / parts
                let upper = count * (slice + 1) / parts
                do { try body(slice, lower..<upper) } catch { failures[slice] = error }
            }
        }
        if let failure = failures.lazy.compactMap({ $0 }).first { throw failure }
    }

    /// Runs shorter than this many chunks are processed on the calling thread alone: handing
    /// 64 KiB–192 KiB to a second thread costs about as much as it saves.
    static let parallelThreshold = 4

    /// The number of threads bulk sealing and opening use: 2, or 1 on a single-core machine.
    static let threads = ProcessInfo.processInfo.activeProcessorCount >= 2 ? 2 : 1
}

/// Hands the slice body and the error slots to the threads of one `concurrentPerform` call.
///
/// @unchecked: `concurrentPerform` returns only after every iteration has finished, so nothing
/// here outlives the call; each iteration uses only its own slice's cipher, buffer ranges and
/// error slot, so no two threads touch the same memory.
private struct SharedWithSlices<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

import Dispatch
import XCTest

import CovenKit

/// Sealing and opening throughput on 64 MiB, one thread and two.
///
/// Skipped unless `COVEN_BENCH=1`, since timings on a shared machine are not assertions. Run with
/// `COVEN_BENCH=1 swift test --filter ThroughputCryptoTests` (add `-c release -Xswiftc
/// -enable-testing` for release numbers).
final class ThroughputCryptoTests: XCTestCase {
    static let size = 64 << 20
    static let part = 8 << 20

    override func setUpWithError() throws {
        try XCTSkipUnless(ProcessInfo.processInfo.environment["COVEN_BENCH"] == "1", "set COVEN_BENCH=1 to run")
    }

    /// The best of `rounds` timings of `body`, in GB/s (10^9 bytes per second) over `bytes`.
    func measureGBps(_ label: String, bytes: Int, rounds: Int = 5, _ body: () throws -> Void) rethrows {
        var best = Double.infinity
        for _ in 0..<rounds {
            let start = DispatchTime.now().uptimeNanoseconds
            try body()
            best = min(best, Double(DispatchTime.now().uptimeNanoseconds - start))
        }
        let rate = Double(bytes) / best
        print(String(format: "coven-bench: %@: %.2f GB/s (%.1f ms for %d MiB)", label, rate, best / 1e6, bytes >> 20))
    }

    func testSealAndOpenThroughput() throws {
        let key = FileKey()
        let size = Int64(Self.size)
        let plaintext = [UInt8](repeating: 0x5a, count: Self.size)
        var sealed = [UInt8](repeating: 0, count: Int(ObjectLayout.encryptedSize(plaintextSize: size)) - 8)
        var opened = [UInt8](repeating: 0, count: Self.size)
        let cipher = try ChunkCipher(key: key)
        let sealer = try ObjectSealer(key: key)
        let opener = try ObjectOpener(key: key)
        let chunks = ObjectLayout.chunkCount(plaintextSize: size)

        try plaintext.withUnsafeBytes { input in
            try sealed.withUnsafeMutableBytes { output in
                try measureGBps("seal, 1 thread (ChunkCipher loop)", bytes: Self.size) {
                    for chunk in 0..<chunks {
                        let offset = Int(chunk) * 65536
                        try cipher.seal(
                            index: chunk, isLast: chunk == chunks - 1,
                            plaintext: UnsafeRawBufferPointer(rebasing: input[offset..<(offset + 65536)]),
                            into: UnsafeMutableRawBufferPointer(
                                rebasing: output[(Int(chunk) * 65552)..<(Int(chunk) * 65552 + 65552)]))
                    }
                }
                try measureGBps("seal, 2 threads (sealChunks, one 64 MiB run)", bytes: Self.size) {
                    try sealer.sealChunks(firstChunk: 0, plaintext: input, totalPlaintextSize: size, into: output)
                }
                try measureGBps("seal, 2 threads (sealChunks, 8 MiB parts)", bytes: Self.size) {
                    var offset = 0
                    while offset < Self.size {
                        let sealedOffset = offset / 65536 * 65552
                        let sealedPart = Self.part / 65536 * 65552
                        try sealer.sealChunks(
                            firstChunk: Int64(offset / 65536),
                            plaintext: UnsafeRawBufferPointer(rebasing: input[offset..<(offset + Self.part)]),
                            totalPlaintextSize: size,
                            into: UnsafeMutableRawBufferPointer(
                                rebasing: output[sealedOffset..<(sealedOffset + sealedPart)]))
                        offset += Self.part
                    }
                }
            }
        }
        try sealed.withUnsafeBytes { input in
            try opened.withUnsafeMutableBytes { output in
                try measureGBps("open, 1 thread (ChunkCipher loop)", bytes: Self.size) {
                    for chunk in 0..<chunks {
                        let offset = Int(chunk) * 65552
                        try cipher.open(
                            index: chunk, isLast: chunk == chunks - 1,
                            sealed: UnsafeRawBufferPointer(rebasing: input[offset..<(offset + 65552)]),
                            into: UnsafeMutableRawBufferPointer(
                                rebasing: output[(Int(chunk) * 65536)..<(Int(chunk) * 65536 + 65536)]))
                    }
                }
                try measureGBps("open, 2 threads (openChunks, one 64 MiB run)", bytes: Self.size) {
                    _ = try opener.openChunks(firstChunk: 0, sealed: input, totalPlaintextSize: size, into: output)
                }
            }
        }
        XCTAssertEqual(opened, plaintext)

        let object = sealer.header() + sealed
        try measureGBps("open, 1 thread (ObjectReader, 1 MiB pieces)", bytes: Self.size, rounds: 3) {
            let reader = try ObjectReader(key: key, plaintextSize: size)
            var total = 0
            try object.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let end = min(offset + (1 << 20), bytes.count)
                    try reader.feed(UnsafeRawBufferPointer(rebasing: bytes[offset..<end])) { total += $0.count }
                    offset = end
                }
            }
            try reader.finish { total += $0.count }
            XCTAssertEqual(total, Self.size)
        }
    }
}

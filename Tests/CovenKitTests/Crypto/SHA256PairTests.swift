import CovenSHA256
@testable import CovenKit
import XCTest

/// Two chunks hashed at once (`coven_sha256_pair`, coven's one loop of SHA-256 in C) give what
/// libgcrypt gives each alone: at every length around the block (64) and padding (56) edges, on
/// the standard's vectors, and for buffers of different lengths or none (which go to libgcrypt).
final class SHA256PairTests: XCTestCase {
    func testThePairMatchesLibgcryptAtEveryEdge() {
        var lengths = Array(0...130)
        lengths += [183, 184, 191, 192, 255, 256, 1000, 4095, 4096, 65_535, 65_536, 65_537, 200_003]
        for length in lengths {
            let a = randomBytes(length, seed: UInt64(length) * 2 + 1)
            let b = randomBytes(length, seed: UInt64(length) * 2 + 2)
            let (pairA, pairB) = pair(a, b)
            XCTAssertEqual(pairA, SHA256.digest(a), "first of two \(length)-byte buffers")
            XCTAssertEqual(pairB, SHA256.digest(b), "second of two \(length)-byte buffers")
        }
    }

    func testTheStandardsVectors() {
        let abc = Array("abc".utf8)
        let two = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        XCTAssertEqual(pair(abc, Array("abd".utf8)).0.hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(pair(two, two).1.hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(pair(million, million).0.hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testBuffersOfDifferentLengthsAndEmptyOnesGoToLibgcrypt() {
        let a = randomBytes(65_536, seed: 3)
        let b = randomBytes(1_000, seed: 4)
        let (pairA, pairB) = pair(a, b)
        XCTAssertEqual(pairA, SHA256.digest(a))
        XCTAssertEqual(pairB, SHA256.digest(b))
        let (emptyA, emptyB) = pair([], [])
        XCTAssertEqual(emptyA.hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(emptyB, emptyA)
    }

    func testHashEachPairsBuffersAndHashesAnOddOneAlone() {
        for count in 0...5 {
            let buffers = (0..<count).map { randomBytes(70_000 - $0 * 3_000 * ($0 % 2), seed: UInt64(40 + $0)) }
            var digests = [UInt8](repeating: 0, count: count * 32)
            digests.withUnsafeMutableBytes { out in
                let base = out.baseAddress
                withBuffers(buffers) { pointers in
                    SHA256.hashEach(count, { pointers[$0] }, into: { base! + $0 * 32 })
                }
            }
            for index in 0..<count {
                XCTAssertEqual(Array(digests[(index * 32)..<(index * 32 + 32)]), SHA256.digest(buffers[index]), "\(index) of \(count)")
            }
        }
    }

    /// Where this CPU has the extensions, the C loop itself answers (not the fallback).
    func testTheLoopAnswersWhereTheCPUHasTheExtensions() throws {
        try XCTSkipUnless(coven_sha256_pair_available() == 1, "no SHA extensions on this CPU: libgcrypt hashes each chunk")
        let a = randomBytes(65_536, seed: 8)
        var digests = [UInt8](repeating: 0, count: 64)
        let answered = a.withUnsafeBufferPointer { input in
            digests.withUnsafeMutableBufferPointer { out in
                coven_sha256_pair(input.baseAddress, input.baseAddress, input.count, out.baseAddress, out.baseAddress! + 32)
            }
        }
        XCTAssertEqual(answered, 1)
        XCTAssertEqual(Array(digests[0..<32]), SHA256.digest(a))
        XCTAssertEqual(Array(digests[32..<64]), SHA256.digest(a))
    }

    private func pair(_ a: [UInt8], _ b: [UInt8]) -> ([UInt8], [UInt8]) {
        var digests = [UInt8](repeating: 0, count: 64)
        a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                digests.withUnsafeMutableBytes { out in
                    SHA256.hashPair(a, b, into: out.baseAddress!, out.baseAddress! + 32)
                }
            }
        }
        return (Array(digests[0..<32]), Array(digests[32..<64]))
    }

    private func withBuffers(_ buffers: [[UInt8]], _ body: ([UnsafeRawBufferPointer]) -> Void, _ taken: [UnsafeRawBufferPointer] = []) {
        guard taken.count < buffers.count else { return body(taken) }
        buffers[taken.count].withUnsafeBytes { withBuffers(buffers, body, taken + [$0]) }
    }
}

import Foundation
import XCTest

@testable import CovenKit

// Helpers shared by the *CryptoTests classes.

/// The vector plaintext: byte i is i mod 251 (docs/format.md, section 7).
func patternBytes(_ count: Int) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count { bytes[index] = UInt8(index % 251) }
    return bytes
}

/// The file key of the vectors: 00 01 … 1f.
func vectorKey() throws -> FileKey {
    try FileKey(bytes: (0..<32).map { UInt8($0) })
}

/// Seals a whole object: header, then `ObjectSealer.sealChunks` over runs of `partChunks` chunks
/// (nil: one call for everything).
func sealObject(_ plaintext: [UInt8], key: FileKey, partChunks: Int? = nil) throws -> [UInt8] {
    let sealer = try ObjectSealer(key: key)
    let size = Int64(plaintext.count)
    var object = sealer.header
    let total = Int(ObjectLayout.encryptedSize(plaintextSize: size))
    object += [UInt8](repeating: 0, count: total - object.count)
    let chunkCount = ObjectLayout.chunkCount(plaintextSize: size)
    let step = Int64(partChunks ?? Int(chunkCount))
    try plaintext.withUnsafeBytes { input in
        try object.withUnsafeMutableBytes { output in
            var chunk: Int64 = 0
            while chunk < chunkCount {
                let last = min(chunk + step, chunkCount) - 1
                let plain = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size).lowerBound
                    ..< ObjectLayout.plaintextRange(chunk: last, plaintextSize: size).upperBound
                let sealed = ObjectLayout.encryptedRange(chunk: chunk, plaintextSize: size).lowerBound
                    ..< ObjectLayout.encryptedRange(chunk: last, plaintextSize: size).upperBound
                let written = try sealer.sealChunks(
                    firstChunk: chunk,
                    plaintext: UnsafeRawBufferPointer(rebasing: input[Int(plain.lowerBound)..<Int(plain.upperBound)]),
                    totalPlaintextSize: size,
                    into: UnsafeMutableRawBufferPointer(rebasing: output[Int(sealed.lowerBound)..<Int(sealed.upperBound)]))
                XCTAssertEqual(written, sealed.count)
                chunk = last + 1
            }
        }
    }
    return object
}

/// Seals chunk by chunk on one ChunkCipher: an independent path to compare the bulk one against.
func sealObjectSequentially(_ plaintext: [UInt8], key: FileKey) throws -> [UInt8] {
    let cipher = try ChunkCipher(key: key)
    let size = Int64(plaintext.count)
    var object = ObjectHeader.file
    let count = ObjectLayout.chunkCount(plaintextSize: size)
    var sealed = [UInt8](repeating: 0, count: Int(ObjectLayout.sealedChunkSize))
    try plaintext.withUnsafeBytes { input in
        for chunk in 0..<count {
            let range = ObjectLayout.plaintextRange(chunk: chunk, plaintextSize: size)
            try sealed.withUnsafeMutableBytes { output in
                try cipher.seal(
                    index: chunk, isLast: chunk == count - 1,
                    plaintext: UnsafeRawBufferPointer(rebasing: input[Int(range.lowerBound)..<Int(range.upperBound)]),
                    into: output)
            }
            object += sealed[0..<(range.count + 16)]
        }
    }
    return object
}

/// Reads an object through `ObjectReader`, fed in pieces of `piece` bytes; the plaintext emitted.
func readObject(_ object: [UInt8], key: FileKey, plaintextSize: Int64?, piece: Int) throws -> [UInt8] {
    var output = [UInt8]()
    try readObject(object, key: key, plaintextSize: plaintextSize, piece: piece, into: &output)
    return output
}

/// As above, but keeps what was emitted before a failure in `output`.
func readObject(_ object: [UInt8], key: FileKey, plaintextSize: Int64?, piece: Int, into output: inout [UInt8])
    throws
{
    let reader = try ObjectReader(key: key, plaintextSize: plaintextSize)
    try object.withUnsafeBytes { bytes in
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + piece, bytes.count)
            try reader.feed(UnsafeRawBufferPointer(rebasing: bytes[offset..<end])) { output += $0 }
            offset = end
        }
    }
    try reader.finish { output += $0 }
}

/// Opens a whole object as one ranged read of every chunk (header check, then every chunk, with
/// the size from the record), fed in one piece.
func openObject(_ object: [UInt8], key: FileKey, plaintextSize: Int64) throws -> [UInt8] {
    try ObjectReader.checkHeader(object)
    let output = try openRun(
        object, key: key, plaintextSize: plaintextSize, chunks: 0..<ObjectLayout.chunkCount(plaintextSize: plaintextSize))
    XCTAssertEqual(output.count, Int(plaintextSize))
    return output
}

/// Opens the bytes of a ranged read of `chunks` (from offset 0 when the run starts at chunk 0,
/// header included) with `ObjectReader(key:plaintextSize:chunks:)`, fed in pieces of `piece`.
func openRun(
    _ bytes: some Collection<UInt8>, key: FileKey, plaintextSize: Int64, chunks: Range<Int64>, piece: Int = .max
) throws -> [UInt8] {
    let reader = try ObjectReader(key: key, plaintextSize: plaintextSize, chunks: chunks)
    var output = [UInt8]()
    let all = Array(bytes)
    var offset = 0
    repeat {
        let end = min(offset + piece, all.count)
        try reader.feed(Array(all[offset..<end])) { output += $0 }
        offset = end
    } while offset < all.count
    try reader.finish { output += $0 }
    return output
}

/// Asserts that `body` throws a `CovenError` with `code`; returns it.
@discardableResult
func assertThrowsCoven<T>(
    _ code: ErrorCode, _ message: @autoclosure () -> String = "", file: StaticString = #filePath, line: UInt = #line,
    _ body: () throws -> T
) -> CovenError? {
    do {
        _ = try body()
        XCTFail("expected \(code.rawValue), nothing thrown. \(message())", file: file, line: line)
        return nil
    } catch let error as CovenError {
        XCTAssertEqual(error.code, code, "\(error). \(message())", file: file, line: line)
        return error
    } catch {
        XCTFail("expected CovenError \(code.rawValue), got \(error). \(message())", file: file, line: line)
        return nil
    }
}

/// A deterministic pseudo-random generator for test data and positions.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SplitMix64(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    var index = 0
    while index < count {
        var word = generator.next()
        for _ in 0..<8 where index < count {
            bytes[index] = UInt8(truncatingIfNeeded: word)
            word >>= 8
            index += 1
        }
    }
    return bytes
}

import Foundation
import XCTest

@testable import CovenKit

/// The known-answer vectors of docs/format.md, section 7, read from the document itself so the
/// spec and the test cannot drift apart.
final class FormatVectorsCryptoTests: XCTestCase {
    /// Every ```text block of docs/format.md whose first line is `vector: NAME`, by name.
    static func vectors() throws -> [String: [String: String]] {
        let docs = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // Crypto
            .deletingLastPathComponent()  // CovenKitTests
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // package root
            .appendingPathComponent("docs/format.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        var vectors: [String: [String: String]] = [:]
        var current: [String: String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                if let block = current, let name = block["vector"] { vectors[name] = block }
                current = line == "```text" ? [:] : nil
                continue
            }
            guard current != nil, let colon = line.firstIndex(of: ":") else { continue }
            let key = String(line[..<colon])
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            current?[key] = value
        }
        return vectors
    }

    func vector(_ name: String) throws -> [String: String] {
        let vector = try XCTUnwrap(try Self.vectors()[name], "docs/format.md has no vector \(name)")
        return vector
    }

    func hex(_ vector: [String: String], _ field: String) throws -> [UInt8] {
        let text = try XCTUnwrap(vector[field], "vector lacks \(field)")
        return try XCTUnwrap([UInt8](hex: text), "\(field) is not hex")
    }

    func testDocumentHasAllVectors() throws {
        XCTAssertEqual(
            Set(try Self.vectors().keys),
            ["file-empty", "file-1", "file-65536", "file-65537", "store-fixed-salt", "hkdf-rfc5869-1",
             "ed25519-rfc8032-1", "change-object", "change-object-v2", "device-entry"])
    }

    func checkFileVector(_ name: String) throws {
        let vector = try vector(name)
        let key = try FileKey(bytes: try hex(vector, "key"))
        let size = try XCTUnwrap(Int(try XCTUnwrap(vector["plaintext-size"])))
        let plaintext = patternBytes(size)
        let object = try sealObject(plaintext, key: key)

        XCTAssertEqual(object.count, Int(try XCTUnwrap(vector["object-size"])))
        XCTAssertEqual(Int64(object.count), ObjectLayout.encryptedSize(plaintextSize: Int64(size)))
        XCTAssertEqual(SHA256.digest(object).hex, vector["object-sha256"])
        if let full = vector["object"] { XCTAssertEqual(object.hex, full) }
        if let prefix = vector["object-prefix"] {
            XCTAssertEqual(Array(object.prefix(prefix.count / 2)).hex, prefix)
        }
        let tags = try XCTUnwrap(vector["chunk-tags"]).split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        XCTAssertEqual(tags.count, Int(ObjectLayout.chunkCount(plaintextSize: Int64(size))))
        for (chunk, tag) in tags.enumerated() {
            let range = ObjectLayout.encryptedRange(chunk: Int64(chunk), plaintextSize: Int64(size))
            XCTAssertEqual(Array(object[Int(range.upperBound - 16)..<Int(range.upperBound)]).hex, tag)
        }

        // The other paths agree, and the vector opens.
        XCTAssertEqual(try sealObjectSequentially(plaintext, key: key), object)
        XCTAssertEqual(try readObject(object, key: key, plaintextSize: nil, piece: 4096), plaintext)
        XCTAssertEqual(try readObject(object, key: key, plaintextSize: Int64(size), piece: 4096), plaintext)
        XCTAssertEqual(try openObject(object, key: key, plaintextSize: Int64(size)), plaintext)
    }

    func testFileEmpty() throws { try checkFileVector("file-empty") }
    func testFileOneByte() throws { try checkFileVector("file-1") }
    func testFileOneFullChunk() throws { try checkFileVector("file-65536") }
    func testFileFullChunkAndOneByte() throws { try checkFileVector("file-65537") }

    func testStoreObjectWithFixedSalt() throws {
        let vector = try vector("store-fixed-salt")
        let storeKey = try FileKey(bytes: try hex(vector, "store-key"))
        let salt = try hex(vector, "salt")
        let plaintext = try hex(vector, "plaintext")
        XCTAssertEqual(plaintext, Array("coven store object test vector\n".utf8))

        XCTAssertEqual(try StoreSealer.payloadKey(storeKey: storeKey, salt: salt).hex, vector["payload-key"])
        let object = try StoreSealer.seal(plaintext, storeKey: storeKey, salt: salt)
        XCTAssertEqual(object.count, Int(try XCTUnwrap(vector["object-size"])))
        XCTAssertEqual(object.hex, vector["object"])
        XCTAssertEqual(try StoreSealer.open(try hex(vector, "object"), storeKey: storeKey), plaintext)
    }

    func testHKDFRFC5869Case1() throws {
        let vector = try vector("hkdf-rfc5869-1")
        let ikm = try hex(vector, "ikm")
        let salt = try hex(vector, "salt")
        let info = try hex(vector, "info")
        let length = try XCTUnwrap(Int(try XCTUnwrap(vector["length"])))

        var prk = [UInt8](repeating: 0, count: 32)
        try ikm.withUnsafeBytes { ikm in
            try salt.withUnsafeBytes { salt in
                try prk.withUnsafeMutableBytes { try HKDF.extract(ikm: ikm, salt: salt, into: $0.baseAddress!) }
            }
        }
        XCTAssertEqual(prk.hex, vector["prk"])

        var okm = [UInt8](repeating: 0, count: length)
        try prk.withUnsafeBytes { prk in
            try info.withUnsafeBytes { info in
                try okm.withUnsafeMutableBytes { try HKDF.expand(prk: prk, info: info, into: $0) }
            }
        }
        XCTAssertEqual(okm.hex, vector["okm"])

        // RFC 5869 itself, so a mistyped document cannot pass.
        XCTAssertEqual(
            okm.hex, "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    func testDeriveKeyMatchesExtractThenExpand() throws {
        let storeKey = FileKey()
        let salt = randomBytes(32, seed: 7)
        let derived = try StoreSealer.payloadKey(storeKey: storeKey, salt: salt)
        var prk = [UInt8](repeating: 0, count: 32)
        var okm = [UInt8](repeating: 0, count: 32)
        try storeKey.withUnsafeBytes { ikm in
            try salt.withUnsafeBytes { salt in
                try prk.withUnsafeMutableBytes { try HKDF.extract(ikm: ikm, salt: salt, into: $0.baseAddress!) }
            }
        }
        try prk.withUnsafeBytes { prk in
            try StoreSealer.info.withUnsafeBytes { info in
                try okm.withUnsafeMutableBytes { try HKDF.expand(prk: prk, info: info, into: $0) }
            }
        }
        XCTAssertEqual(derived.hex, okm.hex)
    }
}

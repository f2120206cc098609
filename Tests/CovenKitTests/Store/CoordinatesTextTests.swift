@testable import CovenKit
import Foundation
import XCTest

/// Coordinates' canonical text is written and read without Foundation's coders: byte for byte
/// what JSONEncoder makes, and what JSONDecoder reads, for every text (storage controls some).
final class CoordinatesTextTests: XCTestCase {
    private func foundationJSON(_ coordinates: Coordinates) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(coordinates), as: UTF8.self)
    }

    private func foundationDecode(_ json: String) -> Coordinates? {
        try? JSONDecoder().decode(Coordinates.self, from: Data(json.utf8))
    }

    func testTheTextIsWhatJSONEncoderMakes() throws {
        let device = "b8990225-729e-4295-95fa-ab7c21640f56"
        let object = "files/\(device)/vqw32jemtou6bwvorpuq3qaa7h"
        let key = String(repeating: "0f", count: 32)
        var samples = [
            Coordinates(at: .device, device: device, object: object, key: key),
            Coordinates(at: .stored, device: nil, object: object, key: key),
        ]
        // Every printable ASCII character, the ones JSON escapes and a few beyond.
        let printable = (0x20..<0x7F).map { String(UnicodeScalar(UInt8($0))) }
        for character in printable + ["\u{1}", "\n", "\t", "é", "\u{2028}", "😀", "\u{7F}"] {
            samples.append(Coordinates(at: .device, device: "d\(character)", object: "files/\(character)/x", key: "k\(character)"))
            samples.append(Coordinates(at: .stored, device: nil, object: character + "o", key: key + character))
        }
        for coordinates in samples {
            let text = coordinates.json
            XCTAssertEqual(text, try foundationJSON(coordinates))
            XCTAssertEqual(try Coordinates(json: text), coordinates, text)
        }
    }

    func testEveryOtherTextReadsAsJSONDecoderReadsIt() throws {
        let key = String(repeating: "ab", count: 32)
        let texts = [
            #"{"at":"stored","key":"\#(key)","object":"files/d/o"}"#,
            #"{"at":"device","device":"d","key":"\#(key)","object":"files/d/o"}"#,
            #"{ "at":"stored","key":"\#(key)","object":"files/d/o"}"#,
            #"{"object":"files/d/o","key":"\#(key)","at":"stored"}"#,
            #"{"at":"stored","device":null,"key":"\#(key)","object":"files/d/o"}"#,
            #"{"at":"stored","device":"d","key":"\#(key)","object":"files/d/o"}"#,
            #"{"at":"stored","key":"\#(key)","object":"files\/d\/o"}"#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/\u006f"}"#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/o","extra":1}"#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/o"} "#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/o"}x"#,
            #"{"at":"moon","key":"\#(key)","object":"files/d/o"}"#,
            #"{"at":"stored","key":"","object":"files/d/o"}"#,
            #"{"at":"device","key":"\#(key)","object":"files/d/o"}"#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/o""#,
            #"{"at":"stored","key":"\#(key)","object":"files/d/ó"}"#,
            #"{"at":"stored","key":"k"́,"object":"o"}"#,
            "",
            "{}",
            "[]",
        ]
        for text in texts {
            let decoded = try? Coordinates(json: text)
            var expected = foundationDecode(text)
            if let found = expected, found.object.isEmpty || found.key.isEmpty || (found.at == .device && (found.device ?? "").isEmpty) {
                expected = nil
            }
            XCTAssertEqual(decoded, expected, text)
        }
    }
}

/// Path bytes through Swift strings: the fast paths for valid UTF-8 keep every byte as the
/// scalar-by-scalar walk does.
final class PathTextBytesTests: XCTestCase {
    /// The walk the fast paths stand in for.
    private func slowString(_ bytes: [UInt8]) -> String {
        var scalars = String.UnicodeScalarView()
        var index = 0
        while index < bytes.count {
            let length = PathText.validSequenceLength(bytes, at: index)
            if length == 0 {
                scalars.append(Unicode.Scalar(PathText.escapeBase + UInt32(bytes[index]))!)
                index += 1
            } else {
                scalars.append(contentsOf: String(decoding: bytes[index..<index + length], as: UTF8.self).unicodeScalars)
                index += length
            }
        }
        return String(scalars)
    }

    func testBytesSurviveTheRoundTrip() {
        var generator = SystemRandomNumberGenerator()
        var samples: [[UInt8]] = [
            Array("album/track.flac".utf8), Array("Björk/Jóga.flac".utf8), [0xFF, 0x41], [0xC3], [0xED, 0xA0, 0x80],
            [0xF4, 0x8F, 0xB8, 0x80], [0xF4, 0x90, 0x80, 0x80], Array("a\u{10FE41}b".utf8), [],
        ]
        let alphabet: [UInt8] = [0x41, 0x2F, 0xC3, 0xA9, 0xF4, 0x8F, 0xB8, 0x80, 0xFF, 0xED, 0xE2, 0x82, 0xAC]
        for _ in 0..<2000 {
            samples.append((0..<Int.random(in: 0...12, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! })
        }
        for bytes in samples {
            let text = PathText.string(fromOSBytes: bytes)
            XCTAssertEqual(text, slowString(bytes), "\(bytes)")
            XCTAssertEqual(PathText.osBytes(text), slowBytes(text), "\(bytes)")
            // Bytes that hold an escape scalar's own UTF-8 (F4 8F B8...BB xx) are the one
            // ambiguity of the scheme; every other sequence comes back as it was.
            let holdsEscapeScalar = bytes.indices.contains { bytes[$0] == 0xF4 && $0 + 2 < bytes.count && bytes[$0 + 1] == 0x8F && (0xB8...0xBB).contains(bytes[$0 + 2]) }
            if !holdsEscapeScalar { XCTAssertEqual(PathText.osBytes(text), bytes, "\(bytes)") }
        }
    }

    /// The walk ``PathText/osBytes(_:)``'s fast path stands in for.
    private func slowBytes(_ path: String) -> [UInt8] {
        var out: [UInt8] = []
        for scalar in path.unicodeScalars {
            if scalar.value >= PathText.escapeBase && scalar.value <= PathText.escapeBase + 0xFF {
                out.append(UInt8(scalar.value - PathText.escapeBase))
            } else {
                out.append(contentsOf: String(scalar).utf8)
            }
        }
        return out
    }
}

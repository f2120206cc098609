import Foundation

/// Paths as the operating system's bytes, and their text for people (spec/files.md).
public enum PathText {
    /// The bytes of a path as the OS holds them.
    public static func bytes(_ path: String) -> [UInt8] { Array(path.utf8) }

    /// The text of path bytes: valid UTF-8 as it is, every byte that is not part of valid UTF-8
    /// as `\xNN` (uppercase hex). A backslash already in the name stays as it is, so the text
    /// cannot be turned back into the path.
    public static func text(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        let hexDigits = Array("0123456789ABCDEF".utf8)
        func escape(_ byte: UInt8) {
            out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "x"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 15)]])
        }
        while index < bytes.count {
            let length = validSequenceLength(bytes, at: index)
            if length == 0 {
                escape(bytes[index])
                index += 1
            } else {
                out.append(contentsOf: bytes[index..<index + length])
                index += length
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The length of the valid UTF-8 sequence starting at `index`, or 0 when it is not one
    /// (overlong forms, surrogates and code points past U+10FFFF are invalid).
    static func validSequenceLength(_ bytes: [UInt8], at index: Int) -> Int {
        let first = bytes[index]
        func continuation(_ offset: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
            index + offset < bytes.count && range.contains(bytes[index + offset])
        }
        switch first {
        case 0x00...0x7F: return 1
        case 0xC2...0xDF: return continuation(1) ? 2 : 0
        case 0xE0: return continuation(1, 0xA0...0xBF) && continuation(2) ? 3 : 0
        case 0xE1...0xEC, 0xEE...0xEF: return continuation(1) && continuation(2) ? 3 : 0
        case 0xED: return continuation(1, 0x80...0x9F) && continuation(2) ? 3 : 0
        case 0xF0: return continuation(1, 0x90...0xBF) && continuation(2) && continuation(3) ? 4 : 0
        case 0xF1...0xF3: return continuation(1) && continuation(2) && continuation(3) ? 4 : 0
        case 0xF4: return continuation(1, 0x80...0x8F) && continuation(2) && continuation(3) ? 4 : 0
        default: return 0
        }
    }
}

// MARK: - Bytes that are not UTF-8, through Swift strings

extension PathText {
    /// Where a byte that is not part of valid UTF-8 goes when a path passes through a Swift
    /// `String` (an argument, a line of stdin): U+10FE00 + byte, in plane 16's private use area,
    /// the way Python's surrogateescape keeps such bytes. ``osBytes(_:)`` turns them back.
    static let escapeBase: UInt32 = 0x10FE00

    /// A C string (an argv entry) as a String that keeps every byte.
    public static func string(fromOSBytes bytes: [UInt8]) -> String {
        // Valid UTF-8 throughout (nearly every path): the String of its bytes, validated at once
        // (appending scalar by scalar was 4% of an upload of 10,000 small files).
        if let valid = String(validating: bytes, as: UTF8.self) { return valid }
        var scalars = String.UnicodeScalarView()
        var index = 0
        while index < bytes.count {
            let length = validSequenceLength(bytes, at: index)
            if length == 0 {
                scalars.append(Unicode.Scalar(escapeBase + UInt32(bytes[index]))!)
                index += 1
            } else {
                scalars.append(contentsOf: String(decoding: bytes[index..<index + length], as: UTF8.self).unicodeScalars)
                index += length
            }
        }
        return String(scalars)
    }

    /// The OS bytes of a path held in a String: UTF-8, with escaped bytes restored.
    public static func osBytes(_ path: String) -> [UInt8] {
        // An escaped byte's scalar (U+10FE00...U+10FEFF) starts with 0xF4 in UTF-8: a path
        // without that byte is its UTF-8 as it is.
        if !path.utf8.contains(0xF4) { return Array(path.utf8) }
        var out: [UInt8] = []
        out.reserveCapacity(path.utf8.count)
        for scalar in path.unicodeScalars {
            if scalar.value >= escapeBase && scalar.value <= escapeBase + 0xFF {
                out.append(UInt8(scalar.value - escapeBase))
            } else {
                out.append(contentsOf: String(scalar).utf8)
            }
        }
        return out
    }

    /// Calls `body` with the path as a NUL-terminated C string of its OS bytes.
    public static func withCString<T>(_ path: String, _ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
        var bytes = osBytes(path)
        bytes.append(0)
        return try bytes.withUnsafeBufferPointer { buffer in
            try buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { try body($0) }
        }
    }

    /// Whether `text` carries bytes that were not valid UTF-8 (kept by
    /// ``string(fromOSBytes:)``): fine for a path, wrong for SQL, a name or a URL.
    public static func hasUndecodableBytes(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.value >= escapeBase && $0.value <= escapeBase + 0xFF }
    }

    /// A path for messages: its text, with undecodable bytes as `\xNN`.
    public static func display(_ path: String) -> String { text(osBytes(path)) }
}

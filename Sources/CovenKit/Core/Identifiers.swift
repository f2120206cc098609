import Foundation

/// Random identifiers: UUIDv7 text for files, moves and staged files; random names for objects.
public enum Identifier {
    /// A canonical lowercase UUIDv7: 48 bits of Unix milliseconds, then random bits, so ids sort
    /// by creation time (the upload queue and listings read better for it).
    public static func uuid7(now: Date = Date()) -> String {
        var bytes = SecureRandom.nonce(16)
        let millis = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        for index in 0..<6 { bytes[index] = UInt8((millis >> (8 * (5 - UInt64(index)))) & 0xff) }
        bytes[6] = (bytes[6] & 0x0f) | 0x70
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        return format(bytes)
    }

    /// A canonical lowercase UUIDv4.
    public static func uuid4() -> String {
        var bytes = SecureRandom.nonce(16)
        bytes[6] = (bytes[6] & 0x0f) | 0x40
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        return format(bytes)
    }

    /// A random object name: 26 characters of lowercase base32 (130 bits), nothing derived from
    /// content, so the provider learns nothing from it.
    public static func objectName() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        let bytes = SecureRandom.nonce(17)
        var bits = 0
        var value: UInt32 = 0
        var name: [Character] = []
        for byte in bytes {
            value = (value << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 && name.count < 26 {
                name.append(alphabet[Int((value >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        return String(name)
    }

    static func format(_ bytes: [UInt8]) -> String {
        // Built as ASCII bytes: a write of many files makes several ids per file.
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 36) { out in
            var position = 0
            for (index, byte) in bytes.prefix(16).enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[position] = UInt8(ascii: "-")
                    position += 1
                }
                out[position] = digits[Int(byte >> 4)]
                out[position + 1] = digits[Int(byte & 0x0f)]
                position += 2
            }
            return position
        }
    }

    /// Whether `text` is a canonical lowercase hyphenated UUID of version 4 or 7 with the RFC
    /// variant, as `uuid` identity tables require.
    public static func isCanonicalUUID(_ text: String) -> Bool {
        let utf8 = Array(text.utf8)
        guard utf8.count == 36 else { return false }
        for (index, c) in utf8.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard c == UInt8(ascii: "-") else { return false }
            } else {
                guard (c >= 48 && c <= 57) || (c >= 97 && c <= 102) else { return false }
            }
        }
        let version = utf8[14]
        guard version == UInt8(ascii: "4") || version == UInt8(ascii: "7") else { return false }
        let variant = utf8[19]
        return [UInt8(ascii: "8"), UInt8(ascii: "9"), UInt8(ascii: "a"), UInt8(ascii: "b")].contains(variant)
    }
}

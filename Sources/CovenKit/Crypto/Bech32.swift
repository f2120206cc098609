import Foundation

/// Bech32 (BIP 173) for the strings people copy: member recipients (`coven1…`) and identities
/// (`COVEN-MEMBER-SECRET-1…`), as age writes its keys. Like age, it takes strings longer than
/// BIP 173's 90 characters; it refuses mixed case, a bad checksum and padding that is not zero.
enum Bech32 {
    private static let charset = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l".utf8)
    private static let generator: [UInt32] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3]

    private static func polymod(_ values: [UInt8]) -> UInt32 {
        var check: UInt32 = 1
        for value in values {
            let top = check >> 25
            check = (check & 0x1ff_ffff) << 5 ^ UInt32(value)
            for index in 0..<5 where (top >> UInt32(index)) & 1 == 1 { check ^= generator[index] }
        }
        return check
    }

    private static func expand(_ hrp: [UInt8]) -> [UInt8] {
        hrp.map { $0 >> 5 } + [0] + hrp.map { $0 & 31 }
    }

    /// `data` as bech32 under the human-readable part `hrp` (lowercase unless `hrp` is uppercase).
    static func encode(hrp: String, data: [UInt8]) -> String {
        let upper = hrp == hrp.uppercased() && hrp != hrp.lowercased()
        let low = Array(hrp.lowercased().utf8)
        let words = convert(data, from: 8, to: 5, pad: true) ?? []
        let check = polymod(expand(low) + words + [0, 0, 0, 0, 0, 0]) ^ 1
        let checksum = (0..<6).map { UInt8((check >> UInt32(5 * (5 - $0))) & 31) }
        let text = String(decoding: low, as: UTF8.self) + "1" + String(decoding: (words + checksum).map { charset[Int($0)] }, as: UTF8.self)
        return upper ? text.uppercased() : text
    }

    /// The human-readable part (lowercased) and the bytes of a bech32 string.
    ///
    /// - Throws: `.usage` naming what is wrong: mixed case, no separator, a character outside
    ///   the alphabet, a bad checksum, bad padding.
    static func decode(_ text: String) throws -> (hrp: String, data: [UInt8]) {
        func bad(_ why: String) -> CovenError { CovenError(.usage, "'\(text.prefix(24))…' is not a valid bech32 string: \(why)") }
        guard text == text.lowercased() || text == text.uppercased() else { throw bad("it mixes upper and lower case") }
        let bytes = Array(text.lowercased().utf8)
        guard bytes.allSatisfy({ $0 >= 33 && $0 <= 126 }) else { throw bad("it holds a character outside printable ASCII") }
        guard let separator = bytes.lastIndex(of: UInt8(ascii: "1")), separator >= 1, bytes.count - separator - 1 >= 6 else {
            throw bad("it has no separator and checksum")
        }
        let hrp = Array(bytes[..<separator])
        var words: [UInt8] = []
        for byte in bytes[(separator + 1)...] {
            guard let value = charset.firstIndex(of: byte) else { throw bad("'\(Character(UnicodeScalar(byte)))' is not in its alphabet") }
            words.append(UInt8(value))
        }
        guard polymod(expand(hrp) + words) == 1 else { throw bad("its checksum does not match (a character was changed or lost)") }
        guard let data = convert(Array(words.dropLast(6)), from: 5, to: 8, pad: false) else { throw bad("its padding is not zero") }
        return (String(decoding: hrp, as: UTF8.self), data)
    }

    private static func convert(_ data: [UInt8], from: Int, to: Int, pad: Bool) -> [UInt8]? {
        var accumulator = 0
        var bits = 0
        var out: [UInt8] = []
        let maximum = (1 << to) - 1
        for value in data {
            accumulator = (accumulator << from) | Int(value)
            bits += from
            while bits >= to {
                bits -= to
                out.append(UInt8((accumulator >> bits) & maximum))
            }
        }
        if pad {
            if bits > 0 { out.append(UInt8((accumulator << (to - bits)) & maximum)) }
        } else if bits >= from || (accumulator << (to - bits)) & maximum != 0 {
            return nil
        }
        return out
    }
}

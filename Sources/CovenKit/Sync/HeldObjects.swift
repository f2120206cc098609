import Foundation

/// The stored objects a change says its device's unpublished records name (``ChangeObject``'s
/// `heldObjects`), kept as the bytes a change publishes them in: each name a varint length and
/// its UTF-8 (docs/format.md, section 9.1), one after the other.
///
/// A library's first push names 100,000 of them in every change, and a pull or a join stores
/// each change's list: as 100,000 Strings that took twice the bytes, held three times over
/// (built, encoded, decoded). Here they go from SQLite into the change's bytes, and from a
/// change's bytes into the registry's JSON, as bytes.
///
/// ```swift
/// let held: HeldObjects = ["files/x/abc"]
/// for name in held { print(name) }         // Strings, one at a time
/// held.json()                              // ["files/x/abc"], as RecordedChanges.json writes it
/// ```
public struct HeldObjects: Sendable, Equatable, Sequence, ExpressibleByArrayLiteral {
    /// How many names.
    public private(set) var count = 0
    /// The names as a change holds them, without their count: for a change read, a slice of
    /// its plaintext (not copied out of it).
    private(set) var encoded: ArraySlice<UInt8> = []

    /// No names.
    public init() {}

    /// `names`, in order.
    public init(_ names: some Sequence<String>) {
        for name in names { append(name) }
    }

    public init(arrayLiteral names: String...) {
        self.init(names)
    }

    /// The names decoded from a change: `count` of them in `encoded` (checked by the caller).
    init(count: Int, encoded: ArraySlice<UInt8>) {
        self.count = count
        self.encoded = encoded
    }

    public var isEmpty: Bool { count == 0 }

    /// Adds a name at the end.
    public mutating func append(_ name: String) {
        var name = name
        name.withUTF8 { append(utf8: $0) }
    }

    /// Adds a name given as UTF-8 (as SQLite gives a column's text) at the end.
    mutating func append(utf8 name: UnsafeBufferPointer<UInt8>) {
        var length = UInt64(name.count)
        while length >= 0x80 {
            encoded.append(UInt8(length & 0x7f) | 0x80)
            length >>= 7
        }
        encoded.append(UInt8(length))
        encoded.append(contentsOf: name)
        count += 1
    }

    /// Makes room for `bytes` more bytes of names.
    mutating func reserveCapacity(bytes: Int) {
        encoded.reserveCapacity(encoded.count + bytes)
    }

    /// Every name, as a String, one at a time.
    public func makeIterator() -> Iterator { Iterator(encoded: encoded, at: encoded.startIndex) }

    public struct Iterator: IteratorProtocol {
        let encoded: ArraySlice<UInt8>
        var at: Int

        public mutating func next() -> String? {
            guard let name = HeldObjects.name(in: encoded, at: &at) else { return nil }
            return String(decoding: name, as: UTF8.self)
        }
    }

    /// The name at `at` in `encoded`, moving `at` past it; nil at the end.
    private static func name(in encoded: ArraySlice<UInt8>, at: inout Int) -> ArraySlice<UInt8>? {
        var length = 0
        var shift = 0
        while at < encoded.endIndex {
            let byte = encoded[at]
            at += 1
            length |= Int(byte & 0x7f) << shift
            guard byte & 0x80 != 0 else {
                let end = Swift.min(at + length, encoded.endIndex)
                defer { at = end }
                return encoded[at..<end]
            }
            shift += 7
        }
        return nil
    }

    /// The names as a JSON array of strings, byte for byte what ``RecordedChanges/json(ids:)``
    /// writes for them: `"` and `\` escaped, control characters as `\u00XX`.
    func json() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encoded.count + 2 * count + 2)
        out.append(UInt8(ascii: "["))
        var at = encoded.startIndex
        while let name = Self.name(in: encoded, at: &at) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            for byte in name {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                    out.append(UInt8(ascii: "\\"))
                    out.append(byte)
                case ..<0x20:
                    out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                    out.append(Self.hexDigits[Int(byte >> 4)])
                    out.append(Self.hexDigits[Int(byte & 0x0f)])
                default:
                    out.append(byte)
                }
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Reads `count` names written by ``ChangeObject/encodedHead(version:)`` from `reader`,
    /// each checked to be UTF-8: a slice of the reader's bytes, not a copy.
    static func decode(_ reader: inout ByteReader, count: Int) throws -> HeldObjects {
        let start = reader.offset
        for _ in 0..<count {
            let length = try reader.varint()
            guard length <= UInt64(reader.remaining) else { throw ByteReader.failure("truncated") }
            let name = try reader.take(Int(length))
            // Object names are ASCII: only another name needs the full check.
            guard name.allSatisfy({ $0 < 0x80 }) || String(validating: name, as: UTF8.self) != nil else {
                throw ByteReader.failure("text is not UTF-8")
            }
        }
        return HeldObjects(count: count, encoded: reader.bytes[start..<reader.offset])
    }
}

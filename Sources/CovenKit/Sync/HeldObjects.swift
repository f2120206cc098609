import Foundation

/// The stored objects a change says its device's unpublished records name (``ChangeObject``'s
/// `heldObjects`), kept as the bytes a change publishes them in: each name a varint length and
/// its UTF-8 (docs/format.md, section 9.1), one after the other.
///
/// A library's first push names 100,000 of them in every change, and a pull or a join stores
/// each change's list: as 100,000 Strings that took twice the bytes, held three times over
/// (built, encoded, decoded). Here they go from SQLite into the change's bytes, and from a
/// change's bytes into the registry's JSON, as bytes. A change read holds them as that JSON
/// (made as they are checked), so the plaintext they came in goes as soon as it is decoded.
///
/// ```swift
/// let held: HeldObjects = ["files/x/abc"]
/// for name in held { print(name) }         // Strings, one at a time
/// held.json()                              // ["files/x/abc"], as RecordedChanges.json writes it
/// ```
public struct HeldObjects: Sendable, Equatable, Sequence, ExpressibleByArrayLiteral {
    /// How many names.
    public private(set) var count = 0
    /// The names as a change holds them, without their count (empty for a change read).
    private var wire: [UInt8] = []
    /// For a change read: the names as ``json()`` gives them.
    private var readJSON: [UInt8]?

    /// No names.
    public init() {}

    /// `names`, in order.
    public init(_ names: some Sequence<String>) {
        for name in names { append(name) }
    }

    public init(arrayLiteral names: String...) {
        self.init(names)
    }

    /// The names as a change holds them, without their count.
    var encoded: [UInt8] {
        guard readJSON != nil else { return wire }
        var out: [UInt8] = []
        for name in self { RowEntryCodec.writeString(name, into: &out) }
        return out
    }

    public static func == (a: HeldObjects, b: HeldObjects) -> Bool {
        guard a.count == b.count else { return false }
        if a.readJSON == nil, b.readJSON == nil { return a.wire == b.wire }
        if let x = a.readJSON, let y = b.readJSON { return x == y }
        return a.elementsEqual(b)
    }

    public var isEmpty: Bool { count == 0 }

    /// Adds a name at the end.
    public mutating func append(_ name: String) {
        var name = name
        name.withUTF8 { append(utf8: $0) }
    }

    /// Adds a name given as UTF-8 (as SQLite gives a column's text) at the end.
    mutating func append(utf8 name: UnsafeBufferPointer<UInt8>) {
        if readJSON != nil {
            wire = encoded
            readJSON = nil
        }
        var length = UInt64(name.count)
        while length >= 0x80 {
            wire.append(UInt8(length & 0x7f) | 0x80)
            length >>= 7
        }
        wire.append(UInt8(length))
        wire.append(contentsOf: name)
        count += 1
    }


    /// Every name, as a String, one at a time.
    public func makeIterator() -> Iterator { Iterator(wire: wire, json: readJSON) }

    public struct Iterator: IteratorProtocol {
        let wire: [UInt8]
        let json: [UInt8]?
        var at = 0

        init(wire: [UInt8], json: [UInt8]?) {
            self.wire = wire
            self.json = json
            at = json == nil ? 0 : 1
        }

        public mutating func next() -> String? {
            if let json { return HeldObjects.jsonName(in: json, at: &at) }
            guard let name = HeldObjects.name(in: wire[...], at: &at) else { return nil }
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

    /// The string at `at` in JSON written by ``appendJSON(_:to:)`` (`at` on its opening quote
    /// or the comma before it), moving `at` past it; nil at the end.
    private static func jsonName(in json: [UInt8], at: inout Int) -> String? {
        guard at < json.count, json[at] != UInt8(ascii: "]") else { return nil }
        if json[at] == UInt8(ascii: ",") { at += 1 }
        at += 1
        var name: [UInt8] = []
        while at < json.count, json[at] != UInt8(ascii: "\"") {
            if json[at] == UInt8(ascii: "\\") {
                at += 1
                if json[at] == UInt8(ascii: "u") {
                    name.append(UInt8(hexValue(json[at + 3]) << 4 | hexValue(json[at + 4])))
                    at += 5
                    continue
                }
            }
            name.append(json[at])
            at += 1
        }
        at += 1
        return String(decoding: name, as: UTF8.self)
    }

    private static func hexValue(_ digit: UInt8) -> UInt8 {
        digit >= UInt8(ascii: "a") ? digit - UInt8(ascii: "a") + 10 : digit - UInt8(ascii: "0")
    }

    /// The names as a JSON array of strings, byte for byte what ``RecordedChanges/json(ids:)``
    /// writes for them: `"` and `\` escaped, control characters as `\u00XX`.
    func json() -> [UInt8] {
        if let readJSON { return readJSON }
        var out: [UInt8] = []
        out.reserveCapacity(wire.count + 2 * count + 2)
        out.append(UInt8(ascii: "["))
        var at = 0
        while let name = Self.name(in: wire[...], at: &at) {
            Self.appendJSON(name, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Appends `name` as a JSON string to `out` (holding `[` and any names before it).
    private static func appendJSON(_ name: ArraySlice<UInt8>, to out: inout [UInt8]) {
        if out.count > 1 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        for byte in name {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(byte)
            case ..<0x20:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0f)])
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Reads `count` names written by ``ChangeObject/encodedHead(version:)`` from `reader`,
    /// each checked to be UTF-8, straight into the JSON the registry keeps them as.
    static func decode(_ reader: inout ByteReader, count: Int) throws -> HeldObjects {
        // Checked and measured first, so the JSON is made once at its size.
        var names = reader
        var size = 2
        for _ in 0..<count {
            let length = try reader.varint()
            guard length <= UInt64(reader.remaining) else { throw ByteReader.failure("truncated") }
            let name = try reader.take(Int(length))
            size += name.count + 3
            // Object names are ASCII: only another name needs the full check.
            guard name.allSatisfy({ $0 < 0x80 }) || String(validating: name, as: UTF8.self) != nil else {
                throw ByteReader.failure("text is not UTF-8")
            }
            for byte in name where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { size += byte < 0x20 ? 5 : 1 }
        }
        var json: [UInt8] = []
        json.reserveCapacity(size)
        json.append(UInt8(ascii: "["))
        for _ in 0..<count {
            appendJSON(try names.take(Int(try names.varint())), to: &json)
        }
        json.append(UInt8(ascii: "]"))
        var held = HeldObjects()
        held.count = count
        held.readJSON = json
        return held
    }
}

import Foundation

// MARK: - Published changes

/// The entries of one audience in a change (DESIGN.md "Change objects v2"): the store's, or a
/// circle's, sealed under that audience's key. A change of format 1 has one section, the
/// store's.
public struct ChangeSection: Sendable, Equatable {
    /// The audience the entries are for: `store`, or a circle's id.
    public var audience: String
    /// Its entries, in commit order.
    public var entries: [RowEntry]
    /// The generation of the audience's key it was sealed under, as read (nil for one being
    /// published, and in format 1).
    public var generation: UInt64?

    public init(audience: String, entries: [RowEntry], generation: UInt64? = nil) {
        self.audience = audience
        self.entries = entries
        self.generation = generation
    }

    /// Sections are equal by what they hold, whatever generation sealed them.
    public static func == (a: ChangeSection, b: ChangeSection) -> Bool {
        a.audience == b.audience && a.entries == b.entries
    }
}

/// An audience and the generation of its key: what seals a section.
public struct SectionKey: Sendable, Equatable, Hashable {
    public var audience: String
    public var generation: UInt64

    public init(audience: String, generation: UInt64) {
        self.audience = audience
        self.generation = generation
    }
}

/// One published change, `<store>/changes/<device>/<seq>`: a batch of a device's recorded writes
/// in commit order, with what a puller needs to apply it (DESIGN.md, "Change objects";
/// docs/format.md, section 9).
///
/// Publishing: ``encoded()`` the plaintext, compress it with zstd, seal it under the store key
/// bound to its path (``StoreSealer``), and sign the sealed bytes with the device's key: one
/// ``seal(storeKey:signingKey:)``. Reading: ``open(_:path:storeKey:publicKey:storeID:)`` checks
/// the signature against the device's registered key first, then authenticates and decrypts,
/// decompresses (at most ``maximumPlaintextSize``), decodes, and checks that the change names
/// the device and seq of its path. So a change cannot be forged by another device, moved,
/// swapped between devices or replayed under another seq.
public struct ChangeObject: Sendable, Equatable {
    /// The schema a change was written under: how many migrations ran, and their digest.
    public struct SchemaVersion: Sendable, Equatable {
        /// The number of migrations applied.
        public var migrations: Int
        /// The digest the device computes over them.
        public var digest: String

        /// A schema version: `migrations` applied, with `digest` over them.
        public init(migrations: Int, digest: String) {
            self.migrations = migrations
            self.digest = digest
        }
    }

    /// The plaintext format this code writes and reads.
    public static let formatVersion: UInt8 = 1
    /// The most plaintext bytes a change may decompress to: 64 MiB.
    public static let maximumPlaintextSize = 64 << 20

    /// The store's id.
    public var storeID: String
    /// The publishing device.
    public var device: String
    /// The change's number in the device's sequence, from 1.
    public var seq: UInt64
    /// The schema the entries were written under.
    public var schema: SchemaVersion
    /// For every other device, the highest seq this device has applied with nothing missing
    /// below it.
    public var frontier: [String: UInt64]
    /// Stored objects that this device's unpublished records name (usually none): gc elsewhere
    /// leaves them alone. Up to a whole library's: kept as bytes, not Strings.
    public var heldObjects: HeldObjects
    /// The recorded writes, one section per audience (the store's first), each in commit
    /// order; no section is empty.
    public var sections: [ChangeSection]
    /// The generation of the store audience's key the change was sealed under (format 2); 1
    /// for a change of format 1, sealed under the store key, generation 1.
    public var generation: UInt64 = 1
    /// Sections this device could not open (an audience it is not in): audience and generation.
    public var unreadSections: [SectionKey] = []

    /// Every entry of every section, section by section.
    public var entries: [RowEntry] { sections.count == 1 ? sections[0].entries : sections.flatMap(\.entries) }

    /// A change of `device`, number `seq`, holding `entries` in commit order, all of the store
    /// audience.
    public init(
        storeID: String, device: String, seq: UInt64, schema: SchemaVersion, frontier: [String: UInt64] = [:],
        heldObjects: HeldObjects = [], entries: [RowEntry]
    ) {
        self.init(storeID: storeID, device: device, seq: seq, schema: schema, frontier: frontier, heldObjects: heldObjects,
                  sections: entries.isEmpty ? [] : [ChangeSection(audience: RowAudiences.store, entries: entries)])
    }

    /// A change of `device`, number `seq`, holding `sections`.
    public init(
        storeID: String, device: String, seq: UInt64, schema: SchemaVersion, frontier: [String: UInt64] = [:],
        heldObjects: HeldObjects = [], sections: [ChangeSection]
    ) {
        self.storeID = storeID
        self.device = device
        self.seq = seq
        self.schema = schema
        self.frontier = frontier
        self.heldObjects = heldObjects
        self.sections = sections.filter { !$0.entries.isEmpty }
    }

    // MARK: Paths

    /// The storage path of change `seq` of `device`: `changes/<device>/<seq, 16 digits>`.
    ///
    /// - Parameters:
    ///   - device: the publishing device's id.
    ///   - seq: the change's number, from 1.
    /// - Returns: for example `changes/1b4e…/0000000000000042`.
    public static func path(device: String, seq: UInt64) -> String {
        let digits = String(seq)
        return "changes/" + device + "/" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// The device and seq a change path names.
    ///
    /// - Returns: nil unless `path` is `changes/<device>/<16 digits>` with a seq of at least 1
    ///   and a device id of letters, digits and dashes.
    public static func parsePath(_ path: String) -> (device: String, seq: UInt64)? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "changes", !parts[1].isEmpty,
            parts[1].utf8.allSatisfy({ $0 == 0x2d || (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) }),
            parts[2].utf8.count == 16, parts[2].utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            let seq = UInt64(parts[2]), seq >= 1
        else { return nil }
        return (String(parts[1]), seq)
    }

    /// This change's storage path.
    public var path: String { Self.path(device: device, seq: seq) }

    // MARK: Publishing

    /// The bytes to publish at ``path``: the sealed, compressed plaintext, then the signature.
    ///
    /// ```
    /// published = sealed ‖ signature                      (signature: the last 64 bytes)
    /// sealed    = store object of zstd(plaintext), bound to the path (docs/format.md, 5)
    /// signature = Ed25519(device key, "coven change v1" ‖ 0x00 ‖ path ‖ 0x00 ‖ SHA-256(sealed))
    /// ```
    ///
    /// - Parameters:
    ///   - storeKey: the store key.
    ///   - signingKey: the publishing device's signing key.
    ///   - level: the zstd level (3 by default).
    /// - Returns: the published bytes.
    /// - Throws: ``CovenError`` `.internal` when a library call fails or the change is invalid
    ///   (a seq of 0, its own device in its frontier).
    public func seal(storeKey: FileKey, signingKey: DeviceSigningKey, level: Int = Zstd.defaultLevel) throws -> [UInt8] {
        try seal(storeKey: storeKey, signingKey: signingKey, level: level, salt: SecureRandom.bytes(ObjectHeader.saltSize))
    }

    /// Seals with a given salt: for known-answer vectors only.
    func seal(storeKey: FileKey, signingKey: DeviceSigningKey, level: Int = Zstd.defaultLevel, salt: [UInt8]) throws -> [UInt8] {
        guard seq >= 1, frontier[device] == nil, Self.parsePath(path) != nil else {
            throw CovenError(
                .internal, "cannot publish an invalid change", cause: "seq \(seq) of '\(device)'",
                details: ["path": path])
        }
        // Format 1 has one section, the store's: other audiences need format 2.
        guard sections.allSatisfy({ $0.audience == RowAudiences.store }) else {
            throw CovenError(.internal, "format 1 of a change holds the store audience only",
                             cause: "sections of \(sections.map(\.audience).joined(separator: ", "))", details: ["path": path])
        }
        return try Self.publish(
            compressed: try compressed(version: Self.formatVersion, entries: entries, level: level), path: path, storeKey: storeKey,
            signingKey: signingKey, salt: salt)
    }

    /// Seals compressed bytes bound to `path` and signs the result: the published bytes.
    static func publish(
        compressed: [UInt8], path: String, storeKey: FileKey, signingKey: DeviceSigningKey, salt: [UInt8]
    ) throws -> [UInt8] {
        let sealed = try StoreSealer.seal(compressed, storeKey: storeKey, salt: salt, boundTo: path)
        return sealed + (try signingKey.sign(signedMessage(path: path, sealed: sealed[...])))
    }

    /// What the device signs: a domain string, the path, and the SHA-256 of the sealed bytes.
    static func signedMessage(path: String, sealed: ArraySlice<UInt8>) -> [UInt8] {
        Array("coven change v1".utf8) + [0] + Array(path.utf8) + [0] + sealed.withUnsafeBytes { SHA256.digest($0) }
    }

    // MARK: Reading

    /// Checks and reads a published change.
    ///
    /// In order: the signature against `publicKey` (the device's registered key), then the
    /// store object under `storeKey` bound to `path`, then zstd (at most 64 MiB), then the
    /// plaintext; finally the change must name the device and seq of `path` (and `storeID`,
    /// when given).
    ///
    /// - Parameters:
    ///   - bytes: the published bytes.
    ///   - path: where they were read: `changes/<device>/<seq>`.
    ///   - storeKey: the store key.
    ///   - publicKey: the publishing device's public key, from its registry entry.
    ///   - storeID: the store's id, checked when given.
    /// - Returns: the change.
    /// - Throws: ``CovenError`` with `path` in its details: `.integrity` when the bytes are
    ///   truncated, tampered with, signed by another key, sealed under another key or for another
    ///   path, or name another store, device or seq (moved, swapped, replayed); `.decoding` when
    ///   the authenticated plaintext is malformed (bad zstd, too large, bad fields);
    ///   `.updateRequired` for a newer format; `.internal` when `path` is not a change path.
    public static func open(
        _ bytes: [UInt8], path: String, storeKey: FileKey, publicKey: DevicePublicKey, storeID: String? = nil
    ) throws -> ChangeObject {
        do {
            guard let (device, seq) = parsePath(path) else {
                throw CovenError(.internal, "'\(path)' is not the path of a change")
            }
            let signatureSize = DeviceSigningKey.signatureSize
            guard bytes.count >= signatureSize + StoreSealer.headerSize + 16 else {
                throw CovenError(
                    .integrity, "a published change is truncated", cause: "\(bytes.count.counted("byte"))",
                    details: ["reason": "truncated"])
            }
            let sealed = bytes[0..<(bytes.count - signatureSize)]
            do {
                try publicKey.verify(Array(bytes[(bytes.count - signatureSize)...]), for: signedMessage(path: path, sealed: sealed))
            } catch let error as CovenError where error.code == .integrity {
                throw CovenError(
                    .integrity, "a published change is not signed by its device", cause: error.cause,
                    details: ["reason": "signature", "device": device])
            }
            let compressed = try StoreSealer.open(Array(sealed), storeKey: storeKey, boundTo: path)
            let plaintext = try Zstd.decompress(compressed, maximumSize: maximumPlaintextSize, sized: true)
            let change = try decode(plaintext)
            guard change.device == device, change.seq == seq else {
                throw CovenError(
                    .integrity, "a published change names another device or seq than its path",
                    cause: "it says seq \(change.seq) of '\(change.device)'", details: ["reason": "misplaced"])
            }
            if let storeID, change.storeID != storeID {
                throw CovenError(
                    .integrity, "a published change belongs to another store", cause: "store '\(change.storeID)'",
                    details: ["reason": "store"])
            }
            return change
        } catch let error as CovenError {
            var error = error
            error.details["path"] = path
            throw error
        }
    }
}

// MARK: - The plaintext

extension ChangeObject {
    /// Value tags beyond RowEntryCodec's 0–4: a TEXT equal to the entry's stamp, or to its id
    /// (every upsert carries both again as `_updated_at` and `id`), and a REAL written as its
    /// shortest decimal text, when that is shorter than 8 bytes.
    static let stampTag: UInt8 = 0x05
    static let idTag: UInt8 = 0x06
    static let decimalTag: UInt8 = 0x07

    /// The plaintext: version, identity, schema, frontier, held objects, then the entries with
    /// their table and column names once each (docs/format.md, section 9.1).
    public func encoded() -> [UInt8] {
        var out = encodedHead(version: Self.formatVersion)
        Self.encodeEntries(entries, into: &out)
        return out
    }

    /// Version, identity, schema, frontier and held objects: format 1's first part, and format
    /// 2's envelope.
    func encodedHead(version: UInt8) -> [UInt8] {
        var out = encodedHeadBeforeNames(version: version)
        out.append(contentsOf: heldObjects.encoded)
        return out
    }

    /// zstd of the head and `entries` (format 1's plaintext), or of the head alone (format 2's
    /// envelope): the held names, up to 100,000 of them, compressed from where they are, not
    /// copied into one plaintext first.
    ///
    /// - Throws: ``CovenError`` `.internal` when the plaintext would pass
    ///   ``maximumPlaintextSize`` or libarchive fails.
    func compressed(version: UInt8, entries: [RowEntry]?, level: Int) throws -> [UInt8] {
        var body: [UInt8] = []
        if let entries { Self.encodeEntries(entries, into: &body) }
        let head = encodedHeadBeforeNames(version: version)
        let size = head.count + heldObjects.encoded.count + body.count
        guard size <= Self.maximumPlaintextSize else {
            throw CovenError(.internal, "a change holds more than \(Self.maximumPlaintextSize) bytes", details: ["path": path])
        }
        var output: [UInt8] = []
        output.reserveCapacity(size / 3 + 64)
        let writer = try ZstdWriter(level: level) { output.append(contentsOf: $0) }
        try writer.write(head)
        try heldObjects.encoded.withUnsafeBytes { try writer.write($0) }
        try writer.write(body)
        try writer.finish()
        return output
    }

    /// The head up to the held names: version, identity, schema, frontier, and how many names.
    private func encodedHeadBeforeNames(version: UInt8) -> [UInt8] {
        var out: [UInt8] = [version]
        out.reserveCapacity(256 + frontier.count * 48)
        RowEntryCodec.writeString(storeID, into: &out)
        RowEntryCodec.writeString(device, into: &out)
        RowEntryCodec.writeVarint(seq, into: &out)
        RowEntryCodec.writeVarint(UInt64(max(0, schema.migrations)), into: &out)
        RowEntryCodec.writeString(schema.digest, into: &out)
        RowEntryCodec.writeVarint(UInt64(frontier.count), into: &out)
        for (other, applied) in frontier.sorted(by: { $0.key < $1.key }) {
            RowEntryCodec.writeString(other, into: &out)
            RowEntryCodec.writeVarint(applied, into: &out)
        }
        RowEntryCodec.writeVarint(UInt64(heldObjects.count), into: &out)
        return out
    }

    /// `entries` with their table and column names once each: format 1's second part, and a
    /// section's plaintext in format 2.
    static func encodeEntries(_ entries: [RowEntry], into out: inout [UInt8]) {
        // Tables and column lists (shapes), numbered in order of first use.
        var tables: [String] = []
        var tableIndex: [String: Int] = [:]
        var shapes: [(table: Int, columns: [String])] = []
        var shapeIndex: [ShapeKey: Int] = [:]
        var references: [Int] = []
        references.reserveCapacity(entries.count)
        // The shape of the entry before: a change's upserts mostly repeat it, compared rather
        // than hashed again.
        var last: (table: Int, columns: [String], shape: Int)?
        // Entries are read in place (by index), not copied out of the array one by one.
        for index in entries.indices {
            let entry = entries[index]
            let table: Int
            if let known = tableIndex[entry.table] {
                table = known
            } else {
                table = tables.count
                tables.append(entry.table)
                tableIndex[entry.table] = table
            }
            guard entry.kind == .upsert else {
                references.append(table)
                continue
            }
            if let last, last.table == table, last.columns == entry.columns {
                references.append(last.shape)
                continue
            }
            let key = ShapeKey(table: table, columns: entry.columns)
            let shape: Int
            if let known = shapeIndex[key] {
                shape = known
            } else {
                shape = shapes.count
                shapeIndex[key] = shapes.count
                shapes.append((table, entry.columns))
            }
            references.append(shape)
            last = (table, entry.columns, shape)
        }
        RowEntryCodec.writeVarint(UInt64(tables.count), into: &out)
        for table in tables { RowEntryCodec.writeString(table, into: &out) }
        RowEntryCodec.writeVarint(UInt64(shapes.count), into: &out)
        for shape in shapes {
            RowEntryCodec.writeVarint(UInt64(shape.table), into: &out)
            RowEntryCodec.writeVarint(UInt64(shape.columns.count), into: &out)
            for column in shape.columns { RowEntryCodec.writeString(column, into: &out) }
        }
        RowEntryCodec.writeVarint(UInt64(entries.count), into: &out)
        for index in entries.indices {
            let entry = entries[index], reference = references[index]
            out.append(entry.kind.rawValue)
            RowEntryCodec.writeVarint(UInt64(reference), into: &out)
            RowEntryCodec.writeString(entry.id, into: &out)
            RowEntryCodec.writeString(entry.stamp, into: &out)
            guard entry.kind == .upsert else { continue }
            for value in entry.values { Self.writeValue(value, of: entry, into: &out) }
        }
    }

    private struct ShapeKey: Hashable {
        let table: Int
        let columns: [String]
    }

    private static func writeValue(_ value: SQLValue, of entry: RowEntry, into out: inout [UInt8]) {
        switch value {
        case .text(let text) where text == entry.stamp:
            out.append(stampTag)
        case .text(let text) where text == entry.id:
            out.append(idTag)
        case .real(let real) where real.isFinite:
            // Swift's description is the shortest text that reads back as the same Double.
            let text = real.description
            if text.utf8.count < 8, Double(text)?.bitPattern == real.bitPattern {
                out.append(decimalTag)
                RowEntryCodec.writeString(text, into: &out)
            } else {
                RowEntryCodec.writeValue(value, into: &out)
            }
        default:
            RowEntryCodec.writeValue(value, into: &out)
        }
    }

    /// Decodes a plaintext written by ``encoded()``.
    ///
    /// - Throws: ``CovenError`` `.updateRequired` for a newer format version; `.decoding` when
    ///   the bytes are truncated, have trailing bytes, or hold an invalid field (version 0, seq
    ///   0, an unknown kind or value tag, an index out of range, a frontier naming the device
    ///   itself or one device twice).
    public static func decode(_ bytes: [UInt8]) throws -> ChangeObject {
        var reader = ByteReader(bytes)
        var change = try decodeHead(&reader, version: formatVersion)
        change.sections = [ChangeSection(audience: RowAudiences.store, entries: try decodeEntries(&reader))].filter { !$0.entries.isEmpty }
        return change
    }

    /// A change's first part (``encodedHead(version:)``) of format `expected`, with no entries.
    static func decodeHead(_ reader: inout ByteReader, version expected: UInt8) throws -> ChangeObject {
        let version = try reader.byte()
        if version > expected {
            throw CovenError(
                .updateRequired, "a published change uses a newer format than this coven supports",
                hint: "update coven to read it", cause: "change format version \(version)",
                details: ["version": String(version)])
        }
        guard version == expected else { throw failure("format version \(version)") }
        let storeID = try reader.string()
        let device = try reader.string()
        let seq = try reader.varint()
        guard seq >= 1 else { throw failure("seq 0") }
        let migrations = try reader.varint()
        guard migrations <= UInt64(Int.max) else { throw failure("migration count too large") }
        let digest = try reader.string()
        var frontier: [String: UInt64] = [:]
        for _ in 0..<(try count(&reader)) {
            let other = try reader.string()
            guard other != device, frontier.updateValue(try reader.varint(), forKey: other) == nil else {
                throw failure("a frontier naming '\(other)' twice or the device itself")
            }
        }
        let held = try HeldObjects.decode(&reader, count: try count(&reader))
        return ChangeObject(
            storeID: storeID, device: device, seq: seq, schema: SchemaVersion(migrations: Int(migrations), digest: digest),
            frontier: frontier, heldObjects: held, sections: [])
    }

    /// Entries written by ``encodeEntries(_:into:)``, to the end of `reader`.
    static func decodeEntries(_ reader: inout ByteReader) throws -> [RowEntry] {
        var tables: [String] = []
        for _ in 0..<(try count(&reader)) { tables.append(try reader.string()) }
        var shapes: [(table: String, columns: [String])] = []
        for _ in 0..<(try count(&reader)) {
            let table = try reader.varint()
            guard table < UInt64(tables.count) else { throw failure("a column list of an unknown table") }
            var columns: [String] = []
            for _ in 0..<(try count(&reader)) { columns.append(try reader.string()) }
            shapes.append((tables[Int(table)], columns))
        }
        var entries: [RowEntry] = []
        let entryCount = try count(&reader)
        entries.reserveCapacity(entryCount)
        for _ in 0..<entryCount {
            guard let kind = RowEntry.Kind(rawValue: try reader.byte()) else { throw failure("unknown row entry kind") }
            let reference = try reader.varint()
            let id = try reader.string()
            let stamp = try reader.string()
            if kind != .upsert {
                guard reference < UInt64(tables.count) else { throw failure("an entry of an unknown table") }
                entries.append(RowEntry(kind: kind, table: tables[Int(reference)], id: id, stamp: stamp))
                continue
            }
            guard reference < UInt64(shapes.count) else { throw failure("an entry of an unknown column list") }
            let shape = shapes[Int(reference)]
            var values: [SQLValue] = []
            values.reserveCapacity(shape.columns.count)
            for _ in shape.columns { values.append(try value(&reader, id: id, stamp: stamp)) }
            entries.append(RowEntry(kind: kind, table: shape.table, id: id, stamp: stamp, columns: shape.columns, values: values))
        }
        guard reader.isAtEnd else { throw failure("trailing bytes") }
        return entries
    }

    /// A count that cannot exceed the bytes left (each item takes at least one).
    private static func count(_ reader: inout ByteReader) throws -> Int {
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw failure("a count past the end") }
        return Int(count)
    }

    private static func value(_ reader: inout ByteReader, id: String, stamp: String) throws -> SQLValue {
        guard reader.remaining > 0 else { throw failure("truncated") }
        switch reader.bytes[reader.offset] {
        case stampTag:
            _ = try reader.byte()
            return .text(stamp)
        case idTag:
            _ = try reader.byte()
            return .text(id)
        case decimalTag:
            _ = try reader.byte()
            let text = try reader.string()
            guard text.utf8.count < 8, let real = Double(text), real.isFinite else { throw failure("a bad decimal REAL") }
            return .real(real)
        default:
            return try reader.value()
        }
    }

    static func failure(_ reason: String) -> CovenError {
        CovenError(.decoding, "cannot decode a published change", cause: reason)
    }
}

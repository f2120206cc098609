import Foundation

// MARK: - Format 2: an envelope and sections

/// A change of format 2 (DESIGN.md "Change objects v2"; docs/format.md, section 9.3), published
/// by the devices of a store of members:
///
/// ```
/// published = "COVENS" 02 01 ‖ store ‖ device ‖ seq ‖ gen ‖ envelope ‖ count ‖ section… ‖ signature
/// envelope  = bytes: a store object under the key of generation `gen` of the store audience,
///             bound to path ‖ 00 ‖ "envelope", of zstd(head)       (head: format 1's first part, version 2)
/// section   = audience ‖ generation ‖ bytes: a store object under that audience's key of that
///             generation, bound to path ‖ 00 ‖ audience ‖ 00 ‖ generation, of zstd(entries)
/// signature = Ed25519(device key, "coven change v1" ‖ 00 ‖ path ‖ 00 ‖ SHA-256(everything before))
/// ```
/// Strings are a varint length and UTF-8, numbers varints (docs/format.md 9.1). The clear part
/// says who published, which generations seal what, and nothing of the rows: every member of
/// the store checks the signature of a whole change, sections it cannot open included. The
/// signature is format 1's, over every byte before it, so a coven before members checks it,
/// then stops at the store object's header with `update_required` (its version byte is 2).
extension ChangeObject {
    /// The version byte of format 2, where a store object has its version.
    static let sectionsFormat: UInt8 = 2

    /// The key that seals what a change holds for an audience: the generation and its key.
    typealias SealingKey = (generation: UInt64, key: FileKey)

    /// The bytes to publish in format 2: the envelope under `storeKey`, each section under
    /// `keyOf(audience)`, signed by `signingKey`.
    func sealSections(storeKey: SealingKey, keyOf: (String) throws -> SealingKey, signingKey: DeviceSigningKey,
                      level: Int = Zstd.defaultLevel, salt: (() -> [UInt8])? = nil) throws -> [UInt8] {
        guard seq >= 1, frontier[device] == nil, Self.parsePath(path) != nil else {
            throw CovenError(.internal, "cannot publish an invalid change", cause: "seq \(seq) of '\(device)'", details: ["path": path])
        }
        let head = try compressed(version: Self.sectionsFormat, entries: nil, level: level)
        var sealedSections: [(audience: String, key: SealingKey, compressed: [UInt8])] = []
        var size = 0
        for section in sections {
            let key = section.audience == RowAudiences.store ? storeKey : try keyOf(section.audience)
            var plaintext: [UInt8] = []
            Self.encodeEntries(section.entries, into: &plaintext)
            size += plaintext.count
            guard size <= Self.maximumPlaintextSize else {
                throw CovenError(.internal, "a change holds more than \(Self.maximumPlaintextSize) bytes", details: ["path": path])
            }
            sealedSections.append((section.audience, key, try Zstd.compress(plaintext, level: level)))
        }
        return try Self.publishSections(store: storeID, device: device, seq: seq, head: head, storeKey: storeKey, sections: sealedSections,
                                        signingKey: signingKey, salt: salt)
    }

    /// Seals compressed parts and signs the result: the published bytes of format 2. `salt`
    /// gives each store object's salt (known-answer vectors only), fresh ones otherwise.
    static func publishSections(store: String, device: String, seq: UInt64, head: [UInt8], storeKey: SealingKey,
                                sections: [(audience: String, key: SealingKey, compressed: [UInt8])], signingKey: DeviceSigningKey,
                                salt: (() -> [UInt8])? = nil) throws -> [UInt8] {
        let salt = salt ?? { SecureRandom.bytes(ObjectHeader.saltSize) }
        let path = Self.path(device: device, seq: seq)
        var out = ObjectHeader.storeMagic + [Self.sectionsFormat, ObjectHeader.algorithm]
        RowEntryCodec.writeString(store, into: &out)
        RowEntryCodec.writeString(device, into: &out)
        RowEntryCodec.writeVarint(seq, into: &out)
        RowEntryCodec.writeVarint(storeKey.generation, into: &out)
        writeBytes(try StoreSealer.seal(head, storeKey: storeKey.key, salt: salt(), boundTo: envelopeBinding(path)), into: &out)
        RowEntryCodec.writeVarint(UInt64(sections.count), into: &out)
        for section in sections {
            RowEntryCodec.writeString(section.audience, into: &out)
            RowEntryCodec.writeVarint(section.key.generation, into: &out)
            writeBytes(try StoreSealer.seal(section.compressed, storeKey: section.key.key, salt: salt(),
                                            boundTo: sectionBinding(path, audience: section.audience, generation: section.key.generation)), into: &out)
        }
        return out + (try signingKey.sign(signedMessage(path: path, sealed: out[...])))
    }

    static func envelopeBinding(_ path: String) -> String { path + "\u{0}envelope" }

    static func sectionBinding(_ path: String, audience: String, generation: UInt64) -> String {
        path + "\u{0}" + audience + "\u{0}" + String(generation)
    }

    private static func writeBytes(_ bytes: [UInt8], into out: inout [UInt8]) {
        RowEntryCodec.writeVarint(UInt64(bytes.count), into: &out)
        out += bytes
    }

    /// Whether published bytes are of format 2 (else format 1, whose store object has version 1).
    static func isSectionsFormat(_ bytes: [UInt8]) -> Bool {
        bytes.count > 8 && bytes.starts(with: ObjectHeader.storeMagic) && bytes[6] == sectionsFormat
    }

    /// The generation of the store audience that seals a published change's envelope: 1 for
    /// format 1; nil when the bytes are not a change of either format.
    static func storeGeneration(of bytes: [UInt8]) -> UInt64? {
        guard isSectionsFormat(bytes) else { return 1 }
        var reader = ByteReader(Array(bytes.prefix(4096)))
        do {
            _ = try reader.take(8)
            _ = try reader.string()
            _ = try reader.string()
            _ = try reader.varint()
            return try reader.varint()
        } catch {
            return nil
        }
    }

    /// Checks and reads a published change of either format: the signature first, then the
    /// envelope under the store audience's key of the generation it names, then every section
    /// this device holds the key of; the others are named in ``unreadSections``.
    ///
    /// - Parameter keyOf: the key of an audience's generation, nil when this device holds none.
    /// - Throws: as ``open(_:path:storeKey:publicKey:storeID:)``; `.keyUnavailable` when this
    ///   device holds no key of the envelope's generation (not received yet, or its member was
    ///   removed before it).
    static func open(_ bytes: [UInt8], path: String, keyOf: (String, UInt64) throws -> FileKey?, publicKey: DevicePublicKey,
                     storeID: String? = nil) throws -> ChangeObject {
        guard isSectionsFormat(bytes) else {
            guard let key = try keyOf(RowAudiences.store, 1) else {
                throw CovenError(.keyUnavailable, "change '\(path)' is sealed under the store key, which this device does not hold",
                                 details: ["path": path, "audience": RowAudiences.store, "generation": "1"])
            }
            return try open(bytes, path: path, storeKey: key, publicKey: publicKey, storeID: storeID)
        }
        do {
            guard let (device, seq) = parsePath(path) else { throw CovenError(.internal, "'\(path)' is not the path of a change") }
            let signatureSize = DeviceSigningKey.signatureSize
            guard bytes.count >= signatureSize + 8 else {
                throw CovenError(.integrity, "a published change is truncated", cause: "\(bytes.count.counted("byte"))", details: ["reason": "truncated"])
            }
            let body = bytes[0..<(bytes.count - signatureSize)]
            do {
                try publicKey.verify(Array(bytes[(bytes.count - signatureSize)...]), for: signedMessage(path: path, sealed: body))
            } catch let error as CovenError where error.code == .integrity {
                throw CovenError(.integrity, "a published change is not signed by its device", cause: error.cause, details: ["reason": "signature", "device": device])
            }
            guard body[7] == ObjectHeader.algorithm else {
                throw CovenError(.updateRequired, "a published change uses a newer format than this coven supports", hint: "update coven to read it",
                                 cause: "algorithm \(body[7])", details: ["version": String(sectionsFormat)])
            }
            let (clear, sealedSections) = try clearPart(bytes, signatureSize: signatureSize)
            guard clear.device == device, clear.seq == seq else {
                throw CovenError(.integrity, "a published change names another device or seq than its path",
                                 cause: "it says seq \(clear.seq) of '\(clear.device)'", details: ["reason": "misplaced"])
            }
            if let storeID, clear.store != storeID {
                throw CovenError(.integrity, "a published change belongs to another store", cause: "store '\(clear.store)'", details: ["reason": "store"])
            }
            guard clear.generation >= 1 else { throw CovenError(.integrity, "a published change names generation 0", details: ["reason": "decoding"]) }
            guard let storeKey = try keyOf(RowAudiences.store, clear.generation) else {
                throw CovenError(.keyUnavailable, "change '\(path)' is sealed under generation \(clear.generation) of the store's key, which this device does not hold",
                                 hint: "a sync reads new generations with this device's member identity; a member removed before it reads nothing sealed under it",
                                 details: ["path": path, "audience": RowAudiences.store, "generation": String(clear.generation)])
            }
            var change = try openHead(clear.envelope, path: path, storeKey: storeKey)
            guard change.storeID == clear.store, change.device == device, change.seq == seq else {
                throw CovenError(.integrity, "a published change's envelope names another store, device or seq than its clear part", details: ["reason": "misplaced"])
            }
            change.generation = clear.generation
            try openSections(sealedSections, into: &change, path: path, storeKey: storeKey, keyOf: keyOf)
            return change
        } catch let error as CovenError {
            var error = error
            error.details["path"] = path
            throw error
        }
    }

    /// The change's head, opened from its sealed envelope: in a function of its own so that the
    /// envelope's plaintext, compressed and not (a library's first push names 100,000 held
    /// objects there, 7 MiB), is let go before the sections open; only the head's decoded form
    /// stays.
    private static func openHead(_ envelope: ArraySlice<UInt8>, path: String, storeKey: FileKey) throws -> ChangeObject {
        var reader = ByteReader(try Zstd.decompress(StoreSealer.open(envelope, storeKey: storeKey, boundTo: envelopeBinding(path)),
                                                    maximumSize: maximumPlaintextSize, sized: true))
        let change = try decodeHead(&reader, version: sectionsFormat)
        guard reader.isAtEnd else { throw failure("trailing bytes") }
        return change
    }

    /// The clear part of a sections-format change (its signature, the last `signatureSize` of
    /// `bytes`, already checked): the store, device, seq and generation it names, the sealed
    /// envelope, and the sealed sections, as slices of `bytes` (a change of a library's first
    /// push is megabytes: read in place, never copied while its sections are opened).
    private static func clearPart(_ bytes: [UInt8], signatureSize: Int) throws -> (
        clear: (store: String, device: String, seq: UInt64, generation: UInt64, envelope: ArraySlice<UInt8>),
        sections: [(audience: String, generation: UInt64, sealed: ArraySlice<UInt8>)]
    ) {
        var reader = ByteReader(bytes)
        var sealedSections: [(audience: String, generation: UInt64, sealed: ArraySlice<UInt8>)] = []
        do {
            _ = try reader.take(8)
            let clear = (store: try reader.string(), device: try reader.string(), seq: try reader.varint(), generation: try reader.varint(),
                         envelope: try readBytes(&reader))
            let count = try reader.varint()
            guard count <= UInt64(reader.remaining) else { throw failure("a count past the end") }
            for _ in 0..<count { sealedSections.append((try reader.string(), try reader.varint(), try readBytes(&reader))) }
            // The body ends where the signature begins: not before, not inside it.
            guard reader.remaining >= signatureSize else { throw failure("a length past the end") }
            guard reader.remaining == signatureSize else { throw failure("trailing bytes") }
            return (clear, sealedSections)
        } catch let error as CovenError where error.code == .decoding {
            throw CovenError(.integrity, "a published change is damaged", cause: error.cause, details: ["reason": "decoding"])
        }
    }

    /// Opens every section this device holds the key of into `change` (the store's under the
    /// envelope's key), naming the others in its ``unreadSections``; the plaintexts together
    /// stay within ``maximumPlaintextSize``.
    private static func openSections(_ sealedSections: [(audience: String, generation: UInt64, sealed: ArraySlice<UInt8>)], into change: inout ChangeObject,
                                     path: String, storeKey: FileKey, keyOf: (String, UInt64) throws -> FileKey?) throws {
        var seen: Set<String> = []
        var size = 0
        for section in sealedSections {
            guard seen.insert(section.audience).inserted, section.generation >= 1 else { throw failure("a section of '\(section.audience)' twice, or of generation 0") }
            guard section.audience != RowAudiences.store || section.generation == change.generation else {
                throw failure("a section of the store audience under another generation than the envelope's")
            }
            guard let key = section.audience == RowAudiences.store ? storeKey : try keyOf(section.audience, section.generation) else {
                change.unreadSections.append(SectionKey(audience: section.audience, generation: section.generation))
                continue
            }
            let compressed = try StoreSealer.open(section.sealed, storeKey: key,
                                                  boundTo: sectionBinding(path, audience: section.audience, generation: section.generation))
            let plaintext = try Zstd.decompress(compressed, maximumSize: maximumPlaintextSize - size, sized: true)
            size += plaintext.count
            var entryReader = ByteReader(plaintext)
            let entries = try decodeEntries(&entryReader)
            guard !entries.isEmpty else { throw failure("an empty section") }
            change.sections.append(ChangeSection(audience: section.audience, entries: entries, generation: section.generation))
        }
    }

    private static func readBytes(_ reader: inout ByteReader) throws -> ArraySlice<UInt8> {
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw failure("a length past the end") }
        return try reader.take(Int(count))
    }
}

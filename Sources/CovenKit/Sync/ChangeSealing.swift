import Foundation

/// Seals and opens published changes under the store key, with the object's path inside the
/// authenticated plaintext, so a change cannot be moved, swapped with another device's or
/// replayed under another seq.
enum ChangeSealing {
    static let magic: [UInt8] = Array("COVENCH1".utf8)

    static func seal(_ change: PublishedChange, storeKey: FileKey) throws -> [UInt8] {
        let path = PublishedChange.path(device: change.device, seq: change.seq)
        let header: [String: Any] = [
            "format": change.format, "store": change.store, "device": change.device, "seq": NSNumber(value: change.seq), "path": path,
            "schema_count": change.schemaCount, "schema_digest": change.schemaDigest,
            "frontier": change.frontier.mapValues { NSNumber(value: $0) }, "objects": change.objects,
        ]
        let json = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes])
        var plaintext = magic
        RowEntryCodec.writeVarint(UInt64(json.count), into: &plaintext)
        plaintext.append(contentsOf: json)
        RowEntryCodec.encode(change.entries, into: &plaintext)
        return try StoreSealer.seal(plaintext, storeKey: storeKey)
    }

    /// Opens the change at `path` of `store`.
    ///
    /// - Throws: `.integrity` (naming the object) when it fails authentication, or is not the
    ///   change its path names; `.decoding` when its content is malformed; `.updateRequired`
    ///   for a newer format.
    static func open(_ sealed: [UInt8], path: String, store: String, storeKey: FileKey) throws -> PublishedChange {
        let plaintext: [UInt8]
        do {
            plaintext = try StoreSealer.open(sealed, storeKey: storeKey)
        } catch var error as CovenError {
            error.details["object"] = path
            if error.code == .integrity { error.message = "change '\(path)' fails authentication" }
            throw error
        }
        func malformed(_ reason: String) -> CovenError {
            CovenError(.decoding, "change '\(path)' cannot be decoded", cause: reason, details: ["object": path])
        }
        var reader = ByteReader(plaintext)
        guard plaintext.count >= magic.count, Array(try reader.take(magic.count)) == magic else { throw malformed("not a change") }
        let length = try reader.varint()
        guard length <= UInt64(reader.remaining) else { throw malformed("truncated header") }
        guard let header = try JSONSerialization.jsonObject(with: Data(try reader.take(Int(length)))) as? [String: Any] else { throw malformed("header is not an object") }
        let format = (header["format"] as? NSNumber)?.intValue ?? 0
        guard format <= 1 else {
            throw CovenError(.updateRequired, "change '\(path)' has format \(format), newer than this coven reads", hint: "update coven", details: ["object": path])
        }
        guard let device = header["device"] as? String, let seq = (header["seq"] as? NSNumber)?.int64Value,
              let inside = header["path"] as? String, let changeStore = header["store"] as? String else { throw malformed("header fields missing") }
        guard inside == path, PublishedChange.path(device: device, seq: seq) == path, changeStore == store else {
            throw CovenError(.integrity, "change '\(path)' was written as '\(inside)' of store '\(changeStore)'", hint: "the storage holds a moved, swapped or replayed change",
                             details: ["object": path])
        }
        let entries: [RowEntry]
        do { entries = try RowEntryCodec.decode(from: &reader) } catch { throw malformed(String(describing: error)) }
        guard reader.isAtEnd else { throw malformed("trailing bytes") }
        return PublishedChange(
            format: format, store: changeStore, device: device, seq: seq,
            schemaCount: (header["schema_count"] as? NSNumber)?.intValue ?? 0, schemaDigest: header["schema_digest"] as? String ?? "",
            frontier: ((header["frontier"] as? [String: Any]) ?? [:]).compactMapValues { ($0 as? NSNumber)?.int64Value },
            objects: header["objects"] as? [String] ?? [], entries: entries)
    }
}

@testable import CovenKit
import CovenTestSupport
import Foundation
import XCTest

/// A party turned against a store (docs/security.md): one that can read and write storage
/// (roll it back, delete, replay), and a removed member who kept a copy of their device folder
/// (every key it held) and a database it writes around coven's checks.
struct Adversary {
    /// Storage, read and written as its provider allows anyone with credentials.
    let provider: StorageProvider

    // MARK: - Storage

    /// Every object under `prefix` and its bytes: a copy to roll back to.
    func copy(prefix: String = "") throws -> [String: [UInt8]] {
        var objects: [String: [UInt8]] = [:]
        for info in try provider.list(prefix: prefix) {
            if let bytes = try provider.getObject(info.key) { objects[info.key] = bytes }
        }
        return objects
    }

    /// Puts storage under `prefix` back as `copy` had it: what was written since is deleted,
    /// what was deleted or changed is put back.
    func rollBack(to copy: [String: [UInt8]], prefix: String = "") throws {
        for info in try provider.list(prefix: prefix) where copy[info.key] == nil {
            try provider.delete(info.key)
        }
        for (key, bytes) in copy where key.hasPrefix(prefix) {
            if try provider.getObject(key) != bytes { try provider.put(key, data: bytes) }
        }
    }

    /// Writes the bytes of `from` at `to` (a replay under another name).
    func replay(_ from: String, at to: String) throws {
        guard let bytes = try provider.getObject(from) else { throw CovenError(.notFound, "no object '\(from)'") }
        try provider.put(to, data: bytes)
    }

    // MARK: - A saved device folder

    /// A copy of `device`'s database and folder, taken now, opened as its own device: what a
    /// member keeps when it is removed later.
    static func save(_ device: Device, to folder: String) throws -> Device {
        let paths = DevicePaths(database: folder + "/device.db")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try device.database.execute("VACUUM INTO '\(paths.database)'")
        try FileManager.default.copyItem(atPath: device.paths.folder, toPath: paths.folder)
        let saved = try Device.open(paths: paths)
        saved.storageEnvironment = device.storageEnvironment
        return saved
    }

    /// Every key a saved device holds: each generation of each audience it learned (the store,
    /// its circles) and every file key of the file records it read.
    static func keys(of saved: Device) throws -> [FileKey] {
        var keys: [FileKey] = []
        let audiences = Set([RowAudiences.store] + (try saved.database.query("SELECT DISTINCT audience FROM coven_audience_rosters").compactMap { $0.string("audience") }))
        for audience in audiences.sorted() {
            for generation in try saved.keys.generations(audience: audience) {
                if let key = try saved.keys.key(audience: audience, generation: generation) { keys.append(key) }
            }
        }
        keys += try saved.keys.storeKeysNewestFirst()
        for row in try saved.database.query("SELECT coordinates FROM coven_files") {
            if let text = row.string("coordinates"), let coordinates = try? Coordinates(json: text), !coordinates.key.isEmpty {
                keys.append(try FileKey(hex: coordinates.key))
            }
        }
        return keys
    }

    /// Whether any of `keys` (or `identity`, for a key generation's stanzas) opens the object
    /// at `path`: a change (its envelope, with the publisher's registered key for its
    /// signature), a file object, a snapshot or part, a registry object, a key generation.
    ///
    /// A change opens when a key opens its envelope, or, given the envelope's key (`envelope`:
    /// the store's key of a generation), when a key opens a section of another audience.
    static func opens(_ path: String, _ bytes: [UInt8], keys: [FileKey], identity: MemberIdentity?, store: String,
                      publicKey: (String) throws -> DevicePublicKey?, envelope: (UInt64) throws -> FileKey? = { _ in nil }) -> Bool {
        if path.hasPrefix("changes/") {
            guard let (device, _) = ChangeObject.parsePath(path), let signer = try? publicKey(device) else { return false }
            if keys.contains(where: { key in
                (try? ChangeObject.open(bytes, path: path, keyOf: { audience, _ in audience == RowAudiences.store ? key : nil }, publicKey: signer)) != nil
            }) { return true }
            return keys.contains { key in
                let change = try? ChangeObject.open(bytes, path: path, keyOf: { audience, generation in
                    audience == RowAudiences.store ? try envelope(generation) : key
                }, publicKey: signer)
                return change?.sections.contains { $0.audience != RowAudiences.store && !$0.entries.isEmpty } ?? false
            }
        }
        if path.hasPrefix("files/") {
            guard let size = ObjectLayout.plaintextSize(encryptedSize: Int64(bytes.count)) else { return false }
            return keys.contains { key in
                guard let reader = try? ObjectReader(key: key, plaintextSize: size) else { return false }
                return (try? reader.feed(bytes) { _ in }) != nil && (try? reader.finish { _ in }) != nil
            }
        }
        if path.hasPrefix("audiences/") {
            if let identity, (try? AudienceGeneration.open(bytes, path: path, store: store, identity: identity, signerKey: publicKey)) ?? nil != nil { return true }
            return keys.contains { key in (try? AudienceGeneration.open(bytes, path: path, store: store, key: key.withUnsafeBytes { Array($0) }, signerKey: publicKey)) != nil }
        }
        if path.hasPrefix("notes/") { return false }
        return keys.contains { key in (try? StoreSealer.open(bytes, storeKey: key, boundTo: path)) != nil }
    }
}

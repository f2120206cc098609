import Foundation

/// The keys a device holds, and the one owner of key material in the engine (DESIGN.md
/// "Members and circles"): the store audience's key (today's store key, its first
/// generation), this device's signing key, and the other devices' public keys, screened once.
///
/// Everything that seals, opens, signs or checks an object of the store asks the keyring:
/// sync, join, snapshots and gc hold a `Keyring`, never a key. Only the format types
/// (``StoreSealer``, ``ChangeObject``, ``DeviceEntry``), whose known-answer vectors take keys,
/// are handed one, by the keyring.
///
/// Not Sendable: like its ``Device``, it is confined to the task that opened it.
public final class Keyring {
    /// Where the key files are; nil for a keyring of a device not made yet (``init(storeKey:signingKey:)``).
    private let paths: DevicePaths?
    /// The device's database (its registry and settings); nil as `paths`.
    private let database: Database?
    /// The device, whose registered key the signing key must be.
    let deviceID: String?
    private var loadedStoreKey: FileKey?
    private var loadedSigningKey: DeviceSigningKey?
    /// The other devices' public keys, screened once, by their hex.
    private var screened: [String: DevicePublicKey] = [:]

    /// The keyring of an open device: its keys are read from `<db>.d/` when first needed.
    init(paths: DevicePaths, database: Database, deviceID: String) {
        self.paths = paths
        self.database = database
        self.deviceID = deviceID
    }

    /// The keyring of a device being made (`init`, `join`): the store key it was given, and
    /// its new signing key when it has one.
    init(storeKey: FileKey, signingKey: DeviceSigningKey? = nil, generations: [UInt64: FileKey] = [:]) {
        paths = nil
        database = nil
        deviceID = nil
        loadedStoreKey = storeKey
        loadedSigningKey = signingKey
        if !generations.isEmpty {
            keyCache = [RowAudiences.store: generations]
            generationBytes = [RowAudiences.store: generations.mapValues { $0.withUnsafeBytes { Array($0) } }]
        }
    }

    // MARK: The store key

    /// The setting holding ``storeKeyCheck(_:)`` of the device's store key.
    static let storeKeyCheckSetting = "store_key_check"

    /// The store key's bytes, read from `<db>.d/store.key`, and checked against the check the
    /// device recorded when it was made (a device made before checks were kept has none): what
    /// `coven key export` prints and `coven join --key-file` takes.
    ///
    /// - Throws: `.io` when the file is missing or not 32 bytes; `.integrity` when its bytes
    ///   are not the key the device was made with (a damaged or replaced file).
    public func storeKeyBytes() throws -> [UInt8] {
        guard let paths, let database else {
            guard let loadedStoreKey else { throw CovenError(.internal, "a keyring without a store key") }
            return loadedStoreKey.withUnsafeBytes { Array($0) }
        }
        guard let data = FileManager.default.contents(atPath: paths.storeKey), data.count == 32 else {
            throw CovenError(.io, "cannot read the store key '\(paths.storeKey)'", details: ["path": paths.storeKey])
        }
        let bytes = [UInt8](data)
        let check = try DeviceSettings(database: database).value(Self.storeKeyCheckSetting)
        if let check, check != (try Self.storeKeyCheck(bytes)) {
            throw CovenError(.integrity, "the store key '\(paths.storeKey)' is damaged: it is not the key this device was made with",
                             hint: "put the key back from another device of the store: there 'coven key export' prints it; write its last 64 hex digits here as 32 bytes (xxd -r -p)",
                             details: ["path": paths.storeKey])
        }
        return bytes
    }

    /// A check of a store key that reveals nothing of it: HMAC-SHA256 under the key of a fixed
    /// label, in hex.
    static func storeKeyCheck(_ key: [UInt8]) throws -> String {
        let mac = try key.withUnsafeBytes { try HMACSHA256(key: $0) }
        Array("coven store key check v1".utf8).withUnsafeBytes { mac.update($0) }
        var output = [UInt8](repeating: 0, count: HMACSHA256.outputSize)
        try output.withUnsafeMutableBytes { try mac.finish(into: $0.baseAddress!) }
        return output.hex
    }

    /// The store key in secure memory, read and checked once.
    func storeKey() throws -> FileKey {
        if let loadedStoreKey { return loadedStoreKey }
        var bytes = try storeKeyBytes()
        defer { for index in bytes.indices { bytes[index] = 0 } }
        let key = try FileKey(bytes: bytes)
        loadedStoreKey = key
        return key
    }

    // MARK: Key generations

    /// The audiences' generation keys learned, by audience and generation, as read from
    /// `<db>.d/audience.keys` (or learned since); each made a ``FileKey`` (secure memory) only
    /// when first used, in `keyCache`.
    private var generationBytes: [String: [UInt64: [UInt8]]]?
    private var keyCache: [String: [UInt64: FileKey]] = [:]

    /// The generations learned: the keys of `<db>.d/audience.keys` whose roster this device
    /// holds too, read once.
    ///
    /// A generation is learned whole or not at all: ``learn(audience:_:)`` commits the roster
    /// before it writes the key, but a device that wrote a key without its roster (a coven
    /// that wrote the key first, and a read-only command that then failed on the roster) must
    /// not take that generation as learned: it would seal and judge under a generation whose
    /// roster is empty here (every change of it refused as `not_authorized`), and never read
    /// it again. Such a key is passed over, so the next sync reads that generation again and
    /// learns it whole.
    private func loadedGenerationBytes() throws -> [String: [UInt64: [UInt8]]] {
        if let generationBytes { return generationBytes }
        var keys = try keyFileLines()
        if let database {
            var rostered: Set<String> = []
            for row in try database.query("SELECT DISTINCT audience, generation FROM coven_audience_rosters") {
                if let audience = row.string("audience"), let generation = row.int("generation") { rostered.insert("\(audience) \(generation)") }
            }
            for (audience, generations) in keys {
                keys[audience] = generations.filter { rostered.contains("\(audience) \($0.key)") }
                if keys[audience]?.isEmpty == true { keys[audience] = nil }
            }
        }
        generationBytes = keys
        return keys
    }

    /// Every key of `<db>.d/audience.keys` as written: one line per key,
    /// `<audience> <generation> <64 hex>`.
    ///
    /// - Throws: `.integrity` naming the file when a line is not one.
    private func keyFileLines() throws -> [String: [UInt64: [UInt8]]] {
        var keys: [String: [UInt64: [UInt8]]] = [:]
        guard let paths, let data = FileManager.default.contents(atPath: paths.audienceKeys) else { return keys }
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 3, let generation = UInt64(parts[1]), generation >= 1, let bytes = [UInt8](hex: String(parts[2])), bytes.count == 32 else {
                throw CovenError(.integrity, "the audience keys '\(paths.audienceKeys)' are damaged",
                                 hint: "remove the file: the next sync reads the keys again with this device's member identity",
                                 details: ["path": paths.audienceKeys])
            }
            keys[String(parts[0]), default: [:]][generation] = bytes
        }
        return keys
    }

    /// The newest generation of the store audience this device holds the key of; nil in a
    /// store without members (its one key is the store key).
    public func storeGeneration() throws -> UInt64? {
        try loadedGenerationBytes()[RowAudiences.store]?.keys.max()
    }

    /// The key of `generation` of `audience`, when this device holds it. Generation 1 of the
    /// store is the store key.
    func key(audience: String, generation: UInt64) throws -> FileKey? {
        if let key = keyCache[audience]?[generation] { return key }
        if let bytes = try loadedGenerationBytes()[audience]?[generation] {
            let key = try FileKey(bytes: bytes)
            keyCache[audience, default: [:]][generation] = key
            return key
        }
        if audience == RowAudiences.store, generation == 1, paths == nil || access(paths!.storeKey, F_OK) == 0 { return try storeKey() }
        return nil
    }

    /// Keeps the generations of `audience` a member opened, each whole: first their rosters,
    /// in one transaction, then their keys in `<db>.d/audience.keys` (written whole, synced,
    /// renamed: 0600). A crash between the two leaves rosters without keys, which are not
    /// learned generations (``loadedGenerationBytes()``): the next read learns them again.
    /// Generation 1 of the store is also the store key, which a device that joined by identity
    /// keeps as `store.key`.
    ///
    /// - Throws: `.internal` on a device opened read-only (reading commands learn nothing);
    ///   `.sql`, `.io`.
    func learn(audience: String, _ opened: [AudienceGeneration.Opened]) throws {
        guard let paths, let database else { throw CovenError(.internal, "a keyring without a device") }
        guard !database.isReadOnly else { throw CovenError(.internal, "a device opened to read learns no key generation") }
        try database.transaction {
            for generation in opened {
                for (position, member) in generation.generation.roster.enumerated() {
                    try database.run("""
                        INSERT OR IGNORE INTO coven_audience_rosters (audience, generation, member, position, name, role, recipient, signer)
                        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                        """, [audience, Int64(generation.generation.generation), member.id, Int64(position), member.name, member.role.rawValue,
                               member.recipient.description, generation.generation.signer])
                }
            }
        }
        var file = try keyFileLines()
        var changed = false
        for generation in opened where file[audience]?[generation.generation.generation] != generation.key {
            file[audience, default: [:]][generation.generation.generation] = generation.key
            changed = true
        }
        if changed {
            let lines = file.keys.sorted().flatMap { name in
                (file[name] ?? [:]).keys.sorted().map { "\(name) \($0) \((file[name]?[$0] ?? []).hex)" }
            }
            try AtomicFile.write(paths.audienceKeys, bytes: Array((lines.joined(separator: "\n") + "\n").utf8), mode: 0o600)
        }
        if audience == RowAudiences.store, let first = opened.first(where: { $0.generation.generation == 1 }), access(paths.storeKey, F_OK) != 0 {
            try AtomicFile.write(paths.storeKey, bytes: first.key, mode: 0o600)
            try DeviceSettings(database: database).set(Self.storeKeyCheckSetting, try Self.storeKeyCheck(first.key))
        }
        for generation in opened { keyCache[audience]?[generation.generation.generation] = nil }
        generationBytes = nil
    }

    /// The key this device learned of `generation` of `audience` (nil: not learned), to check
    /// storage's chain against.
    func learnedKeyBytes(audience: String, generation: UInt64) throws -> [UInt8]? {
        try loadedGenerationBytes()[audience]?[generation]
    }

    /// The roster of `generation` of `audience` as learned here (empty when not learned).
    func roster(audience: String, generation: UInt64) throws -> [AudienceGeneration.Member] {
        guard let database else { return [] }
        return try database.query("""
            SELECT member, name, role, recipient FROM coven_audience_rosters WHERE audience = ?1 AND generation = ?2 ORDER BY position
            """, [audience, Int64(generation)]).compactMap { row in
            guard let id = row.string("member"), let role = AudienceGeneration.Role(rawValue: row.string("role") ?? ""),
                  let recipient = try? MemberRecipient(row.string("recipient") ?? "") else { return nil }
            return AudienceGeneration.Member(id: id, name: row.string("name") ?? "", role: role, recipient: recipient)
        }
    }

    // MARK: Sealing for the store audience

    /// `plaintext` sealed under the store key, bound to `path` (a store object, docs/format.md 5).
    func seal(_ plaintext: [UInt8], boundTo path: String = "") throws -> [UInt8] {
        try StoreSealer.seal(plaintext, storeKey: try storeKey(), boundTo: path)
    }

    /// The plaintext of a store object bound to `path`.
    ///
    /// - Throws: `.integrity` when it fails authentication (another key, another path, tampering).
    func open(_ sealed: [UInt8], boundTo path: String = "") throws -> [UInt8] {
        try StoreSealer.open(sealed, storeKey: try storeKey(), boundTo: path)
    }

    /// A streaming sealer of a store object bound to `path` (snapshots), under the newest
    /// generation of the store audience's key this device holds (the store key before
    /// members): a member removed before it cannot read it.
    func sealer(boundTo path: String, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) throws -> StoreSealer.StreamWriter {
        try StoreSealer.StreamWriter(storeKey: try storeKeysNewestFirst()[0], boundTo: path, sink: sink)
    }

    /// A streaming reader of a store object of `sealedSize` bytes bound to `path`, under `key`
    /// (``key(opening:sealedSize:firstBytes:)``).
    func opener(boundTo path: String, sealedSize: Int64, key: FileKey,
                read: @escaping (UnsafeMutableRawBufferPointer) throws -> Int) throws -> StoreSealer.StreamReader {
        try StoreSealer.StreamReader(storeKey: key, boundTo: path, sealedSize: sealedSize, read: read)
    }

    /// The store audience's keys this device holds, newest generation first; the store key
    /// alone before members.
    func storeKeysNewestFirst() throws -> [FileKey] {
        let generations = try loadedGenerationBytes()[RowAudiences.store] ?? [:]
        var keys = try generations.keys.sorted(by: >).compactMap { try key(audience: RowAudiences.store, generation: $0) }
        if generations[1] == nil, paths == nil || access(paths!.storeKey, F_OK) == 0 { keys.append(try storeKey()) }
        guard !keys.isEmpty else { throw CovenError(.keyUnavailable, "this device holds no key of the store") }
        return keys
    }

    /// Which key opens the store object at `path` (a snapshot, sealed under the newest
    /// generation its maker held): each held, newest first, tried on its first chunk, which
    /// `firstBytes` reads (its header and first sealed chunk). Found anew for every read: an
    /// object may be replaced under the same path.
    ///
    /// - Throws: `.integrity` when none authenticates it (damage, or a generation this device
    ///   does not hold: its member was removed before it was made).
    func key(opening path: String, sealedSize: Int64, firstBytes: () throws -> [UInt8]) throws -> FileKey {
        let keys = try storeKeysNewestFirst()
        guard keys.count > 1 else { return keys[0] }
        let first = try firstBytes()
        var failure: (any Error)?
        for key in keys {
            var at = 0
            do {
                let reader = try StoreSealer.StreamReader(storeKey: key, boundTo: path, sealedSize: sealedSize) { buffer in
                    let count = min(buffer.count, first.count - at)
                    if count > 0 { first.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + count)])) } }
                    at += count
                    return count
                }
                _ = try reader.nextChunk()
                return key
            } catch {
                failure = failure ?? error
            }
        }
        throw failure ?? CovenError(.integrity, "'\(path)' opens under no key this device holds", details: ["object": path])
    }


    // MARK: Changes

    /// The generations of `audience` whose keys this device holds, newest first.
    func generations(audience: String) throws -> [UInt64] {
        (try loadedGenerationBytes()[audience] ?? [:]).keys.sorted(by: >)
    }

    /// The newest generation of `audience` whose key this device holds.
    func newestGeneration(audience: String) throws -> UInt64? {
        if audience == RowAudiences.store { return try storeGeneration() }
        return try loadedGenerationBytes()[audience]?.keys.max()
    }

    // MARK: This device's signing key

    /// This device's signing key, read from `<db>.d/device.key` once and checked against the
    /// public key the store has registered for this device: a key that does not match would
    /// sign changes every other device refuses.
    ///
    /// - Throws: `.io` when the file is missing, readable by others, not a key, or not the
    ///   key this device registered (damaged or replaced); nothing is signed then.
    public func signingKey() throws -> DeviceSigningKey {
        if let loadedSigningKey { return loadedSigningKey }
        guard let paths else { throw CovenError(.internal, "a keyring without a signing key") }
        let key: DeviceSigningKey
        do {
            key = try DeviceSigningKey(contentsOf: paths.signingKey)
        } catch var error as CovenError where error.code == .io || error.code == .integrity {
            let missing = access(paths.signingKey, F_OK) != 0
            error = CovenError(.io, missing ? "the device signing key '\(paths.signingKey)' is missing" : error.message,
                               hint: Self.lostSigningKeyHint(paths.signingKey), details: ["path": paths.signingKey])
            throw error
        }
        if let registered = try registeredPublicKey(), registered != key.publicKey.hex {
            throw CovenError(.io, "the device signing key '\(paths.signingKey)' is not the key this device registered (damaged or replaced)",
                             hint: Self.lostSigningKeyHint(paths.signingKey), details: ["path": paths.signingKey])
        }
        loadedSigningKey = key
        return key
    }

    /// Whether this device has a signing key file (a device made before signing keys has none
    /// until its first push makes one).
    var hasSigningKeyFile: Bool {
        guard let paths else { return loadedSigningKey != nil }
        return access(paths.signingKey, F_OK) == 0
    }

    /// Keeps `key` as this device's new signing key (a device made before signing keys): its
    /// file is written 0600, and it signs from now on.
    func adopt(signingKey key: DeviceSigningKey) throws {
        guard let paths else { throw CovenError(.internal, "a keyring without a device") }
        try key.write(to: paths.signingKey)
        loadedSigningKey = key
    }

    /// The public key the store has registered for this device (nil for a device made before
    /// signing keys that has not published one yet).
    func registeredPublicKey() throws -> String? {
        guard let database, let deviceID else { return loadedSigningKey?.publicKey.hex }
        return try database.scalar("SELECT public_key FROM coven_device_registry WHERE device = ?1", [deviceID]).textValue
    }

    /// What a person does about a lost or damaged device key: nothing this device signs with
    /// another key would be accepted by the others.
    static func lostSigningKeyHint(_ path: String) -> String {
        "put the device's own key back at '\(path)' (from a backup of this device); otherwise this device can no longer publish: "
            + "make a new device with 'coven join' and retire this one with 'coven device remove' on another device"
    }

    // MARK: The other devices' keys

    /// The registered public key of `device`, which signs its changes, screened once.
    ///
    /// - Throws: `.integrity` when the device has none registered (its entry predates signing
    ///   keys and it has not published one since), or the key fails the screen.
    func publicKey(of device: String) throws -> DevicePublicKey {
        guard let database else { throw CovenError(.internal, "a keyring without a device registry") }
        guard let hex = try database.scalar("SELECT public_key FROM coven_device_registry WHERE device = ?1", [device]).textValue else {
            throw CovenError(.integrity, "device \(device) has no registered public key, so its changes cannot be checked",
                             hint: "run 'coven sync' on that device with this coven, which registers its key", details: ["device": device])
        }
        if let known = screened[hex] { return known }
        let key = try DevicePublicKey(hex: hex)
        screened[hex] = key
        return key
    }
}

import Foundation

/// A member's public keys, as a person passes them around: `coven1…` (bech32 of the X25519
/// key that receives audience keys, then the Ed25519 key that certifies the member's devices;
/// DESIGN.md "Principals and keys").
public struct MemberRecipient: Sendable, Hashable, CustomStringConvertible {
    /// The bech32 human-readable part.
    static let prefix = "coven"

    /// The X25519 public key (32 bytes).
    public let agreement: [UInt8]
    /// The Ed25519 public key (screened).
    public let signing: DevicePublicKey

    init(agreement: [UInt8], signing: DevicePublicKey) {
        self.agreement = agreement
        self.signing = signing
    }

    /// Reads a recipient string.
    ///
    /// - Throws: `.usage` for anything but `coven1…` with a good checksum holding 64 bytes, an
    ///   X25519 key of low order or an Ed25519 key that fails the screen (each named).
    public init(_ text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        // Only what starts as a recipient does is echoed: a line pasted by mistake may be a
        // secret (an identity's line, a store key), and an error is printed and logged.
        let echoable = trimmed.lowercased().hasPrefix(Self.prefix + "1")
        func refuse(_ why: String) -> CovenError {
            guard echoable else {
                return CovenError(.usage, "that is not a member recipient: \(why)",
                                  hint: "pass the coven1… line 'coven member keygen' printed for that person (never an identity's secret line)")
            }
            return CovenError(.usage, "'\(trimmed.prefix(24))…' is not a member recipient: \(why)",
                              hint: "pass the coven1… line 'coven member keygen' printed for that person", details: ["recipient": String(trimmed.prefix(120))])
        }
        guard echoable else {
            throw refuse(MemberIdentity.looksLikeIdentity(trimmed) ? "it is a member's secret identity line (keep it secret; it was not echoed)"
                         : "it does not start with 'coven1'")
        }
        let decoded: (hrp: String, data: [UInt8])
        do { decoded = try Bech32.decode(trimmed) } catch let error as CovenError { throw refuse(error.message.components(separatedBy: ": ").last ?? error.message) }
        guard decoded.hrp == Self.prefix else { throw refuse("it starts with '\(decoded.hrp)1', not 'coven1'") }
        guard decoded.data.count == 64 else { throw refuse("it holds \(decoded.data.count) bytes, not 64") }
        let agreement = Array(decoded.data[0..<32])
        // A low-order key would make every wrap to it readable by anyone: a trial agreement
        // with a random secret refuses it.
        do { _ = try X25519.sharedSecret(secret: SecureRandom.bytes(32), share: agreement) } catch { throw refuse("its X25519 key is a low-order point") }
        let signing: DevicePublicKey
        do { signing = try DevicePublicKey(bytes: Array(decoded.data[32..<64])) } catch { throw refuse("its Ed25519 key is not usable") }
        self.init(agreement: agreement, signing: signing)
    }

    /// `coven1…`.
    public var description: String { Bech32.encode(hrp: Self.prefix, data: agreement + signing.bytes) }
}

/// A member's secret, from which its keys are derived (HKDF-SHA256 with labels), and the
/// identity file that holds it: what `coven member keygen` writes and `coven join --identity`
/// reads.
///
/// ```
/// # coven member identity: keep it secret; 'coven join URL --identity FILE' reads it
/// # recipient: coven1…
/// COVEN-MEMBER-SECRET-1…
/// ```
public final class MemberIdentity {
    /// The bech32 human-readable part of the secret line (written in upper case).
    static let secretPrefix = "COVEN-MEMBER-SECRET-"
    static let agreementLabel = Array("coven member x25519 v1".utf8)
    static let signingLabel = Array("coven member ed25519 v1".utf8)

    private var secret: [UInt8]
    /// The X25519 secret that opens the stanzas wrapped to this member.
    let agreementSecret: [UInt8]
    /// The Ed25519 key that certifies this member's devices.
    let signingKey: DeviceSigningKey
    /// The public half, as `coven1…`.
    public let recipient: MemberRecipient

    /// A new member secret from the CSPRNG.
    public convenience init() throws {
        try self.init(secret: SecureRandom.bytes(32))
    }

    init(secret: [UInt8]) throws {
        guard secret.count == 32 else { throw CovenError(.internal, "a member secret is 32 bytes") }
        self.secret = secret
        agreementSecret = try HKDF.derive(ikm: secret, salt: [], info: Self.agreementLabel)
        signingKey = try DeviceSigningKey(seed: try HKDF.derive(ikm: secret, salt: [], info: Self.signingLabel))
        recipient = MemberRecipient(agreement: try X25519.publicKey(of: agreementSecret), signing: signingKey.publicKey)
    }

    deinit { for index in secret.indices { secret[index] = 0 } }

    /// Reads an identity file's text: its one `COVEN-MEMBER-SECRET-1…` line (comments and blank
    /// lines aside).
    ///
    /// - Throws: `.usage` naming `source` when there is no such line, more than one, or it is
    ///   damaged (a checksum that does not match, a wrong length).
    public convenience init(text: String, source: String) throws {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        func refuse(_ why: String) -> CovenError {
            CovenError(.usage, "'\(source)' is not a coven member identity: \(why)",
                       hint: "pass the file 'coven member keygen -o FILE' or 'coven member export' wrote", details: ["path": source])
        }
        guard lines.count == 1, let line = lines.first else {
            throw refuse(lines.isEmpty ? "it holds no COVEN-MEMBER-SECRET-1… line" : "it holds \(lines.count) lines that are not comments")
        }
        let decoded: (hrp: String, data: [UInt8])
        do { decoded = try Bech32.decode(line) } catch { throw refuse("its secret line is damaged (its checksum does not match)") }
        guard decoded.hrp == Self.secretPrefix.lowercased(), line == line.uppercased() else { throw refuse("its line does not start with COVEN-MEMBER-SECRET-1") }
        guard decoded.data.count == 32 else { throw refuse("its secret is \(decoded.data.count) bytes, not 32") }
        try self.init(secret: decoded.data)
    }

    /// Reads the identity file at `path`.
    ///
    /// - Throws: `.io` when it cannot be read; `.usage` as ``init(text:source:)``.
    public convenience init(contentsOf path: String) throws {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
            throw CovenError(.usage, "'\(path)' is a folder, not a coven member identity", hint: "pass the file 'coven member keygen -o FILE' or 'coven member export' wrote",
                             details: ["path": path])
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            // FileManager says nothing of why: open(2) does (no such file, permission denied).
            let descriptor = open(path, O_RDONLY)
            let code = descriptor < 0 ? errno : EIO
            if descriptor >= 0 { close(descriptor) }
            throw CovenError.posix("read the identity file", path: path, errno: code)
        }
        try self.init(text: String(decoding: data, as: UTF8.self), source: path)
    }

    /// The identity file's text.
    public var fileText: String {
        "# coven member identity: keep it secret; 'coven join URL --identity FILE' reads it\n"
            + "# recipient: \(recipient)\n"
            + secretLine + "\n"
    }

    /// The identity as one line, `COVEN-MEMBER-SECRET-1…`: what `coven key export` prints in a
    /// store of members, and what ``init(text:source:)`` reads back.
    public var secretLine: String { Bech32.encode(hrp: Self.secretPrefix, data: secret) }

    /// Whether `text` holds an identity rather than a store key (`coven join --key-file`).
    ///
    /// A file whose secret line was damaged past its prefix (`COVEN-MEMBER-SECRT-1…`) or that
    /// holds the comment coven writes is still an identity, damaged (`usage`), not a store key.
    public static func looksLikeIdentity(_ text: String) -> Bool {
        text.range(of: "COVEN-MEMBER", options: .caseInsensitive) != nil || text.range(of: "# coven member identity", options: .caseInsensitive) != nil
    }

    /// Writes the identity file at `path`, mode 0600, crash-safe.
    ///
    /// - Throws: `.exists` when a file is there already (an identity is never overwritten);
    ///   `.io`.
    public func write(to path: String) throws {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw CovenError(.exists, "'\(path)' exists: an identity file is never overwritten", hint: "pick another path, or remove that file yourself",
                             details: ["path": path])
        }
        try AtomicFile.write(path, bytes: Array(fileText.utf8), mode: 0o600)
    }
}

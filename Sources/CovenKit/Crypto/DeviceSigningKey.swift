import CGcrypt
import Foundation

// MARK: - Ed25519 through libgcrypt

/// A device's Ed25519 signing key: it signs the changes the device publishes (DESIGN.md,
/// "Change objects"), so one device cannot publish as another.
///
/// The secret is the RFC 8032 32-byte seed, held in libgcrypt secure memory
/// (`gcry_malloc_secure`) and wiped in `deinit`; the device keeps it in a 0600 file
/// (``write(to:)``, ``init(contentsOf:)``). Signing builds the private-key s-expression from
/// the seed (in secure memory too, since the seed is) and releases it after the one signature.
/// The public half, ``publicKey``, goes in the device's registry entry (``DeviceEntry``).
///
/// A key is immutable after creation, so it is `Sendable`.
///
/// Related documentation: libgcrypt manual, "Public Key cryptography" (`gcry_pk_sign`, EdDSA
/// with `(flags eddsa)`), "Context functions" (`gcry_mpi_ec_get_mpi` with `q@eddsa`).
public final class DeviceSigningKey: @unchecked Sendable {
    // @unchecked: `seed` is written only in init and wiped in deinit; every other access reads.

    /// Bytes of a seed: 32.
    public static let seedSize = 32
    /// Bytes of a signature: 64 (R ‖ S).
    public static let signatureSize = 64

    private let seed: UnsafeMutableRawPointer
    /// The public key the seed derives.
    public let publicKey: DevicePublicKey

    /// Creates a new key from libgcrypt's strong random generator, generated in secure memory.
    ///
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    public convenience init() throws {
        try self.init { gcry_randomize($0, Self.seedSize, GCRY_VERY_STRONG_RANDOM) }
    }

    /// Creates the key of a 32-byte seed (RFC 8032's private key).
    ///
    /// The bytes are copied into secure memory; the caller should wipe its own copy.
    ///
    /// - Parameter seed: exactly 32 bytes.
    /// - Throws: ``CovenError`` `.integrity` when `seed` is not 32 bytes; `.internal` when
    ///   libgcrypt fails.
    public convenience init(seed: UnsafeRawBufferPointer) throws {
        guard seed.count == Self.seedSize, let base = seed.baseAddress else {
            throw CovenError(.integrity, "a device signing key must be \(Self.seedSize) bytes", cause: "got \(seed.count.counted("byte"))")
        }
        try self.init { $0.copyMemory(from: base, byteCount: Self.seedSize) }
    }

    /// Creates the key of a 32-byte seed; see the `UnsafeRawBufferPointer` overload.
    public convenience init(seed: [UInt8]) throws {
        guard seed.count == Self.seedSize else {
            throw CovenError(.integrity, "a device signing key must be \(Self.seedSize) bytes", cause: "got \(seed.count.counted("byte"))")
        }
        try self.init { pointer in
            seed.withUnsafeBytes { if let base = $0.baseAddress { pointer.copyMemory(from: base, byteCount: Self.seedSize) } }
        }
    }

    /// Reads the key a device keeps in `path` (32 bytes, mode 0600).
    ///
    /// - Throws: ``CovenError`` `.io` when the file cannot be read or others may read it;
    ///   `.integrity` when it is not 32 bytes.
    public convenience init(contentsOf path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CovenError.posix("open the device signing key", path: path) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw CovenError.posix("inspect the device signing key", path: path) }
        guard info.st_mode & 0o077 == 0 else {
            throw CovenError(
                .io, "the device signing key '\(path)' may be read by others", hint: "chmod 600 '\(path)'",
                details: ["path": path])
        }
        guard let buffer = gcry_malloc_secure(Self.seedSize + 1) else {
            throw CovenError(.internal, "libgcrypt secure memory is exhausted")
        }
        defer {
            buffer.initializeMemory(as: UInt8.self, repeating: 0, count: Self.seedSize + 1)
            gcry_free(buffer)
        }
        var count = 0
        while count <= Self.seedSize {
            let got = read(fd, buffer + count, Self.seedSize + 1 - count)
            if got < 0 && errno == EINTR { continue }
            guard got >= 0 else { throw CovenError.posix("read the device signing key", path: path) }
            if got == 0 { break }
            count += got
        }
        guard count == Self.seedSize else {
            throw CovenError(
                .integrity, "the device signing key '\(path)' is not \(Self.seedSize) bytes", details: ["path": path])
        }
        try self.init(seed: UnsafeRawBufferPointer(start: buffer, count: Self.seedSize))
    }

    private init(filling fill: (UnsafeMutableRawPointer) -> Void) throws {
        try Gcrypt.ensure()
        guard let pointer = gcry_malloc_secure(Self.seedSize) else {
            throw CovenError(.internal, "libgcrypt secure memory is exhausted")
        }
        fill(pointer)
        seed = pointer
        do {
            publicKey = try Self.derivePublicKey(seed: pointer)
        } catch {
            pointer.initializeMemory(as: UInt8.self, repeating: 0, count: Self.seedSize)
            gcry_free(pointer)
            throw error
        }
    }

    deinit {
        seed.initializeMemory(as: UInt8.self, repeating: 0, count: Self.seedSize)
        gcry_free(seed)
    }

    /// Writes the seed to `path` atomically with mode 0600.
    ///
    /// - Throws: `.noRoom` when the disk is full, `.io` otherwise.
    public func write(to path: String) throws {
        var bytes = Array(UnsafeRawBufferPointer(start: seed, count: Self.seedSize))
        defer { for index in bytes.indices { bytes[index] = 0 } }
        try AtomicFile.write(path, bytes: bytes, mode: 0o600)
    }

    /// Calls `body` with the 32 seed bytes; the pointer must not escape.
    func withSeed<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: seed, count: Self.seedSize))
    }

    // MARK: Signing

    /// Signs `message` (RFC 8032 Ed25519, pure: the message itself, no prehash).
    ///
    /// - Parameter message: the bytes to sign, any length.
    /// - Returns: the 64-byte signature R ‖ S.
    /// - Throws: ``CovenError`` `.internal` when libgcrypt fails.
    public func sign(_ message: UnsafeRawBufferPointer) throws -> [UInt8] {
        var key: gcry_sexp_t?
        let keyCode = publicKey.bytes.withUnsafeBytes { coven_gcry_sexp_ed25519_private(&key, $0.baseAddress, seed) }
        guard keyCode == 0, let key else { throw Gcrypt.error(keyCode, "build an Ed25519 private key") }
        defer { gcry_sexp_release(key) }
        let data = try Self.dataExpression(message)
        defer { gcry_sexp_release(data) }
        var result: gcry_sexp_t?
        let code = gcry_pk_sign(&result, data, key)
        guard code == 0, let result else { throw Gcrypt.error(code, "make an Ed25519 signature") }
        defer { gcry_sexp_release(result) }
        var signature = try Self.token(result, "r")
        signature += try Self.token(result, "s")
        return signature
    }

    /// Signs `message`; see the `UnsafeRawBufferPointer` overload.
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        try message.withUnsafeBytes { try sign($0) }
    }

    // MARK: libgcrypt helpers

    /// `(data (flags eddsa) (hash-algo sha512) (value M))`.
    static func dataExpression(_ message: UnsafeRawBufferPointer) throws -> gcry_sexp_t {
        guard message.count <= Int(Int32.max) else {
            throw CovenError(.internal, "a message to sign is too long", cause: "\(message.count.counted("byte"))")
        }
        var data: gcry_sexp_t?
        // An empty message may have no address; pass a valid one with length 0.
        let code = withUnsafeBytes(of: UInt8(0)) { empty in
            coven_gcry_sexp_ed25519_data(&data, message.baseAddress ?? empty.baseAddress, Int32(message.count))
        }
        guard code == 0, let data else { throw Gcrypt.error(code, "build an Ed25519 message") }
        return data
    }

    /// The 32 bytes of `(name …)` inside a signature s-expression.
    private static func token(_ expression: gcry_sexp_t, _ name: String) throws -> [UInt8] {
        guard let token = gcry_sexp_find_token(expression, name, 0) else {
            throw CovenError(.internal, "libgcrypt gave an Ed25519 signature without '\(name)'")
        }
        defer { gcry_sexp_release(token) }
        var length = 0
        guard let data = gcry_sexp_nth_data(token, 1, &length), length == 32 else {
            throw CovenError(.internal, "libgcrypt gave an Ed25519 signature with a bad '\(name)'", cause: "\(length.counted("byte"))")
        }
        return Array(UnsafeRawBufferPointer(start: data, count: 32))
    }

    /// The public key of `seed`: libgcrypt computes `q@eddsa` from `d`.
    private static func derivePublicKey(seed: UnsafeMutableRawPointer) throws -> DevicePublicKey {
        var key: gcry_sexp_t?
        let keyCode = coven_gcry_sexp_ed25519_seed(&key, seed)
        guard keyCode == 0, let key else { throw Gcrypt.error(keyCode, "build an Ed25519 key") }
        defer { gcry_sexp_release(key) }
        var context: gcry_ctx_t?
        let contextCode = gcry_mpi_ec_new(&context, key, nil)
        guard contextCode == 0, let context else { throw Gcrypt.error(contextCode, "open an Ed25519 context") }
        defer { gcry_ctx_release(context) }
        guard let q = gcry_mpi_ec_get_mpi("q@eddsa", context, 1) else {
            throw CovenError(.internal, "libgcrypt failed to derive an Ed25519 public key")
        }
        defer { gcry_mpi_release(q) }
        var bits: UInt32 = 0
        guard let bytes = gcry_mpi_get_opaque(q, &bits), bits == 256 else {
            throw CovenError(.internal, "libgcrypt derived an Ed25519 public key of \(bits) bits")
        }
        return try DevicePublicKey(bytes: Array(UnsafeRawBufferPointer(start: bytes, count: 32)))
    }
}

// MARK: - The public half

/// A device's Ed25519 public key, 32 bytes (RFC 8032 encoding), screened for what libgcrypt
/// 1.10.1 must not see (``Ed25519Screen``): a value of this type is always safe to verify with.
///
/// It is published in the device's registry entry as 64 hex digits.
public struct DevicePublicKey: Sendable, Hashable, CustomStringConvertible {
    /// The 32 bytes.
    public let bytes: [UInt8]

    /// A public key from its 32 bytes, screened.
    ///
    /// - Parameter bytes: the RFC 8032 encoding.
    /// - Throws: ``CovenError`` `.integrity` when the bytes are not 32, not a canonical encoding
    ///   of a point on the curve, a point of small order, or a point libgcrypt 1.10.1 cannot
    ///   handle (a coordinate below 2^192, which honest keys practically never have).
    public init(bytes: [UInt8]) throws {
        // The screen is a few exponentiations in Swift: each key passes it once a process
        // (every roster, registry row and generation names the same few keys again and again).
        if !Self.screened.contains(bytes) {
            if let refusal = Ed25519Screen.screenPublicKey(bytes) {
                throw CovenError(
                    .integrity, "not a usable Ed25519 public key", cause: refusal.rawValue,
                    details: ["reason": refusal.rawValue])
            }
            Self.screened.insert(bytes)
        }
        self.bytes = bytes
    }

    /// The keys that passed the screen in this process (at most a few thousand kept).
    private static let screened = ScreenedKeys()

    private final class ScreenedKeys: @unchecked Sendable {
        private let lock = NSLock()
        private var keys: Set<[UInt8]> = []

        func contains(_ key: [UInt8]) -> Bool {
            lock.lock()
            defer { lock.unlock() }
            return keys.contains(key)
        }

        func insert(_ key: [UInt8]) {
            lock.lock()
            defer { lock.unlock() }
            if keys.count >= 4096 { keys.removeAll() }
            keys.insert(key)
        }
    }

    /// A public key from its 64 hex digits, screened.
    ///
    /// - Throws: ``CovenError`` `.integrity` when `hex` is not 64 hex digits or the key is
    ///   refused as by ``init(bytes:)``.
    public init(hex: String) throws {
        guard hex.utf8.count == 64, let bytes = [UInt8](hex: hex) else {
            throw CovenError(
                .integrity, "a public key must be 64 hex digits", cause: "got \(hex.utf8.count) characters",
                details: ["reason": "length"])
        }
        try self.init(bytes: bytes)
    }

    /// 64 lowercase hex digits.
    public var hex: String { bytes.hex }

    /// The 64 hex digits.
    public var description: String { hex }

    /// Checks that `signature` is this key's signature of `message`.
    ///
    /// `S` must be below the group order (no malleable twin of a signature verifies); then
    /// libgcrypt checks the equation.
    ///
    /// - Parameters:
    ///   - signature: 64 bytes R ‖ S.
    ///   - message: the signed bytes.
    /// - Throws: ``CovenError`` `.integrity` when the signature is not 64 bytes, its `S` is not
    ///   canonical, or it does not verify; `.internal` when libgcrypt fails otherwise.
    public func verify(_ signature: [UInt8], for message: UnsafeRawBufferPointer) throws {
        guard signature.count == DeviceSigningKey.signatureSize else {
            throw Self.badSignature("the signature is \(signature.count.counted("byte")), not 64", reason: "length")
        }
        guard Ed25519Screen.isCanonicalScalar(signature[32...]) else {
            throw Self.badSignature("its S is not below the group order", reason: "malleable")
        }
        try Gcrypt.ensure()
        var key: gcry_sexp_t?
        let keyCode = bytes.withUnsafeBytes { coven_gcry_sexp_ed25519_public(&key, $0.baseAddress) }
        guard keyCode == 0, let key else { throw Gcrypt.error(keyCode, "build an Ed25519 public key") }
        defer { gcry_sexp_release(key) }
        var expression: gcry_sexp_t?
        let signatureCode = signature.withUnsafeBytes {
            coven_gcry_sexp_ed25519_signature(&expression, $0.baseAddress, $0.baseAddress.map { $0 + 32 })
        }
        guard signatureCode == 0, let expression else { throw Gcrypt.error(signatureCode, "build an Ed25519 signature") }
        defer { gcry_sexp_release(expression) }
        let data = try DeviceSigningKey.dataExpression(message)
        defer { gcry_sexp_release(data) }
        let code = gcry_pk_verify(expression, data, key)
        switch gcry_err_code(code) {
        case GPG_ERR_NO_ERROR:
            return
        case GPG_ERR_BAD_SIGNATURE:
            throw Self.badSignature("it does not verify", reason: "signature")
        case GPG_ERR_BROKEN_PUBKEY, GPG_ERR_INV_OBJ, GPG_ERR_INV_LENGTH, GPG_ERR_BROKEN_SECKEY:
            throw Self.badSignature(String(cString: gcry_strerror(code)), reason: "key")
        default:
            throw Gcrypt.error(code, "verify an Ed25519 signature")
        }
    }

    /// Checks that `signature` is this key's signature of `message`; see the
    /// `UnsafeRawBufferPointer` overload.
    public func verify(_ signature: [UInt8], for message: [UInt8]) throws {
        try message.withUnsafeBytes { try verify(signature, for: $0) }
    }

    private static func badSignature(_ cause: String, reason: String) -> CovenError {
        CovenError(.integrity, "a signature failed its check", cause: cause, details: ["reason": reason])
    }
}

import CGcrypt
import CovenSHA256
import Foundation

// MARK: - Library initialization

/// libgcrypt must be initialized once per process before any use, and the version checked.
///
/// Related documentation: libgcrypt manual, "Initializing the library".
enum Gcrypt {
    /// Initializes libgcrypt once: version check, 1 MiB of secure memory for keys, done.
    ///
    /// The secure pool grows on demand (GCRYCTL_AUTO_EXPAND_SECMEM) so that many live
    /// ``FileKey``s and cipher handles never exhaust it; allocation then fails only when the
    /// process is out of memory.
    static let ready: Bool = {
        guard gcry_check_version("1.9.0") != nil else { return false }
        _ = coven_gcry_disable_secmem_warn()
        _ = coven_gcry_init_secmem(1 << 20)
        _ = coven_gcry_auto_expand_secmem(1 << 20)
        _ = coven_gcry_initialization_finished()
        return true
    }()

    /// Throws unless libgcrypt is initialized and recent enough.
    static func ensure() throws {
        guard ready else {
            throw CovenError(.internal, "libgcrypt 1.9 or later is required")
        }
    }

    /// A ``CovenError`` for a failed libgcrypt call, with gcry_strerror's text.
    static func error(_ code: gcry_error_t, _ operation: String) -> CovenError {
        CovenError(.internal, "libgcrypt failed to \(operation)", cause: String(cString: gcry_strerror(code)))
    }

    /// Throws ``error(_:_:)`` unless `code` is 0 (GPG_ERR_NO_ERROR).
    @inline(__always)
    static func check(_ code: gcry_error_t, _ operation: @autoclosure () -> String) throws {
        guard code == 0 else { throw error(code, operation()) }
    }
}

// MARK: - Random

/// Random bytes from libgcrypt's CSPRNG.
public enum SecureRandom {
    /// `count` bytes of strong randomness (keys, names, ids).
    public static func bytes(_ count: Int) -> [UInt8] {
        _ = Gcrypt.ready
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { raw in
            guard let base = raw.baseAddress else { return }
            if count > StrongPool.shared.capacity / 4 {
                gcry_randomize(base, count, GCRY_STRONG_RANDOM)
            } else {
                StrongPool.shared.take(into: base, count: count)
            }
        }
        return bytes
    }

    /// `count` bytes of nonce-quality randomness (cheaper; for ids and names).
    public static func nonce(_ count: Int) -> [UInt8] {
        _ = Gcrypt.ready
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { raw in
            if let base = raw.baseAddress { gcry_create_nonce(base, count) }
        }
        return bytes
    }
}

// MARK: - SHA-256

/// An incremental SHA-256 (libgcrypt uses the CPU's SHA extensions where present).
///
/// Not Sendable: one owner. The handle is closed in `deinit`.
public final class SHA256 {
    private var handle: gcry_md_hd_t?

    /// Starts a hash.
    public init() throws {
        try Gcrypt.ensure()
        var handle: gcry_md_hd_t?
        let code = gcry_md_open(&handle, Int32(GCRY_MD_SHA256.rawValue), 0)
        guard code == 0, let handle else { throw Gcrypt.error(code, "open SHA-256") }
        self.handle = handle
    }

    deinit { gcry_md_close(handle) }

    /// Adds bytes.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        gcry_md_write(handle, base, bytes.count)
    }

    /// Adds bytes.
    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything added; the hash is reset for reuse.
    public func finish() -> [UInt8] {
        _ = coven_gcry_md_final(handle)
        var digest = [UInt8](repeating: 0, count: 32)
        if let pointer = gcry_md_read(handle, Int32(GCRY_MD_SHA256.rawValue)) {
            digest.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: 32)) }
        }
        gcry_md_reset(handle)
        return digest
    }

    /// The SHA-256 of one buffer, written into `output` (32 bytes), with no allocation.
    public static func hash(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableRawPointer) {
        _ = Gcrypt.ready
        // An empty buffer may have no address; hash from a valid one-byte buffer with length 0.
        withUnsafeBytes(of: UInt8(0)) { empty in
            gcry_md_hash_buffer(
                Int32(GCRY_MD_SHA256.rawValue), output, bytes.baseAddress ?? empty.baseAddress, bytes.count)
        }
    }

    /// The SHA-256 of `a` into `digestA` and of `b` into `digestB` (32 bytes each). Two
    /// buffers of one length are hashed together where the CPU has the SHA extensions
    /// (`coven_sha256_pair`: one stream's rounds wait on each other, two overlap, 1.9 times the
    /// bytes a second); otherwise one after the other, as ``hash(_:into:)``.
    public static func hashPair(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer,
                                into digestA: UnsafeMutableRawPointer, _ digestB: UnsafeMutableRawPointer) {
        if a.count == b.count, a.count > 0, let baseA = a.baseAddress, let baseB = b.baseAddress,
           coven_sha256_pair(baseA.assumingMemoryBound(to: UInt8.self), baseB.assumingMemoryBound(to: UInt8.self), a.count,
                             digestA.assumingMemoryBound(to: UInt8.self), digestB.assumingMemoryBound(to: UInt8.self)) == 1 {
            return
        }
        hash(a, into: digestA)
        hash(b, into: digestB)
    }

    /// Hashes `count` buffers, `buffer(i)` into `digest(i)`, two at a time (``hashPair``).
    public static func hashEach(_ count: Int, _ buffer: (Int) -> UnsafeRawBufferPointer, into digest: (Int) -> UnsafeMutableRawPointer) {
        var index = 0
        while index + 1 < count {
            hashPair(buffer(index), buffer(index + 1), into: digest(index), digest(index + 1))
            index += 2
        }
        if index < count { hash(buffer(index), into: digest(index)) }
    }

    /// The SHA-256 of one buffer.
    public static func digest(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        digest.withUnsafeMutableBytes { output in
            if let base = output.baseAddress { hash(bytes, into: base) }
        }
        return digest
    }

    /// The SHA-256 of a byte array.
    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { digest($0) }
    }
}

// MARK: - Hex

extension Array where Element == UInt8 {
    /// Lowercase hex.
    public var hex: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Bytes from hex text; nil when it is not an even run of hex digits.
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count / 2)
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: return nil
            }
        }
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }
}

// MARK: - MD5

/// MD5, for the one place a protocol requires it (S3's Content-MD5 of a DeleteObjects body);
/// never for anything that needs integrity against an adversary.
enum MD5 {
    /// The MD5 of a byte array.
    static func digest(_ bytes: [UInt8]) -> [UInt8] {
        _ = Gcrypt.ready
        var digest = [UInt8](repeating: 0, count: 16)
        bytes.withUnsafeBytes { input in
            withUnsafeBytes(of: UInt8(0)) { empty in
                digest.withUnsafeMutableBytes { output in
                    gcry_md_hash_buffer(Int32(GCRY_MD_MD5.rawValue), output.baseAddress, input.baseAddress ?? empty.baseAddress, input.count)
                }
            }
        }
        return digest
    }
}

// MARK: - Strong random bytes, drawn a block at a time

/// Strong random bytes drawn from libgcrypt a block at a time and handed out in small pieces:
/// each `gcry_randomize` call costs about 8 µs whatever its size up to a few hundred bytes (its
/// pool is mixed and polled on every call), so a key a file on a write of 10,000 files paid
/// 80 ms, a twentieth of the write. The block lives in libgcrypt's secure memory, each piece is
/// wiped from it as it is handed out, and a forked child never uses its parent's block (the
/// block is drawn again when the process id changes). @unchecked: under `lock`.
final class StrongPool: @unchecked Sendable {
    static let shared = StrongPool()
    /// Bytes drawn at once.
    let capacity = 1024
    private let lock = NSLock()
    private let block: UnsafeMutablePointer<UInt8>
    /// Where the unused bytes start (`capacity`: none left).
    private var next: Int
    /// The process the block was drawn in.
    private var owner: pid_t = 0

    private init() {
        _ = Gcrypt.ready
        guard let memory = gcry_malloc_secure(capacity) else {
            fatalError("libgcrypt has no secure memory for random bytes")
        }
        block = memory.bindMemory(to: UInt8.self, capacity: capacity)
        next = capacity
    }

    /// Writes `count` (at most `capacity`) strong random bytes to `destination`.
    func take(into destination: UnsafeMutableRawPointer, count: Int) {
        precondition(count <= capacity, "internal error: too many bytes for the random pool")
        lock.lock()
        defer { lock.unlock() }
        let process = getpid()
        if next + count > capacity || owner != process {
            gcry_randomize(block, capacity, GCRY_STRONG_RANDOM)
            next = 0
            owner = process
        }
        destination.copyMemory(from: block + next, byteCount: count)
        (block + next).initialize(repeating: 0, count: count)
        next += count
    }
}

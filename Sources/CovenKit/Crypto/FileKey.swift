import CGcrypt

/// A 256-bit symmetric key held in libgcrypt's secure memory.
///
/// Every stored file has its own random `FileKey` (docs/format.md, section 4); the store key that
/// seals changes, snapshots and the device registry is a `FileKey` too (section 5). The 32 bytes
/// live in memory from `gcry_malloc_secure`, which libgcrypt keeps out of swap where it can, and
/// are wiped and freed in `deinit`. They never sit in a Swift array unless a caller asks for
/// ``hex``.
///
/// A key is immutable after creation, so it is `Sendable`: tasks may share one.
///
/// Related documentation: libgcrypt manual, "Memory allocation" (`gcry_malloc_secure`).
public final class FileKey: @unchecked Sendable {
    // @unchecked: `storage` is written only in init and wiped in deinit; every other access reads.

    /// The key length in bytes: 32 (AES-256).
    public static let byteCount = 32

    private let storage: UnsafeMutableRawPointer

    /// Allocates zeroed secure memory for one key.
    ///
    /// With the pool set to grow on demand (``Gcrypt/ready``) this fails only when the process is
    /// out of memory, which Swift treats as fatal for every other allocation too.
    private static func allocate() -> UnsafeMutableRawPointer {
        _ = Gcrypt.ready
        guard let pointer = gcry_malloc_secure(byteCount) else {
            fatalError("internal error: libgcrypt secure memory is exhausted")
        }
        pointer.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
        return pointer
    }

    /// Creates a new random key from libgcrypt's strong random generator.
    ///
    /// The bytes are generated directly in secure memory (`gcry_randomize`, `GCRY_STRONG_RANDOM`).
    public init() {
        storage = Self.allocate()
        gcry_randomize(storage, Self.byteCount, GCRY_STRONG_RANDOM)
    }

    /// Creates a key from its 32 raw bytes.
    ///
    /// The bytes are copied into secure memory; the caller should wipe its own copy.
    ///
    /// - Parameter bytes: exactly 32 bytes.
    /// - Throws: ``CovenError`` `.integrity` when `bytes` is not 32 bytes long.
    public init(bytes: UnsafeRawBufferPointer) throws {
        storage = try Self.copying(bytes)
    }

    /// Creates a key from its 32 raw bytes.
    ///
    /// The bytes are copied into secure memory; the caller should wipe its own copy.
    ///
    /// - Parameter bytes: exactly 32 bytes.
    /// - Throws: ``CovenError`` `.integrity` when `bytes` is not 32 bytes long.
    public init(bytes: [UInt8]) throws {
        storage = try bytes.withUnsafeBytes { try Self.copying($0) }
    }

    /// Secure memory holding a copy of `bytes`, which must be 32 bytes.
    private static func copying(_ bytes: UnsafeRawBufferPointer) throws -> UnsafeMutableRawPointer {
        guard bytes.count == byteCount, let base = bytes.baseAddress else {
            throw CovenError(.integrity, "a key must be \(byteCount.counted("byte"))", cause: "got \(bytes.count.counted("byte"))")
        }
        let pointer = allocate()
        pointer.copyMemory(from: base, byteCount: byteCount)
        return pointer
    }

    /// Creates a key from the 64 hex digits stored in a file record.
    ///
    /// Digits are decoded straight into secure memory; upper and lower case are accepted.
    ///
    /// - Parameter hex: 64 hexadecimal digits.
    /// - Throws: ``CovenError`` `.integrity` when `hex` is not exactly 64 hex digits.
    public init(hex: String) throws {
        let pointer = Self.allocate()
        var valid = false
        defer {
            if !valid {
                pointer.initializeMemory(as: UInt8.self, repeating: 0, count: Self.byteCount)
                gcry_free(pointer)
            }
        }
        var text = hex
        valid = text.withUTF8 { Self.decodeHex($0, into: pointer) }
        guard valid else {
            throw CovenError(.integrity, "a file key must be 64 hex digits", cause: "got \(hex.utf8.count.counted("character"))")
        }
        storage = pointer
    }

    deinit {
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: Self.byteCount)
        gcry_free(storage)
    }

    /// The key as 64 lowercase hex digits, as stored in a file record.
    ///
    /// The result is an ordinary `String` outside secure memory; use it only to persist the key.
    public var hex: String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: Self.byteCount * 2) { output in
            let bytes = storage.assumingMemoryBound(to: UInt8.self)
            digits.withUTF8Buffer { table in
                for index in 0..<Self.byteCount {
                    output[2 * index] = table[Int(bytes[index] >> 4)]
                    output[2 * index + 1] = table[Int(bytes[index] & 0x0f)]
                }
            }
            return Self.byteCount * 2
        }
    }

    /// Calls `body` with the 32 key bytes; the pointer must not escape.
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: storage, count: Self.byteCount))
    }

    /// Decodes 64 hex digits into 32 bytes at `output`; false when the text is not that.
    private static func decodeHex(_ digits: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableRawPointer) -> Bool {
        guard digits.count == byteCount * 2 else { return false }
        @inline(__always) func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: return digit &- 0x30
            case 0x61...0x66: return digit &- 0x57
            case 0x41...0x46: return digit &- 0x37
            default: return nil
            }
        }
        for index in 0..<byteCount {
            guard let high = value(digits[2 * index]), let low = value(digits[2 * index + 1]) else {
                return false
            }
            output.storeBytes(of: high << 4 | low, toByteOffset: index, as: UInt8.self)
        }
        return true
    }
}

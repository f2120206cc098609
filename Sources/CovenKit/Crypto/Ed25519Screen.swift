// MARK: - What libgcrypt 1.10.1 must never be asked to verify

/// The checks an Ed25519 public key and signature pass in Swift before libgcrypt sees them.
///
/// Measured on Debian 12's libgcrypt 1.10.1 (`gcry_pk_verify`, `(flags eddsa)`):
///
/// - it **accepts malleable signatures**: `S + L` (the group order added to a valid `S`)
///   verifies, so one signed message has several valid signatures. RFC 8032, section 5.1.7
///   requires `0 ≤ S < L`: ``isCanonicalScalar(_:)``.
/// - it **aborts the process** (`log_bug("mulm_25519: different sizes")`) when a public key
///   decodes to a point with a coordinate below 2^192: its field multiplication requires
///   four 64-bit limbs and gets the decoded, normalized number. That covers the small-order
///   points with `x = 0` or `y ∈ {0, 1}` (`01 00…00`, all zero, `p − 1`) and any point an
///   attacker picks with a small coordinate. ``screenPublicKey(_:)`` decodes the point itself
///   (RFC 8032, section 5.1.3) and refuses those, every non-canonical encoding (`y ≥ p`, or
///   `x = 0` with the sign bit set), points off the curve, and the eight small-order points
///   (with either sign bit), whatever libgcrypt would do with them. An honest key has a
///   coordinate below 2^192 with probability about 2^-62.
///
/// Field arithmetic is modulo `p = 2^255 − 19` on four 64-bit limbs, every result fully
/// reduced: slow by the standards of curve code (tens of microseconds per key) and only used
/// on public values, so it need not be constant-time.
enum Ed25519Screen {
    /// Why a public key is refused.
    enum Refusal: String {
        case length
        case nonCanonical = "non_canonical"
        case notOnCurve = "not_on_curve"
        case smallOrder = "small_order"
        case smallCoordinate = "small_coordinate"
    }

    /// The group order L = 2^252 + 27742317777372353535851937790883648493, little-endian.
    static let order: [UInt8] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ]

    /// Whether the 32 little-endian bytes are a scalar below L (RFC 8032's `S < L`).
    static func isCanonicalScalar(_ bytes: some Collection<UInt8>) -> Bool {
        let scalar = Array(bytes)
        guard scalar.count == 32 else { return false }
        for index in stride(from: 31, through: 0, by: -1) where scalar[index] != order[index] {
            return scalar[index] < order[index]
        }
        return false  // equal to L
    }

    /// The y coordinates (sign bit cleared) of the eight points of order dividing 8.
    static let smallOrderY: [Field] = [
        Field(0), Field(1), Field.p - Field(1),
        // The four points of order 8, two y values.
        // Encoded c7176a70…92ac037a and 26e8958f…6d53fc05.
        Field(limbs: (0x4fd8_4d3d_706a_17c7, 0x0f67_100d_760b_3cba, 0xc6cc_392c_fa53_202a, 0x7a03_ac92_77fd_c74e)),
        Field(limbs: (0xb027_b2c2_8f95_e826, 0xf098_eff2_89f4_c345, 0x3933_c6d3_05ac_dfd5, 0x05fc_536d_8802_38b1)),
    ]

    /// Checks a 32-byte Ed25519 public key; nil when it is fit for libgcrypt.
    static func screenPublicKey(_ bytes: some Collection<UInt8>) -> Refusal? {
        let encoded = Array(bytes)
        guard encoded.count == 32 else { return .length }
        let sign = encoded[31] >> 7
        let y = Field(littleEndian: encoded)
        guard y < Field.p else { return .nonCanonical }
        if smallOrderY.contains(y) { return .smallOrder }
        // x² = (y² − 1) / (d·y² + 1); x = u·v³·(u·v⁷)^((p−5)/8)   (RFC 8032, 5.1.3)
        let yy = y * y
        let u = yy - Field(1)
        let v = Field.d * yy + Field(1)
        let v3 = v * v * v
        let v7 = v3 * v3 * v
        var x = u * v3 * (u * v7).power(Field.pMinus5Over8)
        let vxx = v * x * x
        if vxx == u {
            // x is a root
        } else if vxx == Field(0) - u {
            x = x * Field.sqrtMinusOne
        } else {
            return .notOnCurve
        }
        if x == Field(0) && sign == 1 { return .nonCanonical }
        if x.isOdd != (sign == 1) { x = Field(0) - x }
        if x.limbs.3 == 0 || y.limbs.3 == 0 { return .smallCoordinate }
        return nil
    }

    // MARK: - GF(2^255 − 19)

    /// A field element, fully reduced (below p), as four little-endian 64-bit limbs.
    struct Field: Equatable, Comparable {
        var limbs: (UInt64, UInt64, UInt64, UInt64)

        static let p = Field(raw: (0xffff_ffff_ffff_ffed, .max, .max, 0x7fff_ffff_ffff_ffff))
        /// d = −121665 / 121666.
        static let d = Field(raw: (0x75eb_4dca_1359_78a3, 0x0070_0a4d_4141_d8ab, 0x8cc7_4079_7779_e898, 0x5203_6cee_2b6f_fe73))
        /// A square root of −1: 2^((p−1)/4).
        static let sqrtMinusOne = Field(raw: (0xc4ee_1b27_4a0e_a0b0, 0x2f43_1806_ad2f_e478, 0x2b4d_0099_3dfb_d7a7, 0x2b83_2480_4fc1_df0b))
        /// (p − 5) / 8 = 2^252 − 3.
        static let pMinus5Over8 = Field(raw: (0xffff_ffff_ffff_fffd, .max, .max, 0x0fff_ffff_ffff_ffff))

        init(_ small: UInt64) { limbs = (small, 0, 0, 0) }
        init(limbs: (UInt64, UInt64, UInt64, UInt64)) { self.limbs = limbs }
        private init(raw: (UInt64, UInt64, UInt64, UInt64)) { limbs = raw }

        /// The number of 32 little-endian bytes with the top bit (an encoding's sign bit)
        /// cleared, not reduced.
        init(littleEndian bytes: [UInt8]) {
            precondition(bytes.count == 32, "internal error: a field element is 32 bytes")
            func limb(_ index: Int) -> UInt64 {
                (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[index * 8 + $1]) << (8 * UInt64($1)) }
            }
            // The sign bit is not part of y.
            limbs = (limb(0), limb(1), limb(2), limb(3) & 0x7fff_ffff_ffff_ffff)
        }

        var isOdd: Bool { limbs.0 & 1 == 1 }

        private var array: [UInt64] { [limbs.0, limbs.1, limbs.2, limbs.3] }
        private init(_ array: [UInt64]) { limbs = (array[0], array[1], array[2], array[3]) }

        static func == (a: Field, b: Field) -> Bool { a.array == b.array }

        static func < (a: Field, b: Field) -> Bool {
            let (x, y) = (a.array, b.array)
            for index in stride(from: 3, through: 0, by: -1) where x[index] != y[index] { return x[index] < y[index] }
            return false
        }

        /// `value` (below 2^256 + 38·2^64) reduced below p.
        private static func reduce(_ words: [UInt64], carry: UInt64) -> Field {
            // 2^256 ≡ 38 (mod p): fold the carry in, at most twice.
            var value = words
            var high = carry
            while high != 0 {
                var add = UInt128(high) * 38
                high = 0
                for index in 0..<4 {
                    let sum = UInt128(value[index]) + add
                    value[index] = UInt64(truncatingIfNeeded: sum)
                    add = sum >> 64
                }
                high = UInt64(add)
            }
            var result = Field(value)
            while !(result < p) { result = subtractRaw(result, p) }
            return result
        }

        private static func subtractRaw(_ a: Field, _ b: Field) -> Field {
            let (x, y) = (a.array, b.array)
            var out = [UInt64](repeating: 0, count: 4)
            var borrow: UInt64 = 0
            for index in 0..<4 {
                let (d1, o1) = x[index].subtractingReportingOverflow(y[index])
                let (d2, o2) = d1.subtractingReportingOverflow(borrow)
                out[index] = d2
                borrow = (o1 ? 1 : 0) + (o2 ? 1 : 0)
            }
            return Field(out)
        }

        static func + (a: Field, b: Field) -> Field {
            let (x, y) = (a.array, b.array)
            var out = [UInt64](repeating: 0, count: 4)
            var carry: UInt64 = 0
            for index in 0..<4 {
                let sum = UInt128(x[index]) + UInt128(y[index]) + UInt128(carry)
                out[index] = UInt64(truncatingIfNeeded: sum)
                carry = UInt64(sum >> 64)
            }
            return reduce(out, carry: carry)
        }

        static func - (a: Field, b: Field) -> Field {
            // a + (p − b), both below p.
            a + subtractRaw(p, b)
        }

        static func * (a: Field, b: Field) -> Field {
            let (x, y) = (a.array, b.array)
            var product = [UInt64](repeating: 0, count: 8)
            for i in 0..<4 {
                var carry: UInt128 = 0
                for j in 0..<4 {
                    let t = UInt128(x[i]) * UInt128(y[j]) + UInt128(product[i + j]) + carry
                    product[i + j] = UInt64(truncatingIfNeeded: t)
                    carry = t >> 64
                }
                product[i + 4] = UInt64(carry)
            }
            // low + 38·high: below 2^256 · 39.
            var out = [UInt64](repeating: 0, count: 4)
            var carry: UInt128 = 0
            for index in 0..<4 {
                let t = UInt128(product[index]) + UInt128(product[index + 4]) * 38 + carry
                out[index] = UInt64(truncatingIfNeeded: t)
                carry = t >> 64
            }
            return reduce(out, carry: UInt64(carry))
        }

        /// self^exponent, square and multiply from the top bit.
        func power(_ exponent: Field) -> Field {
            var result = Field(1)
            let bits = exponent.array
            for index in stride(from: 255, through: 0, by: -1) {
                result = result * result
                if (bits[index / 64] >> UInt64(index % 64)) & 1 == 1 { result = result * self }
            }
            return result
        }
    }
}

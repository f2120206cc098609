// SHA-256 of two equal-length buffers at once on the x86-64 SHA extensions (FIPS 180-4).
//
// libgcrypt hashes one buffer at a time: on the SHA extensions each 64-byte block's 64 rounds
// form one chain of dependent instructions, so a core hashing one stream waits on its own
// latency (1.8 GB/s here). Two independent streams interleaved fill those waits (3.4 GB/s).
// coven hashes a file's 64 KiB chunks, each on its own, when it stages and when every upload
// attempt checks what it sends: pairs of chunks are two streams. This is that one loop, and
// nothing else: padding is the standard's, and the tests check it against libgcrypt and the
// standard's vectors at every length around the block and padding edges. Anything else (one
// buffer, other CPUs) stays with libgcrypt.

#include "coven_sha256.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <cpuid.h>
#include <immintrin.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

// The state of two streams, in the extensions' order (ABEF and CDGH), and `blocks` 64-byte
// blocks of each stream run through it.
#define PAIR_TARGET __attribute__((target("sha,sse4.1,ssse3")))

PAIR_TARGET static void pair_blocks(__m128i abef[2], __m128i cdgh[2], const uint8_t *a, const uint8_t *b, size_t blocks) {
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    const uint8_t *data[2] = {a, b};
    __m128i s0[2] = {abef[0], abef[1]}, s1[2] = {cdgh[0], cdgh[1]};
    for (size_t block = 0; block < blocks; block++) {
        __m128i w[2][4];
        const __m128i saved0[2] = {s0[0], s0[1]}, saved1[2] = {s1[0], s1[1]};
        _Pragma("GCC unroll 16") for (int group = 0; group < 16; group++) {
            const __m128i k = _mm_loadu_si128((const __m128i *)&K[4 * group]);
            _Pragma("GCC unroll 2") for (int lane = 0; lane < 2; lane++) {
                if (group < 4) {
                    // Words 4g..4g+3 of the block, big-endian.
                    w[lane][group] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data[lane] + 64 * block + 16 * group)), swap);
                } else {
                    // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time: the
                    // register of group g-4 gets group g.
                    const __m128i seven = _mm_alignr_epi8(w[lane][(group + 3) & 3], w[lane][(group + 2) & 3], 4);
                    const __m128i partial = _mm_add_epi32(_mm_sha256msg1_epu32(w[lane][group & 3], w[lane][(group + 1) & 3]), seven);
                    w[lane][group & 3] = _mm_sha256msg2_epu32(partial, w[lane][(group + 3) & 3]);
                }
                __m128i message = _mm_add_epi32(w[lane][group & 3], k);
                s1[lane] = _mm_sha256rnds2_epu32(s1[lane], s0[lane], message);
                message = _mm_shuffle_epi32(message, 0x0E);
                s0[lane] = _mm_sha256rnds2_epu32(s0[lane], s1[lane], message);
            }
        }
        for (int lane = 0; lane < 2; lane++) {
            s0[lane] = _mm_add_epi32(s0[lane], saved0[lane]);
            s1[lane] = _mm_add_epi32(s1[lane], saved1[lane]);
        }
    }
    for (int lane = 0; lane < 2; lane++) {
        abef[lane] = s0[lane];
        cdgh[lane] = s1[lane];
    }
}

PAIR_TARGET static void load_state(const uint32_t h[8], __m128i *abef, __m128i *cdgh) {
    __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);  // CDAB
    __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B);  // EFGH
    *abef = _mm_alignr_epi8(dcba, hgfe, 8);
    *cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);
}

PAIR_TARGET static void store_digest(__m128i abef, __m128i cdgh, uint8_t *digest) {
    const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    uint32_t h[8];
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));  // ABCD
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));     // EFGH
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (uint8_t)(h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)h[i];
    }
}

// The final one or two blocks of a message of `length` bytes whose last `rest` (< 64) are at
// `tail`: the bytes, 0x80, zeros, and the length in bits, big-endian. Returns the blocks made.
static size_t final_blocks(const uint8_t *tail, size_t rest, size_t length, uint8_t out[128]) {
    memset(out, 0, 128);
    if (rest > 0) memcpy(out, tail, rest);
    out[rest] = 0x80;
    const size_t blocks = rest + 9 <= 64 ? 1 : 2;
    const uint64_t bits = (uint64_t)length * 8;
    for (int i = 0; i < 8; i++) out[64 * blocks - 1 - i] = (uint8_t)(bits >> (8 * i));
    return blocks;
}

int coven_sha256_pair_available(void) {
    static int available = -1;  // a race only computes the same answer twice
    int known = __atomic_load_n(&available, __ATOMIC_RELAXED);
    if (known >= 0) return known;
    unsigned eax, ebx, ecx, edx;
    int has = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 9)) && (ecx & (1u << 19))) {  // SSSE3, SSE4.1
        if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 29))) has = 1;   // SHA
    }
    __atomic_store_n(&available, has, __ATOMIC_RELAXED);
    return has;
}

PAIR_TARGET static void pair(const uint8_t *a, const uint8_t *b, size_t length, uint8_t *digest_a, uint8_t *digest_b) {
    __m128i abef[2], cdgh[2];
    load_state(H0, &abef[0], &cdgh[0]);
    load_state(H0, &abef[1], &cdgh[1]);
    const size_t whole = length / 64;
    pair_blocks(abef, cdgh, a, b, whole);
    uint8_t last_a[128], last_b[128];
    const size_t rest = length - 64 * whole;
    const size_t blocks = final_blocks(a + 64 * whole, rest, length, last_a);
    final_blocks(b + 64 * whole, rest, length, last_b);
    pair_blocks(abef, cdgh, last_a, last_b, blocks);
    store_digest(abef[0], cdgh[0], digest_a);
    store_digest(abef[1], cdgh[1], digest_b);
}

int coven_sha256_pair(const uint8_t *a, const uint8_t *b, size_t length, uint8_t *digest_a, uint8_t *digest_b) {
    if (!coven_sha256_pair_available()) return 0;
    pair(a, b, length, digest_a, digest_b);
    return 1;
}

#else

int coven_sha256_pair_available(void) { return 0; }

int coven_sha256_pair(const uint8_t *a, const uint8_t *b, size_t length, uint8_t *digest_a, uint8_t *digest_b) {
    (void)a; (void)b; (void)length; (void)digest_a; (void)digest_b;
    return 0;
}

#endif

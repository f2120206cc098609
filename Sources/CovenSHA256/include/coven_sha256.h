#ifndef COVEN_SHA256_H
#define COVEN_SHA256_H

#include <stddef.h>
#include <stdint.h>

/// Whether this CPU has the SHA extensions coven_sha256_pair uses (x86-64 SHA-NI with SSSE3 and
/// SSE4.1): 1 or 0, decided once.
int coven_sha256_pair_available(void);

/// The SHA-256 of two buffers of the same length, `a` into `digest_a` and `b` into `digest_b`
/// (32 bytes each), hashed together: one stream's rounds wait on each other, two streams'
/// rounds overlap, so the pair takes little more time than one. Returns 0 when the CPU lacks
/// the extensions (coven_sha256_pair_available) and nothing was written, 1 otherwise.
int coven_sha256_pair(const uint8_t *a, const uint8_t *b, size_t length, uint8_t *digest_a, uint8_t *digest_b);

#endif

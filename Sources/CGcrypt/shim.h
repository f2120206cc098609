#ifndef COVEN_CGCRYPT_SHIM_H
#define COVEN_CGCRYPT_SHIM_H
#include <gcrypt.h>

// gcry_control is variadic: one typed wrapper per command we use.
static inline gcry_error_t coven_gcry_disable_secmem_warn(void) { return gcry_control(GCRYCTL_DISABLE_SECMEM_WARN, 0); }
static inline gcry_error_t coven_gcry_init_secmem(int bytes) { return gcry_control(GCRYCTL_INIT_SECMEM, bytes, 0); }
static inline gcry_error_t coven_gcry_initialization_finished(void) { return gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0); }
static inline int coven_gcry_initialization_finished_p(void) { return (int)gcry_control(GCRYCTL_INITIALIZATION_FINISHED_P); }
static inline gcry_error_t coven_gcry_suspend_secmem_warn(void) { return gcry_control(GCRYCTL_SUSPEND_SECMEM_WARN); }
static inline gcry_error_t coven_gcry_auto_expand_secmem(unsigned int chunk) { return gcry_control(GCRYCTL_AUTO_EXPAND_SECMEM, chunk, 0); }
// gcry_md_final is a macro over gcry_md_ctl.
static inline gcry_error_t coven_gcry_md_final(gcry_md_hd_t h) { return gcry_md_ctl(h, GCRYCTL_FINALIZE, NULL, 0); }
// gcry_cipher_setiv, _authenticate, _gettag and _checktag are macros or functions taking
// size_t; they import fine. gcry_err_code is a static inline in gpg-error.h and imports too.
// gcry_sexp_build is variadic: one typed builder per Ed25519 s-expression we use
// ((flags eddsa), RFC 8032 encodings: 32-byte seed d, 32-byte public key q, r and s).
static inline gcry_error_t coven_gcry_sexp_ed25519_seed(gcry_sexp_t *r, const void *d) {
    return gcry_sexp_build(r, NULL, "(private-key(ecc(curve Ed25519)(flags eddsa)(d %b)))", 32, d);
}
static inline gcry_error_t coven_gcry_sexp_ed25519_private(gcry_sexp_t *r, const void *q, const void *d) {
    return gcry_sexp_build(r, NULL, "(private-key(ecc(curve Ed25519)(flags eddsa)(q %b)(d %b)))", 32, q, 32, d);
}
static inline gcry_error_t coven_gcry_sexp_ed25519_public(gcry_sexp_t *r, const void *q) {
    return gcry_sexp_build(r, NULL, "(public-key(ecc(curve Ed25519)(flags eddsa)(q %b)))", 32, q);
}
static inline gcry_error_t coven_gcry_sexp_ed25519_data(gcry_sexp_t *r, const void *m, int length) {
    return gcry_sexp_build(r, NULL, "(data(flags eddsa)(hash-algo sha512)(value %b))", length, m);
}
static inline gcry_error_t coven_gcry_sexp_ed25519_signature(gcry_sexp_t *r, const void *rr, const void *s) {
    return gcry_sexp_build(r, NULL, "(sig-val(eddsa(r %b)(s %b)))", 32, rr, 32, s);
}
#endif

#ifndef COVEN_CCURL_SHIM_H
#define COVEN_CCURL_SHIM_H
// libcurl, loaded when the first HTTP client is made rather than linked: linking libcurl maps it
// and its ~35 dependencies (OpenSSL, GnuTLS, Kerberos, LDAP, SSH…) into every coven process,
// about 6-10 MiB of resident memory and milliseconds of start-up that commands working on local
// files or file:// storage never use. The header gives the types and constants; every call goes
// through the table `coven_curl_load` fills, and the variadic setopt/getinfo are called by typed
// wrappers so their arguments are passed the variadic way.
#include <curl/curl.h>
#include <dlfcn.h>
#include <stddef.h>

struct coven_curl_api {
    void *library;
    void *global_init;
    void *easy_init;
    void *easy_cleanup;
    void *easy_reset;
    void *easy_perform;
    void *easy_strerror;
    void *easy_setopt;
    void *easy_getinfo;
    void *slist_append;
    void *slist_free_all;
};

/// Loads libcurl (soname libcurl.so.4) and resolves every function coven calls. Returns NULL on
/// success, or the loader's message (valid until the next dl* call).
static inline const char *coven_curl_load(struct coven_curl_api *api) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return dlerror();
    struct { void **field; const char *name; } symbols[] = {
        { &api->global_init, "curl_global_init" },
        { &api->easy_init, "curl_easy_init" },
        { &api->easy_cleanup, "curl_easy_cleanup" },
        { &api->easy_reset, "curl_easy_reset" },
        { &api->easy_perform, "curl_easy_perform" },
        { &api->easy_strerror, "curl_easy_strerror" },
        { &api->easy_setopt, "curl_easy_setopt" },
        { &api->easy_getinfo, "curl_easy_getinfo" },
        { &api->slist_append, "curl_slist_append" },
        { &api->slist_free_all, "curl_slist_free_all" },
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        dlerror();
        *symbols[i].field = dlsym(library, symbols[i].name);
        if (*symbols[i].field == NULL) {
            const char *message = dlerror();
            dlclose(library);
            return message != NULL ? message : symbols[i].name;
        }
    }
    api->library = library;
    return NULL;
}

static inline CURLcode coven_curl_global_init(const struct coven_curl_api *a, long flags) { return ((CURLcode (*)(long))a->global_init)(flags); }
static inline CURL *coven_curl_easy_init(const struct coven_curl_api *a) { return ((CURL *(*)(void))a->easy_init)(); }
static inline void coven_curl_easy_cleanup(const struct coven_curl_api *a, CURL *h) { ((void (*)(CURL *))a->easy_cleanup)(h); }
static inline void coven_curl_easy_reset(const struct coven_curl_api *a, CURL *h) { ((void (*)(CURL *))a->easy_reset)(h); }
static inline CURLcode coven_curl_easy_perform(const struct coven_curl_api *a, CURL *h) { return ((CURLcode (*)(CURL *))a->easy_perform)(h); }
static inline const char *coven_curl_easy_strerror(const struct coven_curl_api *a, CURLcode c) { return ((const char *(*)(CURLcode))a->easy_strerror)(c); }
static inline struct curl_slist *coven_curl_slist_append(const struct coven_curl_api *a, struct curl_slist *l, const char *s) { return ((struct curl_slist *(*)(struct curl_slist *, const char *))a->slist_append)(l, s); }
static inline void coven_curl_slist_free_all(const struct coven_curl_api *a, struct curl_slist *l) { ((void (*)(struct curl_slist *))a->slist_free_all)(l); }

// curl_easy_setopt and curl_easy_getinfo are variadic: one typed wrapper per kind of value.
typedef CURLcode (*coven_curl_setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*coven_curl_getinfo_fn)(CURL *, CURLINFO, ...);
static inline CURLcode coven_curl_setopt_long(const struct coven_curl_api *a, CURL *h, CURLoption o, long v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
static inline CURLcode coven_curl_setopt_off(const struct coven_curl_api *a, CURL *h, CURLoption o, curl_off_t v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
static inline CURLcode coven_curl_setopt_string(const struct coven_curl_api *a, CURL *h, CURLoption o, const char *v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
static inline CURLcode coven_curl_setopt_pointer(const struct coven_curl_api *a, CURL *h, CURLoption o, void *v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
static inline CURLcode coven_curl_setopt_slist(const struct coven_curl_api *a, CURL *h, CURLoption o, struct curl_slist *v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
typedef size_t (*coven_curl_data_callback)(char *, size_t, size_t, void *);
static inline CURLcode coven_curl_setopt_callback(const struct coven_curl_api *a, CURL *h, CURLoption o, coven_curl_data_callback v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, o, v); }
typedef int (*coven_curl_xferinfo_callback)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t);
static inline CURLcode coven_curl_setopt_xferinfo(const struct coven_curl_api *a, CURL *h, coven_curl_xferinfo_callback v) { return ((coven_curl_setopt_fn)a->easy_setopt)(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode coven_curl_getinfo_long(const struct coven_curl_api *a, CURL *h, CURLINFO i, long *v) { return ((coven_curl_getinfo_fn)a->easy_getinfo)(h, i, v); }
static inline CURLcode coven_curl_getinfo_off(const struct coven_curl_api *a, CURL *h, CURLINFO i, curl_off_t *v) { return ((coven_curl_getinfo_fn)a->easy_getinfo)(h, i, v); }
#endif

/*
 * hooks.c - the entry points libgpupool puts in front of the CUDA driver and NVML.
 *
 * A program reaches the driver three ways, and each is covered:
 *   1. by linking libcuda / libnvidia-ml directly: our exported functions of the same names win
 *      symbol resolution because we are loaded first (LD_PRELOAD or /etc/ld.so.preload);
 *   2. by dlopen + dlsym (the CUDA runtime, PyTorch, pynvml): our dlsym returns our hook for the
 *      names below whenever the handle really defines them;
 *   3. by cuGetProcAddress / cuGetProcAddress_v2 (how the CUDA 12 runtime fetches every driver
 *      function): we ask the driver, then swap the answer for our hook of the same variant.
 * The real functions are always taken from the driver library itself (never through our dlsym,
 * which would hand back the hooks).
 */
#define _GNU_SOURCE
/* glibc declares dlsym with a nonnull attribute; we define dlsym and must test name for NULL. */
#define dlsym gp_glibc_dlsym_declaration
#include <dlfcn.h>
#undef dlsym

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gp_cuda_types.h"
#include "gp_internal.h"

GP_EXPORT void *dlsym(void *handle, const char *name);

/* ---- logging -------------------------------------------------------------------------------- */

static int log_level = -1;

void gp_log(int level, const char *fmt, ...) {
    if (log_level < 0) {
        const char *v = getenv("GPUPOOL_LOG_LEVEL");
        log_level = v != NULL ? atoi(v) : 1;
    }
    if (level > log_level) return;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "gpupool[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf) n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;
}

/* ---- the hook table ------------------------------------------------------------------------- */
/* X(symbol, cuGetProcAddress name or NULL, first CUDA version of this variant, per-thread, lib,
 *   hooked). Entries with hooked=0 are driver functions we only call. */
#define LIB_CUDA 0
#define LIB_NVML 1
#define GP_HOOKS(X)                                                                 \
    X(cuMemAlloc, "cuMemAlloc", 0, 0, LIB_CUDA, 1)                                  \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, LIB_CUDA, 1)                            \
    X(cuMemAllocPitch, "cuMemAllocPitch", 0, 0, LIB_CUDA, 1)                        \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, LIB_CUDA, 1)                  \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, LIB_CUDA, 1)                 \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, LIB_CUDA, 1)                    \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1, LIB_CUDA, 1)               \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, LIB_CUDA, 1)    \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1, LIB_CUDA, 1) \
    X(cuMemFree, "cuMemFree", 0, 0, LIB_CUDA, 1)                                    \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, LIB_CUDA, 1)                              \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, LIB_CUDA, 1)                      \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1, LIB_CUDA, 1)                 \
    X(cuMemCreate, "cuMemCreate", 10020, 0, LIB_CUDA, 1)                            \
    X(cuMemRelease, "cuMemRelease", 10020, 0, LIB_CUDA, 1)                          \
    X(cuMemGetInfo, "cuMemGetInfo", 0, 0, LIB_CUDA, 1)                              \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, LIB_CUDA, 1)                        \
    X(cuDeviceTotalMem, "cuDeviceTotalMem", 0, 0, LIB_CUDA, 1)                      \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, LIB_CUDA, 1)                \
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0, LIB_CUDA, 1)                  \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, LIB_CUDA, 1)               \
    X(cuGetProcAddress_v2_ptsz, "cuGetProcAddress", 12000, 1, LIB_CUDA, 1)          \
    X(cuCtxGetDevice, NULL, 0, 0, LIB_CUDA, 0)                                      \
    X(cuDeviceGetUuid, NULL, 0, 0, LIB_CUDA, 0)                                     \
    X(cuDeviceGetUuid_v2, NULL, 0, 0, LIB_CUDA, 0)                                  \
    X(nvmlDeviceGetMemoryInfo, NULL, 0, 0, LIB_NVML, 1)                             \
    X(nvmlDeviceGetMemoryInfo_v2, NULL, 0, 0, LIB_NVML, 1)                          \
    X(nvmlDeviceGetUUID, NULL, 0, 0, LIB_NVML, 0)                                   \
    X(nvmlDeviceGetIndex, NULL, 0, 0, LIB_NVML, 0)

#define X_ENUM(sym, base, ver, ptsz, lib, hooked) H_##sym,
enum { GP_HOOKS(X_ENUM) H_COUNT };

typedef struct {
    const char *name;
    const char *base;
    int min_version;
    int ptsz;
    int lib;
    void *hook;
} gp_hook_t;

static const gp_hook_t *hook_table(void);
static void *g_real[H_COUNT];

/* ---- real dlsym ----------------------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;

__attribute__((noinline)) static void resolve_real_dlsym(void) {
    /* dlvsym is not interposed, so it can find glibc's own dlsym under its symbol version. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (p != NULL) {
            __atomic_store_n(&real_dlsym, (dlsym_fn)p, __ATOMIC_RELEASE);
            return;
        }
    }
    gp_log(GP_ERROR, "cannot find the C library's dlsym; dynamic symbol lookups will fail");
}

/* ---- configuration and one-time set-up ------------------------------------------------------ */

static gp_config_t cfg;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_once_t region_once = PTHREAD_ONCE_INIT;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void atfork_child(void) {
    gp_ptrtab_fork_child();
    gp_region_after_fork_child();
}

static void do_init(void) {
    gp_config_load(&cfg);
    if (cfg.mode == GP_MODE_ACTIVE) {
        for (int i = 0; i < cfg.nrows; i++) {
            const gp_row_t *r = &cfg.rows[i];
            char dev[GP_UUID_MAX + 16];
            if (r->by_uuid)
                snprintf(dev, sizeof dev, "%s", r->uuid);
            else
                snprintf(dev, sizeof dev, "index %u", r->index);
            gp_log(GP_INFO, "limit from %s: device %s: %llu bytes", cfg.source, dev,
                   (unsigned long long)r->limit);
        }
    }
    pthread_atfork(gp_ptrtab_fork_prepare, gp_ptrtab_fork_parent, atfork_child);
}

static inline void ensure_init(void) { pthread_once(&init_once, do_init); }

static void do_region_init(void) { gp_region_init(&cfg); }

static inline int active(void) {
    ensure_init();
    return cfg.mode != GP_MODE_INERT;
}

__attribute__((destructor)) static void gp_fini(void) { gp_region_process_exit(); }

static void *open_driver(const char *env, const char *soname, const char *fallback) {
    const char *path = getenv(env);
    if (path != NULL && path[0] != '\0') {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) gp_log(GP_ERROR, "%s=%s: %s", env, path, dlerror());
        return h;
    }
    /* The program has normally loaded the driver already; take that copy (matched by soname, so a
     * forward-compatibility libcuda from another directory is found too) rather than a second. */
    void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) h = dlopen(fallback, RTLD_NOW | RTLD_LOCAL);
    return h;
}

static void resolve_lib(int lib, void *h) {
    if (h == NULL) return;
    if (real_dlsym == NULL) resolve_real_dlsym();
    if (real_dlsym == NULL) return;
    const gp_hook_t *t = hook_table();
    for (int i = 0; i < H_COUNT; i++) {
        if (t[i].lib != lib) continue;
        void *p = real_dlsym(h, t[i].name);
        if (p != NULL && p != t[i].hook) __atomic_store_n(&g_real[i], p, __ATOMIC_RELEASE);
    }
}

static void do_cuda_init(void) {
    resolve_lib(LIB_CUDA, open_driver("GPUPOOL_CUDA_LIBRARY", "libcuda.so.1", "libcuda.so"));
}
static void do_nvml_init(void) {
    resolve_lib(LIB_NVML,
                open_driver("GPUPOOL_NVML_LIBRARY", "libnvidia-ml.so.1", "libnvidia-ml.so"));
}

static void *real_fn(int id) {
    void *p = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
    if (p != NULL) return p;
    pthread_once(hook_table()[id].lib == LIB_CUDA ? &cuda_once : &nvml_once,
                 hook_table()[id].lib == LIB_CUDA ? do_cuda_init : do_nvml_init);
    p = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
    if (p == NULL) gp_log(GP_DEBUG, "driver has no %s", hook_table()[id].name);
    return p;
}

#define REAL(sym) ((__typeof__(&sym))real_fn(H_##sym))

/* ---- device rows ---------------------------------------------------------------------------- */

#define ROW_UNLIMITED (-1) /* no configuration, or no context: do not count */
#define ROW_DENY (-2)      /* configured, but this device is not part of the slice */
#define MAX_ORDINALS 64

static int cuda_rows[MAX_ORDINALS]; /* 0: unknown, else row + 1 (or ROW_DENY + ... see below) */
static pthread_mutex_t row_lock = PTHREAD_MUTEX_INITIALIZER;

static int uuid_tail_equal(const char *a, const char *b) {
    /* "GPU-xxxxxxxx-..." vs "MIG-xxxxxxxx-...": compare the hexadecimal part, case-insensitively */
    const char *ta = strchr(a, '-'), *tb = strchr(b, '-');
    if (ta == NULL || tb == NULL) return 0;
    return strcasecmp(ta + 1, tb + 1) == 0;
}

static int any_uuid_rows(void) {
    for (int i = 0; i < cfg.nrows; i++)
        if (cfg.rows[i].by_uuid) return 1;
    return 0;
}

static int match_rows(const char *uuid, unsigned index) {
    for (int i = 0; i < cfg.nrows; i++) {
        const gp_row_t *r = &cfg.rows[i];
        if (r->by_uuid ? (uuid != NULL && uuid_tail_equal(r->uuid, uuid)) : r->index == index)
            return i;
    }
    return ROW_DENY;
}

static void format_uuid(const CUuuid *u, char *out, size_t n) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuCtxGetDevice(CUdevice *dev);

static int row_for_cuda_dev(CUdevice dev) {
    if (cfg.mode == GP_MODE_INERT) return ROW_UNLIMITED;
    if (cfg.mode == GP_MODE_BROKEN || dev < 0 || dev >= MAX_ORDINALS) return ROW_DENY;
    int cached = __atomic_load_n(&cuda_rows[dev], __ATOMIC_ACQUIRE);
    if (cached != 0) return cached > 0 ? cached - 1 : ROW_DENY;
    char uuid[GP_UUID_MAX];
    const char *uuidp = NULL;
    if (any_uuid_rows()) {
        CUuuid u;
        __typeof__(&cuDeviceGetUuid_v2) f2 = REAL(cuDeviceGetUuid_v2);
        __typeof__(&cuDeviceGetUuid) f1 = REAL(cuDeviceGetUuid);
        CUresult r = f2 != NULL ? f2(&u, dev) : f1 != NULL ? f1(&u, dev) : CUDA_ERROR_NOT_FOUND;
        if (r == CUDA_SUCCESS) {
            format_uuid(&u, uuid, sizeof uuid);
            uuidp = uuid;
        }
    }
    int row = match_rows(uuidp, (unsigned)dev);
    pthread_mutex_lock(&row_lock);
    if (cuda_rows[dev] == 0) {
        if (row == ROW_DENY)
            gp_log(GP_WARN, "CUDA device %d (%s) is not in the limits from %s; refusing its memory",
                   dev, uuidp != NULL ? uuidp : "uuid unknown", cfg.source);
        __atomic_store_n(&cuda_rows[dev], row >= 0 ? row + 1 : -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&row_lock);
    return row;
}

static int current_row(void) {
    if (cfg.mode == GP_MODE_INERT) return ROW_UNLIMITED;
    __typeof__(&cuCtxGetDevice) f = REAL(cuCtxGetDevice);
    CUdevice dev = -1;
    if (f == NULL || f(&dev) != CUDA_SUCCESS) return ROW_UNLIMITED; /* driver will refuse anyway */
    return row_for_cuda_dev(dev);
}

#define MAX_NVML_HANDLES 64
static struct {
    nvmlDevice_t handle;
    int row;
} nvml_rows[MAX_NVML_HANDLES];
static int n_nvml_rows;

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);

static int row_for_nvml(nvmlDevice_t d) {
    if (cfg.mode == GP_MODE_INERT) return ROW_UNLIMITED;
    if (cfg.mode == GP_MODE_BROKEN) return ROW_DENY;
    pthread_mutex_lock(&row_lock);
    for (int i = 0; i < n_nvml_rows; i++) {
        if (nvml_rows[i].handle == d) {
            int row = nvml_rows[i].row;
            pthread_mutex_unlock(&row_lock);
            return row;
        }
    }
    pthread_mutex_unlock(&row_lock);
    char uuid[GP_UUID_MAX] = {0};
    const char *uuidp = NULL;
    unsigned index = UINT_MAX;
    __typeof__(&nvmlDeviceGetUUID) fu = REAL(nvmlDeviceGetUUID);
    __typeof__(&nvmlDeviceGetIndex) fi = REAL(nvmlDeviceGetIndex);
    if (fu != NULL && fu(d, uuid, sizeof uuid) == NVML_SUCCESS) uuidp = uuid;
    if (fi != NULL && fi(d, &index) != NVML_SUCCESS) index = UINT_MAX;
    int row = match_rows(uuidp, index);
    pthread_mutex_lock(&row_lock);
    if (n_nvml_rows < MAX_NVML_HANDLES) {
        nvml_rows[n_nvml_rows].handle = d;
        nvml_rows[n_nvml_rows].row = row;
        n_nvml_rows++;
    }
    pthread_mutex_unlock(&row_lock);
    return row;
}

/* ---- charging ------------------------------------------------------------------------------- */

typedef struct {
    int row;
    uint64_t bytes;
    int charged;
} charge_t;

static CUresult charge_begin(int row, uint64_t bytes, charge_t *c) {
    c->row = row;
    c->bytes = bytes;
    c->charged = 0;
    if (row == ROW_UNLIMITED) return CUDA_SUCCESS;
    if (row == ROW_DENY) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_once(&region_once, do_region_init);
    if (gp_region_reserve(row, bytes, cfg.rows[row].limit) != 0) {
        gp_log(GP_INFO, "refusing %llu bytes: over the %llu-byte limit of device row %d",
               (unsigned long long)bytes, (unsigned long long)cfg.rows[row].limit, row);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->charged = 1;
    return CUDA_SUCCESS;
}

static void charge_end(const charge_t *c, CUresult r, uint8_t kind, uint64_t key) {
    if (!c->charged) return;
    if (r == CUDA_SUCCESS)
        gp_ptrtab_insert(kind, key, c->bytes, c->row);
    else
        gp_region_release(c->row, c->bytes);
}

/* Free protocol: forget the entry first (so a concurrent allocation that gets the same address
 * back is not confused with it), call the driver, then credit the bytes or, if the driver
 * refused, remember the entry again. Unknown keys change nothing. */
static int untrack(uint8_t kind, uint64_t key, gp_alloc_t *e) { return gp_ptrtab_remove(kind, key, e); }

static void untrack_end(int had, const gp_alloc_t *e, CUresult r) {
    if (!had) return;
    if (r == CUDA_SUCCESS)
        gp_region_release(e->row, e->size);
    else
        gp_ptrtab_insert(e->kind, e->key, e->size, e->row);
}

/* ---- allocation hooks ----------------------------------------------------------------------- */

#define NO_DRIVER CUDA_ERROR_NOT_FOUND

GP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    __typeof__(&cuMemAlloc_v2) f = REAL(cuMemAlloc_v2);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr, bytesize);
    charge_t c;
    CUresult r = charge_begin(current_row(), bytesize, &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(dptr, bytesize);
    charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
    return r;
}

GP_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    __typeof__(&cuMemAlloc) f = REAL(cuMemAlloc);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr, bytesize);
    charge_t c;
    CUresult r = charge_begin(current_row(), bytesize, &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(dptr, bytesize);
    charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
    return r;
}

GP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    __typeof__(&cuMemAllocManaged) f = REAL(cuMemAllocManaged);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr, bytesize, flags);
    charge_t c;
    CUresult r = charge_begin(current_row(), bytesize, &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(dptr, bytesize, flags);
    charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
    return r;
}

/* Pitched allocations: the pitch is only known afterwards, so charge width*height first and
 * settle to pitch*height once the driver has answered. */
static CUresult settle_pitch(charge_t *c, uint64_t actual) {
    if (!c->charged || actual == c->bytes) return CUDA_SUCCESS;
    if (actual > c->bytes) {
        if (gp_region_reserve(c->row, actual - c->bytes, cfg.rows[c->row].limit) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        gp_region_release(c->row, c->bytes - actual);
    }
    c->bytes = actual;
    return CUDA_SUCCESS;
}

GP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
GP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr);

GP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes) {
    __typeof__(&cuMemAllocPitch_v2) f = REAL(cuMemAllocPitch_v2);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    charge_t c;
    CUresult r = charge_begin(current_row(), gp_sat_mul(WidthInBytes, Height), &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS && pPitch != NULL &&
        settle_pitch(&c, gp_sat_mul(*pPitch, Height)) != CUDA_SUCCESS) {
        __typeof__(&cuMemFree_v2) ff = REAL(cuMemFree_v2);
        if (ff != NULL) ff(*dptr);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
    return r;
}

GP_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                   unsigned int WidthInBytes, unsigned int Height,
                                   unsigned int ElementSizeBytes) {
    __typeof__(&cuMemAllocPitch) f = REAL(cuMemAllocPitch);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    charge_t c;
    CUresult r = charge_begin(current_row(), gp_sat_mul(WidthInBytes, Height), &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS && pPitch != NULL &&
        settle_pitch(&c, gp_sat_mul(*pPitch, Height)) != CUDA_SUCCESS) {
        __typeof__(&cuMemFree) ff = REAL(cuMemFree);
        if (ff != NULL) ff(*dptr);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
    return r;
}

/* Stream-ordered allocations are charged on the current context's device (the usual case: the
 * stream belongs to the current context). Frees are credited when enqueued. */
#define ASYNC_ALLOC(sym)                                                                     \
    GP_EXPORT CUresult sym(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {           \
        __typeof__(&sym) f = REAL(sym);                                                      \
        if (f == NULL) return NO_DRIVER;                                                     \
        if (!active()) return f(dptr, bytesize, hStream);                                    \
        charge_t c;                                                                          \
        CUresult r = charge_begin(current_row(), bytesize, &c);                              \
        if (r != CUDA_SUCCESS) return r;                                                     \
        r = f(dptr, bytesize, hStream);                                                      \
        charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);                       \
        return r;                                                                            \
    }
GP_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
GP_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(sym)                                                                      \
    GP_EXPORT CUresult sym(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,            \
                           CUstream hStream) {                                               \
        __typeof__(&sym) f = REAL(sym);                                                      \
        if (f == NULL) return NO_DRIVER;                                                     \
        if (!active()) return f(dptr, bytesize, pool, hStream);                              \
        charge_t c;                                                                          \
        CUresult r = charge_begin(current_row(), bytesize, &c);                              \
        if (r != CUDA_SUCCESS) return r;                                                     \
        r = f(dptr, bytesize, pool, hStream);                                                \
        charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);                       \
        return r;                                                                            \
    }
GP_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream);
GP_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream);
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

GP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
    __typeof__(&cuMemCreate) f = REAL(cuMemCreate);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(handle, size, prop, flags);
    /* Only device-resident physical memory counts; host (NUMA) locations do not. */
    int row = ROW_UNLIMITED;
    if (prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        row = row_for_cuda_dev(prop->location.id);
    charge_t c;
    CUresult r = charge_begin(row, size, &c);
    if (r != CUDA_SUCCESS) return r;
    r = f(handle, size, prop, flags);
    charge_end(&c, r, GP_KIND_VMM, r == CUDA_SUCCESS ? *handle : 0);
    return r;
}

/* ---- free hooks ----------------------------------------------------------------------------- */

GP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    __typeof__(&cuMemFree_v2) f = REAL(cuMemFree_v2);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr);
    gp_alloc_t e;
    int had = untrack(GP_KIND_PTR, dptr, &e) == 0;
    CUresult r = f(dptr);
    untrack_end(had, &e, r);
    return r;
}

GP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    __typeof__(&cuMemFree) f = REAL(cuMemFree);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(dptr);
    gp_alloc_t e;
    int had = untrack(GP_KIND_PTR, dptr, &e) == 0;
    CUresult r = f(dptr);
    untrack_end(had, &e, r);
    return r;
}

#define ASYNC_FREE(sym)                                                                      \
    GP_EXPORT CUresult sym(CUdeviceptr dptr, CUstream hStream) {                             \
        __typeof__(&sym) f = REAL(sym);                                                      \
        if (f == NULL) return NO_DRIVER;                                                     \
        if (!active()) return f(dptr, hStream);                                              \
        gp_alloc_t e;                                                                        \
        int had = untrack(GP_KIND_PTR, dptr, &e) == 0;                                       \
        CUresult r = f(dptr, hStream);                                                       \
        untrack_end(had, &e, r);                                                             \
        return r;                                                                            \
    }
GP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
GP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)

GP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    __typeof__(&cuMemRelease) f = REAL(cuMemRelease);
    if (f == NULL) return NO_DRIVER;
    if (!active()) return f(handle);
    gp_alloc_t e;
    int had = untrack(GP_KIND_VMM, handle, &e) == 0;
    CUresult r = f(handle);
    untrack_end(had, &e, r);
    return r;
}

/* ---- reporting hooks ------------------------------------------------------------------------ */

/* The slice as the program should see it: total = limit, free = what is left of the limit (and
 * never more than the card really has free), used = the container's usage. */
static void slice_view(int row, uint64_t real_free, uint64_t real_total, uint64_t *free_out,
                       uint64_t *total_out, uint64_t *used_out) {
    if (row == ROW_DENY) {
        *free_out = *total_out = *used_out = 0;
        return;
    }
    pthread_once(&region_once, do_region_init);
    uint64_t limit = cfg.rows[row].limit;
    uint64_t used = gp_region_used(row);
    uint64_t total = limit < real_total || real_total == 0 ? limit : real_total;
    uint64_t left = gp_sat_sub(total, used);
    *total_out = total;
    *free_out = left < real_free ? left : real_free;
    *used_out = used < total ? used : total;
}

GP_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    __typeof__(&cuMemGetInfo_v2) f = REAL(cuMemGetInfo_v2);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || !active()) return r;
    int row = current_row();
    if (row == ROW_UNLIMITED) return r;
    uint64_t fr, tot, used;
    slice_view(row, free_bytes ? *free_bytes : UINT64_MAX, total_bytes ? *total_bytes : 0, &fr,
               &tot, &used);
    if (free_bytes != NULL) *free_bytes = fr;
    if (total_bytes != NULL) *total_bytes = tot;
    return r;
}

GP_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
    __typeof__(&cuMemGetInfo) f = REAL(cuMemGetInfo);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || !active()) return r;
    int row = current_row();
    if (row == ROW_UNLIMITED) return r;
    uint64_t fr, tot, used;
    slice_view(row, free_bytes ? *free_bytes : UINT64_MAX, total_bytes ? *total_bytes : 0, &fr,
               &tot, &used);
    if (free_bytes != NULL) *free_bytes = fr > UINT_MAX ? UINT_MAX : (unsigned)fr;
    if (total_bytes != NULL) *total_bytes = tot > UINT_MAX ? UINT_MAX : (unsigned)tot;
    return r;
}

GP_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    __typeof__(&cuDeviceTotalMem_v2) f = REAL(cuDeviceTotalMem_v2);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(bytes, dev);
    if (r != CUDA_SUCCESS || !active() || bytes == NULL) return r;
    int row = row_for_cuda_dev(dev);
    if (row == ROW_UNLIMITED) return r;
    uint64_t limit = row == ROW_DENY ? 0 : cfg.rows[row].limit;
    if (limit < *bytes) *bytes = limit;
    return r;
}

GP_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    __typeof__(&cuDeviceTotalMem) f = REAL(cuDeviceTotalMem);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(bytes, dev);
    if (r != CUDA_SUCCESS || !active() || bytes == NULL) return r;
    int row = row_for_cuda_dev(dev);
    if (row == ROW_UNLIMITED) return r;
    uint64_t limit = row == ROW_DENY ? 0 : cfg.rows[row].limit;
    if (limit < *bytes) *bytes = (unsigned)limit;
    return r;
}

#define NVML_FUNCTION_NOT_FOUND 13

GP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    __typeof__(&nvmlDeviceGetMemoryInfo) f = REAL(nvmlDeviceGetMemoryInfo);
    if (f == NULL) return NVML_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(device, memory);
    if (r != NVML_SUCCESS || !active() || memory == NULL) return r;
    int row = row_for_nvml(device);
    if (row == ROW_UNLIMITED) return r;
    uint64_t fr, tot, used;
    slice_view(row, memory->free, memory->total, &fr, &tot, &used);
    memory->total = tot;
    memory->free = fr;
    memory->used = used;
    return r;
}

GP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    __typeof__(&nvmlDeviceGetMemoryInfo_v2) f = REAL(nvmlDeviceGetMemoryInfo_v2);
    if (f == NULL) return NVML_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(device, memory);
    if (r != NVML_SUCCESS || !active() || memory == NULL) return r;
    int row = row_for_nvml(device);
    if (row == ROW_UNLIMITED) return r;
    uint64_t fr, tot, used;
    slice_view(row, memory->free, memory->total, &fr, &tot, &used);
    memory->total = tot;
    memory->reserved = 0; /* the slice has no firmware reservation of its own */
    memory->free = fr;
    memory->used = used;
    return r;
}

/* ---- cuGetProcAddress ----------------------------------------------------------------------- */

static int is_our_hook(const void *p) {
    const gp_hook_t *t = hook_table();
    for (int i = 0; i < H_COUNT; i++)
        if (t[i].hook != NULL && t[i].hook == p) return 1;
    return 0;
}

/* The driver answered `symbol` with *pfn. If that is one of the functions we cap, hand back our
 * hook for the same variant: first by identity with the exported variants, then (a driver may
 * return internal addresses) by the rule cuGetProcAddress itself follows: the newest variant not
 * newer than cudaVersion, per-thread-stream variants when asked for. */
static void substitute(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    if (symbol == NULL || pfn == NULL || *pfn == NULL || is_our_hook(*pfn)) return;
    const gp_hook_t *t = hook_table();
    /* cuGetProcAddress takes base names ("cuMemAlloc"); should a driver also answer a full
     * versioned name ("cuMemAlloc_v2"), that name says exactly which hook applies. */
    for (int i = 0; i < H_COUNT; i++) {
        if (t[i].hook != NULL && t[i].lib == LIB_CUDA && strcmp(t[i].name, symbol) == 0 &&
            (t[i].base == NULL || strcmp(t[i].base, symbol) != 0)) {
            void *expected = NULL;
            __atomic_compare_exchange_n(&g_real[i], &expected, *pfn, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE);
            *pfn = t[i].hook;
            return;
        }
    }
    int any = 0;
    for (int i = 0; i < H_COUNT; i++) {
        if (t[i].base == NULL || t[i].hook == NULL || strcmp(t[i].base, symbol) != 0) continue;
        any = 1;
        if (real_fn(i) == *pfn) {
            *pfn = t[i].hook;
            return;
        }
    }
    if (!any) return;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int i = 0; i < H_COUNT; i++) {
            if (t[i].base == NULL || t[i].hook == NULL || strcmp(t[i].base, symbol) != 0) continue;
            if (pass == 0 && t[i].ptsz != per_thread) continue;
            if (t[i].min_version > cudaVersion) continue;
            if (best < 0 || t[i].min_version > t[best].min_version) best = i;
        }
    }
    if (best < 0) return;
    void *expected = NULL;
    __atomic_compare_exchange_n(&g_real[best], &expected, *pfn, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    *pfn = t[best].hook;
}

GP_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags) {
    __typeof__(&cuGetProcAddress) f = REAL(cuGetProcAddress);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && active()) substitute(symbol, pfn, cudaVersion, flags);
    return r;
}

GP_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
    __typeof__(&cuGetProcAddress_v2) f = REAL(cuGetProcAddress_v2);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && active()) substitute(symbol, pfn, cudaVersion, flags);
    return r;
}

GP_EXPORT CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus) {
    __typeof__(&cuGetProcAddress_v2_ptsz) f = REAL(cuGetProcAddress_v2_ptsz);
    if (f == NULL) return NO_DRIVER;
    CUresult r = f(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && active()) substitute(symbol, pfn, cudaVersion, flags);
    return r;
}

/* ---- dlsym ---------------------------------------------------------------------------------- */

static int find_hook(const char *name) {
    const gp_hook_t *t = hook_table();
    for (int i = 0; i < H_COUNT; i++)
        if (t[i].hook != NULL && strcmp(t[i].name, name) == 0) return i;
    return -1;
}

/* Whether the program has the real driver library loaded (we never load it for a lookup). */
static int driver_loaded(int lib) {
    const char *env = getenv(lib == LIB_CUDA ? "GPUPOOL_CUDA_LIBRARY" : "GPUPOOL_NVML_LIBRARY");
    const char *name = env != NULL && env[0] != '\0' ? env
                       : lib == LIB_CUDA              ? "libcuda.so.1"
                                                      : "libnvidia-ml.so.1";
    void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    dlclose(h); /* RTLD_NOLOAD still took a reference */
    return 1;
}

__attribute__((noinline)) static void *dlsym_hooked(void *handle, const char *name, int id) {
    void *p = real_dlsym(handle, name);
    if (p == NULL) return NULL;
    if (is_our_hook(p)) {
        /* A global lookup (RTLD_DEFAULT / RTLD_NEXT) found our own export. Without us it would
         * have found the driver's only if the driver is loaded: answer as it would have. */
        return driver_loaded(hook_table()[id].lib) ? p : NULL;
    }
    if (!active()) return p;
    return hook_table()[id].hook;
}

/* Pinned to -O2 with sibling-call optimisation whatever CFLAGS say: see the tail call below. */
__attribute__((optimize("O2", "optimize-sibling-calls"))) void *dlsym(void *handle,
                                                                      const char *name) {
    if (__builtin_expect(real_dlsym == NULL, 0)) resolve_real_dlsym();
    if (name != NULL && (name[0] == 'c' || name[0] == 'n')) {
        int id = find_hook(name);
        if (id >= 0) return dlsym_hooked(handle, name, id);
    }
    /* glibc's dlsym works out its caller from its return address (RTLD_NEXT, and the local scope
     * of RTLD_DEFAULT). This must stay a tail call so that caller is the program's, not ours;
     * tests/native checks RTLD_NEXT through the limiter. */
    return real_dlsym(handle, name);
}

/* ---- test support --------------------------------------------------------------------------- */

/* Takes the shared accounting lock and returns without releasing it, so a test can SIGKILL a
 * holder and show that the others carry on. Not for production use. */
GP_EXPORT int gpupool_test_hold_lock(void) {
    if (!active() || cfg.mode != GP_MODE_ACTIVE) return -1;
    pthread_once(&region_once, do_region_init);
    return gp_region_test_hold_lock();
}

/* ---- the table, now that every hook is declared --------------------------------------------- */

#define HOOK_PTR_1(sym) ((void *)&sym)
#define HOOK_PTR_0(sym) NULL
#define X_ENTRY(sym, base, ver, ptsz, lib, hooked) {#sym, base, ver, ptsz, lib, HOOK_PTR_##hooked(sym)},
static const gp_hook_t g_hooks[H_COUNT] = {GP_HOOKS(X_ENTRY)};
static const gp_hook_t *hook_table(void) { return g_hooks; }

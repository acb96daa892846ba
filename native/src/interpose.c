/*
 * interpose.c - the two ways a program looks driver functions up at run time, answered with our
 * hooks:
 *   - dlopen + dlsym (the CUDA runtime, PyTorch, pynvml): our dlsym returns our hook for a hooked
 *     name whenever the handle really defines it;
 *   - cuGetProcAddress (how the CUDA 12 runtime fetches every driver function): we ask the
 *     driver, then swap its answer for our hook of the same variant.
 * (The third way, linking libcuda directly, needs nothing here: our exports of the same names
 * win symbol resolution because libgpupool is loaded first.)
 */
#define _GNU_SOURCE
/* glibc declares dlsym with a nonnull attribute; we define dlsym and must test name for NULL. */
#define dlsym gp_glibc_dlsym_declaration
#include <dlfcn.h>
#undef dlsym

#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "hooks.h"
#include "libc_dlsym.h"
#include "slice.h"

GP_EXPORT void *dlsym(void *handle, const char *name);

/* ---- cuGetProcAddress ----------------------------------------------------------------------- */

/* The driver answered `symbol` with *pfn. If that is one of the functions we cap, hand back our
 * hook for the same variant: first by identity with the exported variants, then (a driver may
 * return internal addresses) by the rule cuGetProcAddress itself follows: the newest variant not
 * newer than cudaVersion, per-thread-stream variants when asked for. */
static void substitute(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    if (symbol == NULL || pfn == NULL || *pfn == NULL || gp_fn_is_hook(*pfn)) return;
    const gp_fn_t *t = gp_fn_table();
    /* cuGetProcAddress takes base names ("cuMemAlloc"); should a driver also answer a full
     * versioned name ("cuMemAlloc_v2"), that name says exactly which hook applies. */
    for (int i = 0; i < GP_FN_COUNT; i++) {
        if (t[i].hook != NULL && t[i].lib == GP_LIB_CUDA && strcmp(t[i].name, symbol) == 0 &&
            (t[i].base == NULL || strcmp(t[i].base, symbol) != 0)) {
            gp_real_learn(i, *pfn);
            *pfn = t[i].hook;
            return;
        }
    }
    int any = 0;
    for (int i = 0; i < GP_FN_COUNT; i++) {
        if (t[i].base == NULL || t[i].hook == NULL || strcmp(t[i].base, symbol) != 0) continue;
        any = 1;
        if (gp_real(i) == *pfn) {
            *pfn = t[i].hook;
            return;
        }
    }
    if (!any) return;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int i = 0; i < GP_FN_COUNT; i++) {
            if (t[i].base == NULL || t[i].hook == NULL || strcmp(t[i].base, symbol) != 0) continue;
            if (pass == 0 && t[i].ptsz != per_thread) continue;
            if (t[i].min_version > cudaVersion) continue;
            if (best < 0 || t[i].min_version > t[best].min_version) best = i;
        }
    }
    if (best < 0) return;
    gp_real_learn(best, *pfn);
    *pfn = t[best].hook;
}

/* The three variants differ only in the status word v2 adds; each calls the driver's own
 * variant (a pre-12.0 driver has no _v2), then substitutes the same way. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    __typeof__(&cuGetProcAddress) f = REAL(cuGetProcAddress);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && gp_active()) substitute(symbol, pfn, cudaVersion, flags);
    return r;
}

#define PROC_ADDRESS_V2(sym)                                                                   \
    CUresult sym(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,            \
                 CUdriverProcAddressQueryResult *symbolStatus) {                               \
        __typeof__(&sym) f = REAL(sym);                                                        \
        if (f == NULL) return GP_NO_DRIVER;                                                    \
        CUresult r = f(symbol, pfn, cudaVersion, flags, symbolStatus);                         \
        if (r == CUDA_SUCCESS && gp_active()) substitute(symbol, pfn, cudaVersion, flags);     \
        return r;                                                                              \
    }
PROC_ADDRESS_V2(cuGetProcAddress_v2)
PROC_ADDRESS_V2(cuGetProcAddress_v2_ptsz)

/* ---- dlsym ---------------------------------------------------------------------------------- */

/* Whether the program has the real driver library loaded (we never load it for a lookup). */
static int driver_loaded(int lib) {
    const char *env = getenv(lib == GP_LIB_CUDA ? "GPUPOOL_CUDA_LIBRARY" : "GPUPOOL_NVML_LIBRARY");
    const char *name = env != NULL && env[0] != '\0' ? env
                       : lib == GP_LIB_CUDA           ? "libcuda.so.1"
                                                      : "libnvidia-ml.so.1";
    void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    dlclose(h); /* RTLD_NOLOAD still took a reference */
    return 1;
}

__attribute__((noinline)) static void *dlsym_hooked(gp_dlsym_fn real, void *handle,
                                                    const char *name, int id) {
    void *p = real(handle, name);
    if (p == NULL) return NULL;
    if (gp_fn_is_hook(p)) {
        /* A global lookup (RTLD_DEFAULT / RTLD_NEXT) found our own export. Without us it would
         * have found the driver's only if the driver is loaded: answer as it would have. */
        return driver_loaded(gp_fn_table()[id].lib) ? p : NULL;
    }
    if (!gp_active()) return p;
    return gp_fn_table()[id].hook;
}

/* Pinned to -O2 with sibling-call optimisation whatever CFLAGS say: see the tail call below. */
__attribute__((optimize("O2", "optimize-sibling-calls"))) void *dlsym(void *handle,
                                                                      const char *name) {
    gp_dlsym_fn real = gp_libc_dlsym();
    if (__builtin_expect(real == NULL, 0)) return NULL;
    if (name != NULL && (name[0] == 'c' || name[0] == 'n')) {
        int id = gp_fn_find_hook(name);
        if (id >= 0) return dlsym_hooked(real, handle, name, id);
    }
    /* glibc's dlsym works out its caller from its return address (RTLD_NEXT, and the local scope
     * of RTLD_DEFAULT). This must stay a tail call so that caller is the program's, not ours;
     * tests/native checks RTLD_NEXT through the limiter. */
    return real(handle, name);
}

/*
 * driver.c - the table of driver and NVML functions, and the real ones behind our hooks. The
 * driver library is opened on the first call that needs it: the copy the program already loaded
 * if there is one (matched by soname, so a forward-compatibility libcuda from another directory
 * is found too), else by name, else GPUPOOL_CUDA_LIBRARY / GPUPOOL_NVML_LIBRARY if set.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "libc_dlsym.h"
#include "log.h"

#define HOOK_PTR_1(sym) ((void *)&sym)
#define HOOK_PTR_0(sym) NULL
#define FN_ENTRY(sym, base, ver, ptsz, lib, hooked) \
    {#sym, base, ver, ptsz, lib, HOOK_PTR_##hooked(sym)},
static const gp_fn_t table[GP_FN_COUNT] = {GP_DRIVER_FUNCTIONS(FN_ENTRY)};

static void *real[GP_FN_COUNT];
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

const gp_fn_t *gp_fn_table(void) { return table; }

int gp_fn_find_hook(const char *name) {
    for (int i = 0; i < GP_FN_COUNT; i++)
        if (table[i].hook != NULL && strcmp(table[i].name, name) == 0) return i;
    return -1;
}

int gp_fn_is_hook(const void *p) {
    for (int i = 0; i < GP_FN_COUNT; i++)
        if (table[i].hook != NULL && table[i].hook == p) return 1;
    return 0;
}

static void *open_driver(const char *env, const char *soname, const char *fallback) {
    const char *path = getenv(env);
    if (path != NULL && path[0] != '\0') {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) gp_log(GP_ERROR, "%s=%s: %s", env, path, dlerror());
        return h;
    }
    void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) h = dlopen(fallback, RTLD_NOW | RTLD_LOCAL);
    return h;
}

static void resolve_lib(int lib, void *h) {
    gp_dlsym_fn sym = gp_libc_dlsym();
    if (h == NULL || sym == NULL) return;
    for (int i = 0; i < GP_FN_COUNT; i++) {
        if (table[i].lib != lib) continue;
        void *p = sym(h, table[i].name);
        if (p != NULL && p != table[i].hook) __atomic_store_n(&real[i], p, __ATOMIC_RELEASE);
    }
}

static void open_cuda(void) {
    resolve_lib(GP_LIB_CUDA, open_driver("GPUPOOL_CUDA_LIBRARY", "libcuda.so.1", "libcuda.so"));
}

static void open_nvml(void) {
    resolve_lib(GP_LIB_NVML,
                open_driver("GPUPOOL_NVML_LIBRARY", "libnvidia-ml.so.1", "libnvidia-ml.so"));
}

void *gp_real(int id) {
    void *p = __atomic_load_n(&real[id], __ATOMIC_ACQUIRE);
    if (p != NULL) return p;
    if (table[id].lib == GP_LIB_CUDA)
        pthread_once(&cuda_once, open_cuda);
    else
        pthread_once(&nvml_once, open_nvml);
    p = __atomic_load_n(&real[id], __ATOMIC_ACQUIRE);
    if (p == NULL) gp_log(GP_DEBUG, "driver has no %s", table[id].name);
    return p;
}

void gp_real_learn(int id, void *p) {
    void *expected = NULL;
    __atomic_compare_exchange_n(&real[id], &expected, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

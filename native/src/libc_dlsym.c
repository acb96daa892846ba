/* libc_dlsym.c - finds glibc's dlsym under its symbol version. dlvsym is not interposed (neither
 * by us nor, in practice, by anyone), so it reaches glibc's own definition past our export. */
#define _GNU_SOURCE
#include "libc_dlsym.h"

#include <dlfcn.h>

#include "log.h"

static gp_dlsym_fn libc_dlsym;

gp_dlsym_fn gp_libc_dlsym(void) {
    gp_dlsym_fn f = __atomic_load_n(&libc_dlsym, __ATOMIC_ACQUIRE);
    if (__builtin_expect(f != NULL, 1)) return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (p != NULL) {
            f = (gp_dlsym_fn)p;
            __atomic_store_n(&libc_dlsym, f, __ATOMIC_RELEASE);
            return f;
        }
    }
    gp_log(GP_ERROR, "cannot find the C library's dlsym; dynamic symbol lookups will fail");
    return NULL;
}

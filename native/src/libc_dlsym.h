/* libc_dlsym.h - the C library's own dlsym. libgpupool exports a dlsym of its own (interpose.c),
 * so every lookup libgpupool makes for itself must go through this one instead. */
#ifndef GP_LIBC_DLSYM_H
#define GP_LIBC_DLSYM_H

#include "gp_base.h"

typedef void *(*gp_dlsym_fn)(void *, const char *);

/* glibc's dlsym, or NULL (after an error message) if it cannot be found. Cheap after the first
 * call. */
GP_HIDDEN gp_dlsym_fn gp_libc_dlsym(void);

#endif

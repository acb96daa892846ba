/*
 * log.c - libgpupool's messages. stderr only, written with one write(2) per line so that lines of
 * concurrent threads and processes do not interleave. The level comes from GPUPOOL_LOG_LEVEL once:
 * 0 silent, 1 errors and warnings (default), 2 info, 3 debug.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define LEVEL_UNREAD (-1)
#define DEFAULT_LEVEL GP_WARN

static int log_level = LEVEL_UNREAD;

static int level_now(void) {
    int level = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (level != LEVEL_UNREAD) return level;
    const char *v = getenv("GPUPOOL_LOG_LEVEL");
    level = v != NULL && v[0] != '\0' ? atoi(v) : DEFAULT_LEVEL;
    if (level < 0) level = 0;
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED); /* racing readers agree anyway */
    return level;
}

void gp_log(int level, const char *fmt, ...) {
    if (level > level_now()) return;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "gpupool[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf) n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2; /* truncated: keep the newline */
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;
}

int gp_log_first_time(int *flag) { return __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0; }

/* log.h - libgpupool's messages: one line each on stderr, "gpupool[pid]: ...", filtered by
 * GPUPOOL_LOG_LEVEL. Used by every other unit; depends on none of them. */
#ifndef GP_LOG_H
#define GP_LOG_H

#include "gp_base.h"

#define GP_ERROR 1
#define GP_WARN 1
#define GP_INFO 2
#define GP_DEBUG 3

GP_HIDDEN void gp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 the first time it is called with this flag, 0 ever after (thread-safe): for a message that
 * would otherwise repeat on every call of a hot entry point. */
GP_HIDDEN int gp_log_first_time(int *flag);

#endif

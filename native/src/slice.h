/* slice.h - this process's slice: the limits it runs under, read once, and the container-wide
 * accounting, mapped once (slice.c). */
#ifndef GP_SLICE_H
#define GP_SLICE_H

#include "config.h"
#include "gp_base.h"

/* The limits, read from the environment on the first call. Never NULL. */
GP_HIDDEN const gp_config_t *gp_limits(void);
/* Whether there is any configuration at all (an inert limiter passes everything through). */
GP_HIDDEN int gp_active(void);
/* Maps the shared accounting region on the first call; gp_region_* may be used after it. */
GP_HIDDEN void gp_accounting_ready(void);

#endif

/*
 * slice.c - the one-time set-up of a process: read the limits (config.c), map the container's
 * accounting (region.c) when the first charge or report needs it, keep both right across fork,
 * and leave the accounting cleanly at exit.
 */
#include "slice.h"

#include <pthread.h>
#include <stdio.h>

#include "log.h"
#include "ptrtab.h"
#include "region.h"

static gp_config_t cfg;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;
static pthread_once_t accounting_once = PTHREAD_ONCE_INIT;
/* Set (release) at the end of each one-time step: every allocation asks for both, and a load
 * is cheaper than a call into pthread_once. */
static int limits_read, accounting_mapped;

static void atfork_child(void) {
    gp_ptrtab_fork_child();
    gp_region_after_fork_child();
}

static void read_limits(void) {
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
    __atomic_store_n(&limits_read, 1, __ATOMIC_RELEASE);
}

const gp_config_t *gp_limits(void) {
    if (__builtin_expect(!__atomic_load_n(&limits_read, __ATOMIC_ACQUIRE), 0))
        pthread_once(&limits_once, read_limits);
    return &cfg;
}

int gp_active(void) { return gp_limits()->mode != GP_MODE_INERT; }

static void map_accounting(void) {
    const gp_config_t *c = gp_limits();
    uint64_t limits[GP_MAX_ROWS];
    for (int i = 0; i < c->nrows; i++) limits[i] = c->rows[i].limit;
    gp_region_init(limits, c->nrows);
    __atomic_store_n(&accounting_mapped, 1, __ATOMIC_RELEASE);
}

void gp_accounting_ready(void) {
    if (__builtin_expect(!__atomic_load_n(&accounting_mapped, __ATOMIC_ACQUIRE), 0))
        pthread_once(&accounting_once, map_accounting);
}

__attribute__((destructor)) static void leave_accounting(void) { gp_region_process_exit(); }

/* Takes the shared accounting lock and returns without releasing it, so a test can SIGKILL a
 * holder and show that the others carry on. Not for production use. */
GP_EXPORT int gpupool_test_hold_lock(void);
int gpupool_test_hold_lock(void) {
    if (gp_limits()->mode != GP_MODE_ACTIVE) return -1;
    gp_accounting_ready();
    return gp_region_test_hold_lock();
}

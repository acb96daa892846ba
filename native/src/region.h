/* region.h - device memory accounting shared by every process of a container (region.c). Rows are
 * the lines of the limits; the region knows nothing else about the configuration. */
#ifndef GP_REGION_H
#define GP_REGION_H

#include "gp_base.h"

/* Maps the shared accounting file (or, failing that, private memory). limits[0..n) are kept in
 * the file for information only; every check takes its limit as an argument. */
GP_HIDDEN void gp_region_init(const uint64_t *limits, int n);
/* Reserves bytes on row for this process. Returns 0 if within the limit, -1 if it would exceed. */
GP_HIDDEN int gp_region_reserve(int row, uint64_t bytes, uint64_t limit);
/* Returns bytes to row (saturating: never below zero). */
GP_HIDDEN void gp_region_release(int row, uint64_t bytes);
/* Bytes in use on row by live processes of the container (dead ones are reaped first). */
GP_HIDDEN uint64_t gp_region_used(int row);
/* Drops this process's entry (at exit) and forgets it after fork. */
GP_HIDDEN void gp_region_process_exit(void);
GP_HIDDEN void gp_region_after_fork_child(void);
/* Takes the lock and keeps it (tests: a SIGKILLed holder must not wedge the others). */
GP_HIDDEN int gp_region_test_hold_lock(void);

#endif

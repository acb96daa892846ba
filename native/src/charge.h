/* charge.h - the protocol every capped allocation and every free follows (charge.c). */
#ifndef GP_CHARGE_H
#define GP_CHARGE_H

#include "devices.h"
#include "gp_base.h"
#include "gp_cuda_types.h"
#include "ptrtab.h"

typedef struct {
    int row;
    uint64_t bytes;
    int charged; /* 0: nothing was reserved (unlimited), so there is nothing to settle */
} gp_charge_t;

/* Before the driver is called: reserve `bytes` on the target's row, or answer why not
 * (CUDA_ERROR_OUT_OF_MEMORY past the limit, the target's refusal for a denied device). */
GP_HIDDEN CUresult gp_charge_begin(gp_target_t target, uint64_t bytes, gp_charge_t *c);
/* When the real size is known only afterwards (pitched allocations): move the reservation to
 * `actual` bytes; CUDA_ERROR_OUT_OF_MEMORY if the difference does not fit. */
GP_HIDDEN CUresult gp_charge_settle(gp_charge_t *c, uint64_t actual);
/* After the driver answered r: remember what it gave (key) or give the reservation back. */
GP_HIDDEN void gp_charge_end(const gp_charge_t *c, CUresult r, uint8_t kind, uint64_t key);

/* Before a free is passed to the driver: forget the allocation (so that a concurrent allocation
 * that gets the same address back is not confused with it). 1 if it was one of ours. */
GP_HIDDEN int gp_uncharge_begin(uint8_t kind, uint64_t key, gp_alloc_t *e);
/* After the driver answered r: credit the bytes, or, if it refused, remember the entry again. */
GP_HIDDEN void gp_uncharge_end(int had, const gp_alloc_t *e, CUresult r);

#endif

/*
 * charge.c - reserve before the driver is called, settle after it answered. Reserving first
 * (under the shared lock, in region.c) is what keeps two processes from both squeezing past the
 * limit; a driver failure gives the reservation back. Frees forget the allocation first and
 * credit it only once the driver has freed it. A key we never charged changes nothing, so a stray
 * or double free cannot lower the usage.
 */
#include "charge.h"

#include "config.h"
#include "devices.h"
#include "log.h"
#include "ptrtab.h"
#include "region.h"
#include "slice.h"

CUresult gp_charge_begin(gp_target_t target, uint64_t bytes, gp_charge_t *c) {
    c->row = target.row;
    c->bytes = bytes;
    c->charged = 0;
    if (target.row == GP_ROW_UNLIMITED) return CUDA_SUCCESS;
    if (target.row == GP_ROW_DENY) return target.refusal;
    uint64_t limit = gp_limits()->rows[target.row].limit;
    gp_accounting_ready();
    if (gp_region_reserve(target.row, bytes, limit) != 0) {
        gp_log(GP_INFO, "refusing %llu bytes: over the %llu-byte limit of device row %d",
               (unsigned long long)bytes, (unsigned long long)limit, target.row);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->charged = 1;
    return CUDA_SUCCESS;
}

CUresult gp_charge_settle(gp_charge_t *c, uint64_t actual) {
    if (!c->charged || actual == c->bytes) return CUDA_SUCCESS;
    if (actual > c->bytes) {
        uint64_t limit = gp_limits()->rows[c->row].limit;
        if (gp_region_reserve(c->row, actual - c->bytes, limit) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        gp_region_release(c->row, c->bytes - actual);
    }
    c->bytes = actual;
    return CUDA_SUCCESS;
}

void gp_charge_end(const gp_charge_t *c, CUresult r, uint8_t kind, uint64_t key) {
    if (!c->charged) return;
    if (r == CUDA_SUCCESS) {
        gp_alloc_t a = {.key = key, .size = c->bytes, .row = c->row, .refs = 1, .kind = kind};
        gp_ptrtab_insert(&a);
    } else
        gp_region_release(c->row, c->bytes);
}

int gp_uncharge_begin(uint8_t kind, uint64_t key, gp_alloc_t *e) {
    return gp_ptrtab_remove(kind, key, e) == 0;
}

void gp_uncharge_end(int had, const gp_alloc_t *e, CUresult r) {
    if (!had) return;
    if (r == CUDA_SUCCESS)
        gp_region_release(e->row, e->size);
    else
        gp_ptrtab_insert(e);
}

/*
 * hooks_info.c - what a program is told about device memory: the slice, as if it were the card.
 *
 * Each pair of twins has one implementation over 64-bit values (slice_view, slice_total) and a
 * thin wrapper per entry point that calls the driver's own variant and converts. The wrappers
 * differ for a reason each time:
 *   - cuMemGetInfo / cuDeviceTotalMem (v1, CUDA < 3.2 ABI) write 32-bit sizes: widened on the way
 *     in, clamped to 4 GiB - 1 on the way out (a v1 caller cannot be told more);
 *   - nvmlDeviceGetMemoryInfo and _v2 fill different structs (v2 has a version word first and a
 *     `reserved` field): the same three numbers go into each layout.
 */
#include "hooks.h"

#include <limits.h>

#include "config.h"
#include "devices.h"
#include "driver.h"
#include "region.h"
#include "slice.h"

/* The slice as the program should see it: total = limit (never more than the card), free = what
 * is left of the limit (never more than the card really has free), used = the container's
 * usage. A refused device shows nothing at all. Returns 0 when the numbers are the driver's to
 * keep (no configuration). */
static int slice_view(gp_target_t t, uint64_t real_free, uint64_t real_total, uint64_t *free_out,
                      uint64_t *total_out, uint64_t *used_out) {
    if (t.row == GP_ROW_UNLIMITED) return 0;
    if (t.row == GP_ROW_DENY) {
        *free_out = *total_out = *used_out = 0;
        return 1;
    }
    gp_accounting_ready();
    uint64_t limit = gp_limits()->rows[t.row].limit;
    uint64_t used = gp_region_used(t.row);
    uint64_t total = limit < real_total || real_total == 0 ? limit : real_total;
    uint64_t left = gp_sat_sub(total, used);
    *total_out = total;
    *free_out = left < real_free ? left : real_free;
    *used_out = used < total ? used : total;
    return 1;
}

/* The device's total memory as the program should see it: the limit, or nothing if refused. */
static uint64_t slice_total(gp_target_t t, uint64_t real_total) {
    if (t.row == GP_ROW_UNLIMITED) return real_total;
    uint64_t limit = t.row == GP_ROW_DENY ? 0 : gp_limits()->rows[t.row].limit;
    return limit < real_total ? limit : real_total;
}

static unsigned int clamp32(uint64_t v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

/* ---- cuMemGetInfo --------------------------------------------------------------------------- */

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    __typeof__(&cuMemGetInfo_v2) f = REAL(cuMemGetInfo_v2);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || !gp_active()) return r;
    uint64_t fr, tot, used;
    if (slice_view(gp_target_current(), free_bytes ? *free_bytes : UINT64_MAX,
                   total_bytes ? *total_bytes : 0, &fr, &tot, &used)) {
        if (free_bytes != NULL) *free_bytes = fr;
        if (total_bytes != NULL) *total_bytes = tot;
    }
    return r;
}

CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
    __typeof__(&cuMemGetInfo) f = REAL(cuMemGetInfo);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || !gp_active()) return r;
    uint64_t fr, tot, used;
    if (slice_view(gp_target_current(), free_bytes ? *free_bytes : UINT64_MAX,
                   total_bytes ? *total_bytes : 0, &fr, &tot, &used)) {
        if (free_bytes != NULL) *free_bytes = clamp32(fr);
        if (total_bytes != NULL) *total_bytes = clamp32(tot);
    }
    return r;
}

/* ---- cuDeviceTotalMem ----------------------------------------------------------------------- */

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    __typeof__(&cuDeviceTotalMem_v2) f = REAL(cuDeviceTotalMem_v2);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(bytes, dev);
    if (r == CUDA_SUCCESS && bytes != NULL && gp_active())
        *bytes = slice_total(gp_target_cuda(dev), *bytes);
    return r;
}

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    __typeof__(&cuDeviceTotalMem) f = REAL(cuDeviceTotalMem);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(bytes, dev);
    if (r == CUDA_SUCCESS && bytes != NULL && gp_active())
        *bytes = clamp32(slice_total(gp_target_cuda(dev), *bytes));
    return r;
}

/* ---- nvmlDeviceGetMemoryInfo ---------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    __typeof__(&nvmlDeviceGetMemoryInfo) f = REAL(nvmlDeviceGetMemoryInfo);
    if (f == NULL) return GP_NVML_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(device, memory);
    if (r != NVML_SUCCESS || memory == NULL || !gp_active()) return r;
    uint64_t fr, tot, used;
    if (slice_view(gp_target_nvml(device), memory->free, memory->total, &fr, &tot, &used)) {
        memory->total = tot;
        memory->free = fr;
        memory->used = used;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    __typeof__(&nvmlDeviceGetMemoryInfo_v2) f = REAL(nvmlDeviceGetMemoryInfo_v2);
    if (f == NULL) return GP_NVML_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(device, memory);
    if (r != NVML_SUCCESS || memory == NULL || !gp_active()) return r;
    uint64_t fr, tot, used;
    if (slice_view(gp_target_nvml(device), memory->free, memory->total, &fr, &tot, &used)) {
        memory->total = tot;
        memory->reserved = 0; /* the slice has no firmware reservation of its own */
        memory->free = fr;
        memory->used = used;
    }
    return r;
}

/*
 * devices.c - which line of the limits a device is. A line names a device by UUID (matched
 * against cuDeviceGetUuid / nvmlDeviceGetUUID) or by index (the CUDA ordinal in CUDA calls, the
 * NVML index in NVML calls). A device that no line names is refused (fail closed). Answers are
 * cached per CUDA ordinal and per NVML handle: a device does not change its UUID.
 */
#include "devices.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "driver.h"
#include "log.h"
#include "slice.h"

#define MAX_ORDINALS 64
#define MAX_NVML_HANDLES 64

static const gp_target_t PASS = {GP_ROW_UNLIMITED, CUDA_SUCCESS};
static const gp_target_t DENY = {GP_ROW_DENY, CUDA_ERROR_OUT_OF_MEMORY};

static gp_target_t row_target(int row) {
    return row >= 0 ? (gp_target_t){row, CUDA_SUCCESS} : DENY;
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static int cuda_rows[MAX_ORDINALS]; /* 0: not looked up yet; row + 1; or -1 for "refused" */
static struct {
    nvmlDevice_t handle;
    int row;
} nvml_rows[MAX_NVML_HANDLES];
static int n_nvml_rows;

static int uuid_tail_equal(const char *a, const char *b) {
    /* "GPU-xxxxxxxx-..." vs "MIG-xxxxxxxx-...": compare the hexadecimal part, case-insensitively */
    const char *ta = strchr(a, '-'), *tb = strchr(b, '-');
    if (ta == NULL || tb == NULL) return 0;
    return strcasecmp(ta + 1, tb + 1) == 0;
}

static int any_uuid_rows(const gp_config_t *cfg) {
    for (int i = 0; i < cfg->nrows; i++)
        if (cfg->rows[i].by_uuid) return 1;
    return 0;
}

static int match_rows(const gp_config_t *cfg, const char *uuid, unsigned index) {
    for (int i = 0; i < cfg->nrows; i++) {
        const gp_row_t *r = &cfg->rows[i];
        if (r->by_uuid ? (uuid != NULL && uuid_tail_equal(r->uuid, uuid)) : r->index == index)
            return i;
    }
    return GP_ROW_DENY;
}

static void format_uuid(const CUuuid *u, char *out, size_t n) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static const char *cuda_uuid(CUdevice dev, char *buf, size_t n) {
    __typeof__(&cuDeviceGetUuid_v2) f2 = REAL(cuDeviceGetUuid_v2);
    __typeof__(&cuDeviceGetUuid) f1 = REAL(cuDeviceGetUuid);
    CUuuid u;
    CUresult r = f2 != NULL ? f2(&u, dev) : f1 != NULL ? f1(&u, dev) : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) return NULL;
    format_uuid(&u, buf, n);
    return buf;
}

gp_target_t gp_target_cuda(CUdevice dev) {
    const gp_config_t *cfg = gp_limits();
    if (cfg->mode == GP_MODE_INERT) return PASS;
    if (cfg->mode == GP_MODE_BROKEN || dev < 0 || dev >= MAX_ORDINALS) return DENY;
    int cached = __atomic_load_n(&cuda_rows[dev], __ATOMIC_ACQUIRE);
    if (cached != 0) return row_target(cached > 0 ? cached - 1 : GP_ROW_DENY);
    char buf[GP_UUID_MAX];
    const char *uuid = any_uuid_rows(cfg) ? cuda_uuid(dev, buf, sizeof buf) : NULL;
    int row = match_rows(cfg, uuid, (unsigned)dev);
    pthread_mutex_lock(&cache_lock);
    if (cuda_rows[dev] == 0) {
        if (row == GP_ROW_DENY)
            gp_log(GP_WARN, "CUDA device %d (%s) is not in the limits from %s; refusing its memory",
                   dev, uuid != NULL ? uuid : "uuid unknown", cfg->source);
        __atomic_store_n(&cuda_rows[dev], row >= 0 ? row + 1 : -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cache_lock);
    return row_target(row);
}

gp_target_t gp_target_current(void) {
    const gp_config_t *cfg = gp_limits();
    if (cfg->mode == GP_MODE_INERT) return PASS;
    if (cfg->mode == GP_MODE_BROKEN) return DENY;
    __typeof__(&cuCtxGetDevice) f = REAL(cuCtxGetDevice);
    CUdevice dev = -1;
    CUresult r = f != NULL ? f(&dev) : CUDA_ERROR_NOT_FOUND;
    if (r == CUDA_SUCCESS) return gp_target_cuda(dev);
    /* We cannot tell the device. One line leaves no doubt which limit applies; with several,
     * charging any one of them could let a card be overcommitted, so refuse (fail closed). A
     * driver that fails cuCtxGetDevice (no current context, not initialised) would fail the
     * allocation for the same reason: answer with its error; with no cuCtxGetDevice at all,
     * out of memory is what a program expects of a refused allocation. */
    if (cfg->nrows == 1) return row_target(0);
    static int told;
    if (gp_log_first_time(&told)) {
        if (f == NULL)
            gp_log(GP_WARN,
                   "the driver has no cuCtxGetDevice, so the limiter cannot tell which device an "
                   "allocation is for, and the limits from %s name %d devices; refusing device "
                   "memory allocations (list one device per container, or use a driver with "
                   "cuCtxGetDevice)",
                   cfg->source, cfg->nrows);
        else
            gp_log(GP_WARN,
                   "cuCtxGetDevice failed (CUDA error %d), so the limiter cannot tell which device "
                   "an allocation is for, and the limits from %s name %d devices; refusing such "
                   "allocations with that error",
                   (int)r, cfg->source, cfg->nrows);
    }
    return (gp_target_t){GP_ROW_DENY, f == NULL ? CUDA_ERROR_OUT_OF_MEMORY : r};
}

gp_target_t gp_target_nvml(nvmlDevice_t d) {
    const gp_config_t *cfg = gp_limits();
    if (cfg->mode == GP_MODE_INERT) return PASS;
    if (cfg->mode == GP_MODE_BROKEN) return DENY;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_nvml_rows; i++) {
        if (nvml_rows[i].handle == d) {
            int row = nvml_rows[i].row;
            pthread_mutex_unlock(&cache_lock);
            return row_target(row);
        }
    }
    pthread_mutex_unlock(&cache_lock);
    char uuid[GP_UUID_MAX] = {0};
    const char *uuidp = NULL;
    unsigned index = UINT_MAX;
    __typeof__(&nvmlDeviceGetUUID) fu = REAL(nvmlDeviceGetUUID);
    __typeof__(&nvmlDeviceGetIndex) fi = REAL(nvmlDeviceGetIndex);
    if (fu != NULL && fu(d, uuid, sizeof uuid) == NVML_SUCCESS) uuidp = uuid;
    if (fi != NULL && fi(d, &index) != NVML_SUCCESS) index = UINT_MAX;
    int row = match_rows(cfg, uuidp, index);
    pthread_mutex_lock(&cache_lock);
    if (n_nvml_rows < MAX_NVML_HANDLES) {
        nvml_rows[n_nvml_rows].handle = d;
        nvml_rows[n_nvml_rows].row = row;
        n_nvml_rows++;
    }
    pthread_mutex_unlock(&cache_lock);
    return row_target(row);
}

/*
 * fake_cuda.c - a stand-in libcuda.so.1 for the limiter's tests on machines without a GPU.
 *
 * It implements the driver entry points libgpupool touches, over host memory: every allocation is
 * a real malloc, and device pointers are synthetic addresses (slot + 1) << 16, small enough for
 * the 32-bit v1 API. Each process sees FAKE_CUDA_DEVICES devices (default 1) of
 * FAKE_CUDA_TOTAL_MEM bytes each (default 4 GiB); cuMemGetInfo reports total minus this
 * process's allocations. Frees of unknown pointers fail with CUDA_ERROR_INVALID_VALUE, as the
 * real driver does. Device d has the uuid GPU-fa4ec0de-0000-0000-0000-0000000000dd (dd = d in hex).
 *
 * FAKE_CUDA_UUIDS=GPU-fa4ec0de-...-0000000000aa,GPU-...: the process sees these cards of the fake
 * node, numbered from 0 in that order, as a container sees the cards NVIDIA's toolkit gives it
 * for NVIDIA_VISIBLE_DEVICES (the dev cluster's runc wrapper sets it from that variable): device 0
 * then reports the first uuid. A name that is not one of this driver's uuids is left out (the
 * toolkit would refuse the container). It overrides FAKE_CUDA_DEVICES.
 *
 * Two ways to keep the limiter from learning the current device, as some drivers and shims do:
 *   - FAKE_CUDA_CTX_GET_DEVICE_ERROR=<code>: cuCtxGetDevice fails with that CUresult;
 *   - built with -DFAKE_NO_CTX_GET_DEVICE (build/fake-no-ctx-device/libcuda.so.1): the driver has
 *     no cuCtxGetDevice at all, neither as a symbol nor through cuGetProcAddress.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gp_cuda_types.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_ALLOCS 4096
#define MAX_DEVICES 8

typedef struct {
    void *host;
    size_t size;
    int dev;
    int kind; /* 0 free, 1 pointer, 2 VMM handle, 3 array */
    int refs; /* VMM: the handle's references (create, retain) not yet released */
    int maps; /* VMM: live mappings; the memory goes when both are zero, as in the driver */
} fake_alloc_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc_t allocs[MAX_ALLOCS];
static size_t used[MAX_DEVICES];
static int initialised;
static __thread int current_dev = 0; /* a context is current on device 0 after cuInit */

#define UUID_STEM "GPU-fa4ec0de-0000-0000-0000-0000000000"

static pthread_once_t visible_once = PTHREAD_ONCE_INIT;
static int visible[MAX_DEVICES]; /* device d is the fake node's card visible[d] */
static int nvisible;             /* 0: FAKE_CUDA_UUIDS unset or naming none of ours */

static void parse_visible(void) {
    const char *v = getenv("FAKE_CUDA_UUIDS");
    const size_t stem = strlen(UUID_STEM);
    while (v != NULL && *v != '\0' && nvisible < MAX_DEVICES) {
        const char *end = strchr(v, ',');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        char hex[3] = {0};
        if (len == stem + 2 && strncmp(v, UUID_STEM, stem) == 0) {
            memcpy(hex, v + stem, 2);
            char *rest;
            long card = strtol(hex, &rest, 16);
            if (*rest == '\0' && card >= 0 && card < MAX_DEVICES) visible[nvisible++] = (int)card;
        }
        v = end ? end + 1 : NULL;
    }
}

static int nvisible_devices(void) {
    pthread_once(&visible_once, parse_visible);
    return nvisible;
}

static int ndevices(void) {
    if (nvisible_devices() > 0) return nvisible;
    const char *v = getenv("FAKE_CUDA_DEVICES");
    int n = v ? atoi(v) : 1;
    return n < 1 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* The fake node's card that device d is: its uuid's last byte. */
static int card_of(CUdevice d) { return nvisible_devices() > 0 ? visible[d] : d; }

static size_t total_mem(void) {
    const char *v = getenv("FAKE_CUDA_TOTAL_MEM");
    return v ? (size_t)strtoull(v, NULL, 10) : (size_t)4 << 30;
}

static CUresult do_alloc(unsigned long long *out, size_t size, int dev, int kind) {
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (size <= total_mem() - used[dev]) {
        for (int i = 0; i < MAX_ALLOCS; i++) {
            if (allocs[i].kind != 0) continue;
            void *host = malloc(size); /* lazily committed by the kernel: large sizes are cheap */
            if (host == NULL) break;
            allocs[i] = (fake_alloc_t){host, size, dev, kind, 1, 0};
            used[dev] += size;
            *out = (uint64_t)(i + 1) << 16;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult do_free(uint64_t key, int kind) {
    uint64_t i = (key >> 16) - 1;
    if (key == 0 || (key & 0xffff) != 0 || i >= MAX_ALLOCS) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (allocs[i].kind == kind) {
        free(allocs[i].host);
        used[allocs[i].dev] -= allocs[i].size;
        memset(&allocs[i], 0, sizeof allocs[i]);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    initialised = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    *v = 12040;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    *n = ndevices();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal < 0 || ordinal >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
    if (d < 0 || d >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    static const unsigned char prefix[4] = {0xfa, 0x4e, 0xc0, 0xde};
    memset(u->bytes, 0, sizeof u->bytes);
    memcpy(u->bytes, prefix, 4);
    u->bytes[15] = (char)card_of(d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { return cuDeviceGetUuid_v2(u, d); }

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    if (d < 0 || d >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    *bytes = total_mem();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d) {
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(&b, d);
    if (r == CUDA_SUCCESS) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return r;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice d) {
    (void)flags;
    if (d < 0 || d >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    current_dev = d;
    *ctx = (CUcontext)(uintptr_t)(0x1000 + d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
    return cuCtxCreate_v2(ctx, 0, d);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    current_dev = (int)((uintptr_t)ctx - 0x1000);
    return CUDA_SUCCESS;
}

#ifndef FAKE_NO_CTX_GET_DEVICE
EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    const char *err = getenv("FAKE_CUDA_CTX_GET_DEVICE_ERROR");
    if (err != NULL && err[0] != '\0') return (CUresult)atoi(err);
    *d = current_dev;
    return CUDA_SUCCESS;
}
#endif

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    *free_b = total_mem() - used[current_dev];
    *total_b = total_mem();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b) {
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r != CUDA_SUCCESS) return r;
    *free_b = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
    *total_b = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    return do_alloc(p, n, current_dev, 1);
}

EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int n) {
    CUdeviceptr v;
    CUresult r = cuMemAlloc_v2(&v, n);
    if (r == CUDA_SUCCESS) *p = (CUdeviceptr_v1)v;
    return r;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
    (void)flags;
    return cuMemAlloc_v2(p, n);
}

/* Pitch rounds each row up to 512 bytes, like real devices' texture alignment. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
                                   unsigned int elem) {
    if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (w + 511) & ~(size_t)511;
    CUresult r = cuMemAlloc_v2(p, pt * h);
    if (r == CUDA_SUCCESS) *pitch = pt;
    return r;
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w,
                                unsigned int h, unsigned int elem) {
    CUdeviceptr v;
    size_t pt;
    CUresult r = cuMemAllocPitch_v2(&v, &pt, w, h, elem);
    if (r == CUDA_SUCCESS) {
        *p = (CUdeviceptr_v1)v;
        *pitch = (unsigned)pt;
    }
    return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return do_free(p, 1); }
EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) { return do_free(p, 1); }

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
    (void)s;
    return cuMemAlloc_v2(p, n);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) {
    return cuMemAllocAsync(p, n, s);
}

/* Memory pools: device d's default pool is 0x2000 + d; created pools are 0x3000 + i, on a device
 * or on the host (whose memory is the host's, not the device's). */
#define MAX_POOLS 16
#define POOL_HOST (-1)
static struct {
    int live;
    int dev; /* or POOL_HOST */
} pools[MAX_POOLS];

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
    if (d < 0 || d >= ndevices()) return CUDA_ERROR_INVALID_VALUE;
    *pool = (CUmemoryPool)(uintptr_t)(0x2000 + d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) {
    return cuDeviceGetDefaultMemPool(pool, d);
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (pool == NULL || props == NULL) return CUDA_ERROR_INVALID_VALUE;
    int dev = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props->location.id : POOL_HOST;
    if (dev != POOL_HOST && (dev < 0 || dev >= ndevices())) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < MAX_POOLS; i++) {
        if (pools[i].live) continue;
        pools[i].live = 1;
        pools[i].dev = dev;
        *pool = (CUmemoryPool)(uintptr_t)(0x3000 + i);
        r = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    uintptr_t i = (uintptr_t)pool - 0x3000;
    if (i >= MAX_POOLS || !pools[i].live) return CUDA_ERROR_INVALID_VALUE;
    pools[i].live = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    (void)s;
    uintptr_t v = (uintptr_t)pool;
    if (v >= 0x3000 && v - 0x3000 < MAX_POOLS && pools[v - 0x3000].live) {
        int dev = pools[v - 0x3000].dev;
        if (dev != POOL_HOST) return do_alloc(p, n, dev, 1);
        /* host memory: a 1-byte stand-in, so the device's own count barely moves */
        return do_alloc(p, 1, 0, 1);
    }
    return do_alloc(p, n, (int)(v - 0x2000), 1);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool,
                                             CUstream s) {
    return cuMemAllocFromPoolAsync(p, n, pool, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    return do_free(p, 1);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
                            const CUmemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    /* host-located VMM memory is taken from the host, not from the device */
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
    if (dev < 0) {
        void *host = malloc(n);
        if (host == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_ALLOCS; i++) {
            if (allocs[i].kind != 0) continue;
            allocs[i] = (fake_alloc_t){host, 0, 0, 2, 1, 0};
            *h = (uint64_t)(i + 1) << 16;
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&lock);
        free(host);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return do_alloc(h, n, dev, 2);
}

/* --- CUDA arrays: host memory of width x height x depth x channels x 4 bytes (whatever the
 * format), times two for a mipmap; handles are allocation keys, like pointers -------------- */
static CUresult fake_array(unsigned long long *h, size_t w, size_t hh, size_t d, unsigned ch,
                           unsigned scale) {
    size_t n = (w ? w : 1) * (hh ? hh : 1) * (d ? d : 1) * (ch ? ch : 1) * 4 * scale;
    return do_alloc(h, n, current_dev, 3);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *desc) {
    if (a == NULL || desc == NULL) return CUDA_ERROR_INVALID_VALUE;
    unsigned long long h;
    CUresult r = fake_array(&h, desc->Width, desc->Height, 1, desc->NumChannels, 1);
    if (r == CUDA_SUCCESS) *a = (CUarray)(uintptr_t)h;
    return r;
}

EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) {
    if (desc == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY_DESCRIPTOR d2 = {desc->Width, desc->Height, desc->Format, desc->NumChannels};
    return cuArrayCreate_v2(a, &d2);
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    if (a == NULL || desc == NULL) return CUDA_ERROR_INVALID_VALUE;
    unsigned long long h;
    CUresult r = fake_array(&h, desc->Width, desc->Height, desc->Depth, desc->NumChannels, 1);
    if (r == CUDA_SUCCESS) *a = (CUarray)(uintptr_t)h;
    return r;
}

EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) {
    if (desc == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d2 = {desc->Width,  desc->Height,      desc->Depth,
                                  desc->Format, desc->NumChannels, desc->Flags};
    return cuArray3DCreate_v2(a, &d2);
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels) {
    if (a == NULL || desc == NULL || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned long long h;
    CUresult r = fake_array(&h, desc->Width, desc->Height, desc->Depth, desc->NumChannels, 2);
    if (r == CUDA_SUCCESS) *a = (CUmipmappedArray)(uintptr_t)h;
    return r;
}

EXPORT CUresult cuArrayDestroy(CUarray a) { return do_free((uint64_t)(uintptr_t)a, 3); }
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
    return do_free((uint64_t)(uintptr_t)a, 3);
}

/* --- VMM mappings: a released handle's memory lives until its last mapping is unmapped ------ */
#define MAX_MAPS 1024
static struct {
    uint64_t va;
    size_t size;
    int slot; /* allocs[] index of the handle; -1: free entry */
} maps[MAX_MAPS];
static uint64_t next_va = 1ULL << 40;

static int vmm_slot(uint64_t h) {
    uint64_t i = (h >> 16) - 1;
    if (h == 0 || (h & 0xffff) != 0 || i >= MAX_ALLOCS || allocs[i].kind != 2) return -1;
    return (int)i;
}

static void vmm_free_if_done(int i) {
    if (allocs[i].refs > 0 || allocs[i].maps > 0) return;
    free(allocs[i].host);
    used[allocs[i].dev] -= allocs[i].size;
    memset(&allocs[i], 0, sizeof allocs[i]);
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    pthread_mutex_lock(&lock);
    int i = vmm_slot(h);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && allocs[i].refs > 0) {
        allocs[i].refs--;
        vmm_free_if_done(i);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags) {
    (void)alignment, (void)addr, (void)flags;
    if (ptr == NULL || size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *ptr = next_va;
    next_va += (size + 0xffff) & ~(uint64_t)0xffff;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    (void)ptr, (void)size;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle h, unsigned long long flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    int i = vmm_slot(h);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && allocs[i].refs > 0 && offset == 0 && size <= allocs[i].size) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        for (int m = 0; m < MAX_MAPS; m++) {
            if (maps[m].size != 0) continue;
            maps[m].va = ptr;
            maps[m].size = size;
            maps[m].slot = i;
            allocs[i].maps++;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Unmaps every mapping inside [ptr, ptr + size): a range may span several. */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int m = 0; m < MAX_MAPS; m++) {
        if (maps[m].size == 0 || maps[m].va < ptr || maps[m].va >= ptr + size) continue;
        int i = maps[m].slot;
        memset(&maps[m], 0, sizeof maps[m]);
        allocs[i].maps--;
        vmm_free_if_done(i);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    uint64_t a = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int m = 0; m < MAX_MAPS; m++) {
        if (maps[m].size == 0 || a < maps[m].va || a - maps[m].va >= maps[m].size) continue;
        allocs[maps[m].slot].refs++;
        *h = (uint64_t)(maps[m].slot + 1) << 16; /* the same handle value, as the driver does */
        r = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* --- cuGetProcAddress: the newest variant not newer than the asked version ---------------- */
typedef struct {
    const char *name;
    int version;
    int ptsz;
    void *fn;
} entry_t;

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);

#define E(n, base, v, p) {base, v, p, (void *)&n}
static const entry_t table[] = {
    E(cuInit, "cuInit", 2000, 0),
    E(cuDriverGetVersion, "cuDriverGetVersion", 2020, 0),
    E(cuDeviceGet, "cuDeviceGet", 2000, 0),
    E(cuDeviceGetCount, "cuDeviceGetCount", 2000, 0),
    E(cuDeviceGetUuid, "cuDeviceGetUuid", 9020, 0),
    E(cuDeviceGetUuid_v2, "cuDeviceGetUuid", 11040, 0),
    E(cuDeviceTotalMem, "cuDeviceTotalMem", 2000, 0),
    E(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0),
    E(cuCtxCreate_v2, "cuCtxCreate", 3020, 0),
    E(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0),
#ifndef FAKE_NO_CTX_GET_DEVICE
    E(cuCtxGetDevice, "cuCtxGetDevice", 2000, 0),
#endif
    E(cuMemGetInfo, "cuMemGetInfo", 2000, 0),
    E(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0),
    E(cuMemAlloc, "cuMemAlloc", 2000, 0),
    E(cuMemAlloc_v2, "cuMemAlloc", 3020, 0),
    E(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0),
    E(cuMemAllocPitch, "cuMemAllocPitch", 2000, 0),
    E(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0),
    E(cuArrayCreate, "cuArrayCreate", 2000, 0),
    E(cuArrayCreate_v2, "cuArrayCreate", 3020, 0),
    E(cuArray3DCreate, "cuArray3DCreate", 2000, 0),
    E(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0),
    E(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0),
    E(cuArrayDestroy, "cuArrayDestroy", 2000, 0),
    E(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0),
    E(cuMemFree, "cuMemFree", 2000, 0),
    E(cuMemFree_v2, "cuMemFree", 3020, 0),
    E(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0),
    E(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1),
    E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0),
    E(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1),
    E(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0),
    E(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1),
    E(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0),
    E(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0),
    E(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0),
    E(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0),
    E(cuMemCreate, "cuMemCreate", 10020, 0),
    E(cuMemRelease, "cuMemRelease", 10020, 0),
    E(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0),
    E(cuMemAddressFree, "cuMemAddressFree", 10020, 0),
    E(cuMemMap, "cuMemMap", 10020, 0),
    E(cuMemUnmap, "cuMemUnmap", 10020, 0),
    E(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, 0),
    E(cuGetProcAddress, "cuGetProcAddress", 11030, 0),
    E(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0),
};

static void *lookup(const char *symbol, int version, cuuint64_t flags, int *found_any) {
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const entry_t *best = NULL;
    *found_any = 0;
    for (int pass = 0; pass < 2 && best == NULL; pass++) {
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
            if (strcmp(table[i].name, symbol) != 0) continue;
            *found_any = 1;
            if (pass == 0 && table[i].ptsz != per_thread) continue;
            if (table[i].version > version) continue;
            if (best == NULL || table[i].version > best->version) best = &table[i];
        }
    }
    return best ? best->fn : NULL;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
    int any = 0;
    *pfn = lookup(symbol, version, flags, &any);
    if (status != NULL)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
                       : any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                             : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

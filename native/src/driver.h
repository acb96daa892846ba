/* driver.h - the driver and NVML functions libgpupool hooks or calls, and how it reaches the real
 * ones (driver.c). The real functions are always taken from the driver library's own handle,
 * never through the interposed dlsym, which would hand back the hooks. */
#ifndef GP_DRIVER_H
#define GP_DRIVER_H

#include "gp_base.h"
#include "gp_cuda_types.h"

#define GP_LIB_CUDA 0
#define GP_LIB_NVML 1

/* X(symbol, cuGetProcAddress name or NULL, first CUDA version of this variant, per-thread, lib,
 *   hooked). Entries with hooked=0 are driver functions we only call. */
#define GP_DRIVER_FUNCTIONS(X)                                                           \
    X(cuMemAlloc, "cuMemAlloc", 0, 0, GP_LIB_CUDA, 1)                                    \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, GP_LIB_CUDA, 1)                              \
    X(cuMemAllocPitch, "cuMemAllocPitch", 0, 0, GP_LIB_CUDA, 1)                          \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, GP_LIB_CUDA, 1)                    \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, GP_LIB_CUDA, 1)                   \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, GP_LIB_CUDA, 1)                      \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1, GP_LIB_CUDA, 1)                 \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, GP_LIB_CUDA, 1)      \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1, GP_LIB_CUDA, 1) \
    X(cuArrayCreate, "cuArrayCreate", 0, 0, GP_LIB_CUDA, 1)                              \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0, GP_LIB_CUDA, 1)                        \
    X(cuArray3DCreate, "cuArray3DCreate", 0, 0, GP_LIB_CUDA, 1)                          \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0, GP_LIB_CUDA, 1)                    \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0, GP_LIB_CUDA, 1)         \
    X(cuArrayDestroy, "cuArrayDestroy", 0, 0, GP_LIB_CUDA, 1)                            \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0, GP_LIB_CUDA, 1)       \
    X(cuMemFree, "cuMemFree", 0, 0, GP_LIB_CUDA, 1)                                      \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, GP_LIB_CUDA, 1)                                \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, GP_LIB_CUDA, 1)                        \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1, GP_LIB_CUDA, 1)                   \
    X(cuMemCreate, "cuMemCreate", 10020, 0, GP_LIB_CUDA, 1)                              \
    X(cuMemRelease, "cuMemRelease", 10020, 0, GP_LIB_CUDA, 1)                            \
    X(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0, GP_LIB_CUDA, 1)                      \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0, GP_LIB_CUDA, 1)                    \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0, GP_LIB_CUDA, 1)  \
    X(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0, GP_LIB_CUDA, 1)                \
    X(cuMemMap, "cuMemMap", 10020, 0, GP_LIB_CUDA, 1)                                    \
    X(cuMemUnmap, "cuMemUnmap", 10020, 0, GP_LIB_CUDA, 1)                                \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, 0, GP_LIB_CUDA, 1) \
    X(cuMemGetInfo, "cuMemGetInfo", 0, 0, GP_LIB_CUDA, 1)                                \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, GP_LIB_CUDA, 1)                          \
    X(cuDeviceTotalMem, "cuDeviceTotalMem", 0, 0, GP_LIB_CUDA, 1)                        \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, GP_LIB_CUDA, 1)                  \
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0, GP_LIB_CUDA, 1)                    \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, GP_LIB_CUDA, 1)                 \
    X(cuGetProcAddress_v2_ptsz, "cuGetProcAddress", 12000, 1, GP_LIB_CUDA, 1)            \
    X(cuCtxGetDevice, NULL, 0, 0, GP_LIB_CUDA, 0)                                        \
    X(cuDeviceGetUuid, NULL, 0, 0, GP_LIB_CUDA, 0)                                       \
    X(cuDeviceGetUuid_v2, NULL, 0, 0, GP_LIB_CUDA, 0)                                    \
    X(nvmlDeviceGetMemoryInfo, NULL, 0, 0, GP_LIB_NVML, 1)                               \
    X(nvmlDeviceGetMemoryInfo_v2, NULL, 0, 0, GP_LIB_NVML, 1)                            \
    X(nvmlDeviceGetUUID, NULL, 0, 0, GP_LIB_NVML, 0)                                     \
    X(nvmlDeviceGetIndex, NULL, 0, 0, GP_LIB_NVML, 0)

#define GP_FN_ENUM(sym, base, ver, ptsz, lib, hooked) GP_FN_##sym,
enum { GP_DRIVER_FUNCTIONS(GP_FN_ENUM) GP_FN_COUNT };
#undef GP_FN_ENUM

typedef struct {
    const char *name; /* exported symbol */
    const char *base; /* the name cuGetProcAddress takes, NULL if not looked up that way */
    int min_version;  /* the first CUDA version (1000 * major + 10 * minor) of this variant */
    int ptsz;         /* the per-thread default stream variant */
    int lib;          /* GP_LIB_CUDA or GP_LIB_NVML */
    void *hook;       /* our function of the same name, NULL if we only call it */
} gp_fn_t;

/* The functions above, indexed by GP_FN_<symbol>. */
GP_HIDDEN const gp_fn_t *gp_fn_table(void);
/* The index of the hooked function exported as `name`, or -1. */
GP_HIDDEN int gp_fn_find_hook(const char *name);
/* Whether p is one of our hooks. */
GP_HIDDEN int gp_fn_is_hook(const void *p);
/* The driver's own function (opening the library on first use), or NULL if it has none. */
GP_HIDDEN void *gp_real(int id);
/* Records p as the real function `id` unless one is known already (cuGetProcAddress may be
 * the only way to reach a variant the library does not export). */
GP_HIDDEN void gp_real_learn(int id, void *p);

/* The real function of the same name, typed. */
#define REAL(sym) ((__typeof__(&sym))gp_real(GP_FN_##sym))

/* What a hook answers when the driver lacks the function it stands for. */
#define GP_NO_DRIVER CUDA_ERROR_NOT_FOUND
#define GP_NVML_FUNCTION_NOT_FOUND 13

/* Driver functions we call but do not hook (declared for REAL's types only). */
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);

#endif

/*
 * hooks_pools.c - the entry points that hand a program a memory pool, watched so that an
 * allocation from a pool is charged to the pool's device (pools.c). They change nothing the
 * program sees.
 */
#include "hooks.h"

#include "driver.h"
#include "pools.h"
#include "slice.h"

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
    __typeof__(&cuMemPoolCreate) f = REAL(cuMemPoolCreate);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(pool, poolProps);
    if (r == CUDA_SUCCESS && pool != NULL && poolProps != NULL && gp_active())
        gp_pool_seen(*pool, poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                                ? poolProps->location.id
                                : GP_POOL_HOST);
    return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    __typeof__(&cuMemPoolDestroy) f = REAL(cuMemPoolDestroy);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(pool);
    if (r == CUDA_SUCCESS && gp_active()) gp_pool_gone(pool);
    return r;
}

/* The default pool and the current pool of a device are on that device. */
#define DEVICE_POOL(sym)                                                     \
    CUresult sym(CUmemoryPool *pool, CUdevice dev) {                         \
        __typeof__(&sym) f = REAL(sym);                                      \
        if (f == NULL) return GP_NO_DRIVER;                                  \
        CUresult r = f(pool, dev);                                           \
        if (r == CUDA_SUCCESS && pool != NULL && gp_active()) gp_pool_seen(*pool, dev); \
        return r;                                                            \
    }
DEVICE_POOL(cuDeviceGetDefaultMemPool)
DEVICE_POOL(cuDeviceGetMemPool)

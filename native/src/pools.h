/* pools.h - which device a stream-ordered memory pool's memory is on (pools.c). */
#ifndef GP_POOLS_H
#define GP_POOLS_H

#include "devices.h"
#include "gp_base.h"
#include "gp_cuda_types.h"

#define GP_POOL_HOST (-1) /* a pool of host memory: not the card's, not charged */

/* A pool the program got from cuMemPoolCreate, cuDeviceGetDefaultMemPool or cuDeviceGetMemPool
 * lives on `dev` (or GP_POOL_HOST). */
GP_HIDDEN void gp_pool_seen(CUmemoryPool pool, int dev);
GP_HIDDEN void gp_pool_gone(CUmemoryPool pool);
/* Where an allocation from `pool` goes: the pool's device when we saw where it is, else the
 * current context's device (a pool shared in from another process, say). */
GP_HIDDEN gp_target_t gp_target_pool(CUmemoryPool pool);

#endif

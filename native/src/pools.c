/*
 * pools.c - memory pools and their devices. cuMemAllocFromPoolAsync names a pool, not a device,
 * and a pool may be on another card than the current context, or on the host. Remembering where
 * each pool the program obtained lives lets its allocations be charged to the right line (and
 * still be charged when the current device cannot be told). A handful of pools per process is
 * usual: a small table, scanned.
 */
#include "pools.h"

#include <pthread.h>

#include "devices.h"
#include "log.h"

#define MAX_POOLS 256

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUmemoryPool pool;
    int dev;
} pools[MAX_POOLS];
static int npools;

static int find_locked(CUmemoryPool pool) {
    for (int i = 0; i < npools; i++)
        if (pools[i].pool == pool) return i;
    return -1;
}

void gp_pool_seen(CUmemoryPool pool, int dev) {
    static int told;
    pthread_mutex_lock(&pools_lock);
    int i = find_locked(pool);
    if (i < 0 && npools < MAX_POOLS) i = npools++;
    if (i >= 0) {
        pools[i].pool = pool;
        pools[i].dev = dev;
    }
    pthread_mutex_unlock(&pools_lock);
    if (i < 0 && gp_log_first_time(&told))
        gp_log(GP_WARN, "more than %d memory pools; allocations from the others are charged to "
               "the current device", MAX_POOLS);
}

void gp_pool_gone(CUmemoryPool pool) {
    pthread_mutex_lock(&pools_lock);
    int i = find_locked(pool);
    if (i >= 0) pools[i] = pools[--npools];
    pthread_mutex_unlock(&pools_lock);
}

gp_target_t gp_target_pool(CUmemoryPool pool) {
    pthread_mutex_lock(&pools_lock);
    int i = find_locked(pool);
    int dev = i >= 0 ? pools[i].dev : 0;
    pthread_mutex_unlock(&pools_lock);
    if (i < 0) return gp_target_current();
    if (dev == GP_POOL_HOST) return (gp_target_t){GP_ROW_UNLIMITED, CUDA_SUCCESS};
    return gp_target_cuda(dev);
}

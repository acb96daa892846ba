/* vmm.h - the lifetime of VMM physical memory (vmm.c): a cuMemCreate handle's bytes stay charged
 * until it is released AND no longer mapped, as the driver keeps them. */
#ifndef GP_VMM_H
#define GP_VMM_H

#include "gp_base.h"
#include "gp_cuda_types.h"
#include "ptrtab.h"

/* cuMemRelease: before the driver, drop the handle's own reference; after it, settle. */
typedef struct {
    int state; /* -1: not ours, 0: still mapped somewhere, 1: that was the last reference */
    uint64_t handle;
    gp_alloc_t entry; /* when state is 1 */
} gp_release_t;
GP_HIDDEN void gp_release_begin(uint64_t handle, gp_release_t *rel);
GP_HIDDEN void gp_release_end(const gp_release_t *rel, CUresult r);

/* cuMemMap: the mapping holds a reference to the handle, taken before the driver is called (so a
 * concurrent cuMemRelease cannot credit memory that is about to be mapped). 1 if it is ours. */
GP_HIDDEN int gp_map_begin(uint64_t handle);
GP_HIDDEN void gp_map_end(int ours, uint64_t ptr, uint64_t size, uint64_t handle, CUresult r);

/* cuMemUnmap: the mappings inside [ptr, ptr + size) let go of their handles once the driver has
 * unmapped them. */
typedef struct {
    gp_alloc_t *maps;
    size_t n;
} gp_unmap_t;
GP_HIDDEN void gp_unmap_begin(uint64_t ptr, uint64_t size, gp_unmap_t *u);
GP_HIDDEN void gp_unmap_end(gp_unmap_t *u, CUresult r);

/* cuMemRetainAllocationHandle handed out one more reference to `handle` (the same value the
 * memory was mapped with), which the program will cuMemRelease. */
GP_HIDDEN void gp_retained(uint64_t handle);

#endif

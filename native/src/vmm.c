/*
 * vmm.c - VMM physical memory lives while its handle is unreleased or mapped anywhere. The CUDA
 * samples (vectorAddMMAP) and many allocators release a handle right after cuMemMap, relying on
 * "the memory is freed when it is unmapped"; crediting at cuMemRelease would let such a program
 * map any amount under the cap. So each handle counts its references (itself, each mapping, each
 * cuMemRetainAllocationHandle) and its bytes are credited when the last one goes.
 */
#include "vmm.h"

#include <stdlib.h>

#include "ptrtab.h"
#include "region.h"

/* Drops one reference to an entry of ours; credits its bytes when it was the last. */
static void let_go(uint64_t handle) {
    gp_alloc_t e;
    if (gp_ptrtab_unref(GP_KIND_VMM, handle, &e) == 1) gp_region_release(e.row, e.size);
}

void gp_release_begin(uint64_t handle, gp_release_t *rel) {
    rel->handle = handle;
    rel->state = gp_ptrtab_unref(GP_KIND_VMM, handle, &rel->entry);
}

void gp_release_end(const gp_release_t *rel, CUresult r) {
    if (r == CUDA_SUCCESS) {
        if (rel->state == 1) gp_region_release(rel->entry.row, rel->entry.size);
        return;
    }
    /* the driver kept the handle: so do we */
    if (rel->state == 1)
        gp_ptrtab_insert(&rel->entry);
    else if (rel->state == 0)
        gp_ptrtab_ref(GP_KIND_VMM, rel->handle);
}

int gp_map_begin(uint64_t handle) { return gp_ptrtab_ref(GP_KIND_VMM, handle) == 0; }

void gp_map_end(int ours, uint64_t ptr, uint64_t size, uint64_t handle, CUresult r) {
    if (!ours) return;
    if (r != CUDA_SUCCESS) {
        let_go(handle);
        return;
    }
    gp_alloc_t m = {.key = ptr, .size = size, .handle = handle, .row = -1, .refs = 1,
                    .kind = GP_KIND_MAP};
    gp_ptrtab_insert(&m);
}

void gp_unmap_begin(uint64_t ptr, uint64_t size, gp_unmap_t *u) {
    u->n = gp_ptrtab_take_range(GP_KIND_MAP, ptr, gp_sat_add(ptr, size), &u->maps);
}

void gp_unmap_end(gp_unmap_t *u, CUresult r) {
    for (size_t i = 0; i < u->n; i++) {
        if (r == CUDA_SUCCESS)
            let_go(u->maps[i].handle);
        else
            gp_ptrtab_insert(&u->maps[i]); /* still mapped */
    }
    free(u->maps);
    u->maps = NULL;
    u->n = 0;
}

void gp_retained(uint64_t handle) { gp_ptrtab_ref(GP_KIND_VMM, handle); }

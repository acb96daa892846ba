/* ptrtab.h - this process's live allocations (ptrtab.c): device pointers and VMM handles with the
 * bytes charged for them, and the VMM mappings that keep a released handle's memory alive. */
#ifndef GP_PTRTAB_H
#define GP_PTRTAB_H

#include "gp_base.h"

enum {
    GP_KIND_PTR = 1, /* key: a device pointer */
    GP_KIND_VMM = 2, /* key: a cuMemCreate handle; refs: the handle itself + its live mappings */
    GP_KIND_MAP = 3, /* key: the address a handle is mapped at (cuMemMap); handle: which one */
    GP_KIND_ARRAY = 4, /* key: a CUarray or CUmipmappedArray */
};

typedef struct {
    uint64_t key;
    uint64_t size;   /* bytes charged (GP_KIND_MAP: bytes mapped, nothing charged) */
    uint64_t handle; /* GP_KIND_MAP only */
    int32_t row;
    uint32_t refs; /* the entry goes when the last reference does */
    uint8_t kind;
    uint8_t live;
} gp_alloc_t;

/* Remembers a (a->refs of 0 counts as 1; an entry of the same kind and key is replaced). */
GP_HIDDEN void gp_ptrtab_insert(const gp_alloc_t *a);
/* Removes and returns the entry whatever its references; 0 if found, -1 if the key is unknown. */
GP_HIDDEN int gp_ptrtab_remove(uint8_t kind, uint64_t key, gp_alloc_t *out);
/* One more reference to an entry: 0, or -1 if the key is unknown. */
GP_HIDDEN int gp_ptrtab_ref(uint8_t kind, uint64_t key);
/* One reference fewer: -1 if the key is unknown, 0 if others remain, 1 if that was the last one
 * (the entry is removed and copied to *out). */
GP_HIDDEN int gp_ptrtab_unref(uint8_t kind, uint64_t key, gp_alloc_t *out);
/* Removes every entry of `kind` whose key lies in [lo, hi) and returns them in a malloc'd array
 * (*out, to be freed by the caller; NULL when there are none). Returns how many. */
GP_HIDDEN size_t gp_ptrtab_take_range(uint8_t kind, uint64_t lo, uint64_t hi, gp_alloc_t **out);

GP_HIDDEN void gp_ptrtab_fork_prepare(void);
GP_HIDDEN void gp_ptrtab_fork_parent(void);
GP_HIDDEN void gp_ptrtab_fork_child(void);

#endif

/* ptrtab.h - this process's live allocations: device pointer or VMM handle -> (size, row). */
#ifndef GP_PTRTAB_H
#define GP_PTRTAB_H

#include "gp_base.h"

enum { GP_KIND_PTR = 1, GP_KIND_VMM = 2 };

typedef struct {
    uint64_t key;
    uint64_t size;
    int32_t row;
    uint8_t kind;
    uint8_t live;
} gp_alloc_t;

GP_HIDDEN void gp_ptrtab_insert(uint8_t kind, uint64_t key, uint64_t size, int32_t row);
/* Removes and returns the entry; 0 if found, -1 if the key is unknown. */
GP_HIDDEN int gp_ptrtab_remove(uint8_t kind, uint64_t key, gp_alloc_t *out);
GP_HIDDEN void gp_ptrtab_fork_prepare(void);
GP_HIDDEN void gp_ptrtab_fork_parent(void);
GP_HIDDEN void gp_ptrtab_fork_child(void);

#endif

/*
 * ptrtab.c - this process's live allocations: device pointer or VMM handle -> (size, device row).
 * A free looks its pointer up here; a pointer we did not see allocated (made before the limiter
 * was active, or by a path we do not count) is passed to the driver and changes no counter, so a
 * stray or double free can never push usage below zero.
 *
 * Open addressing with linear probing and backward-shift deletion; grows at half load.
 */
#include "ptrtab.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static gp_alloc_t *tab;
static size_t cap, count;

static size_t hash(uint8_t kind, uint64_t key) {
    uint64_t h = key ^ ((uint64_t)kind << 56);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return (size_t)h;
}

static void put(gp_alloc_t *t, size_t c, const gp_alloc_t *a) {
    size_t i = hash(a->kind, a->key) & (c - 1);
    while (t[i].live) {
        if (t[i].kind == a->kind && t[i].key == a->key) break; /* replace: driver reused the key */
        i = (i + 1) & (c - 1);
    }
    t[i] = *a;
    t[i].live = 1;
}

static int grow(void) {
    size_t ncap = cap ? cap * 2 : 1024;
    gp_alloc_t *nt = calloc(ncap, sizeof *nt);
    if (nt == NULL) return -1;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].live) put(nt, ncap, &tab[i]);
    free(tab);
    tab = nt;
    cap = ncap;
    return 0;
}

void gp_ptrtab_insert(uint8_t kind, uint64_t key, uint64_t size, int32_t row) {
    gp_alloc_t a = {.key = key, .size = size, .row = row, .kind = kind, .live = 1};
    pthread_mutex_lock(&tab_lock);
    if ((count + 1) * 2 > cap && grow() != 0) {
        /* Out of host memory: we cannot remember this allocation, so its free will not be
         * credited back. Usage stays over-counted, never under-counted. */
        pthread_mutex_unlock(&tab_lock);
        gp_log(GP_WARN, "out of host memory tracking an allocation of %llu bytes",
               (unsigned long long)size);
        return;
    }
    size_t before = count;
    size_t i = hash(kind, key) & (cap - 1);
    while (tab[i].live && !(tab[i].kind == kind && tab[i].key == key)) i = (i + 1) & (cap - 1);
    if (!tab[i].live) count = before + 1;
    tab[i] = a;
    pthread_mutex_unlock(&tab_lock);
}

int gp_ptrtab_remove(uint8_t kind, uint64_t key, gp_alloc_t *out) {
    int rc = -1;
    pthread_mutex_lock(&tab_lock);
    if (cap == 0) goto done;
    size_t i = hash(kind, key) & (cap - 1);
    while (tab[i].live) {
        if (tab[i].kind == kind && tab[i].key == key) break;
        i = (i + 1) & (cap - 1);
    }
    if (!tab[i].live) goto done;
    *out = tab[i];
    rc = 0;
    count--;
    /* backward-shift deletion keeps probe chains intact without tombstones */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (!tab[j].live) break;
        size_t home = hash(tab[j].kind, tab[j].key) & (cap - 1);
        /* move j into the hole if its home is not cyclically in (hole, j] */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            tab[hole] = tab[j];
            hole = j;
        }
    }
    memset(&tab[hole], 0, sizeof tab[hole]);
done:
    pthread_mutex_unlock(&tab_lock);
    return rc;
}

void gp_ptrtab_fork_prepare(void) { pthread_mutex_lock(&tab_lock); }
void gp_ptrtab_fork_parent(void) { pthread_mutex_unlock(&tab_lock); }
void gp_ptrtab_fork_child(void) {
    /* CUDA allocations do not survive fork: the child starts with none. */
    if (tab != NULL) memset(tab, 0, cap * sizeof *tab);
    count = 0;
    pthread_mutex_unlock(&tab_lock);
}

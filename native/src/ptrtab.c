/*
 * ptrtab.c - this process's live allocations: device pointer or VMM handle -> (size, device row),
 * and mapped address -> VMM handle. A free looks its pointer up here; a pointer we did not see
 * allocated (made before the limiter was active, or by a path we do not count) is passed to the
 * driver and changes no counter, so a stray or double free can never push usage below zero.
 *
 * Open addressing with linear probing and backward-shift deletion; grows at half load. The range
 * query scans the whole table: it serves cuMemUnmap, which programs call rarely (PyTorch when it
 * shrinks an expandable segment), never per kernel.
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

/* The slot holding (kind, key), or the free slot where it would go. Needs cap > 0. Inlined:
 * every allocation and every free probes twice or more. */
static inline __attribute__((always_inline)) size_t probe(const gp_alloc_t *t, size_t c,
                                                          uint8_t kind, uint64_t key) {
    size_t i = hash(kind, key) & (c - 1);
    while (t[i].live && !(t[i].kind == kind && t[i].key == key)) i = (i + 1) & (c - 1);
    return i;
}

static int grow(void) {
    size_t ncap = cap ? cap * 2 : 1024;
    gp_alloc_t *nt = calloc(ncap, sizeof *nt);
    if (nt == NULL) return -1;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].live) nt[probe(nt, ncap, tab[i].kind, tab[i].key)] = tab[i];
    free(tab);
    tab = nt;
    cap = ncap;
    return 0;
}

/* Index of the live entry (kind, key), or -1. Under tab_lock. */
static long find_locked(uint8_t kind, uint64_t key) {
    if (cap == 0) return -1;
    size_t i = probe(tab, cap, kind, key);
    return tab[i].live ? (long)i : -1;
}

/* Removes the entry at i; backward-shift deletion keeps probe chains intact without tombstones.
 * Under tab_lock. */
static void delete_at(size_t i) {
    count--;
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
}

void gp_ptrtab_insert(const gp_alloc_t *a) {
    pthread_mutex_lock(&tab_lock);
    if ((count + 1) * 2 > cap && grow() != 0) {
        /* Out of host memory: we cannot remember this allocation, so its free will not be
         * credited back. Usage stays over-counted, never under-counted. */
        pthread_mutex_unlock(&tab_lock);
        gp_log(GP_WARN, "out of host memory tracking an allocation of %llu bytes",
               (unsigned long long)a->size);
        return;
    }
    size_t i = probe(tab, cap, a->kind, a->key);
    if (!tab[i].live) count++; /* else the driver reused the key: replace */
    tab[i] = *a;
    tab[i].live = 1;
    if (tab[i].refs == 0) tab[i].refs = 1;
    pthread_mutex_unlock(&tab_lock);
}

int gp_ptrtab_remove(uint8_t kind, uint64_t key, gp_alloc_t *out) {
    pthread_mutex_lock(&tab_lock);
    long i = find_locked(kind, key);
    if (i >= 0) {
        *out = tab[i];
        delete_at((size_t)i);
    }
    pthread_mutex_unlock(&tab_lock);
    return i >= 0 ? 0 : -1;
}

int gp_ptrtab_ref(uint8_t kind, uint64_t key) {
    pthread_mutex_lock(&tab_lock);
    long i = find_locked(kind, key);
    if (i >= 0) tab[i].refs++;
    pthread_mutex_unlock(&tab_lock);
    return i >= 0 ? 0 : -1;
}

int gp_ptrtab_unref(uint8_t kind, uint64_t key, gp_alloc_t *out) {
    int rc = -1;
    pthread_mutex_lock(&tab_lock);
    long i = find_locked(kind, key);
    if (i >= 0) {
        rc = 0;
        if (--tab[i].refs == 0) {
            *out = tab[i];
            delete_at((size_t)i);
            rc = 1;
        }
    }
    pthread_mutex_unlock(&tab_lock);
    return rc;
}

size_t gp_ptrtab_take_range(uint8_t kind, uint64_t lo, uint64_t hi, gp_alloc_t **out) {
    size_t n = 0, room = 0;
    gp_alloc_t *got = NULL;
    pthread_mutex_lock(&tab_lock);
    for (size_t i = 0; i < cap;) {
        if (!(tab[i].live && tab[i].kind == kind && tab[i].key >= lo && tab[i].key < hi)) {
            i++;
            continue;
        }
        if (n == room) {
            size_t nroom = room ? room * 2 : 8;
            gp_alloc_t *ng = realloc(got, nroom * sizeof *ng);
            if (ng == NULL) break; /* keep the rest: their memory stays counted, never less */
            got = ng;
            room = nroom;
        }
        got[n++] = tab[i];
        delete_at(i); /* may shift a later entry into i: look at i again */
    }
    pthread_mutex_unlock(&tab_lock);
    *out = got;
    return n;
}

void gp_ptrtab_fork_prepare(void) { pthread_mutex_lock(&tab_lock); }
void gp_ptrtab_fork_parent(void) { pthread_mutex_unlock(&tab_lock); }
void gp_ptrtab_fork_child(void) {
    /* CUDA allocations do not survive fork: the child starts with none. */
    if (tab != NULL) memset(tab, 0, cap * sizeof *tab);
    count = 0;
    pthread_mutex_unlock(&tab_lock);
}

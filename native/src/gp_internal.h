/* gp_internal.h - declarations shared by libgpupool's translation units. Nothing here is exported. */
#ifndef GP_INTERNAL_H
#define GP_INTERNAL_H

#include <stdint.h>
#include <stddef.h>

#define GP_HIDDEN __attribute__((visibility("hidden")))
#define GP_EXPORT __attribute__((visibility("default")))

#define GP_MAX_ROWS 16       /* devices one container may be given */
#define GP_UUID_MAX 96       /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

/* ---- logging ------------------------------------------------------------------------------ */
GP_HIDDEN void gp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define GP_ERROR 1
#define GP_WARN 1
#define GP_INFO 2
#define GP_DEBUG 3

/* ---- saturating arithmetic ---------------------------------------------------------------- */
static inline uint64_t gp_sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static inline uint64_t gp_sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static inline uint64_t gp_sat_mul(uint64_t a, uint64_t b) {
    if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
    return a * b;
}

/* ---- configuration (config.c) ------------------------------------------------------------- */
typedef struct {
    int by_uuid;                 /* 1: match uuid, 0: match index */
    unsigned index;              /* CUDA ordinal for CUDA calls, NVML index for NVML calls */
    char uuid[GP_UUID_MAX];      /* "GPU-..." / "MIG-..." */
    uint64_t limit;              /* bytes */
    int compute_percent;         /* 0 when absent; parsed and kept, not enforced here */
} gp_row_t;

typedef enum {
    GP_MODE_INERT = 0,   /* no configuration: pass everything through, account nothing */
    GP_MODE_ACTIVE = 1,  /* rows[] are the limits */
    GP_MODE_BROKEN = 2,  /* configuration present but unusable: fail closed (deny device memory) */
} gp_mode_t;

typedef struct {
    gp_mode_t mode;
    int nrows;
    gp_row_t rows[GP_MAX_ROWS];
    char source[256];    /* where the limits came from, for messages */
} gp_config_t;

/* Parses a Kubernetes-style quantity ("12Gi", "500Mi", "1G", "1.5Gi", "1048576") into bytes.
 * Returns 0 on success, -1 on malformed input or overflow. */
GP_HIDDEN int gp_parse_quantity(const char *s, uint64_t *out);
/* Fills cfg from the environment (GPUPOOL_LIMITS_FILE, GPUPOOL_MEMORY_LIMIT). Never fails: a bad
 * configuration yields GP_MODE_BROKEN and a message on stderr. */
GP_HIDDEN void gp_config_load(gp_config_t *cfg);

/* ---- shared accounting (region.c) --------------------------------------------------------- */
GP_HIDDEN void gp_region_init(const gp_config_t *cfg);
/* Reserves bytes on row for this process. Returns 0 if within the limit, -1 if it would exceed. */
GP_HIDDEN int gp_region_reserve(int row, uint64_t bytes, uint64_t limit);
/* Returns bytes to row (saturating: never below zero). */
GP_HIDDEN void gp_region_release(int row, uint64_t bytes);
/* Bytes in use on row by live processes of the container (dead ones are reaped first). */
GP_HIDDEN uint64_t gp_region_used(int row);
/* Drops this process's entry (at exit) and forgets it after fork. */
GP_HIDDEN void gp_region_process_exit(void);
GP_HIDDEN void gp_region_after_fork_child(void);
GP_HIDDEN int gp_region_test_hold_lock(void);

/* ---- per-process table of live allocations (ptrtab.c) ------------------------------------- */
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

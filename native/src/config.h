/* config.h - the limits one process runs under, read from GPUPOOL_LIMITS_FILE or
 * GPUPOOL_MEMORY_LIMIT (config.c; format in native/README.md). */
#ifndef GP_CONFIG_H
#define GP_CONFIG_H

#include "gp_base.h"

typedef struct {
    int by_uuid;            /* 1: match uuid, 0: match index */
    unsigned index;         /* CUDA ordinal for CUDA calls, NVML index for NVML calls */
    char uuid[GP_UUID_MAX]; /* "GPU-..." / "MIG-..." */
    uint64_t limit;         /* bytes */
    int compute_percent;    /* 0 when absent; parsed and kept, not enforced here */
} gp_row_t;

typedef enum {
    GP_MODE_INERT = 0,  /* no configuration: pass everything through, account nothing */
    GP_MODE_ACTIVE = 1, /* rows[] are the limits */
    GP_MODE_BROKEN = 2, /* configuration present but unusable: fail closed (deny device memory) */
} gp_mode_t;

typedef struct {
    gp_mode_t mode;
    int nrows;
    gp_row_t rows[GP_MAX_ROWS];
    char source[256]; /* where the limits came from, for messages */
} gp_config_t;

/* Parses a Kubernetes-style quantity ("12Gi", "500Mi", "1G", "1.5Gi", "1048576") into bytes.
 * Returns 0 on success, -1 on malformed input or overflow. */
GP_HIDDEN int gp_parse_quantity(const char *s, uint64_t *out);
/* Fills cfg from the environment (GPUPOOL_LIMITS_FILE, GPUPOOL_MEMORY_LIMIT). Never fails: a bad
 * configuration yields GP_MODE_BROKEN and a message on stderr. */
GP_HIDDEN void gp_config_load(gp_config_t *cfg);

#endif

/*
 * config.c - where the slice comes from.
 *
 * GPUPOOL_LIMITS_FILE names a small text file the node agent mounts read-only into the container
 * (a file, not only environment variables, so a fresh shell or a `su -` cannot shed the limit).
 * Format, one line per visible device (see native/README.md):
 *
 *     # comment
 *     <index|uuid> <memory> [compute-percent]
 *     GPU-5f0a3c2e-1b7d-4c1e-9a51-8f7e6d5c4b3a 12Gi 30
 *
 * GPUPOOL_MEMORY_LIMIT (a quantity) is the fallback for a single card: it stands for "0 <memory>".
 * A configuration that is present but unusable does not fall back to "unlimited": the limiter fails
 * closed (device memory allocations are refused) and says why on stderr.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int gp_parse_quantity(const char *s, uint64_t *out) {
    if (s == NULL || out == NULL) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;

    unsigned __int128 whole = 0;
    while (isdigit((unsigned char)*s)) {
        whole = whole * 10 + (unsigned)(*s - '0');
        if (whole > UINT64_MAX) return -1;
        s++;
    }
    unsigned __int128 frac = 0, frac_scale = 1;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s)) return -1;
        while (isdigit((unsigned char)*s)) {
            if (frac_scale < (unsigned __int128)1000000000000000000ULL) { /* 18 digits is plenty */
                frac = frac * 10 + (unsigned)(*s - '0');
                frac_scale *= 10;
            }
            s++;
        }
    }

    static const struct { const char *suffix; uint64_t mult; } units[] = {
        {"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30}, {"Ti", 1ULL << 40},
        {"Pi", 1ULL << 50}, {"Ei", 1ULL << 60},
        {"k", 1000ULL}, {"M", 1000000ULL}, {"G", 1000000000ULL}, {"T", 1000000000000ULL},
        {"P", 1000000000000000ULL}, {"E", 1000000000000000000ULL},
        {"", 1ULL},
    };
    uint64_t mult = 0;
    const char *rest = s;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].suffix);
        if (strncmp(s, units[i].suffix, n) == 0) {
            const char *after = s + n;
            while (isspace((unsigned char)*after)) after++;
            if (*after == '\0') {
                mult = units[i].mult;
                rest = after;
                break;
            }
        }
    }
    if (mult == 0 || *rest != '\0') return -1;

    unsigned __int128 bytes = whole * mult;
    if (bytes > UINT64_MAX) return -1;
    /* Fractions round up to a whole byte, as Kubernetes does. */
    unsigned __int128 frac_bytes = (frac * mult + frac_scale - 1) / frac_scale;
    bytes += frac_bytes;
    if (bytes > UINT64_MAX) return -1;
    *out = (uint64_t)bytes;
    return 0;
}

static void set_broken(gp_config_t *cfg, const char *fmt, const char *a, unsigned line, const char *why) {
    cfg->mode = GP_MODE_BROKEN;
    cfg->nrows = 0;
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, line, why);
    gp_log(GP_ERROR, "%s; refusing GPU memory allocations until it is fixed", msg);
}

static int parse_line(char *line, gp_row_t *row, const char **why) {
    char *save = NULL;
    char *dev = strtok_r(line, " \t\r\n", &save);
    char *mem = strtok_r(NULL, " \t\r\n", &save);
    char *cpt = strtok_r(NULL, " \t\r\n", &save);
    char *extra = strtok_r(NULL, " \t\r\n", &save);
    memset(row, 0, sizeof *row);
    if (dev == NULL || mem == NULL || extra != NULL) {
        *why = "expected '<index|uuid> <memory> [compute-percent]'";
        return -1;
    }
    if (strncmp(dev, "GPU-", 4) == 0 || strncmp(dev, "MIG-", 4) == 0) {
        if (strlen(dev) >= GP_UUID_MAX) {
            *why = "device uuid too long";
            return -1;
        }
        row->by_uuid = 1;
        snprintf(row->uuid, sizeof row->uuid, "%s", dev);
    } else {
        char *end = NULL;
        errno = 0;
        unsigned long idx = strtoul(dev, &end, 10);
        if (!isdigit((unsigned char)dev[0]) || *end != '\0' || errno != 0 || idx > 1024) {
            *why = "device must be an index (0, 1, ...) or a uuid (GPU-..., MIG-...)";
            return -1;
        }
        row->index = (unsigned)idx;
    }
    if (gp_parse_quantity(mem, &row->limit) != 0) {
        *why = "memory must be a quantity such as 12Gi, 500Mi, 1G or plain bytes";
        return -1;
    }
    if (cpt != NULL) {
        char *end = NULL;
        long pct = strtol(cpt, &end, 10);
        if (!isdigit((unsigned char)cpt[0]) || *end != '\0' || pct < 1 || pct > 100) {
            *why = "compute-percent must be an integer from 1 to 100";
            return -1;
        }
        row->compute_percent = (int)pct;
    }
    return 0;
}

static int same_device(const gp_row_t *a, const gp_row_t *b) {
    if (a->by_uuid != b->by_uuid) return 0;
    return a->by_uuid ? strcmp(a->uuid, b->uuid) == 0 : a->index == b->index;
}

static void load_file(gp_config_t *cfg, const char *path, FILE *f) {
    char buf[512];
    unsigned lineno = 0;
    cfg->nrows = 0;
    while (fgets(buf, sizeof buf, f) != NULL) {
        lineno++;
        if (strchr(buf, '\n') == NULL && !feof(f)) {
            set_broken(cfg, "%s:%u: %s", path, lineno, "line too long");
            return;
        }
        char *hash = strchr(buf, '#');
        if (hash != NULL) *hash = '\0';
        char *p = buf;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') continue;
        if (cfg->nrows == GP_MAX_ROWS) {
            set_broken(cfg, "%s:%u: %s", path, lineno, "more than 16 devices");
            return;
        }
        const char *why = NULL;
        gp_row_t row;
        if (parse_line(p, &row, &why) != 0) {
            set_broken(cfg, "%s:%u: %s", path, lineno, why);
            return;
        }
        for (int i = 0; i < cfg->nrows; i++) {
            if (same_device(&cfg->rows[i], &row)) {
                set_broken(cfg, "%s:%u: %s", path, lineno, "device listed twice");
                return;
            }
        }
        cfg->rows[cfg->nrows++] = row;
    }
    if (ferror(f)) {
        set_broken(cfg, "%s:%u: %s", path, lineno, "read error");
        return;
    }
    if (cfg->nrows == 0) {
        set_broken(cfg, "%s:%u: %s", path, lineno, "no device lines");
        return;
    }
    cfg->mode = GP_MODE_ACTIVE;
    snprintf(cfg->source, sizeof cfg->source, "%s", path);
}

void gp_config_load(gp_config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    const char *path = getenv("GPUPOOL_LIMITS_FILE");
    const char *mem = getenv("GPUPOOL_MEMORY_LIMIT");
    if (path != NULL && path[0] == '\0') path = NULL;
    if (mem != NULL && mem[0] == '\0') mem = NULL;

    if (path != NULL) {
        FILE *f = fopen(path, "re");
        if (f != NULL) {
            load_file(cfg, path, f);
            fclose(f);
            return;
        }
        if (mem == NULL) {
            set_broken(cfg, "GPUPOOL_LIMITS_FILE=%s (line %u): %s", path, 0, strerror(errno));
            return;
        }
        gp_log(GP_WARN, "cannot open GPUPOOL_LIMITS_FILE=%s (%s); using GPUPOOL_MEMORY_LIMIT=%s",
               path, strerror(errno), mem);
    }
    if (mem != NULL) {
        uint64_t bytes = 0;
        if (gp_parse_quantity(mem, &bytes) != 0) {
            set_broken(cfg, "GPUPOOL_MEMORY_LIMIT=%s (line %u): %s", mem, 0,
                       "not a quantity such as 12Gi, 500Mi, 1G or plain bytes");
            return;
        }
        cfg->mode = GP_MODE_ACTIVE;
        cfg->nrows = 1;
        cfg->rows[0].by_uuid = 0;
        cfg->rows[0].index = 0;
        cfg->rows[0].limit = bytes;
        snprintf(cfg->source, sizeof cfg->source, "GPUPOOL_MEMORY_LIMIT");
        return;
    }
    cfg->mode = GP_MODE_INERT;
}

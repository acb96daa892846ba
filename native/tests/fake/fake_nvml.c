/*
 * fake_nvml.c - a stand-in libnvidia-ml.so.1 for the limiter's tests. FAKE_CUDA_DEVICES devices
 * of FAKE_CUDA_TOTAL_MEM bytes, FAKE_NVML_USED bytes (default 0) in use on each, with the same
 * uuids as fake_cuda.c, and its FAKE_CUDA_UUIDS (the cards this process sees, in that order).
 * Handles are small integers cast to pointers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_cuda_types.h"

#define EXPORT __attribute__((visibility("default")))

#define UUID_STEM "GPU-fa4ec0de-0000-0000-0000-0000000000"
#define MAX_DEVICES 8

/* FAKE_CUDA_UUIDS, as fake_cuda.c reads it: the cards this process sees; 0 when unset. Parsed at
 * each call (NVML's callers here are single-threaded probes and tests; no state to guard). */
static unsigned visible_cards(unsigned cards[MAX_DEVICES]) {
    const char *v = getenv("FAKE_CUDA_UUIDS");
    const size_t stem = strlen(UUID_STEM);
    unsigned n = 0;
    while (v != NULL && *v != '\0' && n < MAX_DEVICES) {
        const char *end = strchr(v, ',');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        char hex[3] = {0};
        if (len == stem + 2 && strncmp(v, UUID_STEM, stem) == 0) {
            memcpy(hex, v + stem, 2);
            char *rest;
            unsigned long card = strtoul(hex, &rest, 16);
            if (*rest == '\0' && card < MAX_DEVICES) cards[n++] = (unsigned)card;
        }
        v = end ? end + 1 : NULL;
    }
    return n;
}

static unsigned ndevices(void) {
    unsigned cards[MAX_DEVICES];
    unsigned n_visible = visible_cards(cards);
    if (n_visible > 0) return n_visible;
    const char *v = getenv("FAKE_CUDA_DEVICES");
    int n = v ? atoi(v) : 1;
    return n < 1 ? 1u : n > 8 ? 8u : (unsigned)n;
}

static unsigned long long env_ull(const char *name, unsigned long long dflt) {
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 10) : dflt;
}

static int index_of(nvmlDevice_t d, unsigned *idx) {
    uintptr_t v = (uintptr_t)d;
    if (v < 0x100 || v - 0x100 >= ndevices()) return -1;
    *idx = (unsigned)(v - 0x100);
    return 0;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    *n = ndevices();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i >= ndevices()) return NVML_ERROR_INVALID_ARGUMENT;
    *d = (nvmlDevice_t)(uintptr_t)(0x100 + i);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
    return index_of(d, i) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    unsigned i;
    if (index_of(d, &i) != 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned cards[MAX_DEVICES];
    unsigned card = visible_cards(cards) > 0 ? cards[i] : i;
    int n = snprintf(uuid, length, UUID_STEM "%02x", card);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    unsigned i;
    if (index_of(d, &i) != 0 || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = env_ull("FAKE_CUDA_TOTAL_MEM", 4ULL << 30);
    m->used = env_ull("FAKE_NVML_USED", 0);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    unsigned i;
    if (index_of(d, &i) != 0 || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    /* nvml.h: nvmlMemory_v2 = sizeof(nvmlMemory_v2_t) | 2 << 24 */
    if (m->version != ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24))) return 25; /* ARGUMENT_VERSION_MISMATCH */
    m->total = env_ull("FAKE_CUDA_TOTAL_MEM", 4ULL << 30);
    m->reserved = 1ULL << 20;
    m->used = env_ull("FAKE_NVML_USED", 0) + m->reserved;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

/*
 * arrays.c - the size of a CUDA array, from its descriptor. The driver does not tell: its
 * cuArrayGetMemoryRequirements answers only for arrays created with
 * CUDA_ARRAY3D_DEFERRED_MAPPING, whose memory comes from cuMemCreate handles (charged there). So
 * an array is charged what its elements need at least, and its padding goes to the reserve share,
 * like the context's own memory.
 */
#include "arrays.h"

#include "gp_cuda_types.h"

/* Bytes per channel of the formats every CUDA version has; 0 for the others. */
static unsigned channel_bytes(int format) {
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

static uint64_t at_least_one(uint64_t v) { return v == 0 ? 1 : v; }

uint64_t gp_array_bytes(uint64_t width, uint64_t height, uint64_t depth, int format,
                        unsigned channels, unsigned flags, unsigned levels) {
    if (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return 0;
    uint64_t w = at_least_one(width), h = at_least_one(height), d = at_least_one(depth);
    /* Layers (and a cube map's six faces) are counted in Depth but do not shrink per level. */
    uint64_t layers = 1;
    if (flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) {
        layers = d;
        d = 1;
    }
    uint64_t elements = 0;
    for (unsigned level = 0; level < (levels == 0 ? 1 : levels); level++) {
        elements = gp_sat_add(elements, gp_sat_mul(gp_sat_mul(w, h), gp_sat_mul(d, layers)));
        if (w == 1 && h == 1 && d == 1) break; /* further levels: a few elements, left out */
        w = at_least_one(w / 2);
        h = at_least_one(h / 2);
        d = at_least_one(d / 2);
    }
    unsigned per_channel = channel_bytes(format);
    if (per_channel == 0) return elements / 2;
    return gp_sat_mul(elements, (uint64_t)per_channel * (channels == 0 ? 1 : channels));
}

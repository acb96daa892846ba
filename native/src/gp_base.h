/* gp_base.h - what every translation unit of libgpupool shares: symbol visibility, the size
 * limits of a configuration, saturating arithmetic. No state, no other project header. */
#ifndef GP_BASE_H
#define GP_BASE_H

#include <stddef.h>
#include <stdint.h>

#define GP_HIDDEN __attribute__((visibility("hidden")))
#define GP_EXPORT __attribute__((visibility("default")))

#define GP_MAX_ROWS 16 /* devices one container may be given */
#define GP_UUID_MAX 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

/* Usage counters saturate instead of wrapping: a stray or double free must never turn into
 * "17 TB used" (HAMi #1181), and a huge request must never wrap into a small one. */
static inline uint64_t gp_sat_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
static inline uint64_t gp_sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static inline uint64_t gp_sat_mul(uint64_t a, uint64_t b) {
    if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
    return a * b;
}

#endif

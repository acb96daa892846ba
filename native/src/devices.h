/* devices.h - which line of the limits a device is (devices.c): the CUDA device of the current
 * context, a CUDA ordinal, or an NVML handle. */
#ifndef GP_DEVICES_H
#define GP_DEVICES_H

#include "gp_base.h"
#include "gp_cuda_types.h"

#define GP_ROW_UNLIMITED (-1) /* no configuration, or memory not on a device: do not count */
#define GP_ROW_DENY (-2)      /* configured, but this memory may not be given: refuse it */

/* Where device memory goes: a row of the limits, GP_ROW_UNLIMITED, or GP_ROW_DENY with the
 * error a refused allocation answers. */
typedef struct {
    int row;
    CUresult refusal;
} gp_target_t;

/* The device of the current context. When the limiter cannot tell it (the driver has no
 * cuCtxGetDevice, or it fails), the only line of a one-line configuration, or a refusal. */
GP_HIDDEN gp_target_t gp_target_current(void);
/* A CUDA device ordinal (as cuMemCreate's location and cuDeviceTotalMem name it). */
GP_HIDDEN gp_target_t gp_target_cuda(CUdevice dev);
/* An NVML device handle. */
GP_HIDDEN gp_target_t gp_target_nvml(nvmlDevice_t device);

#endif

/*
 * gpu_probe - what a GPU container on the real node sees, printed for `kubectl logs`:
 *
 *   cuda: device 0 GPU-... total 12884901888 (12.00 GiB)
 *   cuda: cuMemGetInfo free 12884901888 total 12884901888
 *   nvml: device 0 GPU-... total 12884901888 used 0
 *   alloc 12289 MiB (past the total): CUDA_ERROR_OUT_OF_MEMORY
 *   alloc 6144 MiB (half the total): CUDA_SUCCESS
 *   cuda: device 1 GPU-... total 12884901888 (12.00 GiB)     (each further visible card)
 *   nvml: device 1 GPU-... total 12884901888 used 0
 *   probe done
 *
 * then sleeps until stopped (a Deployment's pod must keep running). It links libcuda.so.1 and
 * opens libnvidia-ml.so.1 as real programs do; in the container both are what the runtime
 * mounted (the fake driver here, NVIDIA's on a GPU node) under gpupool's preloaded limiter.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gp_cuda_types.h"

CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGetUuid_v2(CUuuid *, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);

static const char *cu_name(CUresult r) {
    switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    default: return "CUDA_ERROR_OTHER";
    }
}

static void stop(int sig) { (void)sig; _exit(0); }

static void nvml_report(unsigned int index) {
    typedef nvmlReturn_t (*init_fn)(void);
    typedef nvmlReturn_t (*handle_fn)(unsigned int, nvmlDevice_t *);
    typedef nvmlReturn_t (*uuid_fn)(nvmlDevice_t, char *, unsigned int);
    typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_t *);
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == NULL) {
        printf("nvml: cannot open libnvidia-ml.so.1: %s\n", dlerror());
        return;
    }
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    uuid_fn uuid = (uuid_fn)dlsym(lib, "nvmlDeviceGetUUID");
    mem_fn mem = (mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nvmlDevice_t dev;
    char id[96] = "";
    nvmlMemory_t m = {0};
    if (!init || !handle || !uuid || !mem || init() != 0 || handle(index, &dev) != 0) {
        printf("nvml: no device %u\n", index);
        return;
    }
    uuid(dev, id, sizeof id);
    int rc = mem(dev, &m);
    printf("nvml: device %u %s total %llu used %llu rc=%d\n", index, id,
           (unsigned long long)m.total, (unsigned long long)m.used, rc);
}

/* The uuid and total memory CUDA reports for device `index`, one line; its total. */
static size_t cuda_report(int index) {
    CUdevice dev = 0;
    CUuuid u;
    size_t total = 0;
    if (cuDeviceGet(&dev, index) != CUDA_SUCCESS) {
        printf("cuda: no device %d\n", index);
        return 0;
    }
    memset(&u, 0, sizeof u);
    cuDeviceGetUuid_v2(&u, dev);
    const unsigned char *b = (const unsigned char *)u.bytes;
    CUresult rt = cuDeviceTotalMem_v2(&total, dev);
    printf("cuda: device %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x total %zu (%.2f GiB) rc=%s\n",
           index, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
           b[12], b[13], b[14], b[15], total, (double)total / (1 << 30), cu_name(rt));
    return total;
}

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev = 0;
    size_t free_b = 0, info_total = 0;
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
        printf("cuda: no device\n");
    } else {
        size_t total = cuda_report(0);
        CUresult ri = cuMemGetInfo_v2(&free_b, &info_total);
        printf("cuda: cuMemGetInfo free %zu total %zu rc=%s\n", free_b, info_total, cu_name(ri));
        nvml_report(0);
        CUdeviceptr p = 0;
        size_t past = total + ((size_t)1 << 20);
        CUresult r = cuMemAlloc_v2(&p, past);
        printf("alloc %zu MiB (past the total): %s\n", past >> 20, cu_name(r));
        if (r == CUDA_SUCCESS) cuMemFree_v2(p);
        r = cuMemAlloc_v2(&p, total / 2);
        printf("alloc %zu MiB (half the total): %s\n", (total / 2) >> 20, cu_name(r));
        if (cuDeviceGetCount(&count) == CUDA_SUCCESS) {
            for (int i = 1; i < count; i++) {  /* a pod of several cards: each one's slice */
                cuda_report(i);
                nvml_report((unsigned int)i);
            }
        }
    }
    printf("probe done\n");
    for (;;) pause();
}

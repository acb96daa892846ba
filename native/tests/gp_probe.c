/* gp_probe: prints what dlsym(RTLD_NEXT) inside libprobe_a found (2 is right), and whether a
 * global lookup of a driver function succeeds in this process, which never loads libcuda (it must
 * not: the limiter's own export of the name must not make CUDA look present). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int gp_probe_next(void);

int main(void) {
    printf("next=%d\n", gp_probe_next());
    printf("default_cuMemAlloc_v2=%d\n", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") != NULL);
    printf("default_nvmlDeviceGetMemoryInfo=%d\n",
           dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo") != NULL);
    return 0;
}

/*
 * gp_drive.c - runs a script of CUDA driver / NVML calls given on the command line and prints one
 * line per step, so tests/native can compose scenarios and assert on what the program saw:
 *
 *   gp_drive alloc 40Mi alloc 40Mi free 0 info
 *   -> alloc rc=0 id=0 / alloc rc=2 id=1 / free rc=0 / info rc=0 free=... total=...
 *
 * It links the (fake) libcuda directly, reaches it through dlopen/dlsym and through
 * cuGetProcAddress, and uses NVML through dlopen/dlsym, as real programs do. Allocation steps get
 * ids 0, 1, ... in order (failed ones too) for later `free <id>`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp_cuda_types.h"

CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAlloc(CUdeviceptr_v1 *, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *, unsigned int *, unsigned int, unsigned int, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArrayCreate(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFree(CUdeviceptr_v1);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned int *, unsigned int *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDeviceTotalMem(unsigned int *, CUdevice);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef nvmlReturn_t (*nvml_init_fn)(void);
typedef nvmlReturn_t (*nvml_handle_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_mem_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nvml_mem2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);

enum { K_V2 = 1, K_V1 = 2, K_VMM = 3, K_MAP = 4, K_ARRAY = 5, K_MIPMAP = 6 };
static struct {
    uint64_t key; /* pointer, VMM handle, or mapped address */
    uint64_t size; /* VMM handles and mappings */
    int kind;
} objs[4096];
static int nobjs;

static unsigned long long size_arg(const char *s) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (strcmp(end, "Ki") == 0) v <<= 10;
    else if (strcmp(end, "Mi") == 0) v <<= 20;
    else if (strcmp(end, "Gi") == 0) v <<= 30;
    else if (*end != '\0') {
        fprintf(stderr, "bad size %s\n", s);
        exit(64);
    }
    return v;
}

static void record(const char *op, CUresult r, uint64_t key, int kind) {
    int id = nobjs++;
    objs[id].key = r == CUDA_SUCCESS ? key : 0;
    objs[id].kind = kind;
    printf("%s rc=%d id=%d\n", op, r, id);
}

static void *cuda_lib(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        exit(70);
    }
    return h;
}

static nvmlDevice_t nvml_device(unsigned idx, void **lib) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "dlopen libnvidia-ml.so.1: %s\n", dlerror());
        exit(70);
    }
    ((nvml_init_fn)dlsym(h, "nvmlInit_v2"))();
    nvmlDevice_t d = NULL;
    ((nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(idx, &d);
    *lib = h;
    return d;
}

/* fill: allocate `size` chunks until the limiter (or driver) refuses; count the successes. */
typedef struct {
    unsigned long long size;
    long count;
    CUresult last;
} fill_t;

static void *fill_thread(void *arg) {
    fill_t *f = arg;
    CUdeviceptr p;
    CUcontext ctx;
    cuCtxCreate_v2(&ctx, 0, 0); /* the fake's current device is per thread */
    while ((f->last = cuMemAlloc_v2(&p, f->size)) == CUDA_SUCCESS) f->count++;
    return NULL;
}

static int need(int i, int n, int argc, const char *op) {
    if (i + n >= argc) {
        fprintf(stderr, "%s needs %d argument(s)\n", op, n);
        exit(64);
    }
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (cuInit(0) != CUDA_SUCCESS) return 70;
    CUcontext ctx;
    cuCtxCreate_v2(&ctx, 0, 0);
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
        CUdeviceptr p = 0;
        CUresult r;
        if (strcmp(op, "ctx") == 0 && need(i, 1, argc, op)) {
            r = cuCtxCreate_v2(&ctx, 0, atoi(argv[++i]));
            printf("ctx rc=%d\n", r);
        } else if (strcmp(op, "alloc") == 0 && need(i, 1, argc, op)) {
            r = cuMemAlloc_v2(&p, size_arg(argv[++i]));
            record(op, r, p, K_V2);
        } else if (strcmp(op, "alloc_v1") == 0 && need(i, 1, argc, op)) {
            CUdeviceptr_v1 p1 = 0;
            r = cuMemAlloc(&p1, (unsigned)size_arg(argv[++i]));
            record(op, r, p1, K_V1);
        } else if (strcmp(op, "managed") == 0 && need(i, 1, argc, op)) {
            r = cuMemAllocManaged(&p, size_arg(argv[++i]), 1);
            record(op, r, p, K_V2);
        } else if (strcmp(op, "async") == 0 && need(i, 1, argc, op)) {
            r = cuMemAllocAsync(&p, size_arg(argv[++i]), NULL);
            record(op, r, p, K_V2);
        } else if (strcmp(op, "async_ptsz") == 0 && need(i, 1, argc, op)) {
            r = cuMemAllocAsync_ptsz(&p, size_arg(argv[++i]), NULL);
            record(op, r, p, K_V2);
        } else if (strcmp(op, "pool") == 0 && need(i, 1, argc, op)) {
            CUmemoryPool pool;
            cuDeviceGetDefaultMemPool(&pool, 0);
            r = cuMemAllocFromPoolAsync(&p, size_arg(argv[++i]), pool, NULL);
            record(op, r, p, K_V2);
        } else if (strcmp(op, "pool_dev") == 0 && need(i, 2, argc, op)) {
            /* from device <dev>'s default pool, whatever the current context */
            CUmemoryPool pool;
            r = cuDeviceGetDefaultMemPool(&pool, atoi(argv[i + 1]));
            if (r == CUDA_SUCCESS)
                r = cuMemAllocFromPoolAsync(&p, size_arg(argv[i + 2]), pool, NULL);
            i += 2;
            record(op, r, p, K_V2);
        } else if (strcmp(op, "pool_new") == 0 && need(i, 2, argc, op)) {
            /* from a new pool on device <dev>, or on the host ("host") */
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            int host = strcmp(argv[i + 1], "host") == 0;
            props.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = host ? 0 : atoi(argv[i + 1]);
            CUmemoryPool pool;
            r = cuMemPoolCreate(&pool, &props);
            if (r == CUDA_SUCCESS)
                r = cuMemAllocFromPoolAsync(&p, size_arg(argv[i + 2]), pool, NULL);
            i += 2;
            record(op, r, p, K_V2);
        } else if ((strcmp(op, "create") == 0 || strcmp(op, "create_host") == 0) &&
                   need(i, 1, argc, op)) {
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = strcmp(op, "create") == 0 ? CU_MEM_LOCATION_TYPE_DEVICE : 2;
            prop.location.id = 0;
            CUmemGenericAllocationHandle h = 0;
            unsigned long long size = size_arg(argv[++i]);
            r = cuMemCreate(&h, size, &prop, 0);
            record(op, r, h, K_VMM);
            objs[nobjs - 1].size = size;
        } else if ((strcmp(op, "array") == 0 || strcmp(op, "array_v1") == 0) &&
                   need(i, 4, argc, op)) {
            /* array <width> <height> <format> <channels>: a 2D CUDA array */
            unsigned long long w = size_arg(argv[i + 1]), h = size_arg(argv[i + 2]);
            int format = (int)strtol(argv[i + 3], NULL, 0);
            unsigned ch = (unsigned)atoi(argv[i + 4]);
            CUarray a = NULL;
            if (strcmp(op, "array") == 0) {
                CUDA_ARRAY_DESCRIPTOR d = {w, h, format, ch};
                r = cuArrayCreate_v2(&a, &d);
            } else {
                CUDA_ARRAY_DESCRIPTOR_v1 d = {(unsigned)w, (unsigned)h, format, ch};
                r = cuArrayCreate(&a, &d);
            }
            i += 4;
            record(op, r, (uint64_t)(uintptr_t)a, K_ARRAY);
        } else if ((strcmp(op, "array3d") == 0 || strcmp(op, "mipmap") == 0) &&
                   need(i, 4, argc, op)) {
            /* array3d <width> <height> <depth> <flags>, mipmap <width> <height> <depth> <levels>:
             * one-channel float */
            CUDA_ARRAY3D_DESCRIPTOR d = {size_arg(argv[i + 1]), size_arg(argv[i + 2]),
                                         size_arg(argv[i + 3]), CU_AD_FORMAT_FLOAT, 1, 0};
            unsigned last = (unsigned)strtoul(argv[i + 4], NULL, 0);
            i += 4;
            if (strcmp(op, "array3d") == 0) {
                d.Flags = last;
                CUarray a = NULL;
                r = cuArray3DCreate_v2(&a, &d);
                record(op, r, (uint64_t)(uintptr_t)a, K_ARRAY);
            } else {
                CUmipmappedArray m = NULL;
                r = cuMipmappedArrayCreate(&m, &d, last);
                record(op, r, (uint64_t)(uintptr_t)m, K_MIPMAP);
            }
        } else if ((strcmp(op, "map") == 0 && need(i, 1, argc, op)) ||
                   (strcmp(op, "map_pair") == 0 && need(i, 2, argc, op))) {
            /* reserve address space for one handle (or two, back to back) and map it there */
            int a = atoi(argv[++i]);
            int b = strcmp(op, "map_pair") == 0 ? atoi(argv[++i]) : -1;
            uint64_t size = objs[a].size + (b >= 0 ? objs[b].size : 0);
            CUdeviceptr va = 0;
            r = cuMemAddressReserve(&va, size, 0, 0, 0);
            if (r == CUDA_SUCCESS) r = cuMemMap(va, objs[a].size, 0, objs[a].key, 0);
            if (r == CUDA_SUCCESS && b >= 0)
                r = cuMemMap(va + objs[a].size, objs[b].size, 0, objs[b].key, 0);
            record(op, r, va, K_MAP);
            objs[nobjs - 1].size = size;
        } else if (strcmp(op, "unmap") == 0 && need(i, 1, argc, op)) {
            int id = atoi(argv[++i]);
            r = cuMemUnmap(objs[id].key, objs[id].size);
            if (r == CUDA_SUCCESS) cuMemAddressFree(objs[id].key, objs[id].size);
            printf("unmap rc=%d\n", r);
        } else if (strcmp(op, "retain") == 0 && need(i, 1, argc, op)) {
            /* the handle behind a mapping: one more reference, to be released with free <id> */
            CUmemGenericAllocationHandle h = 0;
            r = cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)objs[atoi(argv[++i])].key);
            record(op, r, h, K_VMM);
        } else if (strcmp(op, "pitch") == 0 && need(i, 2, argc, op)) {
            size_t pitch = 0;
            size_t w = size_arg(argv[i + 1]), h = size_arg(argv[i + 2]);
            i += 2;
            r = cuMemAllocPitch_v2(&p, &pitch, w, h, 4);
            record(op, r, p, K_V2);
            printf("pitch_value %zu\n", pitch);
        } else if (strcmp(op, "pitch_v1") == 0 && need(i, 2, argc, op)) {
            unsigned pitch = 0;
            CUdeviceptr_v1 p1 = 0;
            unsigned w = (unsigned)size_arg(argv[i + 1]), h = (unsigned)size_arg(argv[i + 2]);
            i += 2;
            r = cuMemAllocPitch(&p1, &pitch, w, h, 4);
            record(op, r, p1, K_V1);
            printf("pitch_value %u\n", pitch);
        } else if ((strcmp(op, "gpa1") == 0 || strcmp(op, "gpa2") == 0) && need(i, 1, argc, op)) {
            void *fn = NULL;
            r = strcmp(op, "gpa1") == 0 ? cuGetProcAddress("cuMemAlloc", &fn, 12000, 0)
                                        : cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, NULL);
            if (r == CUDA_SUCCESS) r = ((alloc_fn)fn)(&p, size_arg(argv[i + 1]));
            i++;
            record(op, r, p, K_V2);
        } else if (strcmp(op, "gpa2_async_ptsz") == 0 && need(i, 1, argc, op)) {
            void *fn = NULL;
            r = cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000,
                                    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL);
            if (r == CUDA_SUCCESS) r = ((async_fn)fn)(&p, size_arg(argv[i + 1]), NULL);
            i++;
            record(op, r, p, K_V2);
        } else if (strcmp(op, "dlsym") == 0 && need(i, 1, argc, op)) {
            alloc_fn fn = (alloc_fn)dlsym(cuda_lib(), "cuMemAlloc_v2");
            r = fn(&p, size_arg(argv[++i]));
            record(op, r, p, K_V2);
        } else if (strcmp(op, "dlsym_default") == 0 && need(i, 1, argc, op)) {
            /* libcuda is linked, so a global lookup finds the (interposed) function */
            alloc_fn fn = (alloc_fn)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
            r = fn != NULL ? fn(&p, size_arg(argv[i + 1])) : CUDA_ERROR_NOT_FOUND;
            i++;
            record(op, r, p, K_V2);
        } else if (strcmp(op, "dlsym_gpa") == 0 && need(i, 1, argc, op)) {
            gpa2_fn g = (gpa2_fn)dlsym(cuda_lib(), "cuGetProcAddress_v2");
            void *fn = NULL;
            r = g("cuMemAlloc", &fn, 12000, 0, NULL);
            if (r == CUDA_SUCCESS) r = ((alloc_fn)fn)(&p, size_arg(argv[i + 1]));
            i++;
            record(op, r, p, K_V2);
        } else if (strcmp(op, "gpa_hooked") == 0 && need(i, 2, argc, op)) {
            /* does cuGetProcAddress_v2(<base>) hand out libgpupool's function named <symbol>? */
            void *fn = NULL;
            const char *base = argv[++i], *symbol = argv[++i];
            r = cuGetProcAddress_v2(base, &fn, 12040, 0, NULL);
            Dl_info where;
            int limiter = fn != NULL && dladdr(fn, &where) != 0 && where.dli_fname != NULL &&
                          strstr(where.dli_fname, "libgpupool") != NULL && where.dli_sname != NULL &&
                          strcmp(where.dli_sname, symbol) == 0;
            printf("gpa_hooked rc=%d limiter=%d\n", r, limiter);
        } else if (strcmp(op, "gpa_info") == 0) {
            void *fn = NULL;
            size_t f = 0, t = 0;
            r = cuGetProcAddress_v2("cuMemGetInfo", &fn, 12000, 0, NULL);
            if (r == CUDA_SUCCESS) r = ((info_fn)fn)(&f, &t);
            printf("gpa_info rc=%d free=%zu total=%zu\n", r, f, t);
        } else if (strcmp(op, "free") == 0 && need(i, 1, argc, op)) {
            int id = atoi(argv[++i]);
            if (objs[id].kind == K_VMM) r = cuMemRelease(objs[id].key);
            else if (objs[id].kind == K_ARRAY) r = cuArrayDestroy((CUarray)(uintptr_t)objs[id].key);
            else if (objs[id].kind == K_MIPMAP)
                r = cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)objs[id].key);
            else if (objs[id].kind == K_V1) r = cuMemFree((CUdeviceptr_v1)objs[id].key);
            else r = cuMemFree_v2(objs[id].key);
            printf("free rc=%d\n", r);
        } else if (strcmp(op, "freeasync") == 0 && need(i, 1, argc, op)) {
            r = cuMemFreeAsync(objs[atoi(argv[++i])].key, NULL);
            printf("freeasync rc=%d\n", r);
        } else if (strcmp(op, "free_unknown") == 0) {
            r = cuMemFree_v2(0xdead0000ULL);
            printf("free_unknown rc=%d\n", r);
        } else if (strcmp(op, "info") == 0) {
            size_t f = 0, t = 0;
            r = cuMemGetInfo_v2(&f, &t);
            printf("info rc=%d free=%zu total=%zu\n", r, f, t);
        } else if (strcmp(op, "info_v1") == 0) {
            unsigned f = 0, t = 0;
            r = cuMemGetInfo(&f, &t);
            printf("info_v1 rc=%d free=%u total=%u\n", r, f, t);
        } else if (strcmp(op, "total") == 0 && need(i, 1, argc, op)) {
            size_t t = 0;
            r = cuDeviceTotalMem_v2(&t, atoi(argv[++i]));
            printf("total rc=%d total=%zu\n", r, t);
        } else if (strcmp(op, "total_v1") == 0 && need(i, 1, argc, op)) {
            unsigned t = 0;
            r = cuDeviceTotalMem(&t, atoi(argv[++i]));
            printf("total_v1 rc=%d total=%u\n", r, t);
        } else if (strcmp(op, "nvml") == 0 && need(i, 1, argc, op)) {
            void *h;
            nvmlDevice_t d = nvml_device((unsigned)atoi(argv[++i]), &h);
            nvmlMemory_t m = {0, 0, 0};
            nvmlReturn_t nr = ((nvml_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo"))(d, &m);
            printf("nvml rc=%d total=%llu free=%llu used=%llu\n", nr, m.total, m.free, m.used);
        } else if (strcmp(op, "nvml_v2") == 0 && need(i, 1, argc, op)) {
            void *h;
            nvmlDevice_t d = nvml_device((unsigned)atoi(argv[++i]), &h);
            nvmlMemory_v2_t m;
            memset(&m, 0, sizeof m);
            m.version = (unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24);
            nvmlReturn_t nr = ((nvml_mem2_fn)dlsym(h, "nvmlDeviceGetMemoryInfo_v2"))(d, &m);
            printf("nvml_v2 rc=%d total=%llu free=%llu used=%llu reserved=%llu\n", nr, m.total,
                   m.free, m.used, m.reserved);
        } else if (strcmp(op, "hold_lock") == 0) {
            int (*hold)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpupool_test_hold_lock");
            printf("hold_lock rc=%d\n", hold != NULL ? hold() : -100);
        } else if (strcmp(op, "ready") == 0) {
            printf("READY\n");
        } else if (strcmp(op, "wait") == 0) {
            char line[64];
            if (fgets(line, sizeof line, stdin) == NULL) {
                /* parent gone: fall through */
            }
            printf("resumed\n");
        } else if (strcmp(op, "fill") == 0 && need(i, 1, argc, op)) {
            fill_t f = {size_arg(argv[++i]), 0, 0};
            fill_thread(&f);
            printf("fill rc=%d count=%ld\n", f.last, f.count);
        } else if (strcmp(op, "fill_mt") == 0 && need(i, 2, argc, op)) {
            int n = atoi(argv[i + 1]);
            unsigned long long size = size_arg(argv[i + 2]);
            i += 2;
            fill_t fs[64];
            pthread_t th[64];
            if (n < 1 || n > 64) return 64;
            for (int t = 0; t < n; t++) {
                fs[t] = (fill_t){size, 0, 0};
                pthread_create(&th[t], NULL, fill_thread, &fs[t]);
            }
            long total = 0;
            int rc = 0;
            for (int t = 0; t < n; t++) {
                pthread_join(th[t], NULL);
                total += fs[t].count;
                if (fs[t].last != CUDA_ERROR_OUT_OF_MEMORY) rc = fs[t].last;
            }
            printf("fill_mt rc=%d count=%ld\n", rc == 0 ? CUDA_ERROR_OUT_OF_MEMORY : rc, total);
        } else if (strcmp(op, "fork_alloc") == 0 && need(i, 1, argc, op)) {
            /* a child process allocates and exits without freeing: its share must come back */
            unsigned long long n = size_arg(argv[++i]);
            pid_t pid = fork();
            if (pid == 0) {
                CUdeviceptr q;
                _exit(cuMemAlloc_v2(&q, n) == CUDA_SUCCESS ? 0 : 1);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            printf("fork_alloc child_exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        } else {
            fprintf(stderr, "unknown step %s\n", op);
            return 64;
        }
    }
    return 0;
}

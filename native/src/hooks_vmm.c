/*
 * hooks_vmm.c - what happens to a cuMemCreate handle afterwards (VMM: PyTorch's expandable
 * segments, the CUDA samples' vectorAddMMAP). Its bytes were charged at cuMemCreate
 * (hooks_alloc.c) and are credited when it is released and unmapped everywhere (vmm.c).
 */
#include "hooks.h"

#include "driver.h"
#include "slice.h"
#include "vmm.h"

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    __typeof__(&cuMemRelease) f = REAL(cuMemRelease);
    if (f == NULL) return GP_NO_DRIVER;
    if (!gp_active()) return f(handle);
    gp_release_t rel;
    gp_release_begin(handle, &rel);
    CUresult r = f(handle);
    gp_release_end(&rel, r);
    return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
    __typeof__(&cuMemMap) f = REAL(cuMemMap);
    if (f == NULL) return GP_NO_DRIVER;
    if (!gp_active()) return f(ptr, size, offset, handle, flags);
    int ours = gp_map_begin(handle);
    CUresult r = f(ptr, size, offset, handle, flags);
    gp_map_end(ours, ptr, size, handle, r);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    __typeof__(&cuMemUnmap) f = REAL(cuMemUnmap);
    if (f == NULL) return GP_NO_DRIVER;
    if (!gp_active()) return f(ptr, size);
    gp_unmap_t u;
    gp_unmap_begin(ptr, size, &u);
    CUresult r = f(ptr, size);
    gp_unmap_end(&u, r);
    return r;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    __typeof__(&cuMemRetainAllocationHandle) f = REAL(cuMemRetainAllocationHandle);
    if (f == NULL) return GP_NO_DRIVER;
    CUresult r = f(handle, addr);
    if (r == CUDA_SUCCESS && handle != NULL && gp_active()) gp_retained(*handle);
    return r;
}

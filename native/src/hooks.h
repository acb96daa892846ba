/* hooks.h - every driver and NVML entry point libgpupool exports in front of the real one.
 * Defined in hooks_alloc.c (allocations and frees), hooks_vmm.c (VMM handle lifetime),
 * hooks_pools.c (which device a pool is on), hooks_info.c (what the program is told about
 * memory) and interpose.c (cuGetProcAddress); driver.c lists them in the hook table. */
#ifndef GP_HOOKS_H
#define GP_HOOKS_H

#include "gp_base.h"
#include "gp_cuda_types.h"

/* ---- allocations and frees (hooks_alloc.c) ------------------------------------------------- */
GP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
GP_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
GP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes);
GP_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                   unsigned int WidthInBytes, unsigned int Height,
                                   unsigned int ElementSizeBytes);
GP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
GP_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
GP_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
GP_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream);
GP_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream);
GP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags);
GP_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
GP_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray);
GP_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle,
                                      const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
GP_EXPORT CUresult cuArray3DCreate(CUarray *pHandle,
                                   const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray);
GP_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                          unsigned int numMipmapLevels);
GP_EXPORT CUresult cuArrayDestroy(CUarray hArray);
GP_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);
GP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
GP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr);
GP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
GP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);

/* ---- memory pools: which device each is on (hooks_pools.c) --------------------------------- */
GP_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
GP_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool);
GP_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
GP_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);

/* ---- VMM handles: released and unmapped (hooks_vmm.c) -------------------------------------- */
GP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
GP_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags);
GP_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
GP_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);

/* ---- what the program is told (hooks_info.c) ----------------------------------------------- */
GP_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
GP_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes);
GP_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
GP_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
GP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
GP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);

/* ---- cuGetProcAddress (interpose.c; dlsym is there too) ------------------------------------ */
GP_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags);
GP_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus);
GP_EXPORT CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus);

#endif

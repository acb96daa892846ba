/*
 * hooks_alloc.c - every entry point that allocates or frees device memory (the lifetime of VMM
 * handles after cuMemCreate is in hooks_vmm.c).
 *
 * All of them follow one protocol (charge.c): find where the memory goes, reserve it, call the
 * driver, then remember the pointer or give the reservation back; a free forgets the pointer,
 * calls the driver, then credits it. CHARGED_ALLOC and UNCHARGED_FREE below are that protocol,
 * written once; each entry point is one line naming its arguments, where its memory goes and
 * what it hands back.
 *
 * Twins (cuMemAlloc / cuMemAlloc_v2, cuMemFree / cuMemFree_v2, the _ptsz variants) share the
 * body but each calls the driver's own variant. For the v1 entry points (CUDA < 3.2 ABI: 32-bit
 * CUdeviceptr_v1 and sizes) that is a must, not a preference: a v1 caller's 32-bit pointer cannot
 * hold an address the v2 function may return, so v1 cannot be emulated through v2.
 */
#include "hooks.h"

#include "arrays.h"
#include "charge.h"
#include "devices.h"
#include "driver.h"
#include "pools.h"
#include "ptrtab.h"
#include "slice.h"

/* One allocation through entry point `sym`: charge `bytes` to `target` before the driver is
 * called, and file the driver's answer `key` (a device pointer, VMM handle or array) under
 * `kind`. */
#define CHARGED_ALLOC(sym, PARAMS, ARGS, target, bytes, kind, key)                   \
    CUresult sym PARAMS {                                                            \
        __typeof__(&sym) f = REAL(sym);                                              \
        if (f == NULL) return GP_NO_DRIVER;                                          \
        gp_charge_t c;                                                               \
        CUresult r = gp_charge_begin(target, bytes, &c);                             \
        if (r != CUDA_SUCCESS) return r;                                             \
        r = f ARGS;                                                                  \
        gp_charge_end(&c, r, kind, r == CUDA_SUCCESS ? (uint64_t)(key) : 0);         \
        return r;                                                                    \
    }

/* One free through entry point `sym` of the allocation filed as (kind, key). */
#define UNCHARGED_FREE(sym, PARAMS, ARGS, kind, key)                                 \
    CUresult sym PARAMS {                                                            \
        __typeof__(&sym) f = REAL(sym);                                              \
        if (f == NULL) return GP_NO_DRIVER;                                          \
        if (!gp_active()) return f ARGS;                                             \
        gp_alloc_t e;                                                                \
        int had = gp_uncharge_begin(kind, (uint64_t)(key), &e);                      \
        CUresult r = f ARGS;                                                         \
        gp_uncharge_end(had, &e, r);                                                 \
        return r;                                                                    \
    }

/* Only device-resident VMM memory counts; host (NUMA) locations are not the card's. */
static gp_target_t vmm_target(const CUmemAllocationProp *prop) {
    if (prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return (gp_target_t){GP_ROW_UNLIMITED, CUDA_SUCCESS};
    return gp_target_cuda(prop->location.id);
}

/* ---- allocations ---------------------------------------------------------------------------- */

CHARGED_ALLOC(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize),
              gp_target_current(), bytesize, GP_KIND_PTR, *dptr)
CHARGED_ALLOC(cuMemAlloc, (CUdeviceptr_v1 *dptr, unsigned int bytesize), (dptr, bytesize),
              gp_target_current(), bytesize, GP_KIND_PTR, *dptr)

/* Managed memory is charged in full to the current device, though it may migrate. */
CHARGED_ALLOC(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags),
              (dptr, bytesize, flags), gp_target_current(), bytesize, GP_KIND_PTR, *dptr)

/* Stream-ordered allocations: from a pool, to the pool's device when the program got the pool
 * through an entry point we watch (pools.c), else to the current context's device, as
 * cuMemAllocAsync is (the usual case: the stream belongs to the current context). Frees are
 * credited when enqueued. */
CHARGED_ALLOC(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
              (dptr, bytesize, hStream), gp_target_current(), bytesize, GP_KIND_PTR, *dptr)
CHARGED_ALLOC(cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
              (dptr, bytesize, hStream), gp_target_current(), bytesize, GP_KIND_PTR, *dptr)
CHARGED_ALLOC(cuMemAllocFromPoolAsync,
              (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
              (dptr, bytesize, pool, hStream), gp_target_pool(pool), bytesize, GP_KIND_PTR,
              *dptr)
CHARGED_ALLOC(cuMemAllocFromPoolAsync_ptsz,
              (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
              (dptr, bytesize, pool, hStream), gp_target_pool(pool), bytesize, GP_KIND_PTR,
              *dptr)

/* VMM (PyTorch's expandable segments): physical memory is charged when created, whatever is
 * mapped where, and credited once it is both released and unmapped (hooks_vmm.c). */
CHARGED_ALLOC(cuMemCreate,
              (CUmemGenericAllocationHandle *handle, size_t size,
               const CUmemAllocationProp *prop, unsigned long long flags),
              (handle, size, prop, flags), vmm_target(prop), size, GP_KIND_VMM, *handle)

/* CUDA arrays (textures, surfaces) on the current device, charged what their elements need at
 * least (arrays.c: the driver does not say what it really takes). The v1 entry points take
 * descriptors with 32-bit extents: the same body over their own type, and their own driver
 * variant. */
#define ARRAY_BYTES_2D(desc) \
    ((desc) == NULL ? 0      \
                    : gp_array_bytes((desc)->Width, (desc)->Height, 1, (desc)->Format, \
                                     (desc)->NumChannels, 0, 1))
#define ARRAY_BYTES_3D(desc, levels)                                                      \
    ((desc) == NULL ? 0                                                                  \
                    : gp_array_bytes((desc)->Width, (desc)->Height, (desc)->Depth,       \
                                     (desc)->Format, (desc)->NumChannels, (desc)->Flags, \
                                     levels))
#define ARRAY_2D(sym, desc_t)                                                                \
    CHARGED_ALLOC(sym, (CUarray *pHandle, const desc_t *pAllocateArray),                    \
                  (pHandle, pAllocateArray), gp_target_current(),                            \
                  ARRAY_BYTES_2D(pAllocateArray), GP_KIND_ARRAY, (uintptr_t)*pHandle)
#define ARRAY_3D(sym, desc_t)                                                                \
    CHARGED_ALLOC(sym, (CUarray *pHandle, const desc_t *pAllocateArray),                    \
                  (pHandle, pAllocateArray), gp_target_current(),                            \
                  ARRAY_BYTES_3D(pAllocateArray, 1), GP_KIND_ARRAY, (uintptr_t)*pHandle)
ARRAY_2D(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR)
ARRAY_2D(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1)
ARRAY_3D(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR)
ARRAY_3D(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1)
CHARGED_ALLOC(cuMipmappedArrayCreate,
              (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
               unsigned int numMipmapLevels),
              (pHandle, pMipmappedArrayDesc, numMipmapLevels), gp_target_current(),
              ARRAY_BYTES_3D(pMipmappedArrayDesc, numMipmapLevels), GP_KIND_ARRAY,
              (uintptr_t)*pHandle)

/* Pitched allocations: the pitch is known only afterwards, so width * height is charged first
 * and settled to pitch * height once the driver has answered; if the padding does not fit, the
 * allocation is freed again and refused. One body for v1 and v2 (see the top of the file for why
 * each calls its own driver variant); `free_sym` is the free of the same ABI. */
#define PITCHED_ALLOC(sym, ptr_t, size_type, free_sym)                                      \
    CUresult sym(ptr_t *dptr, size_type *pPitch, size_type WidthInBytes, size_type Height,  \
                 unsigned int ElementSizeBytes) {                                           \
        __typeof__(&sym) f = REAL(sym);                                                     \
        if (f == NULL) return GP_NO_DRIVER;                                                 \
        gp_charge_t c;                                                                      \
        CUresult r = gp_charge_begin(gp_target_current(), gp_sat_mul(WidthInBytes, Height), \
                                     &c);                                                   \
        if (r != CUDA_SUCCESS) return r;                                                    \
        r = f(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);                        \
        if (r == CUDA_SUCCESS && pPitch != NULL &&                                          \
            gp_charge_settle(&c, gp_sat_mul(*pPitch, Height)) != CUDA_SUCCESS) {            \
            __typeof__(&free_sym) ff = REAL(free_sym);                                      \
            if (ff != NULL) ff(*dptr);                                                      \
            r = CUDA_ERROR_OUT_OF_MEMORY;                                                   \
        }                                                                                   \
        gp_charge_end(&c, r, GP_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);                   \
        return r;                                                                           \
    }
PITCHED_ALLOC(cuMemAllocPitch_v2, CUdeviceptr, size_t, cuMemFree_v2)
PITCHED_ALLOC(cuMemAllocPitch, CUdeviceptr_v1, unsigned int, cuMemFree)

/* ---- frees ---------------------------------------------------------------------------------- */

UNCHARGED_FREE(cuArrayDestroy, (CUarray hArray), (hArray), GP_KIND_ARRAY, (uintptr_t)hArray)
UNCHARGED_FREE(cuMipmappedArrayDestroy, (CUmipmappedArray hMipmappedArray), (hMipmappedArray),
               GP_KIND_ARRAY, (uintptr_t)hMipmappedArray)
UNCHARGED_FREE(cuMemFree_v2, (CUdeviceptr dptr), (dptr), GP_KIND_PTR, dptr)
UNCHARGED_FREE(cuMemFree, (CUdeviceptr_v1 dptr), (dptr), GP_KIND_PTR, dptr)
UNCHARGED_FREE(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), GP_KIND_PTR,
               dptr)
UNCHARGED_FREE(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream),
               GP_KIND_PTR, dptr)

// The CUDA toolkit headers the backend uses. Every file of kernels/cuda/ includes this (through
// gpu.h) instead of naming CUDA headers, so that a HIP build can swap in vendors/hip.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Programmatic dependent launch (Hopper): the kernel that follows may be scheduled while this
// one runs; it waits here until this one's memory is visible.
#define WAAV_GPU_HAS_PDL 1
// mma.sync / ldmatrix / cp.async tensor-core paths (PTX, sm_80 and later).
#define WAAV_GPU_HAS_MMA 1
#define WAAV_GPU_NAME "cuda"
// A by-value kernel argument indexed at run time (an array of pointers) is read where it lives
// instead of being copied to each thread's stack first.
#define WAAV_GRID_CONSTANT __grid_constant__

// Device primitives of the persistent kernels (persistent_decoder.cu): GPU-scope acquire/release
// for the grid barrier, and L2 prefetch of a whole byte range by one instruction (Hopper's bulk
// copy engine; a no-op before sm_90). Device code only.
#if defined(__CUDACC__)
namespace waav::gpu {
__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void RedAddRelease(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// `bytes` a multiple of 16, `p` 16-byte aligned.
__device__ __forceinline__ void PrefetchL2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// Four floats through L2 only (data other blocks of the same kernel wrote).
__device__ __forceinline__ float4 LoadCg4(const float4* p) { return __ldcg(p); }
// 16 bytes global -> shared without registers (cp.async through L2 only, sm_80); complete and
// visible to the issuing thread after CopyAsyncWaitAll(), to the block after a barrier that
// follows it. Both addresses 16-byte aligned.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(global)
               : "memory");
}
__device__ __forceinline__ void CopyAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
}  // namespace waav::gpu
#endif

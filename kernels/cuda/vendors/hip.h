// HIP build of the CUDA sources: maps the CUDA runtime names that kernels/cuda/ uses to their HIP
// equivalents (after ggml's vendors/hip.h). Only names used in kernels/cuda/ are mapped; add a
// line here when the CUDA code starts using a new one.
//
// What has no HIP equivalent is compiled out by the feature macros below:
//  * no programmatic dependent launch: kernels launch with plain stream order;
//  * no mma.sync/ldmatrix/cp.async PTX: attention uses the f32 split-KV kernel for every shape.
// cuBLAS is loaded at run time (blas.cc); the HIP build does not load hipBLAS yet and uses the
// backend's own tiled GEMM (see docs/gpu.md).
#pragma once

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define WAAV_GPU_HAS_PDL 0
#define WAAV_GPU_HAS_MMA 0
#define WAAV_GPU_NAME "hip"
#define WAAV_GRID_CONSTANT  // no such qualifier: the argument may be copied per thread

// Types.
#define cudaError_t hipError_t
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphNode_t hipGraphNode_t
#define cudaDeviceProp hipDeviceProp_t
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaGraphExecUpdateResult hipGraphExecUpdateResult

// Constants.
#define cudaSuccess hipSuccess
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaGraphExecUpdateSuccess hipGraphExecUpdateSuccess
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor \
  hipDeviceAttributeMaxSharedMemoryPerMultiprocessor

// Functions.
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaSetDevice hipSetDevice
#define cudaGetDevice hipGetDevice
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemset hipMemset
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaGraphInstantiate(exec, graph, flags) \
  hipGraphInstantiate(exec, graph, nullptr, nullptr, 0)
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphGetNodes hipGraphGetNodes
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncGetAttributes hipFuncGetAttributes
#define cudaFuncAttributes hipFuncAttributes
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaDeviceSynchronize hipDeviceSynchronize

// Device intrinsics. Kernels treat a "warp" as 32 lanes; on a 64-lane wavefront (gfx90a) the
// shuffles below stay inside each 32-lane half, so the same code computes the same result
// (with half-filled wavefronts where a kernel would rather use 64).
#define __shfl_xor_sync(mask, var, lane_mask) __shfl_xor(var, lane_mask, 32)
#define __shfl_sync(mask, var, src_lane) __shfl(var, src_lane, 32)
// A wavefront's lanes run in lock step: nothing to wait for within one.
#define __syncwarp() ((void)0)
// L2-coherent load of data other blocks wrote before a __threadfence() (SplitAttention's merge).
#define __ldcg(ptr) __hip_atomic_load(ptr, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
#define cudaLaunchCooperativeKernel hipLaunchCooperativeKernel
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaDevAttrCooperativeLaunch hipDeviceAttributeCooperativeLaunch
#define cudaErrorInvalidValue hipErrorInvalidValue

// Device primitives of the persistent kernels (see vendors/cuda.h): agent-scope atomics, and no
// bulk L2 prefetch.
namespace waav::gpu {
__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void StoreRelease(unsigned* p, unsigned v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void RedAddRelease(unsigned* p, unsigned v) {
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void PrefetchL2(const void*, unsigned) {}
__device__ __forceinline__ float4 LoadCg4(const float4* p) {
  const float* f = reinterpret_cast<const float*>(p);
  return make_float4(__ldcg(f), __ldcg(f + 1), __ldcg(f + 2), __ldcg(f + 3));
}
// No asynchronous copy: 16 bytes copied at once (L2-coherent loads, like __ldcg).
__device__ __forceinline__ void CopyAsync16(void* smem, const void* global) {
  const unsigned* src = static_cast<const unsigned*>(global);
  unsigned* dst = static_cast<unsigned*>(smem);
  for (int i = 0; i < 4; ++i) {
    dst[i] = __hip_atomic_load(src + i, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  }
}
__device__ __forceinline__ void CopyAsyncWaitAll() {}
}  // namespace waav::gpu

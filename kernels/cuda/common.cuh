// Device-side helpers shared by every kernel family: launch plumbing, warp reductions, f16
// loads, and the device error word through which kernels report bad index values.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

// ---- Architectures --------------------------------------------------------------------------
// 0 in a device pass for an architecture before sm_90 (Ampere, Ada), 1 in every other pass:
// Hopper's clusters, distributed shared memory, bulk copies and mbarrier transactions are
// compiled only where 1. The kernels made of them keep their names in every pass (the host
// registers one set) and trap where 0; the host never launches them there
// (GpuCodeArchitecture in arch.h).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define WAAV_GPU_SM90_CODE 0
#else
#define WAAV_GPU_SM90_CODE 1
#endif

// ---- Programmatic dependent launch ----------------------------------------------------------
// Every kernel starts with WaitForPreviousKernel() before it touches global memory, and calls
// AllowNextKernel() once it no longer needs to delay the next one. Both are no-ops when the launch
// did not ask for programmatic serialization (LaunchConfig::pdl false) or the target lacks it.
__device__ __forceinline__ void WaitForPreviousKernel() {
#if WAAV_GPU_HAS_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowNextKernel() {
#if WAAV_GPU_HAS_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- Reductions -----------------------------------------------------------------------------
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block; `scratch` holds one float per warp. Every thread gets the result.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = -INFINITY;
  for (int w = 0; w < warps; ++w) total = fmaxf(total, scratch[w]);
  return total;
}

// ---- Element access -------------------------------------------------------------------------
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

// Eight f16 values held raw in 16 bytes, as floats (exact).
__device__ __forceinline__ void WidenHalves8(const uint4& raw, float* out) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// 16 raw bytes of a K or V row as floats: 8 f16 or 4 f32 values.
template <typename KV>
__device__ __forceinline__ void WidenRow16(const uint4& raw, float* out) {
  if constexpr (sizeof(KV) == 2) {
    WidenHalves8(raw, out);
  } else {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  }
}

// Eight consecutive weights (f16 or f32) held raw, so that they can be loaded before
// WaitForPreviousKernel() (weights never depend on the previous kernel) and widened after.
template <typename W>
struct Raw8;
template <>
struct Raw8<__half> {
  uint4 v;
  __device__ __forceinline__ void Load(const __half* p) { v = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void Zero() { v = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ void Widen(float* out) const { WidenHalves8(v, out); }
};
template <>
struct Raw8<float> {
  float4 a, b;
  __device__ __forceinline__ void Load(const float* p) {
    a = *reinterpret_cast<const float4*>(p);
    b = *reinterpret_cast<const float4*>(p + 4);
  }
  __device__ __forceinline__ void Zero() { a = b = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
  __device__ __forceinline__ void Widen(float* out) const {
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

// Exact GELU (erf form, as in Whisper): 0.5·x·erfc(−x/√2) keeps precision for very negative x.
__device__ __forceinline__ float GeluExact(float x) {
  return 0.5f * x * erfcf(-x * 0.70710678118654752f);
}

// GELU for results rounded to f16 right after: erfc(|z|), z = x/√2, by Abramowitz and Stegun
// 7.1.26 (erfc(z) ≈ t·(a1 + t·(a2 + ...))·e^(−z²), t = 1 / (1 + p·z); a few FMAs, a reciprocal and
// an exp2 where erfcf's branches and divisions made the f16 epilogue compute-bound). Against
// GeluExact, over [−12, 12]: at most 4.2e-7 absolute, 1.3e-5 relative where |GELU| > 0.01, far
// under f16's half ulp (2.4e-4 relative), with which the outputs are rounded.
__device__ __forceinline__ float GeluForHalf(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.3275911f, z, 1.0f));
  const float poly =
      t * fmaf(t,
               fmaf(t, fmaf(t, fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f),
               0.254829592f);
  const float q = poly * exp2f(-z * z * 1.4426950408889634f);  // erfc(|z|)
  return 0.5f * x * (x < 0.0f ? q : 2.0f - q);
}

// ---- Errors found on the device -------------------------------------------------------------
// A kernel that finds an index value out of range (a token id, a position, a cache length)
// skips the affected rows and records one 64-bit word: the op code (DeviceErrorOp) in the top
// byte, the batch row or flat index in the next 24 bits, the offending value in the low 32.
// The word lives in host-mapped memory; the backend reads and clears it at Synchronize().
__device__ __forceinline__ void ReportDeviceError(unsigned long long* word, DeviceErrorOp op,
                                                  int64_t index, int32_t value) {
  if (word == nullptr) return;
  const unsigned long long code = (static_cast<unsigned long long>(op) << 56) |
                                  ((static_cast<unsigned long long>(index) & 0xffffffull) << 32) |
                                  static_cast<unsigned long long>(static_cast<uint32_t>(value));
  *reinterpret_cast<volatile unsigned long long*>(word) = code;
  __threadfence_system();
}

// out[0..5) of a greedy choice from its maximum, token and sum (Backend::ArgmaxLogSumExp's
// layout; ArgmaxLogSumExp's kernels and the cluster decoder step's logits launch).
__device__ __forceinline__ void WriteChoice(float* o, float best, int best_id, double total) {
  o[0] = best == -INFINITY ? 0.0f : static_cast<float>(best_id);
  o[1] = best;
  // SplitF64 (backend.h): three floats whose double sum is `total` exactly.
  o[2] = __double2float_rn(total);
  const double rest = total - static_cast<double>(o[2]);
  o[3] = __double2float_rn(rest);
  o[4] = __double2float_rn(rest - static_cast<double>(o[3]));
}

}  // namespace waav::cuda

namespace waav::cuda {

// Launches `kernel` on ctx.stream, with programmatic stream serialization when ctx.pdl. Returns
// the launch error (not the kernel's: kernels run later).
template <typename... Params, typename... Args>
cudaError_t Launch(const LaunchContext& ctx, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t smem_bytes, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
#if WAAV_GPU_HAS_PDL
  // Only small grids launch early: the blocks of a large one, resident while the previous kernel
  // still runs, wait in griddepcontrol.wait on multiprocessors that kernel needs (measured on an
  // H200: PDL on every launch made a 30 s encoder pass 9% slower, while it made a decoder step,
  // whose kernels are small, 20% faster).
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (ctx.pdl && blocks <= static_cast<uint64_t>(ctx.pdl_max_blocks_per_sm) *
                               static_cast<uint64_t>(ctx.sm_count)) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem_bytes;
    config.stream = ctx.stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  }
#endif
  kernel<<<grid, block, smem_bytes, ctx.stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

inline unsigned CeilDiv(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace waav::cuda

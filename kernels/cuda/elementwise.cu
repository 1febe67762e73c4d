// Grid-stride loops, 16-byte accesses when every pointer is 16-byte aligned and n % 4 == 0.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 256;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

unsigned GridFor(const LaunchContext& ctx, int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  const int64_t cap =
      int64_t{ctx.sm_count} * 16;  // enough to fill the chip; the loop does the rest
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// b repeats every `period` values (kVec: in float4s); the index's remainder only where it does.
template <bool kVec>
__global__ void AddKernel(const float* a, const float* b, float* y, int64_t n, int64_t period) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const bool repeats = period != n;
  if constexpr (kVec) {
    const auto* a4 = reinterpret_cast<const float4*>(a);
    const auto* b4 = reinterpret_cast<const float4*>(b);
    auto* y4 = reinterpret_cast<float4*>(y);
    const int64_t period4 = period / 4;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n / 4; i += stride) {
      const float4 u = a4[i], v = b4[repeats ? i % period4 : i];
      y4[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
      y[i] = a[i] + b[repeats ? i % period : i];
    }
  }
}

template <bool kVec>
__global__ void GeluKernel(const float* x, float* y, int64_t n) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if constexpr (kVec) {
    const auto* x4 = reinterpret_cast<const float4*>(x);
    auto* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n / 4; i += stride) {
      const float4 u = x4[i];
      y4[i] = make_float4(GeluExact(u.x), GeluExact(u.y), GeluExact(u.z), GeluExact(u.w));
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
      y[i] = GeluExact(x[i]);
    }
  }
}

}  // namespace

cudaError_t LaunchAdd(const LaunchContext& ctx, const float* a, const float* b, float* y, int64_t n,
                      int64_t period) {
  if (n == 0) return cudaSuccess;
  if (period <= 0) period = n;
  if (n % 4 == 0 && period % 4 == 0 && Aligned16(a) && Aligned16(b) && Aligned16(y)) {
    return Launch(ctx, AddKernel<true>, dim3(GridFor(ctx, n / 4)), dim3(kThreads), 0, a, b, y, n,
                  period);
  }
  return Launch(ctx, AddKernel<false>, dim3(GridFor(ctx, n)), dim3(kThreads), 0, a, b, y, n,
                period);
}

cudaError_t LaunchGelu(const LaunchContext& ctx, const float* x, float* y, int64_t n) {
  if (n == 0) return cudaSuccess;
  if (n % 4 == 0 && Aligned16(x) && Aligned16(y)) {
    return Launch(ctx, GeluKernel<true>, dim3(GridFor(ctx, n / 4)), dim3(kThreads), 0, x, y, n);
  }
  return Launch(ctx, GeluKernel<false>, dim3(GridFor(ctx, n)), dim3(kThreads), 0, x, y, n);
}

}  // namespace waav::cuda

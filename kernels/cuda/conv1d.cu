// One thread per column element, walking the output row-major so that writes coalesce; reads of
// x are strided by K along c but stay within a few cache lines per warp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv1d.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 256;

// T: float, or __half (the column matrix rounded for the f16 GEMM as it is built).
template <typename T>
__global__ void Im2colKernel(const float* x, Im2colShape s, T* col) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t width = s.in_channels * s.kernel_size;
  const int64_t total = s.batch * s.out_time * width;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / width, e = i % width;
    const int64_t b = row / s.out_time, t = row % s.out_time;
    const int64_t c = e / s.kernel_size, j = e % s.kernel_size;
    const int64_t in_t = t * s.stride - s.padding + j;
    const float v = (in_t >= 0 && in_t < s.time) ? x[(b * s.time + in_t) * s.in_channels + c] : 0.0f;
    if constexpr (sizeof(T) == 2) {
      col[i] = __float2half_rn(v);
    } else {
      col[i] = v;
    }
  }
}

}  // namespace

cudaError_t LaunchIm2col(const LaunchContext& ctx, const float* x, const Im2colShape& s, void* col,
                         bool col_f16) {
  const int64_t total = s.batch * s.out_time * s.in_channels * s.kernel_size;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{ctx.sm_count} * 32;
  const dim3 grid(static_cast<unsigned>(blocks < cap ? blocks : cap));
  if (col_f16) {
    return Launch(ctx, Im2colKernel<__half>, grid, dim3(kThreads), 0, x, s,
                  static_cast<__half*>(col));
  }
  return Launch(ctx, Im2colKernel<float>, grid, dim3(kThreads), 0, x, s, static_cast<float*>(col));
}

}  // namespace waav::cuda

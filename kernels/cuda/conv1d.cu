// One thread per column element, walking the output row-major so that writes coalesce; reads of
// x are strided by K along c but stay within a few cache lines per warp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv1d.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 256;

// T: float, or __half (the column matrix rounded for the f16 GEMM as it is built). Index:
// uint32_t where every offset fits (32-bit divisions), else int64_t.
template <typename T, typename Index>
__global__ void Im2colKernel(const float* x, Im2colShape s, T* col) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const auto time = static_cast<Index>(s.time), in_channels = static_cast<Index>(s.in_channels);
  const auto kernel_size = static_cast<Index>(s.kernel_size);
  const auto out_time = static_cast<Index>(s.out_time);
  const Index width = in_channels * kernel_size;
  const Index total = static_cast<Index>(s.batch) * out_time * width;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const Index row = i / width, e = i - row * width;
    const Index b = row / out_time, t = row - b * out_time;
    const Index c = e / kernel_size, j = e - c * kernel_size;
    // Signed: the first output steps reach before the start (padding).
    const int64_t in_t = static_cast<int64_t>(t) * s.stride - s.padding + static_cast<int64_t>(j);
    const float v = (in_t >= 0 && in_t < s.time)
                        ? x[(b * time + static_cast<Index>(in_t)) * in_channels + c]
                        : 0.0f;
    if constexpr (sizeof(T) == 2) {
      col[i] = __float2half_rn(v);
    } else {
      col[i] = v;
    }
  }
}

template <typename T>
cudaError_t LaunchIm2colTyped(const LaunchContext& ctx, const float* x, const Im2colShape& s,
                              T* col, int64_t total, dim3 grid) {
  // 32-bit offsets where the column matrix and x both hold fewer than 2^31 elements.
  if (total < (int64_t{1} << 31) && s.batch * s.time * s.in_channels < (int64_t{1} << 31)) {
    return Launch(ctx, Im2colKernel<T, uint32_t>, grid, dim3(kThreads), 0, x, s, col);
  }
  return Launch(ctx, Im2colKernel<T, int64_t>, grid, dim3(kThreads), 0, x, s, col);
}

}  // namespace

cudaError_t LaunchIm2col(const LaunchContext& ctx, const float* x, const Im2colShape& s, void* col,
                         bool col_f16) {
  const int64_t total = s.batch * s.out_time * s.in_channels * s.kernel_size;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{ctx.sm_count} * 32;
  const dim3 grid(static_cast<unsigned>(blocks < cap ? blocks : cap));
  if (col_f16) return LaunchIm2colTyped(ctx, x, s, static_cast<__half*>(col), total, grid);
  return LaunchIm2colTyped(ctx, x, s, static_cast<float*>(col), total, grid);
}

}  // namespace waav::cuda

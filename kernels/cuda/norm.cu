// One warp per row, two reductions (mean, then squared deviations: no cancellation) and a write.
// Rows of up to 1024 floats stay in registers; longer (or unaligned) ones are re-read from
// L1/L2 for each pass. In place is safe: each element is read by the thread that writes it,
// before it writes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.cuh"

namespace waav::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

// Stores of f32 results as f32 or f16 (rounded to nearest): f16 activations for the next GEMM.
__device__ __forceinline__ void Store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store1(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void Store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void Store4(__half* p, float4 v) {
  __half2* h = reinterpret_cast<__half2*>(p);
  h[0] = __floats2half2_rn(v.x, v.y);
  h[1] = __floats2half2_rn(v.z, v.w);
}

template <bool kVec, typename Out>
__global__ void LayerNormKernel(const float* x, int64_t rows, int64_t cols, const float* gamma,
                                const float* beta, float eps, Out* y) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  Out* yr = y + row * cols;
  float sum = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = lane * 4; c < cols; c += kWarp * 4) {
      const float4 v = *reinterpret_cast<const float4*>(xr + c);
      sum += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t c = lane; c < cols; c += kWarp) sum += xr[c];
  }
  const float mean = WarpSum(sum) / static_cast<float>(cols);
  float squares = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = lane * 4; c < cols; c += kWarp * 4) {
      const float4 v = *reinterpret_cast<const float4*>(xr + c);
      const float a = v.x - mean, b = v.y - mean, d = v.z - mean, e = v.w - mean;
      squares += (a * a + b * b) + (d * d + e * e);
    }
  } else {
    for (int64_t c = lane; c < cols; c += kWarp) squares += (xr[c] - mean) * (xr[c] - mean);
  }
  const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(cols) + eps);
  if constexpr (kVec) {
    for (int64_t c = lane * 4; c < cols; c += kWarp * 4) {
      const float4 v = *reinterpret_cast<const float4*>(xr + c);
      const float4 g = *reinterpret_cast<const float4*>(gamma + c);
      const float4 b = *reinterpret_cast<const float4*>(beta + c);
      Store4(yr + c, make_float4((v.x - mean) * rstd * g.x + b.x, (v.y - mean) * rstd * g.y + b.y,
                                 (v.z - mean) * rstd * g.z + b.z, (v.w - mean) * rstd * g.w + b.w));
    }
  } else {
    for (int64_t c = lane; c < cols; c += kWarp) {
      Store1(yr + c, (xr[c] - mean) * rstd * gamma[c] + beta[c]);
    }
  }
}

// Rows of up to kQuads·128 floats held in registers: one read of x instead of three, which is
// what a decoder step's single row is bound by (three dependent trips to memory).
template <int kQuads, typename Out>
__global__ void LayerNormRegistersKernel(const float* x, int64_t rows, int64_t cols,
                                         const float* gamma, const float* beta, float eps, Out* y) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (row >= rows) return;
  const float4* xr = reinterpret_cast<const float4*>(x + row * cols);
  const int64_t quads = cols / 4;
  float4 v[kQuads];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kQuads; ++i) {
    const int64_t q = lane + int64_t{i} * kWarp;
    v[i] = q < quads ? xr[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  const float mean = WarpSum(sum) / static_cast<float>(cols);
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kQuads; ++i) {
    if (lane + int64_t{i} * kWarp < quads) {
      const float a = v[i].x - mean, b = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
      squares += (a * a + b * b) + (c * c + d * d);
    }
  }
  const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(cols) + eps);
  Out* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < kQuads; ++i) {
    const int64_t q = lane + int64_t{i} * kWarp;
    if (q < quads) {
      const float4 g = reinterpret_cast<const float4*>(gamma)[q];
      const float4 b = reinterpret_cast<const float4*>(beta)[q];
      Store4(yr + q * 4,
             make_float4((v[i].x - mean) * rstd * g.x + b.x, (v[i].y - mean) * rstd * g.y + b.y,
                         (v[i].z - mean) * rstd * g.z + b.z, (v[i].w - mean) * rstd * g.w + b.w));
    }
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename Out>
cudaError_t LaunchLayerNormAs(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                              const float* gamma, const float* beta, float eps, Out* y) {
  const dim3 grid(CeilDiv(rows, kRowsPerBlock)), block(kRowsPerBlock * kWarp);
  if (cols % 4 == 0 && Aligned16(x) && Aligned16(y) && Aligned16(gamma) && Aligned16(beta)) {
    if (cols <= 4 * kWarp * 4) {  // up to 512: Whisper tiny and base
      return Launch(ctx, LayerNormRegistersKernel<4, Out>, grid, block, 0, x, rows, cols, gamma,
                    beta, eps, y);
    }
    if (cols <= 4 * kWarp * 8) {  // up to 1024
      return Launch(ctx, LayerNormRegistersKernel<8, Out>, grid, block, 0, x, rows, cols, gamma,
                    beta, eps, y);
    }
    return Launch(ctx, LayerNormKernel<true, Out>, grid, block, 0, x, rows, cols, gamma, beta, eps,
                  y);
  }
  return Launch(ctx, LayerNormKernel<false, Out>, grid, block, 0, x, rows, cols, gamma, beta, eps,
                y);
}

}  // namespace

cudaError_t LaunchLayerNorm(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                            const float* gamma, const float* beta, float eps, void* y, bool y_f16) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (y_f16) {
    return LaunchLayerNormAs(ctx, x, rows, cols, gamma, beta, eps, static_cast<__half*>(y));
  }
  return LaunchLayerNormAs(ctx, x, rows, cols, gamma, beta, eps, static_cast<float*>(y));
}

}  // namespace waav::cuda

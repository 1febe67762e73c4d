// One kernel per fused linear: every block normalises its rows of x into shared memory (they are
// few: recomputing them per block is cheaper than a launch), then its warps compute output
// columns as the skinny GEMM does and apply bias, activation and the output mode.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/fused_linear.cuh"

namespace waav::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kChunk = 8;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
__device__ __forceinline__ void Load8(const T* p, float* out) {
  Raw8<T> raw;
  raw.Load(p);
  raw.Widen(out);
}

template <typename W, int kRows, int kCols>
__global__ void __launch_bounds__(kWarps* kWarp) FusedLinearKernel(FusedLinearParams p) {
  extern __shared__ float4 normed_raw[];  // [kRows][K] when normalising
  float* normed = reinterpret_cast<float*>(normed_raw);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t n0 = (blockIdx.x * int64_t{kWarps} + warp) * kCols;
  const W* w = static_cast<const W*>(p.w);
  // Weights never depend on the previous kernel: the first chunks are requested before waiting
  // for it, so that they arrive while it finishes (programmatic dependent launch).
  constexpr int kPrefetch = 2;
  Raw8<W> pre[kPrefetch][kCols];
#pragma unroll
  for (int q = 0; q < kPrefetch; ++q) {
    const int64_t k0 = (lane + int64_t{q} * kWarp) * kChunk;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      if (k0 < p.k && n0 + c < p.n) {
        pre[q][c].Load(w + (n0 + c) * p.k + k0);
      } else {
        pre[q][c].Zero();
      }
    }
  }
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t m0 = blockIdx.y * int64_t{kRows};
  const int rows = static_cast<int>(min(int64_t{kRows}, p.m - m0));
  const float* x = p.x + m0 * p.k;
  int64_t x_stride = p.k;
  if (p.gamma != nullptr) {
    // Warp w normalises rows w, w + 4, ...: two reductions over the row (held in shared memory).
    for (int r = warp; r < rows; r += kWarps) {
      const float* xr = x + r * p.k;
      float* nr = normed + r * p.k;
      float sum = 0.0f;
      for (int64_t c = lane; c < p.k; c += kWarp) {
        nr[c] = xr[c];
        sum += nr[c];
      }
      const float mean = WarpSum(sum) / static_cast<float>(p.k);
      float squares = 0.0f;
      for (int64_t c = lane; c < p.k; c += kWarp) squares += (nr[c] - mean) * (nr[c] - mean);
      const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(p.k) + p.eps);
      for (int64_t c = lane; c < p.k; c += kWarp) {
        nr[c] = (nr[c] - mean) * rstd * p.gamma[c] + p.beta[c];
      }
    }
    __syncthreads();
    x = normed;
  }
  if (n0 >= p.n) return;
  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  auto accumulate = [&](int64_t k0, const float(&wv)[kCols][kChunk]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < rows) {
        float xv[kChunk];
        Load8(x + r * x_stride + k0, xv);
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
#pragma unroll
          for (int i = 0; i < kChunk; ++i) acc[r][c] = fmaf(xv[i], wv[c][i], acc[r][c]);
        }
      }
    }
  };
#pragma unroll
  for (int q = 0; q < kPrefetch; ++q) {
    const int64_t k0 = (lane + int64_t{q} * kWarp) * kChunk;
    if (k0 < p.k) {
      float wv[kCols][kChunk];
#pragma unroll
      for (int c = 0; c < kCols; ++c) pre[q][c].Widen(wv[c]);
      accumulate(k0, wv);
    }
  }
  for (int64_t k0 = (lane + int64_t{kPrefetch} * kWarp) * kChunk; k0 < p.k; k0 += kWarp * kChunk) {
    float wv[kCols][kChunk];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      if (n0 + c < p.n) {
        Load8(w + (n0 + c) * p.k + k0, wv[c]);
      } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) wv[c][i] = 0.0f;
      }
    }
    accumulate(k0, wv);
  }
  const int64_t channels = p.n / 3;  // kQkv
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float sum = WarpSum(acc[r][c]);
      const int64_t m = m0 + r, n = n0 + c;
      if (lane != (r * kCols + c) % kWarp || r >= rows || n >= p.n) continue;
      const float v = ApplyEpilogue(sum + (p.bias != nullptr ? p.bias[n] : 0.0f), p.act);
      switch (p.output) {
        case FusedOutput::kStore:
          p.y[m * p.n + n] = v;
          break;
        case FusedOutput::kAccumulate:
          p.y[m * p.n + n] += v;
          break;
        case FusedOutput::kQkv: {
          const int64_t part = n / channels, ch = n % channels;
          if (part == 0) {
            p.q[m * channels + ch] = v;
            break;
          }
          const int32_t position = p.positions[m];
          if (position < 0 || position >= p.capacity) {
            if (part == 1 && ch == 0) {
              ReportDeviceError(p.error_word, DeviceErrorOp::kWriteRows, m, position);
            }
            break;
          }
          float* cache = part == 1 ? p.k_cache : p.v_cache;
          cache[(m * p.capacity + position) * channels + ch] = v;
          break;
        }
      }
    }
  }
}

template <typename W, int kRows, int kCols>
cudaError_t LaunchTyped(const LaunchContext& ctx, const FusedLinearParams& p) {
  const dim3 grid(CeilDiv(p.n, int64_t{kWarps} * kCols), CeilDiv(p.m, kRows));
  const size_t smem = p.gamma != nullptr ? static_cast<size_t>(kRows * p.k) * sizeof(float) : 0;
  return Launch(ctx, FusedLinearKernel<W, kRows, kCols>, grid, dim3(kWarps * kWarp), smem, p);
}

template <typename W>
cudaError_t LaunchRows(const LaunchContext& ctx, const FusedLinearParams& p) {
  const bool wide = p.n >= 8192;
  if (p.m == 1) return wide ? LaunchTyped<W, 1, 4>(ctx, p) : LaunchTyped<W, 1, 1>(ctx, p);
  if (p.m <= 2) return wide ? LaunchTyped<W, 2, 4>(ctx, p) : LaunchTyped<W, 2, 1>(ctx, p);
  if (p.m <= 4) return wide ? LaunchTyped<W, 4, 4>(ctx, p) : LaunchTyped<W, 4, 1>(ctx, p);
  return wide ? LaunchTyped<W, 8, 2>(ctx, p) : LaunchTyped<W, 8, 1>(ctx, p);
}

}  // namespace

bool FusedLinearSupported(const FusedLinearParams& p) {
  if (p.m > kFusedMaxRows || p.k == 0 || p.k % kChunk != 0) return false;
  if (!Aligned16(p.x) || !Aligned16(p.w)) return false;
  if (p.gamma != nullptr && p.k > kFusedMaxNormK) return false;
  if (p.output == FusedOutput::kQkv && p.n % 3 != 0) return false;
  return true;
}

cudaError_t LaunchFusedLinear(const LaunchContext& ctx, const FusedLinearParams& p) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  FusedLinearParams q = p;
  q.error_word = ctx.error_word;
  return p.w_f16 ? LaunchRows<__half>(ctx, q) : LaunchRows<float>(ctx, q);
}

namespace {

__global__ void QkvScatterKernel(const float* src, int64_t m, int64_t channels, float* q,
                                 float* k_cache, float* v_cache, const int32_t* positions,
                                 int64_t capacity, unsigned long long* error_word) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t total = m * 3 * channels;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / (3 * channels), n = i % (3 * channels);
    const int64_t part = n / channels, ch = n % channels;
    if (part == 0) {
      q[row * channels + ch] = src[i];
      continue;
    }
    const int32_t position = positions[row];
    if (position < 0 || position >= capacity) {
      if (part == 1 && ch == 0)
        ReportDeviceError(error_word, DeviceErrorOp::kWriteRows, row, position);
      continue;
    }
    (part == 1 ? k_cache : v_cache)[(row * capacity + position) * channels + ch] = src[i];
  }
}

}  // namespace

cudaError_t LaunchQkvScatter(const LaunchContext& ctx, const float* src, int64_t m,
                             int64_t channels, float* q, float* k_cache, float* v_cache,
                             const int32_t* positions, int64_t capacity) {
  const int64_t total = m * 3 * channels;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t{ctx.sm_count} * 16);
  return Launch(ctx, QkvScatterKernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, src, m,
                channels, q, k_cache, v_cache, positions, capacity, ctx.error_word);
}

}  // namespace waav::cuda

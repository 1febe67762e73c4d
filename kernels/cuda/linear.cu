#include "kernels/cuda/common.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {
namespace {

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ---- SkinnyLinear ---------------------------------------------------------------------------
// A warp owns kCols consecutive outputs for kRows consecutive rows. Lane l reads elements
// [8·l, 8·l + 8) of every 256-element stretch of K: one 16-byte load per weight row (f16; two for
// f32) and two per x row, kCols·kRows independent FMA chains, then one butterfly reduction per
// output. x is re-read by every warp from L1/L2; the weights, read once, are the traffic.
constexpr int kSkinnyWarps = 4;
constexpr int kChunk = 8;  // K elements per lane per step

template <typename T>
__device__ __forceinline__ void Load8(const T* p, float* out) {
  Raw8<T> raw;
  raw.Load(p);
  raw.Widen(out);
}

template <typename W, int kRows, int kCols, bool kVec>
__global__ void __launch_bounds__(kSkinnyWarps* kWarp)
    SkinnyLinearKernel(const float* x, int64_t m, int64_t k, const W* w, int64_t n,
                       const float* bias, Epilogue act, float* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n0 = (blockIdx.x * int64_t{kSkinnyWarps} + threadIdx.x / kWarp) * kCols;
  const int64_t m0 = blockIdx.y * int64_t{kRows};
  if (n0 >= n) {
    WaitForPreviousKernel();
    AllowNextKernel();
    return;
  }
  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  if constexpr (kVec) {
    // The first kPrefetch chunks of this lane's weights are requested before waiting for the
    // previous kernel: with programmatic dependent launch they arrive while it finishes.
    constexpr int kPrefetch = 2;
    Raw8<W> pre[kPrefetch][kCols];
#pragma unroll
    for (int p = 0; p < kPrefetch; ++p) {
      const int64_t k0 = (lane + int64_t{p} * kWarp) * kChunk;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (k0 < k && n0 + c < n) {
          pre[p][c].Load(w + (n0 + c) * k + k0);
        } else {
          pre[p][c].Zero();
        }
      }
    }
    WaitForPreviousKernel();
    AllowNextKernel();
    auto accumulate = [&](int64_t k0, const float(&wv)[kCols][kChunk]) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (m0 + r < m) {
          float xv[kChunk];
          Load8(x + (m0 + r) * k + k0, xv);
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
#pragma unroll
            for (int i = 0; i < kChunk; ++i) acc[r][c] = fmaf(xv[i], wv[c][i], acc[r][c]);
          }
        }
      }
    };
#pragma unroll
    for (int p = 0; p < kPrefetch; ++p) {
      const int64_t k0 = (lane + int64_t{p} * kWarp) * kChunk;
      if (k0 < k) {
        float wv[kCols][kChunk];
#pragma unroll
        for (int c = 0; c < kCols; ++c) pre[p][c].Widen(wv[c]);
        accumulate(k0, wv);
      }
    }
    for (int64_t k0 = (lane + int64_t{kPrefetch} * kWarp) * kChunk; k0 < k; k0 += kWarp * kChunk) {
      float wv[kCols][kChunk];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (n0 + c < n) {
          Load8(w + (n0 + c) * k + k0, wv[c]);
        } else {
#pragma unroll
          for (int i = 0; i < kChunk; ++i) wv[c][i] = 0.0f;
        }
      }
      accumulate(k0, wv);
    }
  } else {
    WaitForPreviousKernel();
    AllowNextKernel();
    for (int64_t kk = lane; kk < k; kk += kWarp) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (m0 + r < m) {
          const float xv = x[(m0 + r) * k + kk];
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
            if (n0 + c < n) acc[r][c] = fmaf(xv, ToFloat(w[(n0 + c) * k + kk]), acc[r][c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float sum = WarpSum(acc[r][c]);
      // Spread the stores (and the epilogue) over the lanes.
      if (lane == (r * kCols + c) % kWarp && m0 + r < m && n0 + c < n) {
        const float v = sum + (bias != nullptr ? bias[n0 + c] : 0.0f);
        y[(m0 + r) * n + n0 + c] = ApplyEpilogue(v, act);
      }
    }
  }
}

template <typename W, int kRows, int kCols>
cudaError_t LaunchSkinnyTyped(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                              const W* w, int64_t n, const float* bias, Epilogue act, float* y) {
  const dim3 grid(CeilDiv(n, int64_t{kSkinnyWarps} * kCols), CeilDiv(m, kRows));
  const dim3 block(kSkinnyWarps * kWarp);
  const bool vec = k % kChunk == 0 && Aligned16(x) && Aligned16(w);
  if (vec) {
    return Launch(ctx, SkinnyLinearKernel<W, kRows, kCols, true>, grid, block, 0, x, m, k, w, n,
                  bias, act, y);
  }
  return Launch(ctx, SkinnyLinearKernel<W, kRows, kCols, false>, grid, block, 0, x, m, k, w, n,
                bias, act, y);
}

template <typename W>
cudaError_t LaunchSkinnyRows(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                             const W* w, int64_t n, const float* bias, Epilogue act, float* y) {
  // Wide outputs (the 51864 logits) get 4 per warp so each lane keeps 4 weight loads in flight;
  // narrow ones one per warp, so that the 384 outputs of a projection spread over 96 blocks.
  const bool wide = n >= 8192;
  if (m == 1) {
    return wide ? LaunchSkinnyTyped<W, 1, 4>(ctx, x, m, k, w, n, bias, act, y)
                : LaunchSkinnyTyped<W, 1, 1>(ctx, x, m, k, w, n, bias, act, y);
  }
  if (m <= 2) {
    return wide ? LaunchSkinnyTyped<W, 2, 4>(ctx, x, m, k, w, n, bias, act, y)
                : LaunchSkinnyTyped<W, 2, 1>(ctx, x, m, k, w, n, bias, act, y);
  }
  if (m <= 4) {
    return wide ? LaunchSkinnyTyped<W, 4, 4>(ctx, x, m, k, w, n, bias, act, y)
                : LaunchSkinnyTyped<W, 4, 1>(ctx, x, m, k, w, n, bias, act, y);
  }
  return wide ? LaunchSkinnyTyped<W, 8, 2>(ctx, x, m, k, w, n, bias, act, y)
              : LaunchSkinnyTyped<W, 8, 1>(ctx, x, m, k, w, n, bias, act, y);
}

// ---- TiledLinear ----------------------------------------------------------------------------
// 64×64 output tile per block of 256 threads, 4×4 outputs per thread, K in steps of 16 through
// shared memory (x and w tiles stored k-major so the inner loop reads rows of 4 and 4).
constexpr int kTile = 64, kTileK = 16;

template <typename W>
__global__ void __launch_bounds__(256)
    TiledLinearKernel(const float* x, int64_t m, int64_t k, const W* w, int64_t n,
                      const float* bias, Epilogue act, float* y) {
  WaitForPreviousKernel();
  AllowNextKernel();
  __shared__ float xs[kTileK][kTile + 4];
  __shared__ float ws[kTileK][kTile + 4];
  const int64_t row0 = blockIdx.y * int64_t{kTile}, col0 = blockIdx.x * int64_t{kTile};
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // 16×16 threads, 4×4 outputs each
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    // 64 rows × 16 k of each operand: 1024 elements, 4 per thread.
    for (int i = threadIdx.x; i < kTile * kTileK; i += 256) {
      const int r = i / kTileK, kk = i % kTileK;
      const int64_t gk = k0 + kk;
      xs[kk][r] = (row0 + r < m && gk < k) ? x[(row0 + r) * k + gk] : 0.0f;
      ws[kk][r] = (col0 + r < n && gk < k) ? ToFloat(w[(col0 + r) * k + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][tr * 4 + i];
        b[i] = ws[kk][tc * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + tr * 4 + i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = col0 + tc * 4 + j;
      if (c < n) y[r * n + c] = ApplyEpilogue(acc[i][j] + (bias != nullptr ? bias[c] : 0.0f), act);
    }
  }
}

// ---- Conversions and epilogue -----------------------------------------------------------------
constexpr int kThreads = 256;

unsigned GridFor(const LaunchContext& ctx, int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{ctx.sm_count} * 16;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}

// Whether element offsets below `n` (plus a grid's stride) fit 32-bit arithmetic.
bool Fits32(int64_t n) { return n < (int64_t{1} << 31); }

// v += the four biases at `bias` (16-byte aligned); nothing for a null bias.
__device__ __forceinline__ void AddBias4(float4& v, const float* bias) {
  if (bias == nullptr) return;
  const float4 b = *reinterpret_cast<const float4*>(bias);
  v.x += b.x;
  v.y += b.y;
  v.z += b.z;
  v.w += b.w;
}

__global__ void ToHalfKernel(const float* x, int64_t n, __half* out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    out[i] = __float2half_rn(x[i]);
  }
}

__global__ void ToFloatKernel(const __half* x, int64_t n, float* out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    out[i] = __half2float(x[i]);
  }
}

// Four columns per thread (cols % 4 == 0, 16-byte aligned input): float4 in, two half2 out.
template <typename Index>
__global__ void EpilogueToHalfKernel(const float* in, Index rows, Index cols, const float* bias,
                                     Epilogue act, __half* out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index quads = rows * cols / 4;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index q = blockIdx.x * Index{blockDim.x} + threadIdx.x; q < quads; q += stride) {
    float4 v = reinterpret_cast<const float4*>(in)[q];
    AddBias4(v, bias != nullptr ? bias + (q * 4) % cols : nullptr);
    __half2* o = reinterpret_cast<__half2*>(out + q * 4);
    o[0] = __floats2half2_rn(HalfEpilogue(v.x, act), HalfEpilogue(v.y, act));
    o[1] = __floats2half2_rn(HalfEpilogue(v.z, act), HalfEpilogue(v.w, act));
  }
}

// The planes of LinearPlanes: grid row y is plane y, whose C columns of `in` ([rows, P·C]) go to
// out.planes[y] ([rows, C]) plus their bias. Index: uint32_t where every offset fits (one 32-bit
// division per item instead of 64-bit ones), else int64_t.
template <typename T>
__device__ __forceinline__ void StoreFloat(T* o, float v) {
  if constexpr (sizeof(T) == 2) {
    *o = __float2half_rn(v);
  } else {
    *o = v;
  }
}

template <typename T, typename Index>
__global__ void EpiloguePlanesKernel(const float* in, Index rows, Index cols, Index plane_cols,
                                     const float* bias, const WAAV_GRID_CONSTANT PlaneOutputs out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index plane = blockIdx.y;
  T* dst = static_cast<T*>(out.planes[plane]);
  const float* src = in + plane * plane_cols;
  const float* b = bias != nullptr ? bias + plane * plane_cols : nullptr;
  const Index total = rows * plane_cols;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const Index r = i / plane_cols, c = i - r * plane_cols;
    const int64_t row_at = PlaneRowOffset(out, static_cast<int>(plane), r, plane_cols);
    if (row_at < 0) continue;
    StoreFloat(dst + row_at + c, src[r * cols + c] + (b != nullptr ? b[c] : 0.0f));
  }
}

// Four columns per thread (C % 4 == 0, 16-byte aligned input and bias, planes aligned to four
// elements): float4 in, four f16 or f32 out.
template <typename T, typename Index>
__global__ void EpiloguePlanes4Kernel(const float* in, Index rows, Index cols, Index plane_cols,
                                      const float* bias,
                                      const WAAV_GRID_CONSTANT PlaneOutputs out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index plane = blockIdx.y;
  T* dst = static_cast<T*>(out.planes[plane]);
  const float* src = in + plane * plane_cols;
  const float* b = bias != nullptr ? bias + plane * plane_cols : nullptr;
  const Index row_quads = plane_cols / 4, quads = rows * row_quads;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index q = blockIdx.x * Index{blockDim.x} + threadIdx.x; q < quads; q += stride) {
    const Index r = q / row_quads, c = (q - r * row_quads) * 4;
    const int64_t row_at = PlaneRowOffset(out, static_cast<int>(plane), r, plane_cols);
    if (row_at < 0) continue;
    float4 v = *reinterpret_cast<const float4*>(src + r * cols + c);
    AddBias4(v, b != nullptr ? b + c : nullptr);
    T* o = dst + row_at + c;
    if constexpr (sizeof(T) == 2) {
      __half2* o2 = reinterpret_cast<__half2*>(o);
      o2[0] = __floats2half2_rn(v.x, v.y);
      o2[1] = __floats2half2_rn(v.z, v.w);
    } else {
      *reinterpret_cast<float4*>(o) = v;
    }
  }
}

__global__ void EpilogueToHalfScalarKernel(const float* in, int64_t rows, int64_t cols,
                                           const float* bias, Epilogue act, __half* out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t total = rows * cols;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    out[i] = __float2half_rn(HalfEpilogue(in[i] + (bias != nullptr ? bias[i % cols] : 0.0f), act));
  }
}

// In place on f16 values, eight columns per thread (cols % 8 == 0, 16-byte aligned y and bias).
template <typename Index>
__global__ void EpilogueHalfInPlace8Kernel(__half* y, Index rows, Index cols, const float* bias,
                                           Epilogue act) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index octets = rows * cols / 8;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index q = blockIdx.x * Index{blockDim.x} + threadIdx.x; q < octets; q += stride) {
    uint4 packed = reinterpret_cast<const uint4*>(y)[q];
    auto* h = reinterpret_cast<__half2*>(&packed);
    const float* b = bias != nullptr ? bias + (q * 8) % cols : nullptr;
    for (int i = 0; i < 4; ++i) {
      float2 v = __half22float2(h[i]);
      if (b != nullptr) {
        v.x += b[2 * i];
        v.y += b[2 * i + 1];
      }
      h[i] = __floats2half2_rn(HalfEpilogue(v.x, act), HalfEpilogue(v.y, act));
    }
    reinterpret_cast<uint4*>(y)[q] = packed;
  }
}

__global__ void EpilogueHalfInPlaceScalarKernel(__half* y, int64_t rows, int64_t cols,
                                                const float* bias, Epilogue act) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t total = rows * cols;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const float v = __half2float(y[i]) + (bias != nullptr ? bias[i % cols] : 0.0f);
    y[i] = __float2half_rn(HalfEpilogue(v, act));
  }
}

__global__ void SplitHalfKernel(const float* x, int64_t n, __half* hi, __half* lo) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    const __half h = __float2half_rn(v);
    hi[i] = h;
    lo[i] = __float2half_rn(v - __half2float(h));
  }
}

template <typename Index>
__global__ void EpilogueKernel(float* y, Index rows, Index cols, const float* bias, Epilogue act,
                               bool zero_input) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index total = rows * cols;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const float v = (zero_input ? 0.0f : y[i]) + (bias != nullptr ? bias[i % cols] : 0.0f);
    y[i] = ApplyEpilogue(v, act);
  }
}

// Four columns per thread (cols % 4 == 0, 16-byte aligned y and bias).
template <typename Index>
__global__ void Epilogue4Kernel(float* y, Index rows, Index cols, const float* bias, Epilogue act,
                                bool zero_input) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Index quads = rows * cols / 4;
  const Index stride = Index{gridDim.x} * blockDim.x;
  for (Index q = blockIdx.x * Index{blockDim.x} + threadIdx.x; q < quads; q += stride) {
    float4 v = zero_input ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : reinterpret_cast<float4*>(y)[q];
    AddBias4(v, bias != nullptr ? bias + (q * 4) % cols : nullptr);
    reinterpret_cast<float4*>(y)[q] = make_float4(ApplyEpilogue(v.x, act), ApplyEpilogue(v.y, act),
                                                  ApplyEpilogue(v.z, act), ApplyEpilogue(v.w, act));
  }
}

template <typename Index>
cudaError_t LaunchEpilogueIndexed(const LaunchContext& ctx, float* y, int64_t rows, int64_t cols,
                                  const float* bias, Epilogue act, bool zero_input) {
  const auto r = static_cast<Index>(rows), c = static_cast<Index>(cols);
  const bool vec = cols % 4 == 0 && Aligned16(y) && (bias == nullptr || Aligned16(bias));
  if (vec) {
    return Launch(ctx, Epilogue4Kernel<Index>, dim3(GridFor(ctx, rows * cols / 4)), dim3(kThreads),
                  0, y, r, c, bias, act, zero_input);
  }
  return Launch(ctx, EpilogueKernel<Index>, dim3(GridFor(ctx, rows * cols)), dim3(kThreads), 0, y,
                r, c, bias, act, zero_input);
}

}  // namespace

cudaError_t LaunchSkinnyLinear(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                               const void* w, bool w_f16, int64_t n, const float* bias,
                               Epilogue act, float* y) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (w_f16) {
    return LaunchSkinnyRows(ctx, x, m, k, static_cast<const __half*>(w), n, bias, act, y);
  }
  return LaunchSkinnyRows(ctx, x, m, k, static_cast<const float*>(w), n, bias, act, y);
}

cudaError_t LaunchTiledLinear(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                              const void* w, bool w_f16, int64_t n, const float* bias, Epilogue act,
                              float* y) {
  if (m == 0 || n == 0) return cudaSuccess;
  const dim3 grid(CeilDiv(n, kTile), CeilDiv(m, kTile)), block(256);
  if (w_f16) {
    return Launch(ctx, TiledLinearKernel<__half>, grid, block, 0, x, m, k,
                  static_cast<const __half*>(w), n, bias, act, y);
  }
  return Launch(ctx, TiledLinearKernel<float>, grid, block, 0, x, m, k,
                static_cast<const float*>(w), n, bias, act, y);
}

cudaError_t LaunchToHalf(const LaunchContext& ctx, const float* x, int64_t n, void* out) {
  if (n == 0) return cudaSuccess;
  return Launch(ctx, ToHalfKernel, dim3(GridFor(ctx, n)), dim3(kThreads), 0, x, n,
                static_cast<__half*>(out));
}

cudaError_t LaunchSplitHalf(const LaunchContext& ctx, const float* x, int64_t n, void* hi,
                            void* lo) {
  if (n == 0) return cudaSuccess;
  return Launch(ctx, SplitHalfKernel, dim3(GridFor(ctx, n)), dim3(kThreads), 0, x, n,
                static_cast<__half*>(hi), static_cast<__half*>(lo));
}

cudaError_t LaunchToFloat(const LaunchContext& ctx, const void* x, int64_t n, float* out) {
  if (n == 0) return cudaSuccess;
  return Launch(ctx, ToFloatKernel, dim3(GridFor(ctx, n)), dim3(kThreads), 0,
                static_cast<const __half*>(x), n, out);
}

cudaError_t LaunchEpilogueToHalf(const LaunchContext& ctx, const float* in, int64_t rows,
                                 int64_t cols, const float* bias, Epilogue act, void* out) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (cols % 4 == 0 && aligned(in, 16) && aligned(bias, 16) && aligned(out, 8)) {
    auto* o = static_cast<__half*>(out);
    if (Fits32(rows * cols)) {
      return Launch(ctx, EpilogueToHalfKernel<uint32_t>, dim3(GridFor(ctx, rows * cols / 4)),
                    dim3(kThreads), 0, in, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                    bias, act, o);
    }
    return Launch(ctx, EpilogueToHalfKernel<int64_t>, dim3(GridFor(ctx, rows * cols / 4)),
                  dim3(kThreads), 0, in, rows, cols, bias, act, o);
  }
  return Launch(ctx, EpilogueToHalfScalarKernel, dim3(GridFor(ctx, rows * cols)), dim3(kThreads), 0,
                in, rows, cols, bias, act, static_cast<__half*>(out));
}

cudaError_t LaunchEpilogueHalfInPlace(const LaunchContext& ctx, void* y, int64_t rows, int64_t cols,
                                      const float* bias, Epilogue act) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  auto* h = static_cast<__half*>(y);
  if (cols % 8 == 0 && Aligned16(y) && (bias == nullptr || Aligned16(bias))) {
    if (Fits32(rows * cols)) {
      return Launch(ctx, EpilogueHalfInPlace8Kernel<uint32_t>, dim3(GridFor(ctx, rows * cols / 8)),
                    dim3(kThreads), 0, h, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                    bias, act);
    }
    return Launch(ctx, EpilogueHalfInPlace8Kernel<int64_t>, dim3(GridFor(ctx, rows * cols / 8)),
                  dim3(kThreads), 0, h, rows, cols, bias, act);
  }
  return Launch(ctx, EpilogueHalfInPlaceScalarKernel, dim3(GridFor(ctx, rows * cols)),
                dim3(kThreads), 0, h, rows, cols, bias, act);
}

namespace {

template <typename T, typename Index>
cudaError_t LaunchPlanes(const LaunchContext& ctx, bool vec, const float* in, int64_t rows,
                         int64_t cols, int64_t plane_cols, const float* bias,
                         const PlaneOutputs& out) {
  const dim3 grid(GridFor(ctx, rows * plane_cols / (vec ? 4 : 1)),
                  static_cast<unsigned>(cols / plane_cols));
  const auto r = static_cast<Index>(rows), c = static_cast<Index>(cols);
  const auto pc = static_cast<Index>(plane_cols);
  if (vec) {
    return Launch(ctx, EpiloguePlanes4Kernel<T, Index>, grid, dim3(kThreads), 0, in, r, c, pc, bias,
                  out);
  }
  return Launch(ctx, EpiloguePlanesKernel<T, Index>, grid, dim3(kThreads), 0, in, r, c, pc, bias,
                out);
}

}  // namespace

cudaError_t LaunchEpiloguePlanes(const LaunchContext& ctx, const float* in, int64_t rows,
                                 int64_t cols, int64_t plane_cols, const float* bias,
                                 const PlaneOutputs& out, bool out_f16) {
  if (rows == 0 || cols == 0 || plane_cols <= 0) return cudaSuccess;
  if (cols % plane_cols != 0 || cols / plane_cols > kMaxPlaneOutputs) return cudaErrorInvalidValue;
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  bool vec = plane_cols % 4 == 0 && aligned(in, 16) && aligned(bias, 16);
  for (int64_t p = 0; p < cols / plane_cols; ++p) {
    vec = vec && aligned(out.planes[p], out_f16 ? 8 : 16);
  }
  if (Fits32(rows * cols)) {
    return out_f16 ? LaunchPlanes<__half, uint32_t>(ctx, vec, in, rows, cols, plane_cols, bias, out)
                   : LaunchPlanes<float, uint32_t>(ctx, vec, in, rows, cols, plane_cols, bias, out);
  }
  return out_f16 ? LaunchPlanes<__half, int64_t>(ctx, vec, in, rows, cols, plane_cols, bias, out)
                 : LaunchPlanes<float, int64_t>(ctx, vec, in, rows, cols, plane_cols, bias, out);
}

cudaError_t LaunchEpilogue(const LaunchContext& ctx, float* y, int64_t rows, int64_t cols,
                           const float* bias, Epilogue act, bool zero_input) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (Fits32(rows * cols)) {
    return LaunchEpilogueIndexed<uint32_t>(ctx, y, rows, cols, bias, act, zero_input);
  }
  return LaunchEpilogueIndexed<int64_t>(ctx, y, rows, cols, bias, act, zero_input);
}

}  // namespace waav::cuda

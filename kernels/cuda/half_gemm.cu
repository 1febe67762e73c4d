#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half_gemm.cuh"
#include "kernels/cuda/mma.cuh"

namespace waav::cuda {
namespace {

bool Aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

#if WAAV_GPU_HAS_MMA

constexpr int kBN = 64;            // outputs per block along N
constexpr int kBK = 32;            // K per step
constexpr int kStride = kBK + 8;   // smem row stride in halves (80 bytes: conflict-free ldmatrix)
constexpr int kGemmThreads = 128;  // 4 warps, 2 × 2 over the block tile

using mma::CopyAsync16;
using mma::LdMatrix4;

__device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  mma::Mma16816(c, a, b0, b1);
}

__device__ __forceinline__ float ApplyAct(float v, Epilogue act) {
  switch (act) {
    case Epilogue::kGelu:
      return GeluExact(v);
    case Epilogue::kRelu:
      return v > 0.0f ? v : (v == v ? 0.0f : v);
    case Epilogue::kSigmoid:
      return 1.0f / (1.0f + expf(-v));
    case Epilogue::kNone:
      break;
  }
  return v;
}

struct GemmParams {
  const float* x;
  const __half* w;
  const float* bias;
  float* y;
  int64_t m, n, k;
  Epilogue act;
  ConvGather conv;
};

// Each thread stages the same kSlots 4-wide A pieces every step: rows tid/8 + 16·i, columns
// 4·(tid % 8) .. +3 of the step's 32.
template <int BM, bool kConv>
struct ALoader {
  static constexpr int kSlots = BM * kBK / 4 / kGemmThreads;
  float4 v[kSlots];
  int64_t base[kSlots];  // dense: row offset into x (−1: row beyond M); conv: b·time
  int64_t t0[kSlots];    // conv: t·stride − padding
  int col;

  __device__ void Init(const GemmParams& p, int64_t m0) {
    col = (threadIdx.x % 8) * 4;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int64_t row = m0 + threadIdx.x / 8 + 16 * i;
      if (row >= p.m) {
        base[i] = -1;
        t0[i] = 0;
      } else if (kConv) {
        const int64_t b = row / p.conv.out_time, t = row - b * p.conv.out_time;
        base[i] = b * p.conv.time;
        t0[i] = t * p.conv.stride - p.conv.padding;
      } else {
        base[i] = row * p.k;
        t0[i] = 0;
      }
    }
  }

  __device__ void Load(const GemmParams& p, int64_t k0) {
    const int64_t kk = k0 + col;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (base[i] < 0 || kk >= p.k) continue;
      if (!kConv) {
        v[i] = __ldg(reinterpret_cast<const float4*>(p.x + base[i] + kk));
      } else {
        float e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t q = kk + j;
          const int64_t c = q / p.conv.kernel_size;
          const int64_t ti = t0[i] + (q - c * p.conv.kernel_size);
          e[j] = ti >= 0 && ti < p.conv.time ? __ldg(p.x + (base[i] + ti) * p.conv.in_channels + c)
                                             : 0.0f;
        }
        v[i] = make_float4(e[0], e[1], e[2], e[3]);
      }
    }
  }

  __device__ void Store(__half (*tile)[kStride]) const {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const __half2 lo = __floats2half2_rn(v[i].x, v[i].y);
      const __half2 hi = __floats2half2_rn(v[i].z, v[i].w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(&tile[threadIdx.x / 8 + 16 * i][col]) = packed;
    }
  }
};

// Weights [N, K] f16: kBN rows × kBK halves per step = 256 chunks of 16 bytes, 2 per thread.
__device__ __forceinline__ void LoadWeights(const GemmParams& p, int64_t n0, int64_t k0,
                                            __half (*tile)[kStride]) {
#pragma unroll
  for (int i = 0; i < kBN * kBK / 8 / kGemmThreads; ++i) {
    const int c = threadIdx.x + kGemmThreads * i;
    const int r = c / 4, c8 = (c % 4) * 8;
    const bool in = n0 + r < p.n && k0 + c8 < p.k;
    const __half* src = in ? p.w + (n0 + r) * p.k + k0 + c8 : p.w;
    CopyAsync16(&tile[r][c8], src, in ? 16 : 0);
  }
}

template <int BM, bool kConv>
__global__ void __launch_bounds__(kGemmThreads) HalfGemmKernel(GemmParams p) {
  constexpr int kWarpM = BM / 2, kWarpN = kBN / 2;
  constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;
  __shared__ alignas(16) __half as[2][BM][kStride];
  __shared__ alignas(16) __half bs[2][kBN][kStride];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int wm = warp / 2, wn = warp % 2;
  const int64_t m0 = blockIdx.x * int64_t{BM}, n0 = blockIdx.y * int64_t{kBN};
  const int steps = static_cast<int>((p.k + kBK - 1) / kBK);

  // Weights never depend on the previous kernel: request the first step's before waiting.
  LoadWeights(p, n0, 0, bs[0]);
  asm volatile("cp.async.commit_group;\n" ::);
  ALoader<BM, kConv> a;
  a.Init(p, m0);
  WaitForPreviousKernel();
  AllowNextKernel();
  a.Load(p, 0);
  a.Store(as[0]);

  float acc[kMt][kNt][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  }

  for (int s = 0; s < steps; ++s) {
    const int buf = s & 1;
    const bool more = s + 1 < steps;
    if (more) {
      LoadWeights(p, n0, int64_t{s + 1} * kBK, bs[buf ^ 1]);
      asm volatile("cp.async.commit_group;\n" ::);
      a.Load(p, int64_t{s + 1} * kBK);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        LdMatrix4(af[mt], &as[buf][wm * kWarpM + mt * 16 + lane % 16][kk + (lane / 16) * 8]);
      }
#pragma unroll
      for (int nt = 0; nt < kNt; nt += 2) {
        uint32_t bf[4];
        LdMatrix4(
            bf,
            &bs[buf][wn * kWarpN + nt * 8 + (lane / 16) * 8 + lane % 8][kk + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          Mma(acc[mt][nt], af[mt], bf[0], bf[1]);
          Mma(acc[mt][nt + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
    if (more) a.Store(as[buf ^ 1]);
    __syncthreads();
  }

  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    const int64_t col = n0 + wn * kWarpN + nt * 8 + t2;
    if (col >= p.n) continue;
    float2 bias = make_float2(0.0f, 0.0f);
    if (p.bias != nullptr) bias = *reinterpret_cast<const float2*>(p.bias + col);
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + wm * kWarpM + mt * 16 + g + half * 8;
        if (row >= p.m) continue;
        const float2 out = make_float2(ApplyAct(acc[mt][nt][2 * half] + bias.x, p.act),
                                       ApplyAct(acc[mt][nt][2 * half + 1] + bias.y, p.act));
        *reinterpret_cast<float2*>(p.y + row * p.n + col) = out;
      }
    }
  }
}

template <int BM>
cudaError_t LaunchTiled(const LaunchContext& ctx, const GemmParams& p, bool conv) {
  const dim3 grid(CeilDiv(p.m, BM), CeilDiv(p.n, kBN));
  if (conv) return Launch(ctx, HalfGemmKernel<BM, true>, grid, dim3(kGemmThreads), 0, p);
  return Launch(ctx, HalfGemmKernel<BM, false>, grid, dim3(kGemmThreads), 0, p);
}

#endif  // WAAV_GPU_HAS_MMA

}  // namespace

bool HalfGemmSupported(const HalfGemmArgs& a) {
#if WAAV_GPU_HAS_MMA
  return a.k % 8 == 0 && a.n % 8 == 0 && Aligned(a.x, 16) && Aligned(a.w, 16) && Aligned(a.y, 16) &&
         (a.bias == nullptr || Aligned(a.bias, 8)) &&
         (a.conv == nullptr || (a.conv->kernel_size > 0 && a.conv->out_time > 0));
#else
  (void)a;
  (void)Aligned;
  return false;
#endif
}

cudaError_t LaunchHalfGemm(const LaunchContext& ctx, const HalfGemmArgs& a) {
#if WAAV_GPU_HAS_MMA
  if (a.m == 0 || a.n == 0) return cudaSuccess;
  GemmParams p{a.x,   static_cast<const __half*>(a.w),           a.bias, a.y, a.m, a.n, a.k,
               a.act, a.conv != nullptr ? *a.conv : ConvGather{}};
  // 64-row tiles when they alone give two blocks per multiprocessor, else 32-row tiles (one
  // 1500-row window at N = 384: 47 × 6 blocks instead of 24 × 6 on 132 SMs).
  const int64_t big_blocks = ((a.m + 63) / 64) * ((a.n + kBN - 1) / kBN);
  if (big_blocks >= 2 * int64_t{ctx.sm_count}) return LaunchTiled<64>(ctx, p, a.conv != nullptr);
  return LaunchTiled<32>(ctx, p, a.conv != nullptr);
#else
  (void)ctx;
  (void)a;
  return cudaErrorNotSupported;
#endif
}

}  // namespace waav::cuda

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/half_gemm.cuh"
#include "kernels/cuda/mma.cuh"

namespace waav::cuda {
namespace {

bool Aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

#if WAAV_GPU_HAS_MMA

constexpr int kBK = 32;            // K per step
constexpr int kAStride = kBK + 8;  // A smem row stride in floats (≡ 8 mod 32: conflict-free float2)
constexpr int kBStride = kBK + 8;  // B smem row stride in halves (80 bytes: conflict-free ldmatrix)
constexpr int kGemmThreads = 128;  // 4 warps, 2 × 2 over the block tile

using mma::CommitAsync;
using mma::CopyAsync16;
using mma::LdMatrix4;
using mma::WaitAsync;

__device__ __forceinline__ void CopyAsync4(void* smem, const void* global, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mma::SmemAddress(smem)),
               "l"(global), "r"(src_bytes));
}

struct GemmParams {
  const float* x;
  const __half* w;
  const float* bias;
  const float* residual;
  float* y;
  int64_t m, n, k;
  Epilogue act;
  ConvGather conv;
  // Split K (dense only): grid.z ranges of split_steps steps of kBK each; with splits > 1 every
  // block stores its raw sums in partials[z][M][N] and the last of a tile's blocks to arrive
  // (counters[tile], reset by it) adds them in z order and runs the epilogue.
  int splits;
  int split_steps;
  float* partials;
  int* counters;
  // plane_cols > 0: column c of the result goes to planes[c / plane_cols], column c % plane_cols
  // (f32 planes of plane_cols columns each; y unused).
  int64_t plane_cols;
  PlaneOutputs planes;
};

// Where output (row, col) and (row, col + 1) go: y, or a plane (plane_cols even, so both land in
// the same one; null for an appended cache's row whose position is out of range).
__device__ __forceinline__ float* OutputAt(const GemmParams& p, int64_t row, int64_t col) {
  if (p.plane_cols <= 0) return p.y + row * p.n + col;
  const int plane = static_cast<int>(col / p.plane_cols);
  const int64_t offset = PlaneRowOffset(p.planes, plane, row, p.plane_cols);
  if (offset < 0) return nullptr;
  return static_cast<float*>(p.planes.planes[plane]) + offset + (col - plane * p.plane_cols);
}

// A block tile of BM × BN outputs, K staged kStages steps deep in dynamic shared memory:
// per stage BM rows of f32 A (as loaded; rounded to f16 into the fragments) and BN rows of f16
// weights [n][k].
template <int BM, int BN, int kStages>
struct Tile {
  static constexpr int kABytes = BM * kAStride * 4, kBBytes = BN * kBStride * 2;
  static constexpr int kSmemBytes = kStages * (kABytes + kBBytes);
};

// Every step each thread copies the same A pieces: rows tid/8 + 16·i, columns 4·(tid % 8) .. +3
// of the step's 32 (dense: one 16-byte copy; conv: four 4-byte gathers of the im2col matrix).
template <int BM, bool kConv>
struct ALoader {
  static constexpr int kSlots = BM * kBK / 4 / kGemmThreads;
  int64_t base[kSlots];  // dense: offset of the row in x (−1: beyond M); conv: b·time (−1 beyond)
  int t0[kSlots];        // conv: t·stride − padding
  int col;
  int q;     // K index of this thread's first column at the current step
  int c[4];  // conv: channel and tap of the 4 columns at the current step
  int j[4];
  int dc, dj;  // conv: advance of (channel, tap) per step of 32

  __device__ void Init(const GemmParams& p, int64_t m0, int64_t k_begin) {
    col = (threadIdx.x % 8) * 4;
    q = static_cast<int>(k_begin) + col;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int64_t row = m0 + threadIdx.x / 8 + 16 * i;
      t0[i] = 0;
      if (row >= p.m) {
        base[i] = -1;
      } else if (kConv) {
        const int64_t b = row / p.conv.out_time, t = row - b * p.conv.out_time;
        base[i] = b * p.conv.time;
        t0[i] = static_cast<int>(t * p.conv.stride - p.conv.padding);
      } else {
        base[i] = row * p.k;
      }
    }
    if (kConv) {
      const int ks = static_cast<int>(p.conv.kernel_size);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        c[e] = (col + e) / ks;
        j[e] = (col + e) - c[e] * ks;
      }
      dc = kBK / ks;
      dj = kBK - dc * ks;
    }
  }

  // Issues the copies of the current step into `tile`, then moves to the next step.
  __device__ void Issue(const GemmParams& p, float (*tile)[kAStride]) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      float* dst = &tile[threadIdx.x / 8 + 16 * i][col];
      if (!kConv) {
        const bool in = base[i] >= 0 && q < p.k;
        CopyAsync16(dst, in ? p.x + base[i] + q : p.x, in ? 16 : 0);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ti = t0[i] + j[e];
          const bool in = base[i] >= 0 && q + e < p.k && ti >= 0 && ti < p.conv.time;
          CopyAsync4(dst + e, in ? p.x + (base[i] + ti) * p.conv.in_channels + c[e] : p.x,
                     in ? 4 : 0);
        }
      }
    }
    q += kBK;
    if (kConv) {
      const int ks = static_cast<int>(p.conv.kernel_size);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        c[e] += dc;
        j[e] += dj;
        if (j[e] >= ks) {
          j[e] -= ks;
          c[e] += 1;
        }
      }
    }
  }
};

// Weights [N, K] f16: BN rows × kBK halves per step, 16-byte chunks.
template <int BN>
__device__ __forceinline__ void IssueWeights(const GemmParams& p, int64_t n0, int64_t k0,
                                             __half (*tile)[kBStride]) {
#pragma unroll
  for (int i = 0; i < BN * kBK / 8 / kGemmThreads; ++i) {
    const int c = threadIdx.x + kGemmThreads * i;
    const int r = c / 4, c8 = (c % 4) * 8;
    const bool in = n0 + r < p.n && k0 + c8 < p.k;
    CopyAsync16(&tile[r][c8], in ? p.w + (n0 + r) * p.k + k0 + c8 : p.w, in ? 16 : 0);
  }
}

__device__ __forceinline__ uint32_t HalfPair(const float* p) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  return mma::PackHalf2(v.x, v.y);
}

// Split K: stores this block's raw sums (fragment (mt, nt) of a warp whose first row and column
// are row0 and col0) in its partials plane; the last block of the tile to arrive replaces acc by
// the sum of every plane in z order (the same result whichever block is last) and returns true,
// the others return false. The last block resets the tile's counter for the next launch (which
// reads it only after this grid has completed: WaitForPreviousKernel).
template <int kMt, int kNt>
__device__ __forceinline__ bool AddSplitPartials(const GemmParams& p, int64_t row0, int64_t col0,
                                                 float (&acc)[kMt][kNt][4]) {
  __shared__ int last;
  const int64_t plane = p.m * p.n;
  auto for_each = [&](auto&& visit) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int64_t col = col0 + nt * 8;
      if (col >= p.n) continue;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t row = row0 + mt * 16 + half * 8;
          if (row < p.m) visit(row * p.n + col, acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
        }
      }
    }
  };
  float* own = p.partials + blockIdx.z * plane;
  for_each([&](int64_t at, float& x, float& y) {
    *reinterpret_cast<float2*>(own + at) = make_float2(x, y);
  });
  __threadfence();
  __syncthreads();
  const int tile = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
  if (threadIdx.x == 0) last = atomicAdd(&p.counters[tile], 1) == p.splits - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  for_each([&](int64_t at, float& x, float& y) {
    float2 sum = make_float2(0.0f, 0.0f);
    for (int z = 0; z < p.splits; ++z) {
      const float2 v = z == static_cast<int>(blockIdx.z)
                           ? make_float2(x, y)
                           : __ldcg(reinterpret_cast<const float2*>(p.partials + z * plane + at));
      sum.x += v.x;
      sum.y += v.y;
    }
    x = sum.x;
    y = sum.y;
  });
  if (threadIdx.x == 0) p.counters[tile] = 0;
  return true;
}

template <int BM, int BN, int kStages, bool kConv>
__global__ void __launch_bounds__(kGemmThreads) HalfGemmKernel(GemmParams p) {
  using T = Tile<BM, BN, kStages>;
  constexpr int kWarpM = BM / 2, kWarpN = BN / 2;
  constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  auto stage_a = [&](int s) {
    return reinterpret_cast<float(*)[kAStride]>(smem + s * (T::kABytes + T::kBBytes));
  };
  auto stage_b = [&](int s) {
    return reinterpret_cast<__half(*)[kBStride]>(smem + s * (T::kABytes + T::kBBytes) + T::kABytes);
  };
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int wm = warp / 2, wn = warp % 2;
  // Blocks along N vary fastest: the blocks that share rows of A run together and re-read them
  // from L2, not from memory (at 16 windows A is 37 MB of f32).
  const int64_t m0 = blockIdx.y * int64_t{BM}, n0 = blockIdx.x * int64_t{BN};
  const int all_steps = static_cast<int>((p.k + kBK - 1) / kBK);
  const int first_step = static_cast<int>(blockIdx.z) * p.split_steps;
  const int steps = min(all_steps - first_step, p.split_steps);
  const int64_t k_begin = int64_t{first_step} * kBK;

  // Weights never depend on the previous kernel: request the first stages' before waiting. The
  // commit groups then hold (weights 0..S−2, A 0), (A 1), ..., one group per step as the loop
  // expects (a step's group is complete once all groups up to it are).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) IssueWeights<BN>(p, n0, k_begin + int64_t{s} * kBK, stage_b(s));
  }
  ALoader<BM, kConv> a;
  a.Init(p, m0, k_begin);
  WaitForPreviousKernel();
  AllowNextKernel();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) a.Issue(p, stage_a(s));
    CommitAsync();
  }

  float acc[kMt][kNt][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
    }
  }
  const int g = lane / 4, t2 = (lane % 4) * 2;

  for (int s = 0; s < steps; ++s) {
    WaitAsync<kStages - 2>();
    __syncthreads();  // step s is in shared memory; every warp is done with step s − 1's stage
    const int next = s + kStages - 1;
    if (next < steps) {
      IssueWeights<BN>(p, n0, k_begin + int64_t{next} * kBK, stage_b(next % kStages));
      a.Issue(p, stage_a(next % kStages));
    }
    CommitAsync();
    const float(*as)[kAStride] = stage_a(s % kStages);
    const __half(*bs)[kBStride] = stage_b(s % kStages);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const float* r0 = &as[wm * kWarpM + mt * 16 + g][kk + t2];
        const float* r1 = r0 + 8 * kAStride;
        af[mt][0] = HalfPair(r0);
        af[mt][1] = HalfPair(r1);
        af[mt][2] = HalfPair(r0 + 8);
        af[mt][3] = HalfPair(r1 + 8);
      }
#pragma unroll
      for (int nt = 0; nt < kNt; nt += 2) {
        uint32_t bf[4];
        LdMatrix4(
            bf, &bs[wn * kWarpN + nt * 8 + (lane / 16) * 8 + lane % 8][kk + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma::Mma16816(acc[mt][nt], af[mt], bf[0], bf[1]);
          mma::Mma16816(acc[mt][nt + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
  }
  WaitAsync<0>();

  if constexpr (!kConv) {  // convs never split K
    if (p.splits > 1 &&
        !AddSplitPartials<kMt, kNt>(p, m0 + wm * kWarpM + g, n0 + wn * kWarpN + t2, acc)) {
      return;
    }
  }
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
        float2 out = make_float2(ApplyEpilogue(acc[mt][nt][2 * half] + bias.x, p.act),
                                 ApplyEpilogue(acc[mt][nt][2 * half + 1] + bias.y, p.act));
        if (p.residual != nullptr) {
          const float2 r = *reinterpret_cast<const float2*>(p.residual + row * p.n + col);
          out.x += r.x;
          out.y += r.y;
        }
        if (float* dst = OutputAt(p, row, col); dst != nullptr) {
          *reinterpret_cast<float2*>(dst) = out;
        }
      }
    }
  }
}

template <int BM, int BN, int kStages, bool kConv>
cudaError_t LaunchTile(const LaunchContext& ctx, const GemmParams& p) {
  constexpr int kBytes = Tile<BM, BN, kStages>::kSmemBytes;
  const dim3 grid(CeilDiv(p.n, BN), CeilDiv(p.m, BM), static_cast<unsigned>(p.splits));
  return Launch(ctx, HalfGemmKernel<BM, BN, kStages, kConv>, grid, dim3(kGemmThreads),
                static_cast<size_t>(kBytes), p);
}

// Above 48 KB a kernel must be allowed its dynamic shared memory first (PrepareHalfGemm).
template <int BM, int BN, int kStages>
cudaError_t AllowSmem() {
  constexpr int kBytes = Tile<BM, BN, kStages>::kSmemBytes;
  // And the largest shared-memory carveout, so that as many blocks as the registers allow are
  // resident (3 to 5 per SM) whatever the driver's own choice would be.
  for (const void* kernel :
       {reinterpret_cast<const void*>(HalfGemmKernel<BM, BN, kStages, true>),
        reinterpret_cast<const void*>(HalfGemmKernel<BM, BN, kStages, false>)}) {
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
    }
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <int BM, int BN, int kStages>
cudaError_t LaunchTiled(const LaunchContext& ctx, const GemmParams& p, bool conv) {
  return conv ? LaunchTile<BM, BN, kStages, true>(ctx, p)
              : LaunchTile<BM, BN, kStages, false>(ctx, p);
}

#endif  // WAAV_GPU_HAS_MMA

// The block tile of a GEMM: the largest that still gives two blocks per multiprocessor (fewer
// re-reads of A (f32) and of the weights through L2; one 30 s window: 1500x384->1536 in 64 x 128
// tiles, 288 blocks; N = 384 in 32 x 64 tiles, 282 blocks, where 64 x 64 would give 144 on 132
// SMs). A decoder step's GEMMs (tens of rows, N = 384: 12 blocks of 32 x 64) leave most
// multiprocessors idle; narrower tiles double the blocks.
struct TileShape {
  int bm, bn;
};
TileShape ChooseTile(int64_t m, int64_t n, bool narrow_tiles, int sm_count) {
  const int64_t wanted = 2 * int64_t{sm_count};
  auto blocks = [&](int64_t bm, int64_t bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
  if (blocks(64, 128) >= wanted) return {64, 128};
  if (blocks(64, 64) >= wanted) return {64, 64};
  if (!narrow_tiles || blocks(32, 64) >= int64_t{sm_count}) return {32, 64};
  return {32, 32};
}

}  // namespace

int HalfGemmSplits(int64_t m, int64_t n, int64_t k, bool narrow_tiles, int sm_count, int waves) {
  if (waves <= 0 || m <= 0 || n <= 0 || sm_count <= 0) return 1;
  const TileShape t = ChooseTile(m, n, narrow_tiles, sm_count);
  const int64_t tiles = ((m + t.bm - 1) / t.bm) * ((n + t.bn - 1) / t.bn);
  const int64_t wanted = int64_t{waves} * sm_count;
  if (tiles >= wanted || tiles > kHalfGemmSplitCounters) return 1;
  const int64_t steps = (k + 31) / 32;
  // At least two steps per range, so that a block's copies still overlap its MMAs.
  const int64_t splits = std::min((wanted + tiles - 1) / tiles, steps / 2);
  if (splits <= 1) return 1;
  const int64_t per = (steps + splits - 1) / splits;
  return static_cast<int>((steps + per - 1) / per);  // every range non-empty
}

size_t HalfGemmSplitBytes(int64_t m, int64_t n, int splits) {
  return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(m * n) * sizeof(float) : 0;
}

bool HalfGemmSupported(const HalfGemmArgs& a) {
#if WAAV_GPU_HAS_MMA
  return a.k % 8 == 0 && a.n % 8 == 0 && a.m <= int64_t{65535} * 32 && Aligned(a.x, 16) &&
         Aligned(a.w, 16) && Aligned(a.y, 16) && (a.bias == nullptr || Aligned(a.bias, 8)) &&
         (a.conv == nullptr || (a.conv->kernel_size > 0 && a.conv->out_time > 0));
#else
  (void)a;
  (void)Aligned;
  return false;
#endif
}

cudaError_t PrepareHalfGemm() {
#if WAAV_GPU_HAS_MMA
  cudaError_t err = AllowSmem<64, 128, 3>();
  if (err == cudaSuccess) err = AllowSmem<64, 64, 3>();
  if (err == cudaSuccess) err = AllowSmem<32, 64, 4>();
  if (err == cudaSuccess) err = AllowSmem<32, 32, 4>();
  return err;
#else
  return cudaSuccess;
#endif
}

cudaError_t LaunchHalfGemm(const LaunchContext& ctx, const HalfGemmArgs& a) {
#if WAAV_GPU_HAS_MMA
  if (a.m == 0 || a.n == 0) return cudaSuccess;
  GemmParams p;
  p.x = a.x;
  p.w = static_cast<const __half*>(a.w);
  p.bias = a.bias;
  p.residual = a.residual;
  p.y = a.y;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.act = a.act;
  p.conv = a.conv != nullptr ? *a.conv : ConvGather{};
  const bool conv = a.conv != nullptr;
  const TileShape tile = ChooseTile(a.m, a.n, a.narrow_tiles, ctx.sm_count);
  const int64_t tiles = int64_t{CeilDiv(a.m, tile.bm)} * CeilDiv(a.n, tile.bn);
  const int steps = static_cast<int>((a.k + kBK - 1) / kBK);
  // K ranges as asked, every one non-empty; none for convs, without scratch or too many tiles.
  const bool split = a.splits > 1 && !conv && a.partials != nullptr && a.counters != nullptr &&
                     tiles <= kHalfGemmSplitCounters && steps > 1;
  p.split_steps = split ? (steps + a.splits - 1) / a.splits : std::max(1, steps);
  p.splits = split ? (steps + p.split_steps - 1) / p.split_steps : 1;
  p.partials = a.partials;
  p.counters = a.counters;
  p.plane_cols = a.planes != nullptr && !conv ? a.plane_cols : 0;
  p.planes = a.planes != nullptr ? *a.planes : PlaneOutputs{};
  switch (tile.bm * 1000 + tile.bn) {
    case 64128:
      return LaunchTiled<64, 128, 3>(ctx, p, conv);
    case 64064:
      return LaunchTiled<64, 64, 3>(ctx, p, conv);
    case 32064:
      return LaunchTiled<32, 64, 4>(ctx, p, conv);
    default:
      return LaunchTiled<32, 32, 4>(ctx, p, conv);
  }
#else
  (void)ctx;
  (void)a;
  return cudaErrorNotSupported;
#endif
}

}  // namespace waav::cuda

// FlashAttention v2 (attention.cuh): the tuned f16 tensor-core kernel for encoder attention.
// Against the first flash kernel (attention.cu):
//  * keys are split over blocks so that the grid fills the chip evenly (a 30 s window is 144
//    (query block, head) groups on 132 SMs: unsplit, 12 SMs ran two groups each while the rest
//    idled half the time); the split count comes from a cost model of blocks per SM × tiles per
//    block. The last block of a group merges the partials with all its threads (one round of
//    loads per split, not a serial loop).
//  * K fragments through ldmatrix (4 per tile step instead of 32 single-word loads);
//  * key masks only on tiles that cross a visibility bound; exp2 on the SFU directly;
//  * q, k, v converted to f16 with 16-byte loads.
//  * an f32 q over an f16 K/V cache (a prompt's cross-attention, the alignment pass): K and V
//    read as they are, q split into f16 hi + lo parts and the probabilities too, two MMAs
//    each, so that the result is as exact as f32 queries and probabilities times f16 keys and
//    values (SplitAttention's arithmetic) while K and V are read once per 64 queries.
//    Warps whose 16 queries all lie past the last one skip the arithmetic there.
#include <algorithm>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace waav::cuda {
namespace {

#if WAAV_GPU_HAS_MMA
using namespace mma;  // NOLINT: the PTX wrappers of mma.cuh

constexpr int kRows = 64;  // keys per tile (and queries per block with one m-tile per warp)
constexpr int kDim = 64;
constexpr int kPadded = kDim + 8;  // row stride in halves (144 bytes: conflict-free ldmatrix)
constexpr int kMaxSplits = 4;
constexpr int kResidentPerSm = 4;  // __launch_bounds__(128, 4) with one m-tile per warp
// Blocks per SM of a kernel with kM m-tiles per warp (16 queries each: the block's queries are
// 64·kM) and of its split-q form (more registers).
constexpr int ResidentPerSm(bool split_q, int m_tiles) {
  return split_q ? 3 : (m_tiles == 1 ? kResidentPerSm : 2);
}

__device__ __forceinline__ int64_t Visible(int64_t valid, int64_t q_len, int64_t i, bool causal) {
  if (!causal) return valid;
  const int64_t n = valid - q_len + i + 1;
  return n < 0 ? 0 : (n > valid ? valid : n);
}

// Rows [row0, row0 + kCount) of a [B·T, width] f16 matrix at column col0 into `tile`; rows at
// or beyond `rows` are zero-filled.
template <int kCount = kRows>
__device__ __forceinline__ void LoadRows(__half (*tile)[kPadded], const __half* base, int64_t row0,
                                         int64_t rows, int64_t width, int64_t col0) {
#pragma unroll
  for (int i = 0; i < kCount * kDim / 8 / 128; ++i) {
    const int c = threadIdx.x + 128 * i;
    const int r = c / 8, c8 = c % 8;
    const bool in = row0 + r < rows;
    const __half* src = in ? base + (row0 + r) * width + col0 + c8 * 8 : base;
    CopyAsync16(&tile[r][c8 * 8], src, in ? 16 : 0);
  }
}

struct Flash2Params {
  const __half *q, *k, *v;
  const float* q32;  // kSplitQ: the f32 q (q unused), split into f16 hi + lo parts as loaded
  const int32_t* kv_lengths;
  float* out;
  __half* out16;  // non-null: the output rounded to f16 here instead (out unused)
  int64_t q_len, kv_len;
  int heads;
  float scale_log2;
  bool causal;
  int splits;
  float* partials;  // splits > 1: o [groups·splits][64][64], then (m, l) [groups·splits][64]
  int* counters;
  unsigned long long* error_word;
};

// f16 hi + lo parts of a pair of floats: hi = f16(a), lo = f16(a − hi).
__device__ __forceinline__ void SplitPack(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = PackHalf2(a - back.x, b - back.y);
}

// Two adjacent output elements at `index` (even): f32 into out, or rounded to f16 into out16.
__device__ __forceinline__ void StoreOutPair(const Flash2Params& p, int64_t index, float a,
                                             float b) {
  if (p.out16 != nullptr) {
    *reinterpret_cast<__half2*>(p.out16 + index) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<float2*>(p.out + index) = make_float2(a, b);
  }
}

// kSplitQ: an f32 q (q32) over f16 K/V: q and the probabilities split into f16 hi + lo parts,
// each multiplied by both.
// Its second MMAs need more registers than 4 blocks an SM leave (128 a thread): 3 blocks.
// kM: m-tiles of 16 queries per warp (1 or 2; the split-q form 1). With 2 each K and V fragment
// loaded from shared memory feeds twice the MMAs (the loads were as many cycles as the MMAs at
// one), at twice the accumulators: 2 blocks an SM.
template <bool kSplitQ, int kM>
__global__ void __launch_bounds__(128, ResidentPerSm(kSplitQ, kM)) Flash2Kernel(Flash2Params p) {
  static_assert(kM == 1 || (kM == 2 && !kSplitQ), "1 or 2 m-tiles a warp, the split-q form 1");
  constexpr int kQRows = 64 * kM;  // queries per block
  const int64_t q_len = p.q_len, kv_len = p.kv_len;
  const int heads = p.heads;
  const float scale_log2 = p.scale_log2;
  WaitForPreviousKernel();
  AllowNextKernel();
  // K and V tiles [k0, v0, k1, v1]; the queries' tile is the second buffer pair (kQRows <= 128
  // rows) until every warp has its fragments, before the second tile is loaded there.
  __shared__ alignas(16) __half kv_tiles[4 * kRows][kPadded];
  __half(*const qs)[kPadded] = kv_tiles + 2 * kRows;
  auto ks = [&](int buf) { return kv_tiles + 2 * buf * kRows; };
  auto vs = [&](int buf) { return kv_tiles + (2 * buf + 1) * kRows; };
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int64_t i0 = blockIdx.x * int64_t{kQRows};
  const int64_t width = int64_t{heads} * kDim;
  int64_t valid = kv_len;
  if (p.kv_lengths != nullptr) {
    valid = p.kv_lengths[b];
    if (valid < 0 || valid > kv_len) {
      if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0 && h == 0) {
        ReportDeviceError(p.error_word, DeviceErrorOp::kAttention, b, static_cast<int32_t>(valid));
      }
      return;
    }
  }
  const int64_t last_row = min(i0 + kQRows, q_len) - 1;
  const int64_t block_keys = Visible(valid, q_len, last_row, p.causal);
  const int all_tiles = static_cast<int>((block_keys + kRows - 1) / kRows);
  const int per_split = (all_tiles + p.splits - 1) / p.splits;
  const int first_tile = min(all_tiles, static_cast<int>(blockIdx.z) * per_split);
  const int tiles = min(all_tiles, first_tile + per_split) - first_tile;
  const __half* qb = kSplitQ ? nullptr : p.q + b * q_len * width;
  const __half* kb = p.k + b * kv_len * width;
  const __half* vb = p.v + b * kv_len * width;

  if constexpr (!kSplitQ) LoadRows<kQRows>(qs, qb, i0, q_len, width, h * kDim);
  CommitAsync();
  if (tiles > 0) {
    LoadRows(ks(0), kb, int64_t{first_tile} * kRows, kv_len, width, h * kDim);
    LoadRows(vs(0), vb, int64_t{first_tile} * kRows, kv_len, width, h * kDim);
  }
  CommitAsync();
  // The split-q form reads its f32 q rows while the first K/V tile is in flight (8 float4 a
  // thread) and writes their f16 hi parts into the tile, then the lo parts.
  float4 q32[kSplitQ ? 8 : 1];
  if constexpr (kSplitQ) {
    const float* rows = p.q32 + b * q_len * width + h * kDim;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = threadIdx.x + 128 * i;
      const int64_t r = i0 + c / 16;
      q32[i] = r < q_len ? __ldg(reinterpret_cast<const float4*>(rows + r * width) + c % 16)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      uint32_t hi[2], lo[2];
      SplitPack(q32[i].x, q32[i].y, hi[0], lo[0]);
      SplitPack(q32[i].z, q32[i].w, hi[1], lo[1]);
      *reinterpret_cast<uint2*>(&qs[c / 16][(c % 16) * 4]) = make_uint2(hi[0], hi[1]);
    }
  }
  WaitAsync<0>();
  __syncthreads();

  // This warp's 16·kM query rows as A fragments, 4 steps of 16 along the head dim.
  const int fr = lane / 4, fc = (lane % 4) * 2;
  uint32_t qa[kM][4][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      LdMatrix4(qa[mi][kk], &qs[(warp * kM + mi) * 16 + lane % 16][kk * 16 + (lane / 16) * 8]);
    }
  }
  uint32_t qa_lo[4][4];
  if constexpr (kSplitQ) {  // the lo parts through the same tile once every warp has its hi
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = threadIdx.x + 128 * i;
      uint32_t hi[2], lo[2];
      SplitPack(q32[i].x, q32[i].y, hi[0], lo[0]);
      SplitPack(q32[i].z, q32[i].w, hi[1], lo[1]);
      *reinterpret_cast<uint2*>(&qs[c / 16][(c % 16) * 4]) = make_uint2(lo[0], lo[1]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      LdMatrix4(qa_lo[kk], &qs[warp * 16 + lane % 16][kk * 16 + (lane / 16) * 8]);
  }
  __syncthreads();  // every warp has its fragments: the second tile may go where q was
  // A warp whose rows all lie past the last query (a prompt's few queries) only helps load
  // (split-q form only: the test costs the other form registers).
  const bool active = i0 + warp * 16 * kM < q_len;
  // m-tile mi's two rows of this lane: row[mi][0] and row[mi][0] + 8.
  int64_t row[kM][2], visible[kM][2];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    row[mi][0] = i0 + (warp * kM + mi) * 16 + fr;
    row[mi][1] = row[mi][0] + 8;
    visible[mi][0] = Visible(valid, q_len, row[mi][0], p.causal);
    visible[mi][1] = Visible(valid, q_len, row[mi][1], p.causal);
  }
  // (Rows grow down the block: a causal mask shows the first row the fewest keys.)
  const int64_t visible_min = min(visible[0][0], visible[0][1]);

  float m[kM][2], l[kM][2];
  float o[kM][8][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    m[mi][0] = m[mi][1] = -INFINITY;
    l[mi][0] = l[mi][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt) o[mi][dt][0] = o[mi][dt][1] = o[mi][dt][2] = o[mi][dt][3] = 0.0f;
  }

  // One barrier per tile: it makes tile kt visible and tells that every warp is done with tile
  // kt − 1, whose buffer then takes tile kt + 1 while tile kt is computed.
  for (int kt = 0; kt < tiles; ++kt) {
    const int buf = kt & 1;
    if (kt > 0) {
      WaitAsync<0>();
      __syncthreads();
    }
    if (kt + 1 < tiles) {
      const int64_t next = int64_t{first_tile + kt + 1} * kRows;
      LoadRows(ks(buf ^ 1), kb, next, kv_len, width, h * kDim);
      LoadRows(vs(buf ^ 1), vb, next, kv_len, width, h * kDim);
    }
    CommitAsync();
    if (kSplitQ && !active) continue;  // the barrier and the loads above are the block's

    float s[kM][8][4];
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int nt = 0; nt < 8; nt += 2) {
        uint32_t kf[4];
        LdMatrix4(kf,
                  &ks(buf)[nt * 8 + (lane / 16) * 8 + lane % 8][kk * 16 + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          Mma16816(s[mi][nt], qa[mi][kk], kf[0], kf[1]);
          Mma16816(s[mi][nt + 1], qa[mi][kk], kf[2], kf[3]);
        }
        if constexpr (kSplitQ) {
          Mma16816(s[0][nt], qa_lo[kk], kf[0], kf[1]);
          Mma16816(s[0][nt + 1], qa_lo[kk], kf[2], kf[3]);
        }
      }
    }
    const int64_t key0 = int64_t{first_tile + kt} * kRows;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
      float mx0 = -INFINITY, mx1 = -INFINITY;
      if (key0 + kRows <= visible_min) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s[mi][nt][e] *= scale_log2;
            s[mi][nt][2 + e] *= scale_log2;
            mx0 = fmaxf(mx0, s[mi][nt][e]);
            mx1 = fmaxf(mx1, s[mi][nt][2 + e]);
          }
        }
      } else {
        const int64_t d0 = visible[mi][0] - key0, d1 = visible[mi][1] - key0;
        const int lim0 = d0 < 0 ? 0 : (d0 > kRows ? kRows : static_cast<int>(d0));
        const int lim1 = d1 < 0 ? 0 : (d1 > kRows ? kRows : static_cast<int>(d1));
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = nt * 8 + fc + e;
            s[mi][nt][e] = key < lim0 ? s[mi][nt][e] * scale_log2 : -INFINITY;
            s[mi][nt][2 + e] = key < lim1 ? s[mi][nt][2 + e] * scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, s[mi][nt][e]);
            mx1 = fmaxf(mx1, s[mi][nt][2 + e]);
          }
        }
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
      const float n0 = fmaxf(m[mi][0], mx0), n1 = fmaxf(m[mi][1], mx1);
      // A row that has seen no key yet keeps max −inf: subtract 0 instead (2^−inf = 0 then).
      const float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
      const float alpha0 = Exp2Approx(m[mi][0] - base0), alpha1 = Exp2Approx(m[mi][1] - base1);
      m[mi][0] = n0;
      m[mi][1] = n1;
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[mi][nt][e] = Exp2Approx(s[mi][nt][e] - base0);
          s[mi][nt][2 + e] = Exp2Approx(s[mi][nt][2 + e] - base1);
          sum0 += s[mi][nt][e];
          sum1 += s[mi][nt][2 + e];
        }
      }
      l[mi][0] = l[mi][0] * alpha0 + sum0;
      l[mi][1] = l[mi][1] * alpha1 + sum1;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        o[mi][dt][0] *= alpha0;
        o[mi][dt][1] *= alpha0;
        o[mi][dt][2] *= alpha1;
        o[mi][dt][3] *= alpha1;
      }
    }
    // O += P·V: P's accumulator layout is the A-fragment layout of the next MMA; V's B fragments
    // come transposed from the row-major tile through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[kM][4], pl[4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        if constexpr (kSplitQ) {
          SplitPack(s[0][2 * kk][0], s[0][2 * kk][1], pa[0][0], pl[0]);
          SplitPack(s[0][2 * kk][2], s[0][2 * kk][3], pa[0][1], pl[1]);
          SplitPack(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1], pa[0][2], pl[2]);
          SplitPack(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3], pa[0][3], pl[3]);
        } else {
          pa[mi][0] = PackHalf2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          pa[mi][1] = PackHalf2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          pa[mi][2] = PackHalf2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          pa[mi][3] = PackHalf2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
      }
#pragma unroll
      for (int dt = 0; dt < 8; dt += 2) {
        const int mj = lane / 8, rr = lane % 8;
        uint32_t vf[4];
        LdMatrix4Trans(vf, &vs(buf)[kk * 16 + (mj & 1) * 8 + rr][(dt + (mj >> 1)) * 8]);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          Mma16816(o[mi][dt], pa[mi], vf[0], vf[1]);
          Mma16816(o[mi][dt + 1], pa[mi], vf[2], vf[3]);
        }
        if constexpr (kSplitQ) {
          Mma16816(o[0][dt], pl, vf[0], vf[1]);
          Mma16816(o[0][dt + 1], pl, vf[2], vf[3]);
        }
      }
    }
  }
  WaitAsync<0>();

#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      l[mi][e] += __shfl_xor_sync(kFullMask, l[mi][e], 1);
      l[mi][e] += __shfl_xor_sync(kFullMask, l[mi][e], 2);
    }
  }
  const int64_t ob = b * q_len * width + h * kDim;  // the output's (row b, head h) offset
  if (p.splits == 1) {
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
      const float inv0 = l[mi][0] > 0.0f ? 1.0f / l[mi][0] : 0.0f;
      const float inv1 = l[mi][1] > 0.0f ? 1.0f / l[mi][1] : 0.0f;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        const int d = dt * 8 + fc;
        if (row[mi][0] < q_len) {
          StoreOutPair(p, ob + row[mi][0] * width + d, o[mi][dt][0] * inv0, o[mi][dt][1] * inv0);
        }
        if (row[mi][1] < q_len) {
          StoreOutPair(p, ob + row[mi][1] * width + d, o[mi][dt][2] * inv1, o[mi][dt][3] * inv1);
        }
      }
    }
    return;
  }

  // Partial (o, m, l) of this split; m is in log2 units like the scores.
  const int64_t group = bh * gridDim.x + blockIdx.x;
  const int64_t records = int64_t{gridDim.x} * gridDim.y * p.splits;
  const int64_t record = group * p.splits + blockIdx.z;
  float* part_o = p.partials + record * kQRows * kDim;
  float* part_ml = p.partials + records * kQRows * kDim + record * kQRows * 2;
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    const int r0 = (warp * kM + mi) * 16 + fr, r1 = r0 + 8;  // rows within the block
#pragma unroll
    for (int dt = 0; dt < 8; ++dt) {
      const int d = dt * 8 + fc;
      *reinterpret_cast<float2*>(part_o + r0 * kDim + d) = make_float2(o[mi][dt][0], o[mi][dt][1]);
      *reinterpret_cast<float2*>(part_o + r1 * kDim + d) = make_float2(o[mi][dt][2], o[mi][dt][3]);
    }
    if ((lane & 3) == 0) {
      *reinterpret_cast<float2*>(part_ml + 2 * r0) = make_float2(m[mi][0], l[mi][0]);
      *reinterpret_cast<float2*>(part_ml + 2 * r1) = make_float2(m[mi][1], l[mi][1]);
    }
  }
  __shared__ int last;
  __shared__ float weight[kMaxSplits][kQRows];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.counters[group], 1) == p.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int splits = p.splits;
  const float* group_o = p.partials + group * splits * kQRows * kDim;
  const float* group_ml = p.partials + records * kQRows * kDim + group * splits * kQRows * 2;
  // Per row: the weight of each split, 2^(m_s − m) / Σ_s l_s·2^(m_s − m); all loads at once.
  if (threadIdx.x < kQRows) {
    const int r = threadIdx.x;
    float2 ml[kMaxSplits];
#pragma unroll
    for (int sp = 0; sp < kMaxSplits; ++sp) {
      ml[sp] = sp < splits ? __ldcg(reinterpret_cast<const float2*>(group_ml) + sp * kQRows + r)
                           : make_float2(-INFINITY, 0.0f);
    }
    float m_max = -INFINITY;
#pragma unroll
    for (int sp = 0; sp < kMaxSplits; ++sp) m_max = fmaxf(m_max, ml[sp].x);
    float l_sum = 0.0f, w[kMaxSplits];
#pragma unroll
    for (int sp = 0; sp < kMaxSplits; ++sp) {
      w[sp] = ml[sp].x == -INFINITY ? 0.0f : Exp2Approx(ml[sp].x - m_max);
      l_sum = fmaf(ml[sp].y, w[sp], l_sum);
    }
    const float inv = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
#pragma unroll
    for (int sp = 0; sp < kMaxSplits; ++sp) weight[sp][r] = w[sp] * inv;
  }
  __syncthreads();
  const int rows = static_cast<int>(min(int64_t{kQRows}, q_len - i0));
  // kQRows rows × 16 float4 per row: 8·kM per thread, in rounds of 4 with every split's load
  // issued before the first use.
#pragma unroll
  for (int round = 0; round < 2 * kM; ++round) {
    float4 acc[4];
    float4 part[4][kMaxSplits];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int idx = threadIdx.x + 128 * (4 * round + j);
      const int r = idx / 16, d4 = idx % 16;
#pragma unroll
      for (int sp = 0; sp < kMaxSplits; ++sp) {
        part[j][sp] = sp < splits && r < rows
                          ? __ldcg(reinterpret_cast<const float4*>(
                                       group_o + (int64_t{sp} * kQRows + r) * kDim) +
                                   d4)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int idx = threadIdx.x + 128 * (4 * round + j);
      const int r = idx / 16, d4 = idx % 16;
      acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int sp = 0; sp < kMaxSplits; ++sp) {
        const float w = sp < splits ? weight[sp][r] : 0.0f;
        acc[j].x = fmaf(part[j][sp].x, w, acc[j].x);
        acc[j].y = fmaf(part[j][sp].y, w, acc[j].y);
        acc[j].z = fmaf(part[j][sp].z, w, acc[j].z);
        acc[j].w = fmaf(part[j][sp].w, w, acc[j].w);
      }
      if (r < rows) {
        const int64_t dst = ob + (i0 + r) * width + d4 * 4;
        StoreOutPair(p, dst, acc[j].x, acc[j].y);
        StoreOutPair(p, dst + 2, acc[j].z, acc[j].w);
      }
    }
  }
  if (threadIdx.x == 0) p.counters[group] = 0;
}

// q, k and v to f16 in one launch, 4 elements per thread step (counts multiples of 4, pointers
// 16-byte aligned: checked by the launcher).
__global__ void ToHalf3x4Kernel(const float4* q, int64_t nq4, const float4* k, const float4* v,
                                int64_t nkv4, uint2* q16, uint2* k16, uint2* v16) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t total = nq4 + 2 * nkv4;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const float4* src;
    uint2* dst;
    int64_t j;
    if (i < nq4) {
      src = q, dst = q16, j = i;
    } else if (i < nq4 + nkv4) {
      src = k, dst = k16, j = i - nq4;
    } else {
      src = v, dst = v16, j = i - nq4 - nkv4;
    }
    const float4 x = __ldg(src + j);
    dst[j] = make_uint2(PackHalf2(x.x, x.y), PackHalf2(x.z, x.w));
  }
}

size_t Rounded256(int64_t bytes) { return static_cast<size_t>((bytes + 255) / 256 * 256); }

#endif  // WAAV_GPU_HAS_MMA

}  // namespace

cudaError_t PrepareFlashAttention2() {
#if WAAV_GPU_HAS_MMA
  // 37 KB of shared memory per block: four blocks per SM only with the largest carveout.
  for (const void* kernel : {reinterpret_cast<const void*>(Flash2Kernel<false, 1>),
                             reinterpret_cast<const void*>(Flash2Kernel<false, 2>),
                             reinterpret_cast<const void*>(Flash2Kernel<true, 1>)}) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
#else
  return cudaSuccess;
#endif
}

bool FlashAttention2Supported(const AttentionArgs& a) {
#if WAAV_GPU_HAS_MMA
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  // (Its output: f32 at out, or f16 at out16 with out_half.)
  if (a.out_half ? !aligned16(a.out16) : !aligned16(a.out)) return false;
  if (a.half_inputs) {
    return a.head_dim == 64 && a.q_len >= 16 && aligned16(a.q16) && aligned16(a.k16) &&
           aligned16(a.v16);
  }
  // An f32 q over f16 K/V: any number of queries (the caller chooses from how many).
  if (a.kv_half) {
    return a.head_dim == 64 && a.q_len >= 1 && aligned16(a.q) && aligned16(a.k16) &&
           aligned16(a.v16);
  }
  return a.head_dim == 64 && a.q_len >= 16 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
#else
  (void)a;
  return false;
#endif
}

FlashPlan PlanFlashAttention2(const AttentionArgs& a, int sm_count, int64_t max_counters,
                              int force_splits, int m_tiles) {
  FlashPlan plan;
#if WAAV_GPU_HAS_MMA
  // Two m-tiles a warp where their grid, unsplit, fills at least 4 waves of its resident blocks
  // (2 an SM): H100, session 21, the encoder pass 157 against 163 us a window at 64 windows, even
  // at 16 (4.4 waves), 6-7% slower at 1 and 4 windows, where one m-tile's key splits fill the
  // chip better. The split-q form: one m-tile.
  const int64_t groups_of_two = (a.q_len + 2 * kRows - 1) / (2 * kRows) * a.batch * a.heads;
  const bool two = m_tiles == 2 || (m_tiles == 0 && groups_of_two >= 4 * 2 * int64_t{sm_count});
  plan.m_tiles = two && !a.kv_half ? 2 : 1;
  const int64_t q_rows = int64_t{kRows} * plan.m_tiles;
  const int64_t width = int64_t{a.heads} * a.head_dim;
  const int64_t groups = (a.q_len + q_rows - 1) / q_rows * a.batch * a.heads;
  const int64_t tiles = (a.kv_len + kRows - 1) / kRows;
  // Key splits while the grid still fits in one wave of resident blocks (4 per SM: 128
  // registers and 47 KB of shared memory each), at least 2 tiles per split. One 30 s window (144
  // groups, 24 tiles, 132 SMs): 3 splits, 432 blocks of 8 tiles. (Measured on an H100 with 4
  // splits, 576 blocks: 32.8 µs per layer with the conversion, against 60.4 unsplit.)
  const int64_t resident = ResidentPerSm(a.kv_half, plan.m_tiles);
  int best = 1;
  for (int s = 2; s <= kMaxSplits && tiles / s >= 2; ++s) {
    if (groups * s <= resident * sm_count) best = s;
  }
  if (force_splits > 0) {
    best = std::clamp<int64_t>(force_splits, 1,
                               std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, tiles)));
  }
  plan.half_bytes = a.half_inputs || a.kv_half
                        ? 0  // read as they are (kv_half: q split into f16 parts as it is loaded)
                        : Rounded256(a.batch * a.q_len * width * 2) +
                              2 * Rounded256(a.batch * a.kv_len * width * 2);
  if (best > 1 && groups <= max_counters) {
    plan.splits = best;
    plan.counters = groups;
    plan.partial_bytes = static_cast<size_t>(groups * best * q_rows) * (a.head_dim + 2) * 4;
  }
  plan.scratch_bytes = plan.half_bytes + plan.partial_bytes;
#else
  (void)a;
  (void)sm_count;
  (void)max_counters;
  (void)force_splits;
  (void)m_tiles;
#endif
  return plan;
}

cudaError_t LaunchFlashAttention2(const LaunchContext& ctx, const AttentionArgs& a,
                                  const FlashPlan& plan, void* scratch, int* counters) {
#if WAAV_GPU_HAS_MMA
  if (a.batch == 0 || a.q_len == 0 || a.heads == 0) return cudaSuccess;
  const int64_t width = int64_t{a.heads} * a.head_dim;
  const int64_t nq = a.batch * a.q_len * width, nkv = a.batch * a.kv_len * width;
  char* base = static_cast<char*>(scratch);
  auto* q16 = reinterpret_cast<__half*>(base);
  auto* k16 = reinterpret_cast<__half*>(base + Rounded256(nq * 2));
  auto* v16 = reinterpret_cast<__half*>(base + Rounded256(nq * 2) + Rounded256(nkv * 2));
  // width = heads · 64: every count is a multiple of 4.
  const int64_t total4 = (nq + 2 * nkv) / 4;
  // At most 4 blocks per SM: a grid that small launches with PDL (common.cuh).
  const int64_t blocks = std::min<int64_t>((total4 + 255) / 256, int64_t{ctx.sm_count} * 4);
  if (a.half_inputs) {  // f16 q, k, v (f16 activations): read as they are, no conversion
    q16 = static_cast<__half*>(const_cast<void*>(a.q16));
    k16 = static_cast<__half*>(const_cast<void*>(a.k16));
    v16 = static_cast<__half*>(const_cast<void*>(a.v16));
  } else if (a.kv_half) {  // f16 K/V read as they are; the kernel splits the f32 q
    q16 = nullptr;
    k16 = static_cast<__half*>(const_cast<void*>(a.k16));
    v16 = static_cast<__half*>(const_cast<void*>(a.v16));
  } else {
    const cudaError_t err =
        Launch(ctx, ToHalf3x4Kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0,
               reinterpret_cast<const float4*>(a.q), nq / 4, reinterpret_cast<const float4*>(a.k),
               reinterpret_cast<const float4*>(a.v), nkv / 4, reinterpret_cast<uint2*>(q16),
               reinterpret_cast<uint2*>(k16), reinterpret_cast<uint2*>(v16));
    if (err != cudaSuccess) return err;
  }
  Flash2Params params{q16,
                      k16,
                      v16,
                      a.kv_half ? a.q : nullptr,
                      a.kv_lengths,
                      a.out,
                      a.out_half ? static_cast<__half*>(a.out16) : nullptr,
                      a.q_len,
                      a.kv_len,
                      a.heads,
                      a.scale * 1.4426950408889634f,
                      a.causal,
                      plan.splits,
                      reinterpret_cast<float*>(base + plan.half_bytes),
                      counters,
                      ctx.error_word};
  const dim3 grid(CeilDiv(a.q_len, int64_t{kRows} * plan.m_tiles),
                  static_cast<unsigned>(a.batch * a.heads), static_cast<unsigned>(plan.splits));
  if (a.kv_half) return Launch(ctx, Flash2Kernel<true, 1>, grid, dim3(128), 0, params);
  if (plan.m_tiles == 2) return Launch(ctx, Flash2Kernel<false, 2>, grid, dim3(128), 0, params);
  return Launch(ctx, Flash2Kernel<false, 1>, grid, dim3(128), 0, params);
#else
  (void)ctx;
  (void)a;
  (void)plan;
  (void)scratch;
  (void)counters;
  return cudaErrorNotSupported;
#endif
}

}  // namespace waav::cuda

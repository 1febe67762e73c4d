// The cluster step's cross-attention on tensor cores (PersistentStepTuning::cluster_mma_cross):
// a block's ~94 staged cross keys, all six heads, with mma.sync instead of one FMA per element.
// CUDA only (sm_90 PTX); device code for cluster_decoder.cu.
//
// Warp 2 h + half takes head h over half of the block's 16-key tiles (warps 12-15 idle):
//
//   scores: D (16 keys x 8) += K tile (16 keys x 16 dims, ldmatrix) · Q (16 dims x 8), Q's even
//           columns the query rounded to f16 and its odd columns the rounding error, so that
//           each score is the sum of two columns: as exact as f32 queries times f16 keys;
//   softmax: online over the warp's tiles, three tiles per update (scores in log2 units);
//   values: D (16 dims x 8) += V^T tile (16 dims x 16 keys, ldmatrix.trans) · P (16 keys x 8),
//           P's column 0 the probabilities rounded to f16 and column 1 their rounding error
//           (moved from the score layout into the operand layout by two shuffles a tile).
//
// The stage (cluster_cross_stage.cuh) holds each head's keys in a swizzled region, so that the
// 8 keys an ldmatrix reads at one chunk fall in 8 different bank groups. Keys past the block's
// last read key 0 (finite) and get probability 0.
#pragma once

#include <cstdint>

#include "kernels/cuda/cluster_cross_stage.cuh"
#include "kernels/cuda/cluster_decoder_parts.cuh"
#include "kernels/cuda/mma.cuh"

namespace waav::cuda::cluster_detail {

constexpr int kMmaCrossTiles = 3;  // 16-key tiles scored before one softmax update

// The partial (o[64] unnormalised, m in natural log units, l) of head `head` over this warp's
// tiles of the n_keys staged rows into wpart's record [half][head].
__device__ __forceinline__ void CrossAttentionMmaWarp(const __half* sk, const __half* sv,
                                                      int n_keys, int region, const float* q,
                                                      float scale, int head, int half,
                                                      float* wpart) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int tiles = (n_keys + 15) / 16, split = (tiles + 1) / 2;
  const int tile0 = half == 0 ? 0 : split, tile1 = half == 0 ? split : tiles;
  // Q's fragments (b0, b1 of each of the 4 k-steps): lane (g, t) holds column g's dims
  // 16 k + 2 t, +1 and 16 k + 2 t + 8, +9 of the head (scaled by scale · log2 e).
  const float qscale = scale * kLog2E;
  uint32_t qb[4][2];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float* qk = q + head * kDh + 16 * k + 2 * t;
    float hi[4], lo[4];
    const float x[4] = {qk[0] * qscale, qk[1] * qscale, qk[8] * qscale, qk[9] * qscale};
#pragma unroll
    for (int i = 0; i < 4; ++i) SplitHalf(x[i], hi[i], lo[i]);
    qb[k][0] = (g & 1) != 0 ? mma::PackHalf2(lo[0], lo[1]) : mma::PackHalf2(hi[0], hi[1]);
    qb[k][1] = (g & 1) != 0 ? mma::PackHalf2(lo[2], lo[3]) : mma::PackHalf2(hi[2], hi[3]);
  }
  float m = -INFINITY, l = 0.0f;
  float o[4][4] = {};  // dims 16 j + g (+8): column 0 (f16 part) and 1 (rounding error)
  for (int base = tile0; base < tile1; base += kMmaCrossTiles) {
    // A tile's four loads are issued before the mma.sync that use them (the asm is volatile: in
    // program order), so that they wait for one load latency, not four. (The chunk's fragments
    // all at once, or a k-step across its tiles, took registers the layers' kernel spilled;
    // the k-steps as two chains of two measured 1.3 us slower a step.)
    bool valid[kMmaCrossTiles];
    float acc[kMmaCrossTiles][4] = {};
#pragma unroll
    for (int c = 0; c < kMmaCrossTiles; ++c) {
      valid[c] = base + c < tile1;
      if (!valid[c]) continue;
      const int row = 16 * (base + c) + lane % 16, k_key = row < n_keys ? row : 0;
      uint32_t frag[4][4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        mma::LdMatrix4(frag[k],
                       sk + StageOffset(region, k_key, head * kDh + 16 * k + 8 * (lane / 16)));
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) mma::Mma16816(acc[c], frag[k], qb[k][0], qb[k][1]);
    }
    // Lane (g, t) holds the scores of keys 16 tile + g and 16 tile + g + 8.
    float s[kMmaCrossTiles][2];
#pragma unroll
    for (int c = 0; c < kMmaCrossTiles; ++c) {
      const int first = 16 * (base + c);
      s[c][0] = valid[c] && first + g < n_keys ? acc[c][0] + acc[c][1] : -INFINITY;
      s[c][1] = valid[c] && first + g + 8 < n_keys ? acc[c][2] + acc[c][3] : -INFINITY;
    }
    float top = m;
#pragma unroll
    for (int c = 0; c < kMmaCrossTiles; ++c) top = fmaxf(top, fmaxf(s[c][0], s[c][1]));
#pragma unroll
    for (int off = 4; off < kWarp; off *= 2) top = fmaxf(top, __shfl_xor_sync(kFullMask, top, off));
    // (top is finite: the chunk's first tile has a key below n_keys.)
    const float corr = exp2f(m - top);
    l *= corr;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[j][i] *= corr;
    }
    // P's fragments: lane (g, t) needs column g (0: f16 parts, 1: errors, else 0) of keys 2 t,
    // 2 t + 1 (b0) and 2 t + 8, 2 t + 9 (b1), held by lanes (2 t, g) and (2 t + 1, g).
    uint32_t b0[kMmaCrossTiles], b1[kMmaCrossTiles];
#pragma unroll
    for (int c = 0; c < kMmaCrossTiles; ++c) {
      const float p0 = exp2f(s[c][0] - top), p1 = exp2f(s[c][1] - top);  // (0 where masked)
      l += p0 + p1;
      float hi0, lo0, hi1, lo1;
      SplitHalf(p0, hi0, lo0);
      SplitHalf(p1, hi1, lo1);
      const uint32_t mine = t == 0 ? mma::PackHalf2(hi0, hi1) : mma::PackHalf2(lo0, lo1);
      const uint32_t even = __shfl_sync(kFullMask, mine, 8 * t + (g & 1));
      const uint32_t odd = __shfl_sync(kFullMask, mine, 8 * t + 4 + (g & 1));
      b0[c] = g < 2 ? __byte_perm(even, odd, 0x5410) : 0u;
      b1[c] = g < 2 ? __byte_perm(even, odd, 0x7632) : 0u;
    }
#pragma unroll
    for (int c = 0; c < kMmaCrossTiles; ++c) {
      if (!valid[c]) continue;
      // V^T's tiles: matrix i of the ldmatrix.trans holds keys 8 (i / 2), dims 8 (i % 2).
      const int row = 16 * (base + c) + lane % 8 + 8 * (lane / 16);
      const int v_key = row < n_keys ? row : 0;
      uint32_t frag[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mma::LdMatrix4Trans(
            frag[j], sv + StageOffset(region, v_key, head * kDh + 16 * j + 8 * ((lane / 8) % 2)));
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) mma::Mma16816(o[j], frag[j], b0[c], b1[c]);
    }
    m = top;
  }
  // l: the lane's keys (g, g + 8 of each tile; the four lanes of a g hold the same) over g.
#pragma unroll
  for (int off = 4; off < kWarp; off *= 2) l += __shfl_xor_sync(kFullMask, l, off);
  float* rec = wpart + (half * kH + head) * kRec;
  if (t == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      rec[16 * j + g] = o[j][0] + o[j][1];
      rec[16 * j + g + 8] = o[j][2] + o[j][3];
    }
  }
  if (lane == 0) {
    rec[kDh] = m == -INFINITY ? m : m * kLn2;
    rec[kDh + 1] = l;
  }
}

// The block's cross-attention partial per head into `mine` (o unnormalised, m, l: MergeBlock's
// records), then a block barrier.
__device__ __forceinline__ void CrossAttentionMma(const __half* sk, const __half* sv, int n_keys,
                                                  int region, const float* q, float scale,
                                                  float* wpart, float* mine) {
  static_assert(kWarps >= 2 * kH && kDh == 64, "two warps a head, four 16-dim tiles");
  const int warp = threadIdx.x / kWarp;
  if (warp < 2 * kH) {
    CrossAttentionMmaWarp(sk, sv, n_keys, region, q, scale, warp / 2, warp % 2, wpart);
  }
  __syncthreads();
  // The two halves of each head merged.
  if (threadIdx.x < kD) {
    const int h = threadIdx.x / kDh, d = threadIdx.x % kDh;
    const float* r0 = wpart + h * kRec;
    const float* r1 = wpart + (kH + h) * kRec;
    const float m0 = r0[kDh], m1 = r1[kDh], top = fmaxf(m0, m1);
    const float e0 = m0 == -INFINITY ? 0.0f : expf(m0 - top);
    const float e1 = m1 == -INFINITY ? 0.0f : expf(m1 - top);
    mine[h * kRec + d] = r0[d] * e0 + r1[d] * e1;
    if (d == 0) {
      mine[h * kRec + kDh] = top;
      mine[h * kRec + kDh + 1] = r0[kDh + 1] * e0 + r1[kDh + 1] * e1;
    }
  }
  __syncthreads();
}

}  // namespace waav::cuda::cluster_detail

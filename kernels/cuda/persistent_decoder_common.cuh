// The persistent decoder step's building blocks (persistent_decoder.cu is the kernel): its
// constants and workspace layout, the grid barrier, L2 prefetch, the GEMV over the whole grid
// with weights loaded ahead, and the rows (LayerNorm'ed or copied) in shared memory. Device code
// for that one translation unit (and the HIP compile check of it).
#pragma once

#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::cuda::persistent_detail {

constexpr int kD = kPersistentDModel;
constexpr int kH = kPersistentHeads;
constexpr int kDh = kD / kH;  // 64
constexpr int kFf = kPersistentFfn;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarp;
constexpr int kPartial = kDh + 2;  // o[64], m, l
constexpr int kVGroup = 16;        // value rows loaded together
constexpr int kMaxSplits = 128;    // key splits per (row, head) the merge takes
static_assert(kDh == 2 * kWarp, "attention keeps two dims per lane");
// Block attention: a chunk's partial is o[64], m, l and two floats of padding (16-byte records
// for cp.async); K and V tiles of up to kStageBytes / 2 each sit in shared memory.
constexpr int kChunkPartial = kDh + 4;
// Fused FFN: hidden units per block (a multiple of 4, at most this many).
constexpr int kMaxFfnUnits = 32;
constexpr int kStageBytes = 65536;
template <typename T>
__host__ __device__ constexpr int TileKeys() {
  return kStageBytes / (2 * kDh * static_cast<int>(sizeof(T)));  // 256 (f16), 128 (f32)
}
constexpr int kMaxTileKeys = TileKeys<__half>();
constexpr int kScoreLanes = 8;                        // lanes per key when scoring a tile
constexpr int kKeysPerPass = kThreads / kScoreLanes;  // 64

inline size_t Round4(size_t n) { return (n + 3) / 4 * 4; }

inline int MaxSplits(int audio_ctx, int text_ctx, int cross_split, int self_split) {
  return std::max((audio_ctx + cross_split - 1) / cross_split,
                  (text_ctx + self_split - 1) / self_split);
}

// Offsets (floats) of the workspace regions.
struct Layout {
  size_t x, x2, q, att, hidden, partials, stats, total;
};
// Chunks of the block attention: at most one per block plus one per (row, head).
inline size_t MaxChunks(int batch, int max_blocks) {
  return static_cast<size_t>(max_blocks) + static_cast<size_t>(batch) * kH;
}
inline Layout MakeLayout(int batch, int max_splits, int max_blocks) {
  Layout l{};
  const size_t b = static_cast<size_t>(batch);
  l.x = 0;
  l.x2 = l.x + Round4(b * kD);  // the other residual buffer of the fused FFN
  l.q = l.x2 + Round4(b * kD);
  l.att = l.q + Round4(b * kD);
  l.hidden = l.att + Round4(b * kD);
  l.partials = l.hidden + Round4(b * kFf);
  const size_t split_partials = b * kH * static_cast<size_t>(max_splits) * kPartial;
  const size_t chunk_partials = MaxChunks(batch, max_blocks) * kChunkPartial;
  l.stats = l.partials + Round4(std::max(split_partials, chunk_partials));
  l.total = l.stats + Round4(static_cast<size_t>(max_blocks) * kPersistentMaxBatch * 4);
  return l;
}

// Sync words: [0] barrier arrivals in this launch, [2] blocks done, [8, 8 + 8·6) attention merge
// counters per (row, head).
constexpr int kSyncCount = 0, kSyncDone = 2, kSyncHeads = 8;
static_assert(kSyncHeads + kPersistentMaxBatch * kH <= kPersistentSyncWords, "sync area");

// ---- Grid barrier -----------------------------------------------------------------------------
// One counter of arrivals that only grows during a launch: barrier i is passed when it reaches
// i · blocks. Thread 0 arrives with a release reduction (no reply to wait for; cumulative over
// the block's writes ordered before it by __syncthreads) and spins with acquire loads; the
// target lives in its register. FinishLaunch() zeroes the counter once every block is past the
// last barrier. (A first version with a generation word and a self-resetting count cost 2 µs per
// barrier on an H200: three dependent L2 round trips.)
__device__ __forceinline__ void GridSync(unsigned* sync, unsigned& target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    target += gridDim.x;
    gpu::RedAddRelease(sync + kSyncCount, 1u);
    while (gpu::LoadAcquire(sync + kSyncCount) < target) {
    }
  }
  __syncthreads();
}

// The barrier in two halves, so that the next phase's loads that depend on nothing of this step
// (weights, biases, LayerNorm gains, K/V tiles) are issued between them: after the arrival, whose
// release fence waits for the arriving thread's outstanding memory operations (loads included),
// and before the wait. With `split` false both together at GridWait (the loads then precede
// the arrival).
__device__ __forceinline__ void GridArrive(unsigned* sync, unsigned& target, bool split) {
  if (!split) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    target += gridDim.x;
    gpu::RedAddRelease(sync + kSyncCount, 1u);
  }
}
__device__ __forceinline__ void GridWait(unsigned* sync, unsigned& target, bool split) {
  if (!split) {
    GridSync(sync, target);
    return;
  }
  if (threadIdx.x == 0) {
    while (gpu::LoadAcquire(sync + kSyncCount) < target) {
    }
  }
  __syncthreads();
}

// Called by every block after its last barrier: the last block to get here zeroes the barrier
// counter for the next launch. Returns whether this block was the last (for all threads).
__device__ __forceinline__ bool FinishLaunch(unsigned* sync, bool* last_block) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(sync + kSyncDone, 1u);
    *last_block = done == gridDim.x - 1;
    if (*last_block) {
      atomicExch(sync + kSyncCount, 0u);
      atomicExch(sync + kSyncDone, 0u);
    }
  }
  __syncthreads();
  return *last_block;
}

// This block's share of [base, base + bytes) prefetched into L2 (bytes a multiple of 16).
__device__ __forceinline__ void PrefetchShare(const void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return;
  constexpr size_t kPiece = 16384;
  const size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const size_t begin = blockIdx.x * per;
  const size_t end = bytes < begin + per ? bytes : begin + per;
  for (size_t off = begin + threadIdx.x * kPiece; off < end; off += kThreads * kPiece) {
    const size_t piece = end - off < kPiece ? end - off : kPiece;
    gpu::PrefetchL2(static_cast<const char*>(base) + off, static_cast<unsigned>(piece));
  }
}

__device__ inline void PrefetchLayer(const PersistentDecoderLayer& w) {
  constexpr size_t kSq = size_t{kD} * kD * 2;
  PrefetchShare(w.qkv_w, 3 * kSq);
  PrefetchShare(w.out_w, kSq);
  PrefetchShare(w.cq_w, kSq);
  PrefetchShare(w.cout_w, kSq);
  PrefetchShare(w.ff1_w, size_t{kFf} * kD * 2);
  PrefetchShare(w.ff2_w, size_t{kFf} * kD * 2);
}

// ---- GEMV -------------------------------------------------------------------------------------
template <int K>
struct Geom {
  static constexpr int kChunks = K / 8;  // 16-byte chunks of f16 weights per column
  static constexpr int kLanes = kChunks % kWarp == 0 ? kWarp : kWarp / 2;
  static constexpr int kPerLane = kChunks / kLanes;
  static constexpr int kCols = kWarp / kLanes;  // columns per warp pass
  static_assert(kChunks % kLanes == 0, "K must split evenly over the lane group");
};

// A lane's weights of one column pass, and the column's bias.
template <int K>
struct WeightRegs {
  uint4 v[Geom<K>::kPerLane];
  float bias;
};

// Column `col` of W [n, K] into this lane's registers (zeros past n); `load16(address)` reads
// each 16-byte piece (a plain load, or one with a cache policy).
template <int K, typename Load16>
__device__ __forceinline__ void LoadWeightsWith(const __half* w, const float* bias, int n, int col,
                                                WeightRegs<K>& r, Load16&& load16) {
  using G = Geom<K>;
  const int sub = threadIdx.x % G::kLanes;
  r.bias = bias != nullptr && col < n ? bias[col] : 0.0f;
#pragma unroll
  for (int j = 0; j < G::kPerLane; ++j) {
    r.v[j] = col < n ? load16(w + static_cast<size_t>(col) * K + (sub + j * G::kLanes) * 8)
                     : make_uint4(0, 0, 0, 0);
  }
}
template <int K>
__device__ __forceinline__ void LoadWeights(const __half* w, const float* bias, int n, int col,
                                            WeightRegs<K>& r) {
  LoadWeightsWith<K>(w, bias, n, col, r,
                     [](const __half* p) { return *reinterpret_cast<const uint4*>(p); });
}

// The column of this lane's group in the first pass.
template <int K>
__device__ __forceinline__ int FirstColumn() {
  using G = Geom<K>;
  const int gwarp = blockIdx.x * kWarps + threadIdx.x / kWarp;
  return gwarp * G::kCols + (threadIdx.x % kWarp) / G::kLanes;
}

// One column pass of a lane group: y[r, col] = W[col] · xs[r] + bias for r < MaxB, with this
// lane's weights in `wr`; epi(r, col, value) on lane `r` of the group when col < n. Every lane
// of the warp must call it (shuffles).
template <int K, int MaxB, typename Epi>
__device__ __forceinline__ void GemvColumn(const WeightRegs<K>& wr, int col, int n, const float* xs,
                                           Epi&& epi) {
  using G = Geom<K>;
  const int sub = threadIdx.x % kWarp % G::kLanes;
  float acc[MaxB];
#pragma unroll
  for (int r = 0; r < MaxB; ++r) acc[r] = 0.0f;
#pragma unroll
  for (int j = 0; j < G::kPerLane; ++j) {
    const int k0 = (sub + j * G::kLanes) * 8;
    float wf[8];
    const __half2* h = reinterpret_cast<const __half2*>(&wr.v[j]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      wf[2 * i] = f.x;
      wf[2 * i + 1] = f.y;
    }
#pragma unroll
    for (int r = 0; r < MaxB; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(xs + r * K + k0);
      const float4 b = *reinterpret_cast<const float4*>(xs + r * K + k0 + 4);
      float s = acc[r];
      s = fmaf(wf[0], a.x, s);
      s = fmaf(wf[1], a.y, s);
      s = fmaf(wf[2], a.z, s);
      s = fmaf(wf[3], a.w, s);
      s = fmaf(wf[4], b.x, s);
      s = fmaf(wf[5], b.y, s);
      s = fmaf(wf[6], b.z, s);
      s = fmaf(wf[7], b.w, s);
      acc[r] = s;
    }
  }
#pragma unroll
  for (int o = G::kLanes / 2; o > 0; o /= 2) {
#pragma unroll
    for (int r = 0; r < MaxB; ++r) acc[r] += __shfl_xor_sync(kFullMask, acc[r], o);
  }
  if (col < n) {
#pragma unroll
    for (int r = 0; r < MaxB; ++r) {
      if (sub == r) epi(r, col, acc[r] + wr.bias);
    }
  }
}

// y[r, col] = W[col] · xs[r] + bias[col] for every column of W [n, K] and row r < MaxB of
// xs [MaxB][K] (shared memory); epi(r, col, value) runs on lane `r` of the column's lane group.
// `first` holds the weights of the first pass (loaded before the barrier).
template <int K, int MaxB, typename Epi>
__device__ __forceinline__ void Gemv(const __half* w, const float* bias, int n, const float* xs,
                                     const WeightRegs<K>& first, Epi&& epi) {
  using G = Geom<K>;
  const int lane = threadIdx.x % kWarp;
  const int stride = gridDim.x * kWarps * G::kCols;
  const int warp_base = (blockIdx.x * kWarps + threadIdx.x / kWarp) * G::kCols;
  auto process = [&](const WeightRegs<K>& wr, int col) {
    GemvColumn<K, MaxB>(wr, col, n, xs, epi);
  };
  // Passes after the first (the logits' 51864 columns): kDepth passes' weights in flight, each
  // slot refilled with the pass kDepth ahead as soon as it has been used.
  // (Fewer with more rows: the accumulators of 8 rows leave no registers for a deeper ring.)
  constexpr int kDepth = K > 384 ? 1 : MaxB <= 2 ? 4 : 1;
  const int group = lane / G::kLanes;
  WeightRegs<K> ring[kDepth];
  ring[0] = first;
#pragma unroll
  for (int d = 1; d < kDepth; ++d) {
    if (warp_base + d * stride < n) {
      LoadWeights<K>(w, bias, n, warp_base + d * stride + group, ring[d]);
    }
  }
  for (int base = warp_base; base < n; base += kDepth * stride) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int b = base + d * stride;
      if (b >= n) break;
      process(ring[d], b + group);
      if (b + kDepth * stride < n) LoadWeights<K>(w, bias, n, b + kDepth * stride + group, ring[d]);
    }
  }
}

// ---- Logits: argmax (suppression) and log-sum-exp reduced on the device
// --------------------------
struct Best {
  float m;    // running max
  float s;    // Σ exp(v − m)
  int index;  // argmax (lowest index on ties), INT_MAX when none
};

__device__ __forceinline__ Best Merge(Best a, Best b) {
  Best out;
  out.m = fmaxf(a.m, b.m);
  if (out.m == -INFINITY) {
    out.s = 0.0f;
  } else {
    out.s = a.s * expf(a.m - out.m) + b.s * expf(b.m - out.m);
  }
  if (a.m > b.m) {
    out.index = a.index;
  } else if (b.m > a.m) {
    out.index = b.index;
  } else {
    out.index = min(a.index, b.index);
  }
  return out;
}

__device__ __forceinline__ Best ShuffleXor(const Best& b, int mask) {
  Best o;
  o.m = __shfl_xor_sync(kFullMask, b.m, mask);
  o.s = __shfl_xor_sync(kFullMask, b.s, mask);
  o.index = __shfl_xor_sync(kFullMask, b.index, mask);
  return o;
}

// Lane epilogue of the logits GEMV: column `col` of row `r` is `v`. Writes the raw logit when
// asked and folds it into the lane's running max / argmax / Σexp unless suppressed or NaN. The
// suppression bits are p.suppress_bits, or `bits` (a copy of words word0 .. in shared memory,
// row r's at bits + r · bits_row_words: 0 when every row has the same).
__device__ __forceinline__ void TakeLogit(const PersistentDecoderParams& p, int batch, int r,
                                          int col, float v, Best& best,
                                          const uint32_t* bits = nullptr, int word0 = 0,
                                          int bits_row_words = 0) {
  if (r >= batch) return;
  if (p.logits != nullptr) p.logits[static_cast<size_t>(r) * p.vocab + col] = v;
  const uint32_t* words = bits != nullptr ? bits + r * bits_row_words : p.suppress_bits;
  if (words != nullptr && ((words[(col >> 5) - word0] >> (col & 31)) & 1u)) return;
  if (!(v > -INFINITY)) return;  // NaN, or -inf (adds nothing; the sum would become NaN)
  if (v > best.m) {
    best.s = best.s * expf(best.m - v) + 1.0f;
    best.m = v;
    best.index = col;
  } else {
    best.s += expf(v - best.m);
    if (v == best.m && col < best.index) best.index = col;
  }
}

// A logits block's suppression words (columns [c0, c1), at most Words words) into shared memory:
// with p.choice_out each row's greedy-choice mask (none for a row left out or with a bad mask
// index, which block 0 reports), else p.suppress_bits' into row 0 (TakeLogit's bits_row_words 0).
template <int MaxB, int Words>
__device__ void LoadSuppressWords(const PersistentDecoderParams& p, int c0, int c1,
                                  uint32_t (&words)[MaxB][Words]) {
  const int word0 = c0 >> 5, count = ((c1 - 1) >> 5) - word0 + 1;
  if (p.choice_out == nullptr) {
    for (int i = threadIdx.x; i < count; i += blockDim.x) words[0][i] = p.suppress_bits[word0 + i];
    return;
  }
  for (int i = threadIdx.x; i < MaxB * count; i += blockDim.x) {
    const int r = i / count, w = i % count;
    const int mask = r < p.batch ? p.choice_mask_index[r] : -1;
    const bool ok = mask >= 0 && mask < p.choice_num_masks;
    if (blockIdx.x == 0 && w == 0 && r < p.batch && !ok && mask != -1) {
      ReportDeviceError(p.error_word, DeviceErrorOp::kArgmaxLogSumExp, r, mask);
    }
    words[r][w] =
        ok ? p.choice_masks[static_cast<size_t>(mask) * p.choice_mask_words + word0 + w] : 0u;
  }
}

// A row's merged maximum, its token and Σexp(x − m) in f64 (the last block's merge).
struct BestSum {
  float m;
  double s;
  int index;
};

// The last block's merge of row r's per-block partials (stats, FinishLogits' layout) by one
// warp: the maximum and its lowest token first, then each block's sum rescaled to that maximum
// (f32 exp, f64 sum), so that there is one exp per block, not one per pairwise merge. A block's
// partials are read once into registers (up to 8 a lane: grids of 256 blocks; more are read
// again).
__device__ inline BestSum MergeBlockPartials(const float* stats, int r) {
  constexpr int kHeld = 8;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, grid = static_cast<int>(gridDim.x);
  auto at = [&](int blk) {
    return stats + (static_cast<size_t>(blk) * kPersistentMaxBatch + r) * 4;
  };
  float m = -INFINITY;
  int index = INT_MAX;
  auto take = [&](const float* st) {
    const float bm = __ldcg(st);
    const int bi = __float_as_int(__ldcg(st + 2));
    if (bm > m || (bm == m && bi < index)) {
      m = bm;
      index = bi;
    }
    return bm;
  };
  float held_m[kHeld], held_s[kHeld];
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    const int blk = lane + k * kWarp;
    held_m[k] = blk < grid ? take(at(blk)) : -INFINITY;
    held_s[k] = blk < grid ? __ldcg(at(blk) + 1) : 0.0f;
  }
  for (int blk = lane + kHeld * kWarp; blk < grid; blk += kWarp) take(at(blk));
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float om = __shfl_xor_sync(kFullMask, m, o);
    const int oi = __shfl_xor_sync(kFullMask, index, o);
    if (om > m || (om == m && oi < index)) {
      m = om;
      index = oi;
    }
  }
  double s = 0.0;
  if (m != -INFINITY) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (held_m[k] != -INFINITY) {
        s += static_cast<double>(held_s[k]) * static_cast<double>(expf(held_m[k] - m));
      }
    }
    for (int blk = lane + kHeld * kWarp; blk < grid; blk += kWarp) {
      const float bm = __ldcg(at(blk));
      if (bm != -INFINITY) s += static_cast<double>(__ldcg(at(blk) + 1)) * expf(bm - m);
    }
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) s += __shfl_xor_sync(kFullMask, s, o);
  return BestSum{m, s, index};
}

// Row r's merged result: the greedy choice (p.choice_out, Backend::ArgmaxLogSumExp's layout)
// and its feed where asked, else the best token / log-softmax / log-sum-exp outputs.
__device__ inline void WriteRowResult(const PersistentDecoderParams& p, int r, const BestSum& b) {
  if (p.choice_out == nullptr) {
    const double lse = b.m + log(b.s);
    if (p.best_token != nullptr) p.best_token[r] = b.index == INT_MAX ? -1 : b.index;
    if (p.best_logprob != nullptr) p.best_logprob[r] = static_cast<float>(b.m - lse);
    if (p.logsumexp != nullptr) p.logsumexp[r] = static_cast<float>(lse);
    return;
  }
  const int mask = p.choice_mask_index[r];
  if (mask < 0 || mask >= p.choice_num_masks) return;  // left out, or reported as bad
  const bool none = b.m == -INFINITY;                  // nothing allowed above -inf: token 0
  WriteChoice(p.choice_out + static_cast<size_t>(r) * 5, b.m, b.index, none ? 0.0 : b.s);
  if (p.feed_tokens == nullptr) return;
  const int position = min(p.feed_positions[r] + 1, p.feed_max_position);
  p.feed_tokens[r] = none ? 0 : b.index;
  p.feed_positions[r] = position;
  p.feed_lengths[r] = position + 1;
}

// After a block's last logits column: its lanes' partials merged per row into stats[block][row],
// and the last block of the launch to get here merges every block's (MergeBlockPartials) and
// writes each row's result (WriteRowResult). Lanes r and r + 16 hold row r (two column groups per
// warp). Every thread of every block calls it; it also resets the launch's sync words
// (FinishLaunch).
template <int MaxB>
__device__ void FinishLogits(const PersistentDecoderParams& p, int batch, Best best, float* stats,
                             Best (&warp_best)[kWarps][MaxB], bool* last_block) {
  best = Merge(best, ShuffleXor(best, 16));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane < MaxB) warp_best[warp][lane] = best;
  __syncthreads();
  if (warp == 0 && lane < batch) {
    Best b = warp_best[0][lane];
    for (int i = 1; i < kWarps; ++i) b = Merge(b, warp_best[i][lane]);
    float* st = stats + (static_cast<size_t>(blockIdx.x) * kPersistentMaxBatch + lane) * 4;
    st[0] = b.m;
    st[1] = b.s;
    st[2] = __int_as_float(b.index);
    __threadfence();
  }
  if (!FinishLaunch(p.sync, last_block)) return;
  __threadfence();
  if (warp < batch) {
    const BestSum b = MergeBlockPartials(stats, warp);
    if (lane == 0) WriteRowResult(p, warp, b);
  }
}

// ---- Row inputs into shared memory ------------------------------------------------------------
struct Rows {
  int batch;
  int token[kPersistentMaxBatch];
  int position[kPersistentMaxBatch];
  int length[kPersistentMaxBatch];
  bool ok[kPersistentMaxBatch];
};

// A LayerNorm's gain and bias as the lanes of warps 0 .. MaxB − 1 use them (lane + 32·i), read
// before the barrier that starts the phase.
constexpr int kPer = kD / kWarp;  // 12
struct NormRegs {
  float g[kPer], b[kPer];
};
template <int MaxB>
__device__ __forceinline__ NormRegs LoadNorm(const float* gamma, const float* beta) {
  NormRegs n;
  const int lane = threadIdx.x % kWarp;
  const bool used = threadIdx.x / kWarp < MaxB;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    n.g[i] = used ? gamma[lane + i * kWarp] : 0.0f;
    n.b[i] = used ? beta[lane + i * kWarp] : 0.0f;
  }
  return n;
}

// xs[r][0, 384) = LayerNorm(x[r]) for r < B, zeros for B <= r < MaxB. With `embed`, x[r] is the
// token embedding plus the position encoding, and block 0 stores it into x.
template <int MaxB>
__device__ void NormRows(const PersistentDecoderParams& p, const Rows& rows, float* x,
                         const NormRegs& norm, bool embed, float* xs) {
  const int lane = threadIdx.x % kWarp, r = threadIdx.x / kWarp;
  if (r < MaxB) {
    float* out = xs + r * kD;
    if (r < rows.batch) {
      float v[kPer];
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWarp;
        if (embed) {
          v[i] = __half2float(p.token_embedding[static_cast<size_t>(rows.token[r]) * kD + c]) +
                 p.position_table[static_cast<size_t>(rows.position[r]) * kD + c];
          if (blockIdx.x == 0) x[r * kD + c] = v[i];
        } else {
          v[i] = __ldcg(x + r * kD + c);
        }
        sum += v[i];
      }
      const float mean = WarpSum(sum) / kD;
      float squares = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) squares += (v[i] - mean) * (v[i] - mean);
      const float rstd = 1.0f / sqrtf(WarpSum(squares) / kD + p.eps);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + i * kWarp;
        out[c] = (v[i] - mean) * rstd * norm.g[i] + norm.b[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPer; ++i) out[lane + i * kWarp] = 0.0f;
    }
  }
  __syncthreads();
}

// xs[r][0, k) = src[r][0, k) for r < B, zeros after (activations written by other blocks).
template <int MaxB>
__device__ void CopyRows(const float* src, int batch, int k, float* xs) {
  const int n = MaxB * k;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    xs[i] = i < batch * k ? __ldcg(src + i) : 0.0f;
  }
  __syncthreads();
}

}  // namespace waav::cuda::persistent_detail

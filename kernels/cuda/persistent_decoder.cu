// The persistent decoder step (see persistent_decoder.cuh for the phases). One block of 512
// threads per multiprocessor, all co-resident (cooperative launch); phases are separated by a
// grid barrier on one growing arrival counter with GPU-scope release/acquire.
//
// Work split:
//  * GEMV phases: output columns go to (warp, lane group) slots across the whole grid; a column
//    of K = 384 is 16 lanes x 3 chunks of 8 f16 weights (two columns per warp), a column of
//    K = 1536 is 32 lanes x 6 chunks. The inputs (LayerNorm'ed rows, attention output or FFN
//    hidden of all B rows) sit in shared memory, recomputed by every block. The first chunks of
//    a warp's weights are loaded into registers between the halves of the barrier before it.
//  * Block attention (default): each (row, head)'s keys split into chunks, about one per block
//    (ChunkPlan); a block copies its chunk's K/V tile (up to 256 f16 / 128 f32 keys) into shared
//    memory with cp.async before the barrier (self: the step's own row re-read after it), scores
//    the keys 8 lanes per key, takes the softmax over the tile and P·V over 16 warps, and writes
//    one partial (o, m, l); the next phase's GEMV blocks copy all partials at once and merge
//    them. Fused self-attention: one chunk per (row, head) that applies its W_o slice itself.
//  * First version (knob): items (row, head, `split` keys) go to warps, one key per lane, merged
//    by the last warp of each (row, head) to finish (arrival counter).
//  * Fused FFN: block b owns hidden units [12 b, 12 b + 12): FFN1 + GELU of those, then its
//    share of FFN2 for all 384 outputs, added atomically into a zeroed second residual buffer.
//  * Logits: the tied embedding as a GEMV over all warps; each lane group keeps a running
//    max / argmax / Σexp of its row over the columns it computed (suppressed tokens skipped);
//    blocks merge theirs and the last block to finish reduces the blocks' partials.
#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/persistent_decoder.cuh"

#if defined(WAAV_HIP) && !defined(__grid_constant__)
#define __grid_constant__
#endif

namespace waav::cuda {
namespace {

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

size_t Round4(size_t n) { return (n + 3) / 4 * 4; }

int MaxSplits(int audio_ctx, int text_ctx, int cross_split, int self_split) {
  return std::max((audio_ctx + cross_split - 1) / cross_split,
                  (text_ctx + self_split - 1) / self_split);
}

// Offsets (floats) of the workspace regions.
struct Layout {
  size_t x, x2, q, att, hidden, partials, stats, total;
};
// Chunks of the block attention: at most one per block plus one per (row, head).
size_t MaxChunks(int batch, int max_blocks) {
  return static_cast<size_t>(max_blocks) + static_cast<size_t>(batch) * kH;
}
Layout MakeLayout(int batch, int max_splits, int max_blocks) {
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

__device__ void PrefetchLayer(const PersistentDecoderLayer& w) {
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

template <int K>
__device__ __forceinline__ void LoadWeights(const __half* w, const float* bias, int n, int col,
                                            WeightRegs<K>& r) {
  using G = Geom<K>;
  const int sub = threadIdx.x % G::kLanes;
  r.bias = bias != nullptr && col < n ? bias[col] : 0.0f;
#pragma unroll
  for (int j = 0; j < G::kPerLane; ++j) {
    r.v[j] = col < n ? *reinterpret_cast<const uint4*>(w + static_cast<size_t>(col) * K +
                                                       (sub + j * G::kLanes) * 8)
                     : make_uint4(0, 0, 0, 0);
  }
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

// ---- Attention --------------------------------------------------------------------------------
template <typename T>
struct KvAccess;
template <>
struct KvAccess<float> {
  // Self caches are written by this kernel: read them through L2.
  static __device__ __forceinline__ float Dot64(const float* k, const float* q) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kDh / 4; ++i) {
      const float4 a = gpu::LoadCg4(reinterpret_cast<const float4*>(k) + i);
      s = fmaf(a.x, q[4 * i], s);
      s = fmaf(a.y, q[4 * i + 1], s);
      s = fmaf(a.z, q[4 * i + 2], s);
      s = fmaf(a.w, q[4 * i + 3], s);
    }
    return s;
  }
  static __device__ __forceinline__ float2 Load2(const float* v) {
    return make_float2(__ldcg(v), __ldcg(v + 1));
  }
};
template <>
struct KvAccess<__half> {
  // Cross K/V converted once per window: never written by this kernel.
  static __device__ __forceinline__ float Dot64(const __half* k, const float* q) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kDh / 8; ++i) {
      const uint4 raw = *(reinterpret_cast<const uint4*>(k) + i);
      const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h[j]);
        s = fmaf(f.x, q[8 * i + 2 * j], s);
        s = fmaf(f.y, q[8 * i + 2 * j + 1], s);
      }
    }
    return s;
  }
  static __device__ __forceinline__ float2 Load2(const __half* v) {
    return __half22float2(*reinterpret_cast<const __half2*>(v));
  }
};

// Attention of the B query rows in q (global, [B, 384]) over keys [0, len(r)) of k/v
// ([B, rows, 384]); output into att [B, 384]. `lengths` null: every row sees `rows` keys.
template <int MaxB, typename T>
__device__ void AttentionPhase(const PersistentDecoderParams& p, const Rows& rows, const T* k,
                               const T* v, int cache_rows, bool self, int split, int max_splits,
                               const float* q, float* att, float* partials, float* xs,
                               float* merge_weights) {
  CopyRows<MaxB>(q, rows.batch, kD, xs);  // queries, read by all lanes (broadcast)
  unsigned* counters = p.sync + kSyncHeads;
  const int lane = threadIdx.x % kWarp;
  const int gwarp = blockIdx.x * kWarps + threadIdx.x / kWarp;
  const int nwarps = gridDim.x * kWarps;
  int splits[MaxB];
  int total = 0;
#pragma unroll
  for (int r = 0; r < MaxB; ++r) {
    const int len = r < rows.batch ? (self ? rows.length[r] : cache_rows) : 0;
    splits[r] = (len + split - 1) / split;
    total += kH * splits[r];
  }
  for (int item = gwarp; item < total; item += nwarps) {
    int r = 0, rest = item;
#pragma unroll
    for (int i = 0; i < MaxB - 1; ++i) {
      if (r == i && rest >= kH * splits[i]) {
        rest -= kH * splits[i];
        r = i + 1;
      }
    }
    int row_splits = splits[0];
#pragma unroll
    for (int i = 1; i < MaxB; ++i) row_splits = r == i ? splits[i] : row_splits;
    const int len = self ? rows.length[r] : cache_rows;
    const int h = rest / row_splits, s = rest % row_splits;
    const int k_begin = s * split, k_end = min(len, k_begin + split);
    const float* qh = xs + r * kD + h * kDh;
    const size_t row_base = static_cast<size_t>(r) * cache_rows * kD + h * kDh;
    float m = -INFINITY, l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int t0 = k_begin; t0 < k_end; t0 += kWarp) {
      const int key = t0 + lane;
      // The first group of value rows is requested before the keys' loads are consumed (its
      // addresses do not depend on the scores): one memory latency for both.
      const int count = min(kWarp, k_end - t0);
      const T* vrow = v + row_base + static_cast<size_t>(t0) * kD + 2 * lane;
      float2 v_first[kVGroup];
#pragma unroll
      for (int u = 0; u < kVGroup; ++u) {
        v_first[u] = u < count ? KvAccess<T>::Load2(vrow + static_cast<size_t>(u) * kD)
                               : make_float2(0.0f, 0.0f);
      }
      float score = -INFINITY;
      if (key < k_end) {
        score = KvAccess<T>::Dot64(k + row_base + static_cast<size_t>(key) * kD, qh) * p.scale;
      }
      const float m_new = fmaxf(m, WarpMax(score));
      const float corr = expf(m - m_new);
      const float pk = key < k_end ? expf(score - m_new) : 0.0f;
      l = l * corr + WarpSum(pk);
      o0 *= corr;
      o1 *= corr;
      m = m_new;
      // P·V: the value rows in groups of 16, each group's loads issued together.
#pragma unroll
      for (int g = 0; g < kWarp; g += kVGroup) {
        if (g >= count) break;
        float2 vv[kVGroup];
#pragma unroll
        for (int u = 0; u < kVGroup; ++u) {
          if (g == 0) {
            vv[u] = v_first[u];
          } else {
            vv[u] = g + u < count ? KvAccess<T>::Load2(vrow + static_cast<size_t>(g + u) * kD)
                                  : make_float2(0.0f, 0.0f);
          }
        }
#pragma unroll
        for (int u = 0; u < kVGroup; ++u) {
          const float pj = __shfl_sync(kFullMask, pk, g + u);
          o0 = fmaf(pj, vv[u].x, o0);
          o1 = fmaf(pj, vv[u].y, o1);
        }
      }
    }
    float* group = partials + static_cast<size_t>(r * kH + h) * max_splits * kPartial;
    float* part = group + static_cast<size_t>(s) * kPartial;
    part[2 * lane] = o0;
    part[2 * lane + 1] = o1;
    if (lane == 0) {
      part[kDh] = m;
      part[kDh + 1] = l;
    }
    __threadfence();
    __syncwarp();
    unsigned arrived = 0;
    if (lane == 0) arrived = atomicAdd(counters + r * kH + h, 1u);
    arrived = __shfl_sync(kFullMask, arrived, 0);
    if (arrived == static_cast<unsigned>(row_splits - 1)) {
      // The last of this (row, head): merge every split. Lanes take the splits' (m, l) and
      // leave the weights exp(m − M) in shared memory; then each lane sums its two dims over
      // the splits, 8 partials' loads in flight at a time.
      __threadfence();
      float* weights = merge_weights + (threadIdx.x / kWarp) * kMaxSplits;
      float ms[kMaxSplits / kWarp], ls[kMaxSplits / kWarp];
      float m_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < kMaxSplits / kWarp; ++i) {
        const int sp = lane + i * kWarp;
        ms[i] = sp < row_splits ? __ldcg(group + sp * kPartial + kDh) : -INFINITY;
        ls[i] = sp < row_splits ? __ldcg(group + sp * kPartial + kDh + 1) : 0.0f;
        m_max = fmaxf(m_max, ms[i]);
      }
      m_max = WarpMax(m_max);
      float l_sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxSplits / kWarp; ++i) {
        const float w = expf(ms[i] - m_max);  // 0 for the unused (−inf)
        l_sum = fmaf(ls[i], w, l_sum);
        weights[lane + i * kWarp] = w;
      }
      l_sum = WarpSum(l_sum);
      __syncwarp();
      float a0 = 0.0f, a1 = 0.0f;
      for (int sp0 = 0; sp0 < row_splits; sp0 += 8) {
        float2 ov[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const float* ps = group + (sp0 + u) * kPartial + 2 * lane;
          ov[u] = sp0 + u < row_splits ? make_float2(__ldcg(ps), __ldcg(ps + 1))
                                       : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const float w = sp0 + u < row_splits ? weights[sp0 + u] : 0.0f;
          a0 = fmaf(ov[u].x, w, a0);
          a1 = fmaf(ov[u].y, w, a1);
        }
      }
      __syncwarp();
      att[r * kD + h * kDh + 2 * lane] = a0 / l_sum;
      att[r * kD + h * kDh + 2 * lane + 1] = a1 / l_sum;
      if (lane == 0) atomicExch(counters + r * kH + h, 0u);
    }
  }
}

// ---- Block attention ----------------------------------------------------------------------
// The keys of each (row, head) split into n[r] chunks of keys[r] keys, about one chunk per block
// in all (n[r] proportional to the row's keys, at least 1 and at most len / min_keys); chunk c
// goes to block c mod G. Chunk index: start[r] + h · n[r] + j. Planned once per launch by every
// block alike (it depends only on the rows' lengths), so that the prefetch before a barrier, the
// phase and the merge in the next phase agree.
struct ChunkPlan {
  int n[kPersistentMaxBatch];
  int keys[kPersistentMaxBatch];
  int start[kPersistentMaxBatch];
  int len[kPersistentMaxBatch];
  int total;
};

struct Chunk {
  int r, h, begin, end;
};

__device__ void MakePlan(const int* lengths, int batch, int blocks, int min_keys, ChunkPlan& plan) {
  long long sum = 0;
  for (int r = 0; r < batch; ++r) sum += lengths[r];
  int start = 0;
  for (int r = 0; r < batch; ++r) {
    const int len = lengths[r];
    int n = static_cast<int>(static_cast<long long>(blocks) * len / (kH * sum));
    n = max(1, min(n, (len + min_keys - 1) / min_keys));
    plan.n[r] = n;
    plan.keys[r] = (len + n - 1) / n;
    plan.start[r] = start;
    plan.len[r] = len;
    start += kH * n;
  }
  plan.total = start;
}

__device__ __forceinline__ Chunk GetChunk(const ChunkPlan& plan, int batch, int c) {
  int r = 0;
  for (int i = 1; i < batch; ++i) r = c >= plan.start[i] ? i : r;
  const int rest = c - plan.start[r];
  Chunk ch;
  ch.r = r;
  ch.h = rest / plan.n[r];
  const int j = rest % plan.n[r];
  ch.begin = min(plan.len[r], j * plan.keys[r]);
  ch.end = min(plan.len[r], ch.begin + plan.keys[r]);
  return ch;
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Copies keys [t0, t0 + count) of head h of row r (K and V, 64 values each) into the stage
// (ks, vs: [key - t0][64]), asynchronously; the key `skip` is left out (the self cache's row of
// this step, written by the phase before: re-read after the barrier).
template <typename T>
__device__ __forceinline__ void IssueTile(const T* k, const T* v, int cache_rows, const Chunk& ch,
                                          int t0, int count, int skip, T* ks, T* vs) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));  // values per 16-byte piece
  constexpr int kPieces = kDh / kPer;                     // pieces per key row
  const size_t base = static_cast<size_t>(ch.r) * cache_rows * kD + ch.h * kDh;
  const int n = count * kPieces;
  for (int i = threadIdx.x; i < 2 * n; i += kThreads) {
    const bool is_v = i >= n;
    const int j = is_v ? i - n : i;
    const int key = j / kPieces, piece = j % kPieces;
    if (t0 + key == skip) continue;
    const size_t src = base + static_cast<size_t>(t0 + key) * kD + piece * kPer;
    gpu::CopyAsync16((is_v ? vs : ks) + key * kDh + piece * kPer, (is_v ? v : k) + src);
  }
}

// The first tile of this block's first chunk, issued before the barrier of the phase.
template <typename T>
__device__ __forceinline__ void PrefetchFirstTile(const ChunkPlan& plan, int batch,
                                                  const int* positions, const T* k, const T* v,
                                                  int cache_rows, bool self, char* stage) {
  if (static_cast<int>(blockIdx.x) >= plan.total) return;
  const Chunk ch = GetChunk(plan, batch, blockIdx.x);
  T* ks = reinterpret_cast<T*>(stage);
  T* vs = ks + TileKeys<T>() * kDh;
  IssueTile<T>(k, v, cache_rows, ch, ch.begin, min(TileKeys<T>(), ch.end - ch.begin),
               self ? positions[ch.r] : -1, ks, vs);
}

// Score of key `key` (lanes kScoreLanes · key ..): this lane's share of the 64-dim dot product.
__device__ __forceinline__ float TileDot(const float* krow, const float* qh, int part) {
  // Dims [4·part, +4) and [32 + 4·part, +4): a key's 8 lanes read 128 contiguous bytes twice.
  const float4 a = *reinterpret_cast<const float4*>(krow + 4 * part);
  const float4 b = *reinterpret_cast<const float4*>(krow + 32 + 4 * part);
  const float4 qa = *reinterpret_cast<const float4*>(qh + 4 * part);
  const float4 qb = *reinterpret_cast<const float4*>(qh + 32 + 4 * part);
  float s = a.x * qa.x;
  s = fmaf(a.y, qa.y, s);
  s = fmaf(a.z, qa.z, s);
  s = fmaf(a.w, qa.w, s);
  s = fmaf(b.x, qb.x, s);
  s = fmaf(b.y, qb.y, s);
  s = fmaf(b.z, qb.z, s);
  return fmaf(b.w, qb.w, s);
}
__device__ __forceinline__ float TileDot(const __half* krow, const float* qh, int part) {
  const uint4 raw = *reinterpret_cast<const uint4*>(krow + 8 * part);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
  const float4 qa = *reinterpret_cast<const float4*>(qh + 8 * part);
  const float4 qb = *reinterpret_cast<const float4*>(qh + 8 * part + 4);
  const float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]);
  const float2 f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
  float s = f0.x * qa.x;
  s = fmaf(f0.y, qa.y, s);
  s = fmaf(f1.x, qa.z, s);
  s = fmaf(f1.y, qa.w, s);
  s = fmaf(f2.x, qb.x, s);
  s = fmaf(f2.y, qb.y, s);
  s = fmaf(f3.x, qb.z, s);
  return fmaf(f3.y, qb.w, s);
}
__device__ __forceinline__ float2 TileLoad2(const float* v) {
  return *reinterpret_cast<const float2*>(v);
}
__device__ __forceinline__ float2 TileLoad2(const __half* v) {
  return __half22float2(*reinterpret_cast<const __half2*>(v));
}

// Self-attention fused with its output projection: the head's W_o slice in shared memory
// (PrefetchOutSlice), the projection's bias and the residual stream.
struct FusedOut {
  const char* w = nullptr;
  const float* bias = nullptr;
  float* x = nullptr;
};

// Shared memory of the block attention besides the stage: a tile's scores and the warps' P·V
// sums.
struct AttentionShared {
  float scores[kMaxTileKeys];
  float sums[kWarps][kDh];
};

// Attention of this block's chunks: q (global [B, 384]) against the K/V of each chunk, one tile
// of up to TileKeys<T>() keys at a time (online softmax across tiles), one partial per chunk into
// `partials` ([chunk][kChunkPartial]: o unnormalised, m, l). `prefetched`: the first tile of the
// first chunk was issued before the barrier.
__device__ __forceinline__ float ReadFresh(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float ReadFresh(const __half* p) { return __half2float(*p); }

template <int MaxB, typename T>
__device__ void BlockAttentionPhase(const PersistentDecoderParams& p, const Rows& rows,
                                    const ChunkPlan& plan, const T* k, const T* v, int cache_rows,
                                    bool self, bool prefetched, const float* q, float* partials,
                                    float* xs, char* stage, AttentionShared& sh,
                                    const FusedOut& fused = {}) {
  T* ks = reinterpret_cast<T*>(stage);
  T* vs = ks + TileKeys<T>() * kDh;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  bool need_q = true;
  for (int c = blockIdx.x; c < plan.total; c += gridDim.x) {
    const Chunk ch = GetChunk(plan, rows.batch, c);
    const int skip = self ? rows.position[ch.r] : -1;
    const bool pre = prefetched && c == static_cast<int>(blockIdx.x);
    float o_acc = 0.0f, m_acc = -INFINITY, l_acc = 0.0f;  // threads < 64: dim threadIdx.x
    for (int t0 = ch.begin; t0 < ch.end; t0 += TileKeys<T>()) {
      const int count = min(TileKeys<T>(), ch.end - t0);
      // The self cache's row of this step (written by the QKV phase), read through L2 beside
      // the queries.
      const bool fix = skip >= t0 && skip < t0 + count && threadIdx.x < 2 * kDh;
      float fresh = 0.0f;
      if (fix) {
        const size_t at =
            (static_cast<size_t>(ch.r) * cache_rows + skip) * kD + ch.h * kDh + threadIdx.x % kDh;
        fresh = ReadFresh((threadIdx.x < kDh ? k : v) + at);
      }
      if (need_q) {
        for (int i = threadIdx.x; i < MaxB * kD; i += kThreads) {
          xs[i] = i < rows.batch * kD ? __ldcg(q + i) : 0.0f;
        }
        need_q = false;
      }
      if (!(pre && t0 == ch.begin)) IssueTile<T>(k, v, cache_rows, ch, t0, count, skip, ks, vs);
      gpu::CopyAsyncWaitAll();
      if (fix)
        (threadIdx.x < kDh ? ks : vs)[(skip - t0) * kDh + threadIdx.x % kDh] = FromFloat<T>(fresh);
      __syncthreads();
      // Scores: kScoreLanes lanes per key.
      const float* qh = xs + ch.r * kD + ch.h * kDh;
      for (int base = 0; base < count; base += kKeysPerPass) {
        const int key = base + threadIdx.x / kScoreLanes, part = threadIdx.x % kScoreLanes;
        float sc = key < count ? TileDot(ks + key * kDh, qh, part) : 0.0f;
#pragma unroll
        for (int o = kScoreLanes / 2; o > 0; o /= 2) sc += __shfl_xor_sync(kFullMask, sc, o);
        if (part == 0 && key < count) sh.scores[key] = sc * p.scale;
      }
      __syncthreads();
      // Every warp: the tile's max and Σ exp; then P·V over keys warp, warp + 16, ... (two dims
      // per lane), summed over the warps by threads 0 .. 63.
      float m = -INFINITY;
      for (int i = lane; i < count; i += kWarp) m = fmaxf(m, sh.scores[i]);
      m = WarpMax(m);
      float l = 0.0f;
      for (int i = lane; i < count; i += kWarp) l += expf(sh.scores[i] - m);
      l = WarpSum(l);
      float o0 = 0.0f, o1 = 0.0f;
      for (int key = warp; key < count; key += kWarps) {
        const float pk = expf(sh.scores[key] - m);
        const float2 vv = TileLoad2(vs + key * kDh + 2 * lane);
        o0 = fmaf(pk, vv.x, o0);
        o1 = fmaf(pk, vv.y, o1);
      }
      sh.sums[warp][2 * lane] = o0;
      sh.sums[warp][2 * lane + 1] = o1;
      __syncthreads();
      if (threadIdx.x < kDh) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) o += sh.sums[w][threadIdx.x];
        const float m_new = fmaxf(m_acc, m);
        const float a = expf(m_acc - m_new), b = expf(m - m_new);
        o_acc = fmaf(o_acc, a, o * b);
        l_acc = fmaf(l_acc, a, l * b);
        m_acc = m_new;
      }
    }
    if (fused.w != nullptr) {
      // The chunk is the whole (row, head): its output times the head's slice of W_o, added
      // into the residual stream (bias by head 0). Thread d < 64 only reads sums[·][d] above.
      if (threadIdx.x < kDh) sh.sums[0][threadIdx.x] = o_acc / l_acc;
      __syncthreads();
      if (threadIdx.x < kD) {
        const int row = threadIdx.x;
        const char* wrow = fused.w + row * (kDh * 2);
        float y = ch.h == 0 ? fused.bias[row] : 0.0f;
#pragma unroll
        for (int piece = 0; piece < kDh / 8; ++piece) {
          const uint4 raw = *reinterpret_cast<const uint4*>(wrow + ((piece ^ (row & 7)) * 16));
          const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(h[i]);
            y = fmaf(f.x, sh.sums[0][piece * 8 + 2 * i], y);
            y = fmaf(f.y, sh.sums[0][piece * 8 + 2 * i + 1], y);
          }
        }
        atomicAdd(fused.x + ch.r * kD + row, y);
      }
      continue;
    }
    if (threadIdx.x < kDh) {
      float* part = partials + static_cast<size_t>(c) * kChunkPartial;
      part[threadIdx.x] = o_acc;
      if (threadIdx.x == 0) {
        part[kDh] = m_acc;
        part[kDh + 1] = l_acc;
      }
    }
  }
}

// The W_o slice of the head of this block's chunk ([384][64] f16, 128 bytes a row, the 16-byte
// pieces of row i at piece ^ (i mod 8): conflict-free reads of one piece by consecutive rows),
// copied asynchronously into `dst`.
__device__ __forceinline__ void PrefetchOutSlice(const ChunkPlan& plan, int batch, const __half* w,
                                                 char* dst) {
  if (static_cast<int>(blockIdx.x) >= plan.total) return;
  const Chunk ch = GetChunk(plan, batch, blockIdx.x);
  for (int i = threadIdx.x; i < kD * (kDh / 8); i += kThreads) {
    const int row = i / (kDh / 8), piece = i % (kDh / 8);
    gpu::CopyAsync16(dst + row * (kDh * 2) + ((piece ^ (row & 7)) * 16),
                     w + static_cast<size_t>(row) * kD + ch.h * kDh + piece * 8);
  }
}

// xs[r][0, 384) = the attention output of row r (zeros for B <= r < MaxB), merged from the
// chunks' partials (all copied into `pstage` at once).
template <int MaxB>
__device__ void MergePartials(const ChunkPlan& plan, int batch, const float* partials,
                              float* pstage, float* xs) {
  const int n = plan.total * (kChunkPartial / 4);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    gpu::CopyAsync16(pstage + 4 * i, partials + 4 * i);
  }
  gpu::CopyAsyncWaitAll();
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  for (int pair = threadIdx.x / kWarp; pair < MaxB * kH; pair += kWarps) {
    const int r = pair / kH, h = pair % kH;
    float* out = xs + r * kD + h * kDh + 2 * lane;
    if (r >= batch) {
      out[0] = 0.0f;
      out[1] = 0.0f;
      continue;
    }
    const float* group =
        pstage + static_cast<size_t>(plan.start[r] + h * plan.n[r]) * kChunkPartial;
    const int count = plan.n[r];
    float m = -INFINITY;
    for (int j = lane; j < count; j += kWarp) m = fmaxf(m, group[j * kChunkPartial + kDh]);
    m = WarpMax(m);
    float l = 0.0f, a0 = 0.0f, a1 = 0.0f;
    for (int j = 0; j < count; ++j) {
      const float* part = group + j * kChunkPartial;
      const float mj = part[kDh];
      const float w = mj == -INFINITY ? 0.0f : expf(mj - m);
      l = fmaf(part[kDh + 1], w, l);
      a0 = fmaf(part[2 * lane], w, a0);
      a1 = fmaf(part[2 * lane + 1], w, a1);
    }
    out[0] = a0 / l;
    out[1] = a1 / l;
  }
  __syncthreads();
}

// x[r, col] += value: the residual epilogue (each column has one owner). The value of x that
// a lane adds to in the first pass is read when the phase starts, beside the phase's inputs.
template <int K>
struct Residual {
  float* x;
  int batch;
  int first_col;
  float first_x;
  __device__ __forceinline__ Residual(float* x_in, int batch_in, int n) : x(x_in), batch(batch_in) {
    first_col = FirstColumn<K>();
    const int r = threadIdx.x % Geom<K>::kLanes;
    first_x = r < batch && first_col < n ? __ldcg(x + r * kD + first_col) : 0.0f;
  }
  __device__ __forceinline__ void operator()(int r, int col, float value) const {
    if (r >= batch) return;
    const float base = col == first_col ? first_x : __ldcg(x + r * kD + col);
    x[r * kD + col] = base + value;
  }
};

// ---- Logits reduction -------------------------------------------------------------------------
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

// ---- The kernel -------------------------------------------------------------------------------
template <int MaxB, typename Cross>
__global__ void __launch_bounds__(kThreads, 1)
    PersistentDecoderKernel(const __grid_constant__ PersistentDecoderParams p, Layout lay,
                            int max_splits) {
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);  // [MaxB][kFf]
  // Block attention: the K/V stage (kStageBytes) and the partials' stage (MaxChunks records).
  char* stage = reinterpret_cast<char*>(xs + MaxB * kFf);
  float* pstage = reinterpret_cast<float*>(stage + kStageBytes);
  __shared__ Rows rows;
  __shared__ Best warp_best[kWarps][MaxB];
  __shared__ bool last_block;
  __shared__ float merge_weights[kWarps * kMaxSplits];
  __shared__ ChunkPlan self_plan, cross_plan;
  __shared__ AttentionShared att_shared;
  __shared__ __align__(16) float ffn_hidden[MaxB * kMaxFfnUnits];
  unsigned target = 0;  // barrier arrivals awaited (thread 0)

  float* const xbuf[2] = {p.workspace + lay.x, p.workspace + lay.x2};
  float* x = xbuf[0];  // the residual stream (the fused FFN alternates between the two)
  float* q = p.workspace + lay.q;
  float* att = p.workspace + lay.att;
  float* hidden = p.workspace + lay.hidden;
  float* partials = p.workspace + lay.partials;
  float* stats = p.workspace + lay.stats;

  // Rows and their index values, checked by every block alike (block 0 reports).
  if (threadIdx.x == 0) rows.batch = p.batch;
  if (threadIdx.x < MaxB) {
    const int r = threadIdx.x;
    if (r < p.batch) {
      const int token = p.tokens[r], position = p.positions[r], length = p.lengths[r];
      const bool token_ok = token >= 0 && token < p.vocab;
      const bool position_ok = position >= 0 && position < p.text_ctx;
      const bool length_ok = length >= 1 && length <= p.text_ctx;
      if (blockIdx.x == 0) {
        if (!token_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kEmbed, r, token);
        if (!position_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kWriteRows, r, position);
        if (!length_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kAttention, r, length);
      }
      rows.ok[r] = token_ok && position_ok && length_ok;
      rows.token[r] = token_ok ? token : 0;
      rows.position[r] = position_ok ? position : 0;
      rows.length[r] = length_ok ? length : 1;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int cross_lengths[kPersistentMaxBatch];
    for (int r = 0; r < kPersistentMaxBatch; ++r) cross_lengths[r] = p.audio_ctx;
    const bool one_chunk = p.fuse_self_out && p.block_attention &&
                           p.profile_mode != kProfileNoAttention &&
                           static_cast<int>(gridDim.x) >= kH * p.batch;
    MakePlan(rows.length, p.batch, gridDim.x, one_chunk ? (1 << 20) : p.self_split_keys, self_plan);
    MakePlan(cross_lengths, p.batch, gridDim.x, p.cross_split_keys, cross_plan);
  }
  const size_t cross_bytes =
      static_cast<size_t>(p.batch) * p.audio_ctx * kD * (p.cross_f16 ? 2 : 4);
  if (p.prefetch) {
    PrefetchLayer(p.layers[0]);
    PrefetchShare(p.cross_k[0], cross_bytes);
    PrefetchShare(p.cross_v[0], cross_bytes);
  }
  __syncthreads();
  if (p.profile_mode == kProfileBarriersOnly) {
    for (int i = 0; i < 8 * p.n_layers + 1; ++i) GridSync(p.sync, target);
    FinishLaunch(p.sync, &last_block);
    return;
  }
  const bool attention = p.profile_mode != kProfileNoAttention;
  const bool blocks_att = p.block_attention;
  const bool tiles_early = blocks_att && attention && p.prefetch_kv_tiles;
  // Blocks with columns of a 384-column GEMV (the others skip its input).
  const bool has_d_cols = blockIdx.x * kWarps * Geom<kD>::kCols < kD;
  const bool split = p.split_barrier;
  // Fused FFN: block b owns hidden units [b·U, b·U + U).
  const int ffn_units = ((kFf + static_cast<int>(gridDim.x) - 1) / gridDim.x + 3) / 4 * 4;
  const bool fuse_ffn = p.fuse_ffn && ffn_units <= kMaxFfnUnits;
  // Self-attention + output projection in one phase (one chunk per (row, head)).
  const bool fuse_self =
      p.fuse_self_out && blocks_att && attention && static_cast<int>(gridDim.x) >= kH * p.batch;

  for (int layer = 0; layer < p.n_layers; ++layer) {
    const PersistentDecoderLayer& w = p.layers[layer];
    x = fuse_ffn ? xbuf[layer & 1] : xbuf[0];
    float* const x_next = xbuf[(layer + 1) & 1];  // the fused FFN's output (zeroed below)
    // -- LN1 + QKV, K and V appended to the self caches.
    {
      if (layer > 0) GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.qkv_w, w.qkv_b, 3 * kD, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln1_g, w.ln1_b);
      if (tiles_early) {
        PrefetchFirstTile<float>(self_plan, rows.batch, rows.position, p.self_k[layer],
                                 p.self_v[layer], p.text_ctx, true, stage);
      }
      if (fuse_self) {
        PrefetchOutSlice(self_plan, rows.batch, w.out_w, reinterpret_cast<char*>(pstage));
      }
      if (layer > 0) GridWait(p.sync, target, split);
      if (p.prefetch) {
        if (layer + 1 < p.n_layers) PrefetchLayer(p.layers[layer + 1]);
        if (layer > 0) {
          PrefetchShare(p.cross_k[layer], cross_bytes);
          PrefetchShare(p.cross_v[layer], cross_bytes);
        }
        if (layer == p.logits_prefetch_layer) {
          PrefetchShare(p.token_embedding, static_cast<size_t>(p.vocab) * kD * 2);
        }
      }
      if (fuse_ffn && blockIdx.x == gridDim.x - 1) {
        // Last read as the residual stream in the previous layer (before the barrier above).
        for (int i = threadIdx.x; i < rows.batch * kD; i += kThreads) x_next[i] = 0.0f;
      }
      NormRows<MaxB>(p, rows, x, norm, layer == 0, xs);
      float* kc = p.self_k[layer];
      float* vc = p.self_v[layer];
      Gemv<kD, MaxB>(w.qkv_w, w.qkv_b, 3 * kD, xs, first, [&](int r, int col, float acc) {
        if (r >= rows.batch) return;
        const float value = acc;
        const int part = col / kD, c = col % kD;
        if (part == 0) {
          q[r * kD + c] = value;
        } else if (rows.ok[r]) {
          float* cache = part == 1 ? kc : vc;
          cache[(static_cast<size_t>(r) * p.text_ctx + rows.position[r]) * kD + c] = value;
        }
      });
    }
    // -- Self-attention over keys [0, length).
    GridSync(p.sync, target);
    if (fuse_self) {
      FusedOut fused;
      fused.w = reinterpret_cast<const char*>(pstage);
      fused.bias = w.out_b;
      fused.x = x;
      BlockAttentionPhase<MaxB, float>(p, rows, self_plan, p.self_k[layer], p.self_v[layer],
                                       p.text_ctx, true, tiles_early, q, partials, xs, stage,
                                       att_shared, fused);
    } else if (attention && blocks_att) {
      BlockAttentionPhase<MaxB, float>(p, rows, self_plan, p.self_k[layer], p.self_v[layer],
                                       p.text_ctx, true, tiles_early, q, partials, xs, stage,
                                       att_shared);
    } else if (attention) {
      AttentionPhase<MaxB, float>(p, rows, p.self_k[layer], p.self_v[layer], p.text_ctx, true,
                                  p.self_split_keys, max_splits, q, att, partials, xs,
                                  merge_weights);
    }
    // -- (Partials merged +) output projection + residual (unless fused above).
    if (!fuse_self) {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.out_w, w.out_b, kD, FirstColumn<kD>(), first);
      GridWait(p.sync, target, split);
      const Residual<kD> res(x, rows.batch, kD);
      if (!blocks_att) {
        CopyRows<MaxB>(att, rows.batch, kD, xs);
      } else if (has_d_cols) {
        MergePartials<MaxB>(self_plan, rows.batch, partials, pstage, xs);
      }
      Gemv<kD, MaxB>(w.out_w, w.out_b, kD, xs, first, res);
    }
    // -- LN2 + cross-attention query.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.cq_w, w.cq_b, kD, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln2_g, w.ln2_b);
      if (tiles_early) {
        PrefetchFirstTile<Cross>(
            cross_plan, rows.batch, rows.position, static_cast<const Cross*>(p.cross_k[layer]),
            static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx, false, stage);
      }
      GridWait(p.sync, target, split);
      NormRows<MaxB>(p, rows, x, norm, false, xs);
      Gemv<kD, MaxB>(w.cq_w, w.cq_b, kD, xs, first, [&](int r, int col, float acc) {
        if (r < rows.batch) q[r * kD + col] = acc;
      });
    }
    // -- Cross-attention over the encoder's keys.
    GridSync(p.sync, target);
    if (attention && blocks_att) {
      BlockAttentionPhase<MaxB, Cross>(p, rows, cross_plan,
                                       static_cast<const Cross*>(p.cross_k[layer]),
                                       static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx,
                                       false, tiles_early, q, partials, xs, stage, att_shared);
    } else if (attention) {
      AttentionPhase<MaxB, Cross>(p, rows, static_cast<const Cross*>(p.cross_k[layer]),
                                  static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx, false,
                                  p.cross_split_keys, max_splits, q, att, partials, xs,
                                  merge_weights);
    }
    // -- (Partials merged +) output projection + residual.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.cout_w, w.cout_b, kD, FirstColumn<kD>(), first);
      GridWait(p.sync, target, split);
      const Residual<kD> res(x, rows.batch, kD);
      if (!blocks_att) {
        CopyRows<MaxB>(att, rows.batch, kD, xs);
      } else if (has_d_cols) {
        MergePartials<MaxB>(cross_plan, rows.batch, partials, pstage, xs);
      }
      Gemv<kD, MaxB>(w.cout_w, w.cout_b, kD, xs, first, res);
    }
    if (fuse_ffn) {
      // -- LN3 + FFN1 + GELU of this block's hidden units + their FFN2 share, added into
      //    x_next (zeroed; block 0 adds x + bias): one phase instead of two. Atomic sums:
      //    the order of the blocks' shares varies from run to run (rounding only).
      GridArrive(p.sync, target, split);
      const int u0 = blockIdx.x * ffn_units, u1 = min(kFf, u0 + ffn_units);
      const int warp = threadIdx.x / kWarp;
      const int col = u0 + warp * Geom<kD>::kCols + threadIdx.x % kWarp / Geom<kD>::kLanes;
      WeightRegs<kD> first;
      LoadWeights<kD>(w.ff1_w, w.ff1_b, u1, col, first);
      // FFN2 weights of the units for output column threadIdx.x (< 384), 4 f16 per piece.
      uint2 w2[kMaxFfnUnits / 4];
#pragma unroll
      for (int j = 0; j < kMaxFfnUnits / 4; ++j) {
        w2[j] = threadIdx.x < kD && u0 + 4 * j < u1
                    ? *reinterpret_cast<const uint2*>(
                          w.ff2_w + static_cast<size_t>(threadIdx.x) * kFf + u0 + 4 * j)
                    : make_uint2(0, 0);
      }
      const float b2 = threadIdx.x < kD && blockIdx.x == 0 ? w.ff2_b[threadIdx.x] : 0.0f;
      const NormRegs norm = LoadNorm<MaxB>(w.ln3_g, w.ln3_b);
      GridWait(p.sync, target, split);
      if (u0 < kFf) {      // block-uniform
        float base[MaxB];  // block 0: the residual stream it adds
#pragma unroll
        for (int r = 0; r < MaxB; ++r) {
          base[r] = blockIdx.x == 0 && threadIdx.x < kD && r < rows.batch
                        ? __ldcg(x + r * kD + threadIdx.x)
                        : 0.0f;
        }
        NormRows<MaxB>(p, rows, x, norm, false, xs);
        if (warp * Geom<kD>::kCols < u1 - u0) {  // warp-uniform
          GemvColumn<kD, MaxB>(first, col, u1, xs, [&](int r, int c, float acc) {
            ffn_hidden[r * kMaxFfnUnits + (c - u0)] = GeluExact(acc);
          });
        }
        __syncthreads();
        if (threadIdx.x < kD) {
          float y[MaxB];
#pragma unroll
          for (int r = 0; r < MaxB; ++r) y[r] = 0.0f;
#pragma unroll
          for (int j = 0; j < kMaxFfnUnits / 4; ++j) {
            if (u0 + 4 * j >= u1) break;
            const __half2* h = reinterpret_cast<const __half2*>(&w2[j]);
            const float2 f01 = __half22float2(h[0]), f23 = __half22float2(h[1]);
#pragma unroll
            for (int r = 0; r < MaxB; ++r) {
              const float4 hv =
                  *reinterpret_cast<const float4*>(ffn_hidden + r * kMaxFfnUnits + 4 * j);
              float acc = y[r];
              acc = fmaf(f01.x, hv.x, acc);
              acc = fmaf(f01.y, hv.y, acc);
              acc = fmaf(f23.x, hv.z, acc);
              acc = fmaf(f23.y, hv.w, acc);
              y[r] = acc;
            }
          }
#pragma unroll
          for (int r = 0; r < MaxB; ++r) {
            if (r < rows.batch) {
              atomicAdd(x_next + r * kD + threadIdx.x,
                        blockIdx.x == 0 ? y[r] + base[r] + b2 : y[r]);
            }
          }
        }
      }
      continue;
    }
    // -- LN3 + FFN1 + GELU.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.ff1_w, w.ff1_b, kFf, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln3_g, w.ln3_b);
      GridWait(p.sync, target, split);
      NormRows<MaxB>(p, rows, x, norm, false, xs);
      Gemv<kD, MaxB>(w.ff1_w, w.ff1_b, kFf, xs, first, [&](int r, int col, float acc) {
        if (r < rows.batch) hidden[r * kFf + col] = GeluExact(acc);
      });
    }
    // -- FFN2 + residual.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kFf> first;
      LoadWeights<kFf>(w.ff2_w, w.ff2_b, kD, FirstColumn<kFf>(), first);
      GridWait(p.sync, target, split);
      const Residual<kFf> res(x, rows.batch, kD);
      CopyRows<MaxB>(hidden, rows.batch, kFf, xs);
      Gemv<kFf, MaxB>(w.ff2_w, w.ff2_b, kD, xs, first, res);
    }
  }

  x = fuse_ffn ? xbuf[p.n_layers & 1] : xbuf[0];
  // -- Final LayerNorm + logits + suppression, argmax, log-sum-exp.
  {
    GridArrive(p.sync, target, split);
    WeightRegs<kD> first;
    LoadWeights<kD>(p.token_embedding, nullptr, p.vocab, FirstColumn<kD>(), first);
    const NormRegs norm = LoadNorm<MaxB>(p.final_g, p.final_b);
    GridWait(p.sync, target, split);
    NormRows<MaxB>(p, rows, x, norm, false, xs);
    if (p.profile_mode == kProfileNoLogits) {
      FinishLaunch(p.sync, &last_block);
      return;
    }
    Best best{-INFINITY, 0.0f, INT_MAX};  // of row (lane % 16) on the lanes where that is < B
    Gemv<kD, MaxB>(p.token_embedding, nullptr, p.vocab, xs, first, [&](int r, int col, float v) {
      if (r >= rows.batch) return;
      if (p.logits != nullptr) p.logits[static_cast<size_t>(r) * p.vocab + col] = v;
      if (p.suppress_bits != nullptr && ((p.suppress_bits[col >> 5] >> (col & 31)) & 1u)) return;
      if (!(v == v)) return;  // NaN
      if (v > best.m) {
        best.s = best.s * expf(best.m - v) + 1.0f;
        best.m = v;
        best.index = col;
      } else {
        best.s += expf(v - best.m);
        if (v == best.m && col < best.index) best.index = col;
      }
    });
    // Lanes r and r + 16 hold row r (two column groups per warp).
    best = Merge(best, ShuffleXor(best, 16));
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane < MaxB) warp_best[warp][lane] = best;
    __syncthreads();
    if (warp == 0 && lane < rows.batch) {
      Best b = warp_best[0][lane];
      for (int i = 1; i < kWarps; ++i) b = Merge(b, warp_best[i][lane]);
      float* st = stats + (static_cast<size_t>(blockIdx.x) * kPersistentMaxBatch + lane) * 4;
      st[0] = b.m;
      st[1] = b.s;
      st[2] = __int_as_float(b.index);
      __threadfence();
    }
    if (FinishLaunch(p.sync, &last_block)) {
      __threadfence();
      if (warp < rows.batch) {
        const int r = warp;
        Best b{-INFINITY, 0.0f, INT_MAX};
        for (unsigned blk = lane; blk < gridDim.x; blk += kWarp) {
          const float* st = stats + (static_cast<size_t>(blk) * kPersistentMaxBatch + r) * 4;
          b = Merge(b, Best{__ldcg(st), __ldcg(st + 1), __float_as_int(__ldcg(st + 2))});
        }
#pragma unroll
        for (int o = kWarp / 2; o > 0; o /= 2) b = Merge(b, ShuffleXor(b, o));
        if (lane == 0) {
          const float lse = b.m + logf(b.s);
          if (p.best_token != nullptr) p.best_token[r] = b.index == INT_MAX ? -1 : b.index;
          if (p.best_logprob != nullptr) p.best_logprob[r] = b.m - lse;
          if (p.logsumexp != nullptr) p.logsumexp[r] = lse;
        }
      }
    }
  }
}

__global__ void FloatToHalfKernel(const float* src, __half* dst, int64_t n) {
  WaitForPreviousKernel();
  AllowNextKernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2half_rn(src[i]);
  }
}

template <int MaxB, typename Cross>
cudaError_t LaunchTyped(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  const int max_splits = MaxSplits(p.audio_ctx, p.text_ctx, p.cross_split_keys, p.self_split_keys);
  const Layout lay = MakeLayout(p.batch, max_splits, ctx.sm_count);
  if (lay.total > p.workspace_floats || p.workspace == nullptr || p.sync == nullptr) {
    return cudaErrorInvalidValue;
  }
  auto* kernel = PersistentDecoderKernel<MaxB, Cross>;
  // The partials' stage also holds the fused self-attention's W_o slice (384 x 64 f16).
  const size_t smem =
      sizeof(float) * MaxB * kFf + kStageBytes +
      std::max(sizeof(float) * kChunkPartial * MaxChunks(MaxB, ctx.sm_count), size_t{kD} * kDh * 2);
  cudaError_t err =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) return cudaErrorNotSupported;
  PersistentDecoderParams params = p;
  params.error_word = ctx.error_word;
  int max_splits_arg = max_splits;
  void* args[] = {&params, const_cast<Layout*>(&lay), &max_splits_arg};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(ctx.sm_count),
                                     dim3(kThreads), args, smem, ctx.stream);
}

template <int MaxB>
cudaError_t LaunchForBatch(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  return p.cross_f16 ? LaunchTyped<MaxB, __half>(ctx, p) : LaunchTyped<MaxB, float>(ctx, p);
}

}  // namespace

size_t PersistentWorkspaceFloats(int batch, int audio_ctx, int text_ctx, int cross_split_keys,
                                 int self_split_keys, int max_blocks) {
  return MakeLayout(batch, MaxSplits(audio_ctx, text_ctx, cross_split_keys, self_split_keys),
                    max_blocks)
      .total;
}

bool PersistentDecoderSupported(int batch, int n_layers, int d_model, int n_heads, int ffn) {
  return batch >= 1 && batch <= kPersistentMaxBatch && n_layers >= 1 &&
         n_layers <= kPersistentMaxLayers && d_model == kD && n_heads == kH && ffn == kFf;
}

cudaError_t LaunchPersistentDecoder(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  if (!PersistentDecoderSupported(p.batch, p.n_layers, kD, kH, kFf) || p.cross_split_keys < 1 ||
      p.self_split_keys < 1 ||
      (!p.block_attention &&
       MaxSplits(p.audio_ctx, p.text_ctx, p.cross_split_keys, p.self_split_keys) > kMaxSplits)) {
    return cudaErrorInvalidValue;
  }
  if (p.batch == 1) return LaunchForBatch<1>(ctx, p);
  if (p.batch == 2) return LaunchForBatch<2>(ctx, p);
  if (p.batch <= 4) return LaunchForBatch<4>(ctx, p);
  return LaunchForBatch<8>(ctx, p);
}

cudaError_t LaunchFloatToHalf(const LaunchContext& ctx, const float* src, __half* dst, int64_t n) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, 256), 4096));
  return Launch(ctx, FloatToHalfKernel, dim3(blocks), dim3(256), 0, src, dst, n);
}

}  // namespace waav::cuda

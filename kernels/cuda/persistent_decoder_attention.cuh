// The persistent decoder step's attention phases (persistent_decoder.cu is the kernel): the
// first version (warp items merged by the last warp of each (row, head)) and block attention
// (key chunks per block, K/V tiles in shared memory before the barrier, partials merged by the
// next phase's blocks).
#pragma once

#include "kernels/cuda/persistent_decoder_common.cuh"

namespace waav::cuda::persistent_detail {

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

__device__ inline void MakePlan(const int* lengths, int batch, int blocks, int min_keys,
                                ChunkPlan& plan) {
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

}  // namespace waav::cuda::persistent_detail

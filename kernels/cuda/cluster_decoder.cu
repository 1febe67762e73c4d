// The cluster decoder step (cluster_decoder.cuh): the layers as one thread-block cluster per
// batch row, the logits as a second launch that loads its weights while the layers run.
//
// Layers, per block of a cluster (rank b of kC = 16) and layer, eight phases; each starts when
// its inputs have arrived (the mbarrier of that exchange completes), its weights loaded into
// registers just before:
//
//   LN1 + QKV columns [72 b, 72 b + 72) (this block's K, V kept for the self caches) |
//   self-attention over keys [L b / 16, L (b + 1) / 16), all heads | merge + out-proj columns
//   [24 b, +24) + residual | LN2 + cross-Q columns | cross-attention over this block's ~94 of
//   the 1500 cross keys (bulk-copied into shared memory a layer ahead) | merge + cross out-proj
//   + residual | LN3 + FFN1 + GELU columns [96 b, +96) | FFN2 columns [24 b, +24) + residual.
//
// Every value a phase produces is stored into the shared memory of all 16 blocks with st.async
// (distributed shared memory, counted on the receiver's mbarrier of that exchange), so each
// block holds the row's residual stream, Q/K/V, FFN hidden units and attention partials, and
// computes its LayerNorms itself. No buffer is overwritten before every block has read it: a
// block sends a phase's values only after it has received every block's values of the phase
// before, and each buffer is written again at least two exchanges after it was read.
// Attention: one warp per key (a lane holds 4 (f32) or 8 (f16) dims of a head), online softmax
// per warp, the block's 16 warps merged into one partial (o, m, l) per head, the cluster's 16
// partials merged by every block. The new position's K/V come from shared memory.
#include <algorithm>
#include <atomic>
#include <climits>

#include "kernels/cuda/cluster_decoder.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/persistent_decoder_common.cuh"

namespace waav::cuda {

#if defined(WAAV_HIP)

bool ClusterDecoderAvailable(const PersistentDecoderParams&) { return false; }
cudaError_t LaunchClusterDecoder(const LaunchContext&, const PersistentDecoderParams&) {
  return cudaErrorNotSupported;
}

#else

using namespace persistent_detail;  // NOLINT(google-build-using-namespace): its own parts

namespace {

constexpr int kC = kClusterDecoderBlocks;
constexpr int kRec = kChunkPartial;  // a head's partial: o[64], m, l, two floats of padding
constexpr int kQkvCols = 3 * kD / kC;
constexpr int kDCols = kD / kC;
constexpr int kFfCols = kFf / kC;
static_assert(kD % kC == 0 && kFf % kC == 0, "columns split evenly over the cluster");
// Suppression words of a logits block's columns kept in shared memory (up to 2016 columns).
constexpr int kLogitsBitWords = 64;
// Registers passes of logits columns loaded before the wait (more with fewer rows).
template <int MaxB>
__host__ __device__ constexpr int LogitsRegPasses() {
  return MaxB <= 2 ? 5 : 2;
}

// Shared memory of the layers' blocks (floats, then the f16 stage).
constexpr size_t kLayerFixedFloats = size_t{kD} + kFf + 3 * kD + kFf + size_t{kWarps} * kH * kRec +
                                     size_t{kC} * kH * kRec + 6 * kD + kH * kRec + 16 * kH +
                                     kPersistentMaxLayers * kQkvCols;
size_t LayerSmemBytes(int stage_keys) {
  return sizeof(float) * kLayerFixedFloats + size_t{2} * stage_keys * kD * sizeof(__half);
}
int StageKeys(int audio_ctx) { return (audio_ctx + kC - 1) / kC; }

// ---- Cluster plumbing ---------------------------------------------------------------------
// Barrier halves: arrive releases this thread's prior writes (shared, distributed shared and
// global) to the cluster; wait acquires every other thread's. Every thread of the cluster calls
// both, alternately.
__device__ __forceinline__ void ClusterArrive() { __cluster_barrier_arrive(); }
__device__ __forceinline__ void ClusterWait() { __cluster_barrier_wait(); }
// An arrival that orders nothing (no GPU-scope fence: the release form compiles to
// MEMBAR.ALL.GPU, a round trip to L2 on every arrival).
__device__ __forceinline__ void ClusterArriveRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// Asynchronous copies (cp.async) in groups.
__device__ __forceinline__ void CopyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Bulk copies (Hopper's TMA engine) into this block's shared memory, completed on an mbarrier:
// one instruction per contiguous range instead of one 16-byte cp.async per thread and piece.
__device__ __forceinline__ unsigned SharedAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void BarrierInit(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The next phase of `bar` completes when `bytes` have landed (one thread).
__device__ __forceinline__ void BarrierExpectBytes(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared.
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, unsigned bytes,
                                         unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
// Waits until phase `parity` of `bar` has completed (every thread that reads the data).
__device__ __forceinline__ void BarrierWait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}" ::"r"(SharedAddress(bar)),
      "r"(parity)
      : "memory");
}
// Orders this thread's earlier generic reads of shared memory before later bulk copies into it.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Mapped address of `local` (this block's shared memory) in cluster block `rank`. (Computed at
// each store, volatile asm: hoisted out of the loops, 16 per buffer took the registers the
// weights need; ptxas spilled 1.6 KB per thread.)
__device__ __forceinline__ unsigned MapRank(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(SharedAddress(local)), "r"(rank));
  return remote;
}
// `v` into `local`'s address in cluster block `rank`, counted on that block's mbarrier `event`
// (same address in every block) as 4 bytes: st.async, whose completion the consumer observes
// on its own mbarrier, with no fence or cluster barrier on the producer's side.
__device__ __forceinline__ void StoreAsync(float* local, float v, unsigned rank,
                                           unsigned long long* event) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(
                   MapRank(local, rank)),
               "f"(v), "r"(MapRank(event, rank))
               : "memory");
}
// Four floats (16-byte aligned) likewise, 16 bytes.
__device__ __forceinline__ void StoreAsync4(float* local, float4 v, unsigned rank,
                                            unsigned long long* event) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(MapRank(local, rank)),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(MapRank(event, rank))
      : "memory");
}

// A column's value, held by every lane of its group, into every block of the cluster: lane
// `sub` of the group stores into block `sub` (groups have 16 or 32 lanes).
__device__ __forceinline__ void Broadcast(float* local, float v, int sub,
                                          unsigned long long* event) {
  if (sub < kC) StoreAsync(local, v, static_cast<unsigned>(sub), event);
}

// The exchanges of a layer: each block's mbarrier per event completes when this many bytes
// have arrived from the cluster's blocks (itself included).
enum Event { kEvQkv, kEvSelf, kEvOut, kEvCq, kEvCross, kEvCout, kEvFf1, kEvFf2, kEvents };
__device__ __forceinline__ unsigned EventBytes(int e) {
  constexpr unsigned kPartials = kC * kH * kRec * 4;  // every block's merged partials
  switch (e) {
    case kEvQkv:
      return 3 * kD * 4;
    case kEvSelf:
    case kEvCross:
      return kPartials;
    case kEvFf1:
      return kFf * 4;
    default:  // out, cq, cout, ffn2: 384 values
      return kD * 4;
  }
}

// ---- Timeline (profile mode) ----------------------------------------------------------------
// Stamps [0, kTimelinePhaseStamps): the layers' block 0, clock64() at its start and at each
// phase's start and end. Then globaltimer (ns, comparable across multiprocessors): the layers'
// block 0 at its start and end, the logits' block 0 at its start, when its wait for the layers
// returned, and when its columns were done.
constexpr int kTimelineMain = 80;  // block 0's stamps, at the end of the workspace
constexpr int kTimelinePhaseStamps = kTimelineMain - 8;
// Before them: every block's globaltimer at each of its barrier arrivals (36 per block).
constexpr int kArrivalStamps = 36;
static_assert(kClusterTimelineStamps == kC * kArrivalStamps + kTimelineMain, "timeline layout");
constexpr int kStampLayersStart = kTimelinePhaseStamps, kStampLayersEnd = kStampLayersStart + 1;
constexpr int kStampLogitsStart = kStampLayersStart + 2, kStampLogitsWaited = kStampLayersStart + 3;
constexpr int kStampLogitsDone = kStampLayersStart + 4;
constexpr int kStampLogitsNormed = kStampLayersStart + 5,
              kStampLogitsStaged = kStampLayersStart + 6;
// (The memory clobber keeps loads and stores on their side of the stamp.)
__device__ __forceinline__ long long Clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ long long GlobalNs() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ long long* TimelineStamps(const PersistentDecoderParams& p) {
  return p.profile_mode == kProfileTimeline && blockIdx.x == 0 && threadIdx.x == 0
             ? reinterpret_cast<long long*>(p.workspace + p.workspace_floats) - kTimelineMain
             : nullptr;
}

// ---- GEMV over this block's columns -------------------------------------------------------
// Columns [col0, col0 + Cols) of W [n, K]: pass p of warp w takes columns
// (p · 16 + w) · kCols + group; its weights sit in registers from before the barrier.
template <int K, int Cols>
struct Slice {
  using G = Geom<K>;
  static constexpr int kPerPass = kWarps * G::kCols;
  static constexpr int kPasses = (Cols + kPerPass - 1) / kPerPass;
  WeightRegs<K> pass[kPasses];
};

// (`load` false: zeros, for a profile mode.)
template <int K, int Cols>
__device__ __forceinline__ void LoadSlice(const __half* w, const float* bias, int col0,
                                          Slice<K, Cols>& s, bool load = true) {
  using G = Geom<K>;
  const int warp = threadIdx.x / kWarp, group = threadIdx.x % kWarp / G::kLanes;
  const int end = load ? col0 + Cols : 0;
#pragma unroll
  for (int i = 0; i < Slice<K, Cols>::kPasses; ++i) {
    LoadWeights<K>(w, bias, end, col0 + (i * kWarps + warp) * G::kCols + group, s.pass[i]);
  }
}

// epi(col, value, sub) on every lane of each column's group (value includes the bias; sub: the
// lane's index in the group). The passes run as independent chains (their inputs read once).
template <int K, int Cols, typename Epi>
__device__ __forceinline__ void RunSlice(const Slice<K, Cols>& s, int col0, const float* xs,
                                         Epi&& epi) {
  using G = Geom<K>;
  constexpr int kPasses = Slice<K, Cols>::kPasses;
  const int warp = threadIdx.x / kWarp, group = threadIdx.x % kWarp / G::kLanes;
  const int sub = threadIdx.x % kWarp % G::kLanes;
  float acc[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < G::kPerLane; ++j) {
    const int k0 = (sub + j * G::kLanes) * 8;
    const float4 a = *reinterpret_cast<const float4*>(xs + k0);
    const float4 b = *reinterpret_cast<const float4*>(xs + k0 + 4);
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const __half2* h = reinterpret_cast<const __half2*>(&s.pass[i].v[j]);
      const float2 w0 = __half22float2(h[0]), w1 = __half22float2(h[1]);
      const float2 w2 = __half22float2(h[2]), w3 = __half22float2(h[3]);
      float v = acc[i];
      v = fmaf(w0.x, a.x, v);
      v = fmaf(w0.y, a.y, v);
      v = fmaf(w1.x, a.z, v);
      v = fmaf(w1.y, a.w, v);
      v = fmaf(w2.x, b.x, v);
      v = fmaf(w2.y, b.y, v);
      v = fmaf(w3.x, b.z, v);
      v = fmaf(w3.y, b.w, v);
      acc[i] = v;
    }
  }
#pragma unroll
  for (int o = G::kLanes / 2; o > 0; o /= 2) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) acc[i] += __shfl_xor_sync(kFullMask, acc[i], o);
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int first = (i * kWarps + warp) * G::kCols;
    if (first + group < Cols) epi(col0 + first + group, acc[i] + s.pass[i].bias, sub);
  }
}

// out[0, 384) = LayerNorm(x) with gain g and bias b (all in shared memory), by warp 0; then a
// block barrier.
__device__ __forceinline__ void NormLocal(const float* x, const float* g, const float* b, float eps,
                                          float* out) {
  if (threadIdx.x < kWarp) {
    const int lane = threadIdx.x;
    float v[kPer];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[i] = x[lane + i * kWarp];
      sum += v[i];
    }
    const float mean = WarpSum(sum) / kD;
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) squares += (v[i] - mean) * (v[i] - mean);
    const float rstd = 1.0f / sqrtf(WarpSum(squares) / kD + eps);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + i * kWarp;
      out[c] = (v[i] - mean) * rstd * g[c] + b[c];
    }
  }
  __syncthreads();
}

// ---- Attention ----------------------------------------------------------------------------
// One online-softmax step of a lane's running (m, l, o[N]) with score s and values v.
template <int N>
__device__ __forceinline__ void SoftmaxStep(float s, const float* v, float& m, float& l, float* o) {
  const float m_new = fmaxf(m, s);
  const float corr = expf(m - m_new), pr = expf(s - m_new);
  l = l * corr + pr;
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] = o[i] * corr + pr * v[i];
  m = m_new;
}

__device__ __forceinline__ void WriteRecord(float* wpart, int head, int dim, const float* o, int n,
                                            float m, float l, bool leader) {
  float* rec = wpart + (threadIdx.x / kWarp * kH + head) * kRec;
  for (int i = 0; i < n; ++i) rec[dim + i] = o[i];
  if (leader) {
    rec[kDh] = m;
    rec[kDh + 1] = l;
  }
}

// Self-attention over keys [k0, k1) of f32 caches (global; key `position` from shared memory):
// a partial per (warp, head) into wpart. Lane l holds dims 4 l + 128 c (head 2 c + l / 16).
__device__ void SelfAttentionWarps(const float* kc, const float* vc, int k0, int k1, int position,
                                   const float* q, const float* new_k, const float* new_v,
                                   float scale, float* wpart) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float qv[3][4], o[3][4], m[3], l[3];
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    const float4 t = reinterpret_cast<const float4*>(q)[c * kWarp + lane];
    qv[c][0] = t.x * scale;
    qv[c][1] = t.y * scale;
    qv[c][2] = t.z * scale;
    qv[c][3] = t.w * scale;
    m[c] = -INFINITY;
    l[c] = 0.0f;
    for (int i = 0; i < 4; ++i) o[c][i] = 0.0f;
  }
  for (int j = k0 + warp; j < k1; j += kWarps) {
    float4 kv[3], vv[3];
    if (j == position) {
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        kv[c] = reinterpret_cast<const float4*>(new_k)[c * kWarp + lane];
        vv[c] = reinterpret_cast<const float4*>(new_v)[c * kWarp + lane];
      }
    } else {
      const float4* kr = reinterpret_cast<const float4*>(kc + static_cast<size_t>(j) * kD);
      const float4* vr = reinterpret_cast<const float4*>(vc + static_cast<size_t>(j) * kD);
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        kv[c] = __ldcg(kr + c * kWarp + lane);
        vv[c] = __ldcg(vr + c * kWarp + lane);
      }
    }
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      float s = qv[c][0] * kv[c].x + qv[c][1] * kv[c].y + qv[c][2] * kv[c].z + qv[c][3] * kv[c].w;
#pragma unroll
      for (int off = 8; off > 0; off /= 2) s += __shfl_xor_sync(kFullMask, s, off);
      const float v[4] = {vv[c].x, vv[c].y, vv[c].z, vv[c].w};
      SoftmaxStep<4>(s, v, m[c], l[c], o[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    WriteRecord(wpart, 2 * c + lane / 16, 4 * (lane % 16), o[c], 4, m[c], l[c], lane % 16 == 0);
  }
}

// Cross-attention over n_keys f16 rows in shared memory: a partial per (warp, head) into wpart.
// Lane l holds dims 8 l (head l / 8) and, for l < 16, dims 256 + 8 l (head 4 + l / 8). A warp
// scores kKeyChunk keys before one softmax update (one rescale of o per chunk, not per key).
constexpr int kKeyChunk = 4;
__device__ void CrossAttentionWarps(const __half* sk, const __half* sv, int n_keys, const float* q,
                                    float scale, float* wpart) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const bool has_b = lane < 16;
  float qa[8], qb[8], oa[8], ob[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    qa[i] = q[8 * lane + i] * scale;
    qb[i] = has_b ? q[256 + 8 * lane + i] * scale : 0.0f;
    oa[i] = ob[i] = 0.0f;
  }
  float ma = -INFINITY, la = 0.0f, mb = -INFINITY, lb = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int base = warp; base < n_keys; base += kWarps * kKeyChunk) {
    float sa[kKeyChunk], sb[kKeyChunk];
    uint4 va[kKeyChunk], vb[kKeyChunk];
#pragma unroll
    for (int c = 0; c < kKeyChunk; ++c) {
      const int j = base + c * kWarps;
      sa[c] = sb[c] = 0.0f;
      va[c] = vb[c] = zero;
      if (j < n_keys) {
        const uint4* kr = reinterpret_cast<const uint4*>(sk + static_cast<size_t>(j) * kD);
        const uint4* vr = reinterpret_cast<const uint4*>(sv + static_cast<size_t>(j) * kD);
        const uint4 ka = kr[lane], kb = has_b ? kr[32 + lane] : zero;
        va[c] = vr[lane];
        vb[c] = has_b ? vr[32 + lane] : zero;
        float kf[8];
        WidenHalves8(ka, kf);
#pragma unroll
        for (int i = 0; i < 8; ++i) sa[c] = fmaf(qa[i], kf[i], sa[c]);
        WidenHalves8(kb, kf);
#pragma unroll
        for (int i = 0; i < 8; ++i) sb[c] = fmaf(qb[i], kf[i], sb[c]);
      }
    }
#pragma unroll
    for (int off = 4; off > 0; off /= 2) {
#pragma unroll
      for (int c = 0; c < kKeyChunk; ++c) {
        sa[c] += __shfl_xor_sync(kFullMask, sa[c], off);
        sb[c] += __shfl_xor_sync(kFullMask, sb[c], off);
      }
    }
    float na = ma, nb = mb;
#pragma unroll
    for (int c = 0; c < kKeyChunk; ++c) {
      if (base + c * kWarps < n_keys) {
        na = fmaxf(na, sa[c]);
        nb = fmaxf(nb, sb[c]);
      }
    }
    const float ca = expf(ma - na), cb = expf(mb - nb);
    la *= ca;
    lb *= cb;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      oa[i] *= ca;
      ob[i] *= cb;
    }
#pragma unroll
    for (int c = 0; c < kKeyChunk; ++c) {
      if (base + c * kWarps < n_keys) {  // warp-uniform
        const float pa = expf(sa[c] - na), pb = expf(sb[c] - nb);
        la += pa;
        lb += pb;
        float vf[8];
        WidenHalves8(va[c], vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) oa[i] = fmaf(pa, vf[i], oa[i]);
        WidenHalves8(vb[c], vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) ob[i] = fmaf(pb, vf[i], ob[i]);
      }
    }
    ma = na;
    mb = nb;
  }
  WriteRecord(wpart, lane / 8, 8 * (lane % 8), oa, 8, ma, la, lane % 8 == 0);
  if (has_b) WriteRecord(wpart, 4 + lane / 8, 8 * (lane % 8), ob, 8, mb, lb, lane % 8 == 0);
}

// Softmax-merge weights of 16 partials per head: for head h (threads 16 h .. 16 h + 15 of the
// first 96), weights[h][i] = exp(m_i - M) (/ L when `normalise`), M the largest m_i and L the
// weighted sum of the l_i; without `normalise` also M and L into `merged`'s record h. Then a
// block barrier.
__device__ __forceinline__ void MergeWeights(const float* records, float* weights, bool normalise,
                                             float* merged) {
  static_assert(kWarps == 16 && kC == 16, "16 partials per head: 16 lanes each");
  if (threadIdx.x < 16 * kH) {
    const int h = threadIdx.x / 16, i = threadIdx.x % 16;
    const float* rec = records + (i * kH + h) * kRec;
    const float m_i = rec[kDh];
    float m = m_i;
#pragma unroll
    for (int o = 8; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
    const float e = m == -INFINITY ? 0.0f : expf(m_i - m);
    float l = rec[kDh + 1] * e;
#pragma unroll
    for (int o = 8; o > 0; o /= 2) l += __shfl_xor_sync(kFullMask, l, o);
    weights[h * 16 + i] = normalise ? (l > 0.0f ? e / l : 0.0f) : e;
    if (!normalise && i == 0) {
      merged[h * kRec + kDh] = m;
      merged[h * kRec + kDh + 1] = l;
    }
  }
  __syncthreads();
}

// The block's 16 warp partials per head merged into one (o unnormalised, m, l) in `mine`, then
// copied into record `rank` of cpart in every block (counted on `event`). Call after a block
// barrier that follows the warps'. `weights`: 96 floats of scratch.
__device__ void PushBlockPartial(const float* wpart, float* cpart, float* mine, float* weights,
                                 int rank, unsigned long long* event) {
  MergeWeights(wpart, weights, false, mine);
  if (threadIdx.x < kD) {
    const int h = threadIdx.x / kDh, d = threadIdx.x % kDh;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      o = fmaf(wpart[(w * kH + h) * kRec + d], weights[h * 16 + w], o);
    }
    mine[h * kRec + d] = o;
  }
  __syncthreads();
  constexpr int kPieces = kH * kRec / 4;  // float4 pieces of the block's record
  float* dst = cpart + rank * kH * kRec;
  for (int i = threadIdx.x; i < kC * kPieces; i += kThreads) {
    const int target = i / kPieces, piece = i % kPieces;
    StoreAsync4(dst + 4 * piece, reinterpret_cast<const float4*>(mine)[piece],
                static_cast<unsigned>(target), event);
  }
}

// att[0, 384) = the cluster's partials merged and normalised; then a block barrier.
__device__ void MergeCluster(const float* cpart, float* weights, float* att) {
  MergeWeights(cpart, weights, true, nullptr);
  if (threadIdx.x < kD) {
    const int h = threadIdx.x / kDh, d = threadIdx.x % kDh;
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < kC; ++j) o = fmaf(cpart[(j * kH + h) * kRec + d], weights[h * 16 + j], o);
    att[threadIdx.x] = o;
  }
  __syncthreads();
}

// ---- The layers' kernel -------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 1)
    ClusterLayersKernel(const __grid_constant__ PersistentDecoderParams p, float* x_out,
                        int stage_keys) {
  extern __shared__ float4 smem_raw[];
  float* x_s = reinterpret_cast<float*>(smem_raw);  // the residual stream
  float* xn = x_s + kD;                             // LayerNorm'ed row / merged attention
  float* qkv_s = xn + kFf;                          // Q, K, V of the step (Q: also cross Q)
  float* h_s = qkv_s + 3 * kD;                      // FFN hidden units
  float* wpart = h_s + kFf;                         // [warp][head] partials
  float* cpart = wpart + kWarps * kH * kRec;        // [block][head] partials
  float* norms = cpart + kC * kH * kRec;            // the layer's LN1, LN2, LN3 gains, biases
  float* mine = norms + 6 * kD;                     // this block's merged partial
  float* merge_weights = mine + kH * kRec;          // [head][16]
  float* kv_keep = merge_weights + 16 * kH;         // [layer][column]: this block's K/V of the step
  __half* stage_k = reinterpret_cast<__half*>(kv_keep + kPersistentMaxLayers * kQkvCols);
  __half* stage_v = stage_k + static_cast<size_t>(stage_keys) * kD;
  __shared__ int row_token, row_position, row_length;
  __shared__ bool row_ok;

  AllowNextKernel();  // the logits launch may start on the multiprocessors left idle
  if (p.profile_mode == kProfileLogitsOnly) return;
  // Profile modes (timing only, outputs wrong): see persistent_decoder.cuh.
  const bool barriers_only = p.profile_mode == kProfileBarriersOnly;
  const bool attention = p.profile_mode != kProfileNoAttention && !barriers_only;
  const bool weights = p.profile_mode != kProfileNoWeights && !barriers_only;
  // Timeline (profile mode): block 0 stamps each phase's start and end; every block stamps the
  // end of each of its phases (globaltimer).
  long long* const stamps = TimelineStamps(p);
  if (stamps != nullptr) stamps[kStampLayersStart] = GlobalNs();
  long long* const ends = p.profile_mode == kProfileTimeline && threadIdx.x == 0 && blockIdx.x < kC
                              ? reinterpret_cast<long long*>(p.workspace + p.workspace_floats) -
                                    kClusterTimelineStamps + blockIdx.x * kArrivalStamps
                              : nullptr;
  int stamp = 0, phase_end = 0;
  auto mark = [&] {
    if (stamps != nullptr && stamp < kTimelinePhaseStamps) stamps[stamp] = Clock();
    ++stamp;
  };
  mark();
  const int rank = static_cast<int>(__clusterRelativeBlockRank());
  const int row = static_cast<int>(blockIdx.x) / kC;
  // Data exchange: each phase's values arrive by st.async, completing this block's mbarrier
  // of that event once all kEventBytes have landed (one phase of it per layer).
  __shared__ unsigned long long events[kEvents];
  __shared__ unsigned long long stage_bar;
  if (threadIdx.x == 0) {
    for (int e = 0; e < kEvents; ++e) {
      BarrierInit(&events[e]);
      BarrierExpectBytes(&events[e], EventBytes(e));
    }
    BarrierInit(&stage_bar);
  }
  // A layer's LayerNorm vectors (cp.async, one group), issued while the previous layer's
  // FFN runs (after its LN3 read the last ones).
  auto stage_norms = [&](int layer) {
    const PersistentDecoderLayer& w = p.layers[layer];
    for (int i = threadIdx.x; i < 6 * kD / 4; i += kThreads) {
      const int which = i / (kD / 4), piece = i % (kD / 4);
      const float* src = which == 0   ? w.ln1_g
                         : which == 1 ? w.ln1_b
                         : which == 2 ? w.ln2_g
                         : which == 3 ? w.ln2_b
                         : which == 4 ? w.ln3_g
                                      : w.ln3_b;
      gpu::CopyAsync16(norms + which * kD + 4 * piece, src + 4 * piece);
    }
    CopyAsyncCommit();
  };
  if (!barriers_only) stage_norms(0);  // model constants: before the wait
  // Launched early (programmatic dependent launch): everything above and the model's constants
  // may be touched before this, the step's inputs and the cross K/V only after.
  WaitForPreviousKernel();
  if (threadIdx.x == 0) {
    const int token = p.tokens[row], position = p.positions[row], length = p.lengths[row];
    const bool token_ok = token >= 0 && token < p.vocab;
    const bool position_ok = position >= 0 && position < p.text_ctx;
    const bool length_ok = length >= 1 && length <= p.text_ctx;
    if (rank == 0) {
      if (!token_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kEmbed, row, token);
      if (!position_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kWriteRows, row, position);
      if (!length_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kAttention, row, length);
    }
    row_ok = token_ok && position_ok && length_ok;
    row_token = token_ok ? token : 0;
    row_position = position_ok ? position : 0;
    row_length = length_ok ? length : 1;
  }
  __syncthreads();
  const int position = row_position, length = row_length;
  const bool ok = row_ok;
  // This block's keys: self [s0, s1), cross [a0, a1).
  const int s0 = length * rank / kC, s1 = length * (rank + 1) / kC;
  const int a0 = static_cast<int>(static_cast<int64_t>(p.audio_ctx) * rank / kC);
  const int a1 = static_cast<int>(static_cast<int64_t>(p.audio_ctx) * (rank + 1) / kC);
  // Waits for event `e` of `layer` (every thread), then re-arms it for the next layer.
  auto wait = [&](int e, int layer) {
    BarrierWait(&events[e], static_cast<unsigned>(layer & 1));
    __syncthreads();  // every thread past this phase of it before it can complete again
    if (threadIdx.x == 0 && layer + 1 < p.n_layers) BarrierExpectBytes(&events[e], EventBytes(e));
    mark();
  };
  auto done = [&] {
    mark();
    if (ends != nullptr && phase_end < kArrivalStamps) ends[phase_end] = GlobalNs();
    ++phase_end;
  };
  // A layer's cross K/V rows of this block: two bulk copies completing phase `layer & 1` of
  // stage_bar, issued as soon as the previous layer's cross-attention has read the stage.
  auto stage_cross = [&](int layer) {
    if (threadIdx.x != 0) return;
    const size_t offset = (static_cast<size_t>(row) * p.audio_ctx + a0) * kD;
    const unsigned bytes = static_cast<unsigned>((a1 - a0) * kD * 2);
    FenceProxyAsync();
    BarrierExpectBytes(&stage_bar, 2 * bytes);
    BulkCopy(stage_k, static_cast<const __half*>(p.cross_k[layer]) + offset, bytes, &stage_bar);
    BulkCopy(stage_v, static_cast<const __half*>(p.cross_v[layer]) + offset, bytes, &stage_bar);
  };
  if (!barriers_only) stage_cross(0);
  for (int c = threadIdx.x; c < kD; c += kThreads) {
    x_s[c] = __half2float(p.token_embedding[static_cast<size_t>(row_token) * kD + c]) +
             p.position_table[static_cast<size_t>(position) * kD + c];
  }
  // Every block of the cluster has started and armed its events (fence.mbarrier_init) before
  // any stores into another's shared memory.
  ClusterArriveRelaxed();
  ClusterWait();
  if (barriers_only) {  // the cost of the cluster barriers the exchange replaced
    for (int i = 0; i < 8 * p.n_layers; ++i) {
      ClusterArrive();
      ClusterWait();
    }
  }

  for (int layer = 0; layer < (barriers_only ? 0 : p.n_layers); ++layer) {
    const PersistentDecoderLayer& w = p.layers[layer];
    float* kc = p.self_k[layer] + static_cast<size_t>(row) * p.text_ctx * kD;
    float* vc = p.self_v[layer] + static_cast<size_t>(row) * p.text_ctx * kD;
    // The cluster's attention partials (exchange `in`) merged, times this block's columns of
    // the output projection, added to the residual stream (exchange `out`).
    auto merge_project = [&](const __half* wo, const float* bo, int in, int out) {
      Slice<kD, kDCols> s;
      LoadSlice(wo, bo, rank * kDCols, s, weights);
      wait(in, layer);
      MergeCluster(cpart, merge_weights, xn);
      RunSlice(s, rank * kDCols, xn, [&](int col, float v, int sub) {
        Broadcast(x_s + col, x_s[col] + v, sub, &events[out]);
      });
      done();
    };
    // -- LN1 + QKV (this block's K/V columns kept for the self caches).
    {
      Slice<kD, kQkvCols> s;
      LoadSlice(w.qkv_w, w.qkv_b, rank * kQkvCols, s, weights);
      gpu::CopyAsyncWaitAll();  // the LayerNorm vectors
      if (layer > 0) {
        wait(kEvFf2, layer - 1);  // the residual stream
      } else {
        __syncthreads();  // (the other threads' copies)
        mark();
      }
      NormLocal(x_s, norms, norms + kD, p.eps, xn);
      RunSlice(s, rank * kQkvCols, xn, [&](int col, float v, int sub) {
        Broadcast(qkv_s + col, v, sub, &events[kEvQkv]);
        if (sub == 0) kv_keep[layer * kQkvCols + col - rank * kQkvCols] = v;
      });
      done();
    }
    // -- Self-attention over this block's keys.
    wait(kEvQkv, layer);
    if (attention) {
      SelfAttentionWarps(kc, vc, s0, s1, position, qkv_s, qkv_s + kD, qkv_s + 2 * kD, p.scale,
                         wpart);
    }
    __syncthreads();
    PushBlockPartial(wpart, cpart, mine, merge_weights, rank, &events[kEvSelf]);
    done();
    // -- Merge + output projection + residual.
    merge_project(w.out_w, w.out_b, kEvSelf, kEvOut);
    // -- LN2 + cross-attention query.
    {
      Slice<kD, kDCols> s;
      LoadSlice(w.cq_w, w.cq_b, rank * kDCols, s, weights);
      wait(kEvOut, layer);
      NormLocal(x_s, norms + 2 * kD, norms + 3 * kD, p.eps, xn);
      RunSlice(s, rank * kDCols, xn,
               [&](int col, float v, int sub) { Broadcast(qkv_s + col, v, sub, &events[kEvCq]); });
      done();
    }
    // -- Cross-attention over this block's staged keys.
    wait(kEvCq, layer);
    BarrierWait(&stage_bar, static_cast<unsigned>(layer & 1));
    if (attention) CrossAttentionWarps(stage_k, stage_v, a1 - a0, qkv_s, p.scale, wpart);
    __syncthreads();
    if (layer + 1 < p.n_layers) stage_cross(layer + 1);  // the stage is free
    PushBlockPartial(wpart, cpart, mine, merge_weights, rank, &events[kEvCross]);
    done();
    // -- Merge + cross output projection + residual.
    merge_project(w.cout_w, w.cout_b, kEvCross, kEvCout);
    // -- LN3 + FFN1 + GELU.
    {
      Slice<kD, kFfCols> s;
      LoadSlice(w.ff1_w, w.ff1_b, rank * kFfCols, s, weights);
      wait(kEvCout, layer);
      NormLocal(x_s, norms + 4 * kD, norms + 5 * kD, p.eps, xn);
      if (layer + 1 < p.n_layers) stage_norms(layer + 1);  // LN3 has read this layer's
      RunSlice(s, rank * kFfCols, xn, [&](int col, float v, int sub) {
        Broadcast(h_s + col, GeluExact(v), sub, &events[kEvFf1]);
      });
      done();
    }
    // -- FFN2 + residual.
    {
      Slice<kFf, kDCols> s;
      LoadSlice(w.ff2_w, w.ff2_b, rank * kDCols, s, weights);
      wait(kEvFf1, layer);
      RunSlice(s, rank * kDCols, h_s, [&](int col, float v, int sub) {
        Broadcast(x_s + col, x_s[col] + v, sub, &events[kEvFf2]);
      });
      done();
    }
  }
  // The last residual stream has arrived (so no other block stores into this one any more).
  if (!barriers_only) wait(kEvFf2, p.n_layers - 1);
  // The step's K/V rows into the self caches (kept since the QKV phases).
  if (ok && !barriers_only) {
    for (int i = threadIdx.x; i < p.n_layers * kQkvCols; i += kThreads) {
      const int layer = i / kQkvCols, col = rank * kQkvCols + i % kQkvCols;
      if (col >= kD) {
        float* cache = col < 2 * kD ? p.self_k[layer] : p.self_v[layer];
        cache[(static_cast<size_t>(row) * p.text_ctx + position) * kD + col % kD] = kv_keep[i];
      }
    }
  }
  if (stamps != nullptr) stamps[kStampLayersEnd] = GlobalNs();
  if (rank == 0) {
    for (int c = threadIdx.x; c < kD; c += kThreads) x_out[row * kD + c] = x_s[c];
  }
}

// Columns cols[0..N) of the tied embedding for rows < MaxB of xs, weights in w (one lane group's
// share each, no bias): N independent chains whose inputs are read once; epi(r, col, value) on
// lane r of the group for the columns below `end`. Every lane of the warp must call it.
template <int MaxB, int N, typename Epi>
__device__ __forceinline__ void GemvColumns(const WeightRegs<kD> (&w)[N], const int (&cols)[N],
                                            int end, const float* xs, Epi&& epi) {
  using G = Geom<kD>;
  const int sub = threadIdx.x % kWarp % G::kLanes;
  float acc[N][MaxB];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < MaxB; ++r) acc[n][r] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < G::kPerLane; ++j) {
    const int k0 = (sub + j * G::kLanes) * 8;
    float wf[N][8];
#pragma unroll
    for (int n = 0; n < N; ++n) WidenHalves8(w[n].v[j], wf[n]);
#pragma unroll
    for (int r = 0; r < MaxB; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(xs + r * kD + k0);
      const float4 b = *reinterpret_cast<const float4*>(xs + r * kD + k0 + 4);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float s = acc[n][r];
        s = fmaf(wf[n][0], a.x, s);
        s = fmaf(wf[n][1], a.y, s);
        s = fmaf(wf[n][2], a.z, s);
        s = fmaf(wf[n][3], a.w, s);
        s = fmaf(wf[n][4], b.x, s);
        s = fmaf(wf[n][5], b.y, s);
        s = fmaf(wf[n][6], b.z, s);
        s = fmaf(wf[n][7], b.w, s);
        acc[n][r] = s;
      }
    }
  }
#pragma unroll
  for (int o = G::kLanes / 2; o > 0; o /= 2) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int r = 0; r < MaxB; ++r) acc[n][r] += __shfl_xor_sync(kFullMask, acc[n][r], o);
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (cols[n] < end) {
#pragma unroll
      for (int r = 0; r < MaxB; ++r) {
        if (sub == r) epi(r, cols[n], acc[n][r]);
      }
    }
  }
}

// ---- The logits' kernel -------------------------------------------------------------------
// Block b: columns [b · per_block, (b + 1) · per_block) of the tied embedding; the first `staged`
// of them copied into shared memory and the next LogitsRegPasses() passes loaded into registers
// before the wait for the layers; the rest (small grids only) loaded after.
template <int MaxB>
__global__ void __launch_bounds__(kThreads, 1)
    ClusterLogitsKernel(const __grid_constant__ PersistentDecoderParams p, float* x_final,
                        float* stats, int per_block, int staged) {
  using G = Geom<kD>;
  AllowNextKernel();  // the next step's layers may start their prologue
  long long* const stamps = TimelineStamps(p);
  if (stamps != nullptr) stamps[kStampLogitsStart] = GlobalNs();
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);              // [MaxB][384]
  __half* wstage = reinterpret_cast<__half*>(xs + MaxB * kD);  // [staged][384]
  __shared__ Best warp_best[kWarps][MaxB];
  __shared__ bool last_block;
  __shared__ uint32_t suppress_words[kLogitsBitWords];  // of this block's columns
  constexpr int kPasses = LogitsRegPasses<MaxB>();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int group = lane / G::kLanes, sub = lane % G::kLanes;
  const int c0 = min(p.vocab, static_cast<int>(blockIdx.x) * per_block);
  const int c1 = min(p.vocab, c0 + per_block);
  const int staged_end = min(c1, c0 + staged);
  const int pieces = (staged_end - c0) * (kD / 8);
  const __half* src = p.token_embedding + static_cast<size_t>(c0) * kD;
  for (int i = threadIdx.x; i < pieces; i += kThreads)
    gpu::CopyAsync16(wstage + 8 * i, src + 8 * i);
  WeightRegs<kD> regs[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    LoadWeights<kD>(p.token_embedding, nullptr, c1,
                    staged_end + (i * kWarps + warp) * G::kCols + group, regs[i]);
  }
  const NormRegs norm = LoadNorm<MaxB>(p.final_g, p.final_b);
  // The suppression bits of the block's columns into shared memory (read once per column).
  const int word0 = c0 >> 5;
  const bool local_bits =
      p.suppress_bits != nullptr && c1 > c0 && ((c1 - 1) >> 5) - word0 < kLogitsBitWords;
  if (local_bits) {
    for (int i = word0 + threadIdx.x; i <= (c1 - 1) >> 5; i += kThreads) {
      suppress_words[i - word0] = p.suppress_bits[i];
    }
  }
  const uint32_t* bits = local_bits ? suppress_words : nullptr;
  const int bits_word0 = local_bits ? word0 : 0;
  WaitForPreviousKernel();  // the layers' output
  if (stamps != nullptr) stamps[kStampLogitsWaited] = GlobalNs();
  Rows rows{};
  rows.batch = p.batch;
  gpu::CopyAsyncWaitAll();
  NormRows<MaxB>(p, rows, x_final, norm, false, xs);  // ends with a block barrier
  if (stamps != nullptr) stamps[kStampLogitsNormed] = GlobalNs();
  Best best{-INFINITY, 0.0f, INT_MAX};
  // Without the greedy outputs (the engine reads the logits and chooses itself) only the
  // logits are written: no running max / Σexp and no reduction across blocks.
  const bool reduce =
      p.best_token != nullptr || p.best_logprob != nullptr || p.logsumexp != nullptr;
  auto epi = [&](int r, int col, float v) {
    if (reduce) {
      TakeLogit(p, p.batch, r, col, v, best, bits, bits_word0);
    } else if (r < p.batch && p.logits != nullptr) {
      p.logits[static_cast<size_t>(r) * p.vocab + col] = v;
    }
  };
  // Staged columns, kSlots passes at a time (independent chains, the rows' inputs read once).
  constexpr int kSlots = MaxB <= 2 ? 4 : 2;
  constexpr int kPass = kWarps * G::kCols;  // columns per pass of the block
  for (int first = warp * G::kCols; c0 + first < staged_end; first += kSlots * kPass) {
    WeightRegs<kD> w[kSlots];
    int cols[kSlots];
#pragma unroll
    for (int n = 0; n < kSlots; ++n) {
      const int local = first + n * kPass + group;
      cols[n] = c0 + local;
      w[n].bias = 0.0f;
#pragma unroll
      for (int j = 0; j < G::kPerLane; ++j) {
        w[n].v[j] = cols[n] < staged_end
                        ? *reinterpret_cast<const uint4*>(wstage + static_cast<size_t>(local) * kD +
                                                          (sub + j * G::kLanes) * 8)
                        : make_uint4(0, 0, 0, 0);
      }
    }
    GemvColumns<MaxB, kSlots>(w, cols, staged_end, xs, epi);
  }
  if (stamps != nullptr) stamps[kStampLogitsStaged] = GlobalNs();
  {
    int cols[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) cols[i] = staged_end + (i * kWarps + warp) * G::kCols + group;
    if (staged_end + warp * G::kCols < c1) GemvColumns<MaxB, kPasses>(regs, cols, c1, xs, epi);
  }
  for (int first = staged_end + (kPasses * kWarps + warp) * G::kCols; first < c1;
       first += kWarps * G::kCols) {
    WeightRegs<kD> wr;
    LoadWeights<kD>(p.token_embedding, nullptr, c1, first + group, wr);
    GemvColumn<kD, MaxB>(wr, first + group, c1, xs, epi);
  }
  if (stamps != nullptr) stamps[kStampLogitsDone] = GlobalNs();
  if (reduce) FinishLogits<MaxB>(p, p.batch, best, stats, warp_best, &last_block);
}

int OptInSharedBytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    return 0;
  }
  return bytes;
}

// Static shared memory the logits kernel declares (warp_best, last_block, the suppression
// words), rounded up.
constexpr int kLogitsStaticBytes = 2304;

template <int MaxB>
cudaError_t LaunchLogits(const LaunchContext& ctx, const PersistentDecoderParams& p, float* x_final,
                         float* stats, int optin) {
  // Blocks on the multiprocessors the layers leave idle when that is at least three quarters of
  // them (they start early and load their weights meanwhile), else one per multiprocessor (the
  // shares of a smaller grid would not fit in shared memory and registers).
  const int idle = ctx.sm_count - p.batch * kC;
  const int grid = 4 * idle >= 3 * ctx.sm_count ? idle : ctx.sm_count;
  const int per_block = (p.vocab + grid - 1) / grid;
  const size_t xs_bytes = sizeof(float) * MaxB * kD;
  const int room = optin - static_cast<int>(xs_bytes) - kLogitsStaticBytes;
  const int staged = std::max(0, std::min(per_block, room / (kD * 2)));
  const size_t smem = xs_bytes + size_t{2} * staged * kD;
  auto* kernel = ClusterLogitsKernel<MaxB>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  LaunchContext early = ctx;  // always with PDL: the overlap with the layers is the point
  early.pdl = true;
  early.pdl_max_blocks_per_sm = std::max(early.pdl_max_blocks_per_sm, 1);
  return Launch(early, kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, p, x_final,
                stats, per_block, staged);
}

// `attribute`: room for two (the cluster's shape; with `pdl`, programmatic serialization).
cudaLaunchConfig_t LayersConfig(int batch, size_t smem, cudaStream_t stream,
                                cudaLaunchAttribute* attribute, bool pdl = false) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(batch * kC));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kC;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 2 : 1;
  return config;
}

}  // namespace

bool ClusterDecoderAvailable(const PersistentDecoderParams& p) {
  if (!p.cross_f16 || p.batch < 1 || p.batch > kPersistentMaxBatch || p.n_layers < 1 ||
      p.n_layers > kPersistentMaxLayers || p.audio_ctx < 1 || p.text_ctx < 1) {
    return false;
  }
  // Per stage size, once: the kernel's attributes (the non-portable cluster size, its dynamic
  // shared memory) and whether one cluster of it fits on the device.
  // (Keyed by device and stage size: the attributes are per device.)
  static std::atomic<int> cached_keys{-1}, cached_device{-1}, cached_clusters{0};
  const int keys = StageKeys(p.audio_ctx);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cached_keys.load() != keys || cached_device.load() != device) {
    const size_t smem = LayerSmemBytes(keys);
    const void* kernel = reinterpret_cast<const void*>(ClusterLayersKernel);
    cudaFuncAttributes attributes = {};
    int clusters = 0;
    const int optin = OptInSharedBytes();
    if (cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
        smem + attributes.sharedSizeBytes <= static_cast<size_t>(optin) &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)) == cudaSuccess) {
      cudaLaunchAttribute attribute[1];
      const cudaLaunchConfig_t config = LayersConfig(1, smem, nullptr, attribute);
      if (cudaOccupancyMaxActiveClusters(&clusters, ClusterLayersKernel, &config) != cudaSuccess) {
        clusters = 0;
      }
    }
    (void)cudaGetLastError();  // a refusal above is an answer, not an error of the next launch
    cached_clusters.store(clusters);
    cached_keys.store(keys);
    cached_device.store(device);
  }
  return cached_clusters.load() >= 1;
}

cudaError_t LaunchClusterDecoder(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  if (!ClusterDecoderAvailable(p)) return cudaErrorNotSupported;
  const int max_splits = MaxSplits(p.audio_ctx, p.text_ctx, p.cross_split_keys, p.self_split_keys);
  const Layout lay = MakeLayout(p.batch, max_splits, ctx.sm_count);
  if (lay.total > p.workspace_floats || p.workspace == nullptr || p.sync == nullptr) {
    return cudaErrorInvalidValue;
  }
  PersistentDecoderParams params = p;
  params.error_word = ctx.error_word;
  float* x_final = p.workspace + lay.x;
  float* stats = p.workspace + lay.stats;
  const int stage_keys = StageKeys(p.audio_ctx);
  cudaLaunchAttribute attribute[2];
  const cudaLaunchConfig_t config =
      LayersConfig(p.batch, LayerSmemBytes(stage_keys), ctx.stream, attribute, /*pdl=*/true);
  cudaError_t err = cudaLaunchKernelEx(&config, ClusterLayersKernel, params, x_final, stage_keys);
  if (err != cudaSuccess || p.profile_mode == kProfileNoLogits) return err;
  const int optin = OptInSharedBytes();
  if (p.batch == 1) return LaunchLogits<1>(ctx, params, x_final, stats, optin);
  if (p.batch == 2) return LaunchLogits<2>(ctx, params, x_final, stats, optin);
  if (p.batch <= 4) return LaunchLogits<4>(ctx, params, x_final, stats, optin);
  return LaunchLogits<8>(ctx, params, x_final, stats, optin);
}

#endif  // WAAV_HIP

}  // namespace waav::cuda

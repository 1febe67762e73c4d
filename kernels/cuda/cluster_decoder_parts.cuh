// The cluster decoder step's device building blocks (cluster_decoder.cu has the kernels and
// their launchers): the split of the work over a cluster of kC blocks, the exchange between the
// blocks' shared memory (st.async counted on mbarriers, TMA bulk copies), the timeline stamps
// of the profile mode, the GEMV over a block's columns, the attention warps and the partials'
// merges. CUDA only (sm_90 PTX); device code for cluster_decoder.cu (and the
// one-block check of cluster_cross_check.cu).
#pragma once

#include <cstdint>

#include "kernels/cuda/cluster_decoder.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/persistent_decoder_common.cuh"

namespace waav::cuda::cluster_detail {

using namespace persistent_detail;  // NOLINT(google-build-using-namespace): shared parts

constexpr int kC = kClusterDecoderBlocks;
constexpr int kRec = kChunkPartial;  // a head's partial: o[64], m, l, two floats of padding
constexpr int kQkvCols = 3 * kD / kC;
constexpr int kDCols = kD / kC;
constexpr int kFfCols = kFf / kC;
static_assert(kD % kC == 0 && kFf % kC == 0, "columns split evenly over the cluster");

// ---- Cluster plumbing ---------------------------------------------------------------------
// Barrier halves: arrive releases this thread's prior writes (shared, distributed shared and
// global) to the cluster; wait acquires every other thread's. Every thread of the cluster calls
// both, alternately.
// (Nothing in a device pass before sm_90, where these kernels trap: WAAV_GPU_SM90_CODE.)
__device__ __forceinline__ void ClusterArrive() {
#if WAAV_GPU_SM90_CODE
  __cluster_barrier_arrive();
#endif
}
__device__ __forceinline__ void ClusterWait() {
#if WAAV_GPU_SM90_CODE
  __cluster_barrier_wait();
#endif
}
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
// (`policy`: an L2 cache policy, L2Policy below.)
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, unsigned bytes,
                                         unsigned long long* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;" ::"r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar)), "l"(policy)
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
// Staged weights: this block's `Halves` contiguous halves of `w` (block `rank`'s columns) into
// `dst` by one bulk copy, completing the next phase of `bar` (one thread; the stage free: read
// by every thread before a block barrier).
template <size_t Halves>
__device__ __forceinline__ void StageColumns(__half* dst, const __half* w, int rank,
                                             unsigned long long* bar, uint64_t policy) {
  constexpr unsigned kBytes = Halves * sizeof(__half);
  FenceProxyAsync();
  BarrierExpectBytes(bar, kBytes);
  BulkCopy(dst, w + rank * Halves, kBytes, bar, policy);
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
// (kEvSelfGather, kEvCrossGather: the merged attention dims of the reduce-scatter merge.)
enum Event {
  kEvQkv,
  kEvSelf,
  kEvOut,
  kEvCq,
  kEvCross,
  kEvCout,
  kEvFf1,
  kEvFf2,
  kEvSelfGather,
  kEvCrossGather,
  kEvents
};
// (`half`: the attention partials as f16 records, kHalfRec floats each.)
constexpr int kHalfRec = kDh / 2 + 4;  // o[64] as f16, then m, l and two floats of padding
// (`scatter`: the reduce-scatter merge, kScatterRec floats from every block.)
constexpr int kScatterRec = kDCols + 4;  // a block's 24 dims of o, then (m, l) of two heads
__device__ __forceinline__ unsigned EventBytes(int e, bool half = false, bool scatter = false) {
  const unsigned partials = scatter ? kC * kScatterRec * 4  // the owned dims' records
                                    : kC * kH * (half ? kHalfRec : kRec) * 4;  // every block's
  switch (e) {
    case kEvQkv:
      return 3 * kD * 4;
    case kEvSelf:
    case kEvCross:
      return partials;
    case kEvFf1:
      return kFf * 4;
    default:  // out, cq, cout, ffn2, the gathers: 384 values
      return kD * 4;
  }
}

// ---- Timeline (profile mode) ----------------------------------------------------------------
// Stamps [0, kTimelinePhaseStamps): the layers' block 0, clock64() at its start and at each
// phase's start and end. Then globaltimer (ns, comparable across multiprocessors): the layers'
// block 0 at its start and end, the logits' block 0 at its start, when its wait for the layers
// returned, and when its columns were done.
// Then kTimelineInner clock64() stamps inside the attention phases of block 0, three per layer:
// the self-attention's warps done; the cross K/V stage landed; the cross-attention's warps done
// (the rest of each phase: merging the warps' partials and sending the block's).
constexpr int kTimelineInner = 16;
constexpr int kTimelineMain = 96;  // block 0's stamps, at the end of the workspace
constexpr int kTimelinePhaseStamps = kTimelineMain - 8 - kTimelineInner;
constexpr int kStampInner = kTimelineMain - kTimelineInner;
// Before them: every block's globaltimer at each of its barrier arrivals (36 per block).
constexpr int kArrivalStamps = 36;
static_assert(kClusterTimelineStamps == kC * kArrivalStamps + kTimelineMain, "timeline layout");
constexpr int kStampLayersStart = kTimelinePhaseStamps, kStampLayersEnd = kStampLayersStart + 1;
constexpr int kStampLogitsStart = kStampLayersStart + 2, kStampLogitsWaited = kStampLayersStart + 3;
constexpr int kStampLogitsDone = kStampLayersStart + 4;
constexpr int kStampLogitsNormed = kStampLayersStart + 5,
              kStampLogitsStaged = kStampLayersStart + 6;
constexpr int kStampLogitsRegisters = kStampLayersStart + 7;  // the register-held columns done
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

// ---- L2 eviction priorities ----------------------------------------------------------------
// The logits' 40 MB of embedding stream through L2 every step while the layers run; without a
// hint they push out the layers' 16.5 MB of weights and 9 MB of cross K/V, which the layers then
// fetch from HBM. A cache policy (createpolicy) marks loads evict-first (streamed once) or
// evict-last (read again next step); evict_normal is the unhinted behaviour.
enum class L2Priority { kNormal, kEvictFirst, kEvictLast };
__device__ __forceinline__ uint64_t L2Policy(L2Priority priority) {
  uint64_t policy;
  if (priority == L2Priority::kEvictFirst) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else if (priority == L2Priority::kEvictLast) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  }
  return policy;
}
// 16 bytes of read-only global memory under `policy` (not kept in L1).
__device__ __forceinline__ uint4 LoadHinted(const void* src, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src), "l"(policy));
  return v;
}
// cp.async of 16 bytes under `policy`.
__device__ __forceinline__ void CopyAsyncHinted(void* dst, const void* src, uint64_t policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(SharedAddress(dst)),
      "l"(src), "l"(policy)
      : "memory");
}
// LoadWeights (persistent_decoder_common.cuh) under `policy`.
template <int K>
__device__ __forceinline__ void LoadWeightsHinted(const __half* w, const float* bias, int n,
                                                  int col, WeightRegs<K>& r, uint64_t policy) {
  LoadWeightsWith<K>(w, bias, n, col, r,
                     [policy](const __half* p) { return LoadHinted(p, policy); });
}

// ---- Swizzled f16 rows in shared memory ----------------------------------------------------
// Rows of 384 halves (48 chunks of 16 bytes), chunk c of row r stored at chunk c ^ (r % 8): the
// 8 rows an ldmatrix reads at one column fall in 8 different bank groups (768-byte rows stored
// as they are would all hit the same four banks); a row read whole stays conflict-free.
constexpr int kRowChunks = kD / 8;
__device__ __forceinline__ int SwizzledOffset(int row, int chunk) {
  return row * kD + 8 * (chunk ^ (row & 7));
}
// x as f16 high and low parts (hi + lo carries ~22 bits of x's mantissa).
__device__ __forceinline__ void SplitHalf(float x, float& hi, float& lo) {
  hi = __half2float(__float2half_rn(x));
  lo = x - hi;
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

// (`load` false: zeros, for a profile mode; `policy`: L2Policy.)
template <int K, int Cols>
__device__ __forceinline__ void LoadSlice(const __half* w, const float* bias, int col0,
                                          Slice<K, Cols>& s, uint64_t policy, bool load = true) {
  using G = Geom<K>;
  const int warp = threadIdx.x / kWarp, group = threadIdx.x % kWarp / G::kLanes;
  const int end = load ? col0 + Cols : 0;
#pragma unroll
  for (int i = 0; i < Slice<K, Cols>::kPasses; ++i) {
    LoadWeightsHinted<K>(w, bias, end, col0 + (i * kWarps + warp) * G::kCols + group, s.pass[i],
                         policy);
  }
}

// A slice whose weights were bulk-copied into shared memory (`staged`: columns [col0, col0 +
// Cols) of W, each K halves as in global memory): the biases first (before the phase's wait),
// then the weights into the same registers LoadSlice fills, read just before RunSlice.
// (16-byte reads: each quarter-warp reads 128 contiguous bytes, no bank conflicts.)
template <int K, int Cols>
__device__ __forceinline__ void LoadSliceBias(const float* bias, int col0, Slice<K, Cols>& s) {
  using G = Geom<K>;
  const int warp = threadIdx.x / kWarp, group = threadIdx.x % kWarp / G::kLanes;
#pragma unroll
  for (int i = 0; i < Slice<K, Cols>::kPasses; ++i) {
    const int c = (i * kWarps + warp) * G::kCols + group;
    s.pass[i].bias = c < Cols ? bias[col0 + c] : 0.0f;
  }
}
template <int K, int Cols>
__device__ __forceinline__ void LoadSliceStaged(const __half* staged, Slice<K, Cols>& s) {
  using G = Geom<K>;
  const int warp = threadIdx.x / kWarp, group = threadIdx.x % kWarp / G::kLanes;
  const int sub = threadIdx.x % G::kLanes;
#pragma unroll
  for (int i = 0; i < Slice<K, Cols>::kPasses; ++i) {
    const int c = (i * kWarps + warp) * G::kCols + group;
#pragma unroll
    for (int j = 0; j < G::kPerLane; ++j) {
      s.pass[i].v[j] = c < Cols
                           ? *reinterpret_cast<const uint4*>(staged + static_cast<size_t>(c) * K +
                                                             (sub + j * G::kLanes) * 8)
                           : make_uint4(0, 0, 0, 0);
    }
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

// Columns cols[0..N) of the tied embedding for rows < MaxB of xs, weights in w (one lane group's
// share each, no bias): N independent chains whose inputs are read once; epi(r, col, value) for
// the columns below `end` on lane n · MaxB + r of the group (a lane's rows are all lane % MaxB).
// Every lane of the warp must call it.
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
  // Every lane of the group holds every sum: lane n · MaxB + r takes column n's row r, so that
  // the group's lanes run their epilogues at once (one each) instead of lane r running N.
  static_assert(N * MaxB <= G::kLanes, "one epilogue per lane");
  float v = 0.0f;
  int col = end;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < MaxB; ++r) {
      if (sub == n * MaxB + r) {
        v = acc[n][r];
        col = cols[n];
      }
    }
  }
  if (col < end) epi(sub % MaxB, col, v);
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

// The same by the first 12 warps, one value per thread, in one pass: per warp the sums of
// d = x - x[0] and d², then every thread the 12 warps' (the shift by x[0] keeps a large mean
// from cancelling in E[d²] - E[d]²). `scratch`: 24 floats. Ends with a block barrier.
__device__ __forceinline__ void NormAllWarps(const float* x, const float* g, const float* b,
                                             float eps, float* out, float* scratch) {
  static_assert(kD == 12 * kWarp, "one value per thread of 12 warps");
  const int c = threadIdx.x;
  float d = 0.0f;
  if (c < kD) {
    d = x[c] - x[0];
    float sum = d, squares = d * d;
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      sum += __shfl_xor_sync(kFullMask, sum, o);
      squares += __shfl_xor_sync(kFullMask, squares, o);
    }
    if (c % kWarp == 0) {
      scratch[2 * (c / kWarp)] = sum;
      scratch[2 * (c / kWarp) + 1] = squares;
    }
  }
  __syncthreads();
  if (c < kD) {
    float sum = 0.0f, squares = 0.0f;
#pragma unroll
    for (int w = 0; w < kD / kWarp; ++w) {
      sum += scratch[2 * w];
      squares += scratch[2 * w + 1];
    }
    const float mean = sum / kD;
    const float rstd = rsqrtf(fmaxf(squares / kD - mean * mean, 0.0f) + eps);
    out[c] = (d - mean) * rstd * g[c] + b[c];
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
__device__ inline void SelfAttentionWarps(const float* kc, const float* vc, int k0, int k1,
                                          int position, const float* q, const float* new_k,
                                          const float* new_v, float scale, float* wpart) {
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

// Cross-attention over n_keys f16 rows in shared memory (384 halves each, as in global memory):
// a partial per (warp, head) into wpart.
// Lane l holds dims 8 l (head l / 8) and, for l < 16, dims 256 + 8 l (head 4 + l / 8). A warp
// scores kKeyChunk keys before one softmax update (one rescale of o per chunk, not per key).
constexpr int kKeyChunk = 4;
__device__ inline void CrossAttentionWarps(const __half* sk, const __half* sv, int n_keys,
                                           const float* q, float scale, float* wpart) {
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

// Cross-attention over n_keys f16 rows in shared memory with every lane busy (the warps above
// leave lanes 16-31 idle for heads 4 and 5): two passes. Pass "wide": one key per warp slot,
// lane l dims 8 l (heads 0-3). Pass "pairs": two keys per warp slot, lanes 0-15 key 2 u, lanes
// 16-31 key 2 u + 1, lane l dims 256 + 8 (l % 16) (heads 4, 5); the two halves' partials merged
// at the end. Scores in log2 units (q scaled by scale · log2 e, exp2f), m returned in natural
// units, so the records are those of CrossAttentionWarps.
constexpr int kBalancedSlots = 3;  // warp slots scored before one softmax update
constexpr float kLog2E = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// One pass over `units` warp slots (keys, or key pairs): this lane's running (m, l, o[8]).
__device__ __forceinline__ void CrossPass(const __half* sk, const __half* sv, int n_keys, int units,
                                          bool pairs, const float (&q)[8], float& m, float& l,
                                          float (&o)[8]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int dim = pairs ? 2 * kD / 3 + 8 * (lane % 16) : 8 * lane;
  const int half = pairs ? lane / 16 : 0;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int base = warp; base < units; base += kWarps * kBalancedSlots) {
    float s[kBalancedSlots];
    uint4 v[kBalancedSlots];
    bool valid[kBalancedSlots];
#pragma unroll
    for (int c = 0; c < kBalancedSlots; ++c) {
      const int unit = base + c * kWarps;
      const int key = pairs ? 2 * unit + half : unit;
      valid[c] = unit < units && key < n_keys;
      s[c] = 0.0f;
      v[c] = zero;
      if (valid[c]) {
        const size_t at = static_cast<size_t>(key) * kD + dim;
        const uint4 k = *reinterpret_cast<const uint4*>(sk + at);
        v[c] = *reinterpret_cast<const uint4*>(sv + at);
        float kf[8];
        WidenHalves8(k, kf);
#pragma unroll
        for (int i = 0; i < 8; ++i) s[c] = fmaf(q[i], kf[i], s[c]);
      }
    }
#pragma unroll
    for (int off = 4; off > 0; off /= 2) {  // the 8 lanes of a head
#pragma unroll
      for (int c = 0; c < kBalancedSlots; ++c) s[c] += __shfl_xor_sync(kFullMask, s[c], off);
    }
    float top = m;
#pragma unroll
    for (int c = 0; c < kBalancedSlots; ++c) {
      if (valid[c]) top = fmaxf(top, s[c]);
    }
    // (top stays -inf only for a pair lane whose keys are all past the end: nothing to add.)
    const float corr = top == -INFINITY ? 1.0f : exp2f(m - top);
    l *= corr;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] *= corr;
#pragma unroll
    for (int c = 0; c < kBalancedSlots; ++c) {
      if (valid[c]) {
        const float pr = exp2f(s[c] - top);
        l += pr;
        float vf[8];
        WidenHalves8(v[c], vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = fmaf(pr, vf[i], o[i]);
      }
    }
    m = top;
  }
}

__device__ inline void CrossAttentionBalanced(const __half* sk, const __half* sv, int n_keys,
                                              const float* q, float scale, float* wpart) {
  static_assert(kH == 6 && kDh == 64 && kD == 384, "heads 0-3 in 32 lanes, 4-5 in 16");
  const int lane = threadIdx.x % kWarp;
  const float qscale = scale * kLog2E;
  float qa[8], qb[8], oa[8], ob[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    qa[i] = q[8 * lane + i] * qscale;
    qb[i] = q[2 * kD / 3 + 8 * (lane % 16) + i] * qscale;
    oa[i] = ob[i] = 0.0f;
  }
  float ma = -INFINITY, la = 0.0f, mb = -INFINITY, lb = 0.0f;
  CrossPass(sk, sv, n_keys, n_keys, false, qa, ma, la, oa);
  CrossPass(sk, sv, n_keys, (n_keys + 1) / 2, true, qb, mb, lb, ob);
  // The pair halves (lanes l and l + 16: the same dims, other keys) merged.
  const float m_other = __shfl_xor_sync(kFullMask, mb, 16);
  const float l_other = __shfl_xor_sync(kFullMask, lb, 16);
  const float top = fmaxf(mb, m_other);
  const float w_mine = mb == -INFINITY ? 0.0f : exp2f(mb - top);
  const float w_other = m_other == -INFINITY ? 0.0f : exp2f(m_other - top);
  lb = lb * w_mine + l_other * w_other;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    ob[i] = ob[i] * w_mine + __shfl_xor_sync(kFullMask, ob[i], 16) * w_other;
  }
  auto natural = [](float m_log2) { return m_log2 == -INFINITY ? m_log2 : m_log2 * kLn2; };
  WriteRecord(wpart, lane / 8, 8 * (lane % 8), oa, 8, natural(ma), la, lane % 8 == 0);
  if (lane < 16) {
    WriteRecord(wpart, 4 + lane / 8, 8 * (lane % 8), ob, 8, natural(top), lb, lane % 8 == 0);
  }
}

// Softmax-merge weights of 16 partials per head: for head h (threads 16 h .. 16 h + 15 of the
// first 96), weights[h][i] = exp(m_i - M) (/ L when `normalise`), M the largest m_i and L the
// weighted sum of the l_i; without `normalise` also M and L into `merged`'s record h. Then a
// block barrier. (kStride, kMl: a record's floats and where its m, l are.)
template <int kStride = kRec, int kMl = kDh>
__device__ __forceinline__ void MergeWeights(const float* records, float* weights, bool normalise,
                                             float* merged) {
  static_assert(kWarps == 16 && kC == 16, "16 partials per head: 16 lanes each");
  if (threadIdx.x < 16 * kH) {
    const int h = threadIdx.x / 16, i = threadIdx.x % 16;
    const float* rec = records + (i * kH + h) * kStride;
    const float m_i = rec[kMl];
    float m = m_i;
#pragma unroll
    for (int o = 8; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
    const float e = m == -INFINITY ? 0.0f : expf(m_i - m);
    float l = rec[kMl + 1] * e;
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
// copied into record `rank` of cpart in every block (counted on `event`); with kHalf as f16
// o and f32 m, l (kHalfRec floats a head: half the bytes). Call after a block barrier that
// follows the warps'. `weights`: 96 floats of scratch.
// The block's 16 warp partials per head merged into one (o unnormalised, m, l) in `mine`; then a
// block barrier. `weights`: 96 floats of scratch.
__device__ __forceinline__ void MergeBlock(const float* wpart, float* mine, float* weights) {
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
}

template <bool kHalf = false>
__device__ void PushBlockPartial(const float* wpart, float* cpart, float* mine, float* weights,
                                 int rank, unsigned long long* event) {
  MergeBlock(wpart, mine, weights);
  if constexpr (kHalf) {
    constexpr int kHeadPieces = kHalfRec / 4, kPieces = kH * kHeadPieces;
    float* dst = cpart + rank * kH * kHalfRec;
    for (int i = threadIdx.x; i < kC * kPieces; i += kThreads) {
      const int target = i / kPieces, piece = i % kPieces;
      const int h = piece / kHeadPieces, j = piece % kHeadPieces;
      const float* rec = mine + h * kRec;
      float4 v;
      if (j < kDh / 8) {  // 8 values of o as f16
        const float* o = rec + 8 * j;
        v = make_float4(__uint_as_float(mma::PackHalf2(o[0], o[1])),
                        __uint_as_float(mma::PackHalf2(o[2], o[3])),
                        __uint_as_float(mma::PackHalf2(o[4], o[5])),
                        __uint_as_float(mma::PackHalf2(o[6], o[7])));
      } else {
        v = make_float4(rec[kDh], rec[kDh + 1], 0.0f, 0.0f);
      }
      StoreAsync4(dst + 4 * piece, v, static_cast<unsigned>(target), event);
    }
  } else {
    constexpr int kPieces = kH * kRec / 4;  // float4 pieces of the block's record
    float* dst = cpart + rank * kH * kRec;
    for (int i = threadIdx.x; i < kC * kPieces; i += kThreads) {
      const int target = i / kPieces, piece = i % kPieces;
      StoreAsync4(dst + 4 * piece, reinterpret_cast<const float4*>(mine)[piece],
                  static_cast<unsigned>(target), event);
    }
  }
}

// att[0, 384) = the cluster's partials merged and normalised (kHalf: f16 records); then a block
// barrier.
template <bool kHalf = false>
__device__ inline void MergeCluster(const float* cpart, float* weights, float* att) {
  if constexpr (kHalf) {
    MergeWeights<kHalfRec, kDh / 2>(cpart, weights, true, nullptr);
  } else {
    MergeWeights(cpart, weights, true, nullptr);
  }
  if (threadIdx.x < kD) {
    const int h = threadIdx.x / kDh, d = threadIdx.x % kDh;
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const float v =
          kHalf ? __half2float(reinterpret_cast<const __half*>(cpart + (j * kH + h) * kHalfRec)[d])
                : cpart[(j * kH + h) * kRec + d];
      o = fmaf(v, weights[h * 16 + j], o);
    }
    att[threadIdx.x] = o;
  }
  __syncthreads();
}

// ---- The reduce-scatter merge (PersistentDecoderParams::cluster_scatter_merge) ---------------
// Block t owns the attention's output dims [24 t, 24 t + 24): every block sends block t only
// those dims of its merged partial and the (m, l) of the one or two heads they lie in
// (kScatterRec floats, 112 bytes, into record `rank` of t's cpart); block t merges the 16 records
// and sends its 24 merged dims to every block. Two exchanges of 1.8 and 1.5 KB received instead
// of one of 16 x 1632 bytes sent by every block (the send volume is what an exchange costs
// beyond its ~700-cycle floor: docs/benchmarks.md, dsmem_exchange_bench).
static_assert(kDh % 4 == 0 && kDCols % 4 == 0 && kDCols <= kDh, "owned dims span <= 2 heads");
// The first (which 0) or last (which 1) head of block `owner`'s dims.
__device__ __forceinline__ int OwnedHead(int owner, int which) {
  return (kDCols * owner + (which != 0 ? kDCols - 1 : 0)) / kDh;
}

// The block's merged partial `mine` (MergeBlock) to the blocks owning its dims (on `event`).
__device__ __forceinline__ void ScatterBlockPartial(const float* mine, float* cpart, int rank,
                                                    unsigned long long* event) {
  constexpr int kPieces = kScatterRec / 4;
  if (threadIdx.x < kC * kPieces) {
    const int owner = threadIdx.x / kPieces, piece = threadIdx.x % kPieces;
    float4 v;
    if (piece < kDCols / 4) {  // 4 dims, always of one head
      const int dim = kDCols * owner + 4 * piece;
      v = *reinterpret_cast<const float4*>(mine + (dim / kDh) * kRec + dim % kDh);
    } else {
      const float* first = mine + OwnedHead(owner, 0) * kRec + kDh;
      const float* last = mine + OwnedHead(owner, 1) * kRec + kDh;
      v = make_float4(first[0], first[1], last[0], last[1]);
    }
    StoreAsync4(cpart + rank * kScatterRec + 4 * piece, v, static_cast<unsigned>(owner), event);
  }
}

// This block's dims merged from the 16 records in cpart, normalised, and sent into
// att[24 rank, +24) of every block (on `event`). `weights`: 32 floats of scratch.
__device__ __forceinline__ void GatherOwnedDims(const float* cpart, float* weights, float* att,
                                                int rank, unsigned long long* event) {
  if (threadIdx.x < 2 * kC) {  // lanes 0-15: the first head's 16 records, 16-31: the last's
    const int which = threadIdx.x / kC, b = threadIdx.x % kC;
    const float* ml = cpart + b * kScatterRec + kDCols + 2 * which;
    const float m_b = ml[0];
    float m = m_b;
#pragma unroll
    for (int o = kC / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
    const float e = m == -INFINITY ? 0.0f : expf(m_b - m);
    float l = ml[1] * e;
#pragma unroll
    for (int o = kC / 2; o > 0; o /= 2) l += __shfl_xor_sync(kFullMask, l, o);
    weights[which * kC + b] = l > 0.0f ? e / l : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x < kC * kDCols) {  // one (target, dim) each
    const int target = threadIdx.x / kDCols, i = threadIdx.x % kDCols;
    const int dim = kDCols * rank + i;
    const float* w = weights + (dim / kDh - OwnedHead(rank, 0)) * kC;
    float o = 0.0f;
#pragma unroll
    for (int b = 0; b < kC; ++b) o = fmaf(cpart[b * kScatterRec + i], w[b], o);
    StoreAsync(att + dim, o, static_cast<unsigned>(target), event);
  }
}

}  // namespace waav::cuda::cluster_detail

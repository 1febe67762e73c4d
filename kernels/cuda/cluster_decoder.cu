// The cluster decoder step (cluster_decoder.cuh): the layers as one thread-block cluster per
// batch row, the logits as a second launch that loads its weights while the layers run.
//
// Layers, per block of a cluster (rank b of kC = 16) and layer, eight phases; each starts when
// its inputs have arrived (the mbarrier of that exchange completes), its weights loaded into
// registers just before (by default the QKV, FFN1 and FFN2 columns bulk-copied into shared
// memory earlier instead: staged weights, below):
//
//   LN1 + QKV columns [72 b, 72 b + 72) (this block's K, V kept for the self caches) |
//   self-attention over keys [L b / 16, L (b + 1) / 16), all heads | merge + out-proj columns
//   [24 b, +24) + residual | LN2 + cross-Q columns | cross-attention over this block's ~94 of
//   the 1500 cross keys (copied into shared memory ahead, cluster_cross_stage.cuh) | merge +
//   cross out-proj
//   + residual | LN3 + FFN1 + GELU columns [96 b, +96) | FFN2 columns [24 b, +24) + residual.
//
// Every value a phase produces is stored into the shared memory of all 16 blocks with st.async
// (distributed shared memory, counted on the receiver's mbarrier of that exchange), so each
// block holds the row's residual stream, Q/K/V, FFN hidden units and attention partials, and
// computes its LayerNorms itself. No buffer is overwritten before every block has read it: a
// block sends a phase's values only after it has received every block's values of the phase
// before, and each buffer is written again at least two exchanges after it was read.
// Attention: warps over keys (self: a lane holds 4 f32 dims of a head; cross: on tensor cores,
// two warps a head, cluster_cross_mma.cuh, or with the knob off two passes that keep every lane
// busy, CrossAttentionBalanced), online softmax per warp, the block's warps merged into one
// partial (o, m, l) per head, then the cluster's 16 partials merged: by default
// by a reduce-scatter (block t merges output dims [24 t, +24) from the 16 blocks' records in its
// cpart and sends them into every block's xn: two exchanges, kEvSelf/kEvCross then the gathers),
// else by every block from all 16 whole partials. (xn, written by other blocks in the gather, is
// read by this block's LayerNorm'ed GEMVs only after it has sent the partials that the gather
// depends on, and written by its next LayerNorm only after the gather has completed.) The new
// position's K/V come from shared memory.
#include <algorithm>
#include <atomic>
#include <climits>

#include "kernels/cuda/cluster_decoder.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/persistent_decoder_common.cuh"
#if !defined(WAAV_HIP)
#include "kernels/cuda/cluster_cross_mma.cuh"
#include "kernels/cuda/cluster_decoder_parts.cuh"
#endif

namespace waav::cuda {

#if defined(WAAV_HIP)

bool ClusterDecoderAvailable(const PersistentDecoderParams&) { return false; }
bool ClusterDecoderChooses(const PersistentDecoderParams&, int) { return false; }
cudaError_t LaunchClusterDecoder(const LaunchContext&, const PersistentDecoderParams&) {
  return cudaErrorNotSupported;
}

#else

using namespace persistent_detail;  // NOLINT(google-build-using-namespace): its own parts
using namespace cluster_detail;     // NOLINT(google-build-using-namespace): its own parts

namespace {

// Suppression words of a logits block's columns kept in shared memory per row: 32 (992 columns or
// more) up to 4 rows, 16 (480 columns or more: a Whisper vocabulary over 109 blocks or more) at
// 8, so that the kernel's static shared memory stays within kLogitsStaticBytes.
template <int MaxB>
__host__ __device__ constexpr int LogitsBitWords() {
  return MaxB <= 4 ? 32 : 16;
}
// Registers passes of logits columns loaded before the wait (more with fewer rows).
template <int MaxB>
__host__ __device__ constexpr int LogitsRegPasses() {
  return MaxB <= 2 ? 5 : 2;
}

// Shared memory of the layers' blocks (floats, then the f16 stage). The cluster's partials
// (cpart): 16 whole records, or the reduce-scatter's 16 small ones where only that merge runs
// (the kernels with staged weights).
__host__ __device__ constexpr size_t CpartFloats(bool scatter_only) {
  return scatter_only ? size_t{kC} * kScatterRec : size_t{kC} * kH * kRec;
}
__host__ __device__ constexpr size_t LayerFixedFloats(bool scatter_only) {
  return size_t{kD} + kFf + 3 * kD + kFf + size_t{kWarps} * kH * kRec + CpartFloats(scatter_only) +
         6 * kD + kH * kRec + 16 * kH + kPersistentMaxLayers * kQkvCols;
}
// The stage also holds weight columns between the cross-attention and their phases
// (p.cluster_staged_weights, `staged` below): level 1 a layer's FFN2 columns and the next
// layer's QKV columns (FFN2's at its start, QKV's after); level 2 also the FFN1 columns (FFN1's
// at its start, FFN2's after, the next QKV's where FFN1's were).
constexpr size_t kStagedFfn1Halves = size_t{kFfCols} * kD;
constexpr size_t kStagedFfn2Halves = size_t{kDCols} * kFf;
constexpr size_t kStagedQkvHalves = size_t{kQkvCols} * kD;
constexpr size_t StagedWeightHalves(int staged) {
  return staged >= 2   ? kStagedFfn1Halves + kStagedFfn2Halves
         : staged == 1 ? kStagedFfn2Halves + kStagedQkvHalves
                       : 0;
}
// (The stage starts at the next 1024-byte boundary: the tensor copy's swizzle.)
constexpr size_t kStageAlign = 1024;
size_t LayerSmemBytes(int staged) {
  const size_t stage = std::max(kCrossStageHalves, StagedWeightHalves(staged));
  return sizeof(float) * LayerFixedFloats(staged > 0) + kStageAlign + stage * sizeof(__half);
}
int StageKeys(int audio_ctx) { return (audio_ctx + kC - 1) / kC; }

// ---- The layers' kernel -------------------------------------------------------------------
// How the attention partials are merged, a template parameter so that each variant's registers
// are its own: every block's whole partial to every block in f32 (kFull) or with o as f16
// (kHalf, p.cluster_half_partials), or the reduce-scatter merge (kScatter,
// p.cluster_scatter_merge). kStaged: p.cluster_staged_weights (with the reduce-scatter merge,
// not in the profile modes without weights; a run-time flag made ptxas spill ~550 bytes).
// kMmaCross: p.cluster_mma_cross (with the reduce-scatter merge and staged weights at level 2;
// as a run-time flag the tensor-core code in the default kernel cost it ~3.6 us a step).
enum class PartialsMerge { kFull, kHalf, kScatter };
template <PartialsMerge kMerge, int kStaged, bool kMmaCross = false>
__global__ void __launch_bounds__(kThreads, 1)
    ClusterLayersKernel(const __grid_constant__ PersistentDecoderParams p,
                        const __grid_constant__ CrossStageMaps maps, float* x_out) {
#if WAAV_GPU_SM90_CODE
  extern __shared__ float4 smem_raw[];
  float* x_s = reinterpret_cast<float*>(smem_raw);  // the residual stream
  float* xn = x_s + kD;                             // LayerNorm'ed row / merged attention
  float* qkv_s = xn + kFf;                          // Q, K, V of the step (Q: also cross Q)
  float* h_s = qkv_s + 3 * kD;                      // FFN hidden units
  float* wpart = h_s + kFf;                         // [warp][head] partials
  float* cpart = wpart + kWarps * kH * kRec;        // [block][head] partials
  float* norms = cpart + CpartFloats(kStaged > 0);  // the layer's LN1, LN2, LN3 gains, biases
  float* mine = norms + 6 * kD;                     // this block's merged partial
  float* merge_weights = mine + kH * kRec;          // [head][16]
  float* kv_keep = merge_weights + 16 * kH;         // [layer][column]: this block's K/V of the step
  // The cross K/V stage (cluster_cross_stage.cuh): head regions of `region` halves.
  __half* stage_k = reinterpret_cast<__half*>(kv_keep + kPersistentMaxLayers * kQkvCols);
  stage_k += (kStageAlign - SharedAddress(stage_k) % kStageAlign) % kStageAlign / sizeof(__half);
  constexpr int region = kCrossStageRows * kDh;
  __half* stage_v = stage_k + kH * region;
  __shared__ int row_token, row_position, row_length;
  __shared__ bool row_ok;

  AllowNextKernel();  // the logits launch may start on the multiprocessors left idle
  if (p.profile_mode == kProfileLogitsOnly) return;
  // Profile modes (timing only, outputs wrong): see persistent_decoder.cuh.
  const bool barriers_only = p.profile_mode == kProfileBarriersOnly;
  const bool attention = p.profile_mode != kProfileNoAttention && !barriers_only;
  const bool weights = p.profile_mode != kProfileNoWeights && !barriers_only;
  constexpr bool kHalfPartials = kMerge == PartialsMerge::kHalf;
  constexpr bool scatter = kMerge == PartialsMerge::kScatter;
  // The cross-attention on tensor cores (its partial straight into mine: the reduce-scatter
  // merge only).
  static_assert(!kMmaCross || kMerge == PartialsMerge::kScatter, "the partial goes to the scatter");
  static_assert(!kMmaCross || kStaged >= 2, "the tensor copies' second half: the staged phases");
  const bool mma_cross = kMmaCross && attention;
  // The layers' weights and cross K/V: evict-last with the "keep" hints (read again next
  // step), else normal.
  const uint64_t keep =
      L2Policy(p.l2_hints >= kL2HintsKeepLayers ? L2Priority::kEvictLast : L2Priority::kNormal);
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
  auto inner = [&](int layer, int which) {  // inside an attention phase (kTimelineInner)
    if (stamps != nullptr && 3 * layer + which < kTimelineInner) {
      stamps[kStampInner + 3 * layer + which] = Clock();
    }
  };
  mark();
  const int rank = static_cast<int>(__clusterRelativeBlockRank());
  const int row = static_cast<int>(blockIdx.x) / kC;
  // Data exchange: each phase's values arrive by st.async, completing this block's mbarrier
  // of that event once all kEventBytes have landed (one phase of it per layer).
  __shared__ unsigned long long events[kEvents];
  __shared__ unsigned long long stage_bar, ffn1_bar, ffn2_bar, qkv_bar;
  // Staged weights (kStaged, LayerSmemBytes): the FFN2 and QKV columns (level 1; level 2 also
  // FFN1's) read from the stage instead of loaded into registers just before their phases, each
  // bulk-copied a phase or more ahead, completing phase `layer & 1` of its mbarrier: FFN1's once
  // the cross-attention has read the stage, FFN2's after the FFN1 phase's loads (so that those
  // go first), the next layer's QKV in the FFN2 phase (layer 0's at the start); the layer's cross
  // K/V then in its out-projection phase (after that phase's loads), once the QKV phase has read
  // its columns.
  constexpr bool staged = kStaged > 0, ffn1_staged = kStaged >= 2;
  static_assert(!staged || kMerge == PartialsMerge::kScatter, "cpart sized for the scatter");
  // The thread that issues the stage's bulk copies (warp 15: the one the self-attention leaves
  // idle first, and with the fewest FFN2 columns).
  const int stager = staged ? kThreads - kWarp : 0;
  __half* const staged_ffn1 = stage_k;
  __half* const staged_ffn2 = stage_k + (ffn1_staged ? kStagedFfn1Halves : 0);
  __half* const staged_qkv = stage_k + (ffn1_staged ? 0 : kStagedFfn2Halves);
  auto stage_ffn1 = [&](int layer) {
    StageColumns<kStagedFfn1Halves>(staged_ffn1, p.layers[layer].ff1_w, rank, &ffn1_bar, keep);
  };
  auto stage_ffn2 = [&](int layer) {
    StageColumns<kStagedFfn2Halves>(staged_ffn2, p.layers[layer].ff2_w, rank, &ffn2_bar, keep);
  };
  auto stage_qkv = [&](int layer) {
    StageColumns<kStagedQkvHalves>(staged_qkv, p.layers[layer].qkv_w, rank, &qkv_bar, keep);
  };
  if (threadIdx.x == 0) {
    for (int e = 0; e < kEvents; ++e) {
      BarrierInit(&events[e]);
      BarrierExpectBytes(&events[e], EventBytes(e, kHalfPartials, scatter));
    }
    BarrierInit(&stage_bar);
    BarrierInit(&ffn1_bar);
    BarrierInit(&ffn2_bar);
    BarrierInit(&qkv_bar);
    if (staged) stage_qkv(0);  // model constants: before the wait
    for (int layer = 0; layer < (mma_cross ? p.n_layers : 0); ++layer) {
      PrefetchStageMap(&maps.k[layer]);
      PrefetchStageMap(&maps.v[layer]);
    }
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
  // Waits for event `e` of `layer` (every thread), then re-arms it for the next layer; a phase
  // starts there (timeline stamp) unless `inside` (the reduce-scatter merge's gather).
  auto wait = [&](int e, int layer, bool inside = false) {
    BarrierWait(&events[e], static_cast<unsigned>(layer & 1));
    __syncthreads();  // every thread past this phase of it before it can complete again
    if (threadIdx.x == 0 && layer + 1 < p.n_layers) {
      BarrierExpectBytes(&events[e], EventBytes(e, kHalfPartials, scatter));
    }
    if (!inside) mark();
  };
  // The block's attention partial (its warps' in wpart, after a block barrier) to the cluster.
  auto push_partial = [&](int e) {
    if constexpr (scatter) {
      MergeBlock(wpart, mine, merge_weights);
      ScatterBlockPartial(mine, cpart, rank, &events[e]);
    } else {
      PushBlockPartial<kHalfPartials>(wpart, cpart, mine, merge_weights, rank, &events[e]);
    }
  };
  auto done = [&] {
    mark();
    if (ends != nullptr && phase_end < kArrivalStamps) ends[phase_end] = GlobalNs();
    ++phase_end;
  };
  // LayerNorm of the residual stream into xn (p.cluster_norm_all_warps: NormAllWarps).
  auto norm = [&](const float* g, const float* b) {
    if (p.cluster_norm_all_warps) {
      NormAllWarps(x_s, g, b, p.eps, xn, merge_weights);
    } else {
      NormLocal(x_s, g, b, p.eps, xn);
    }
  };
  // A layer's cross K/V rows of this block, completing phase `layer & 1` of stage_bar, issued as
  // soon as the previous layer's cross-attention has read the stage (with staged weights: in
  // the layer's out-projection phase, see above): two bulk copies of the rows as they are in
  // global memory, or for the tensor-core cross-attention (mma_cross) tensor copies into the
  // swizzled head regions (cluster_cross_stage.cuh), copy `part` of kCrossStageCopies (the
  // first in the out-projection phase, the rest in the cross query's).
  auto stage_cross = [&](int layer, int part) {
    if (threadIdx.x != stager) return;
    // (Staged: this block's cross keys computed here again, not taken from a0 and a1, with
    // which ptxas kept values alive longer and spilled 12 bytes.)
    const int first = staged ? static_cast<int>(static_cast<int64_t>(p.audio_ctx) * rank / kC) : a0;
    const int block_row = staged ? static_cast<int>(blockIdx.x / kC) : row;
    FenceProxyAsync();
    if (mma_cross) {
      if (part == 0) {
        BarrierExpectBytes(&stage_bar, static_cast<unsigned>(2 * kH * region * sizeof(__half)));
      }
      const int key = block_row * p.audio_ctx + first, head = part * (kH / kCrossStageCopies);
      CopyStage(stage_k + head * region, &maps.k[layer], key, head, &stage_bar, keep);
      CopyStage(stage_v + head * region, &maps.v[layer], key, head, &stage_bar, keep);
    } else if (part == 0) {
      const int end =
          staged ? static_cast<int>(static_cast<int64_t>(p.audio_ctx) * (rank + 1) / kC) : a1;
      const size_t offset = (static_cast<size_t>(block_row) * p.audio_ctx + first) * kD;
      const unsigned bytes = static_cast<unsigned>((end - first) * kD * 2);
      BarrierExpectBytes(&stage_bar, 2 * bytes);
      BulkCopy(stage_k, static_cast<const __half*>(p.cross_k[layer]) + offset, bytes, &stage_bar,
               keep);
      BulkCopy(stage_v, static_cast<const __half*>(p.cross_v[layer]) + offset, bytes, &stage_bar,
               keep);
    }
  };

  if (!barriers_only && !staged) stage_cross(0, 0);
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
    auto merge_project = [&](const __half* wo, const float* bo, int in, int gather, int out) {
      Slice<kD, kDCols> s;
      LoadSlice(wo, bo, rank * kDCols, s, keep, weights);
      if (staged && in == kEvSelf) stage_cross(layer, 0);  // the staged QKV columns have been read
      wait(in, layer);
      if constexpr (scatter) {
        GatherOwnedDims(cpart, merge_weights, xn, rank, &events[gather]);
        wait(gather, layer, true);
      } else {
        MergeCluster<kHalfPartials>(cpart, merge_weights, xn);
      }
      RunSlice(s, rank * kDCols, xn, [&](int col, float v, int sub) {
        Broadcast(x_s + col, x_s[col] + v, sub, &events[out]);
      });
      done();
    };
    // -- LN1 + QKV (this block's K/V columns kept for the self caches).
    {
      Slice<kD, kQkvCols> s;
      if (staged) {
        LoadSliceBias(w.qkv_b, rank * kQkvCols, s);
      } else {
        LoadSlice(w.qkv_w, w.qkv_b, rank * kQkvCols, s, keep, weights);
      }
      gpu::CopyAsyncWaitAll();  // the LayerNorm vectors
      if (layer > 0) {
        wait(kEvFf2, layer - 1);  // the residual stream
      } else {
        __syncthreads();  // (the other threads' copies)
        mark();
      }
      norm(norms, norms + kD);
      if (staged) {
        BarrierWait(&qkv_bar, static_cast<unsigned>(layer & 1));
        LoadSliceStaged(staged_qkv, s);
      }
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
    inner(layer, 0);
    push_partial(kEvSelf);
    done();
    // -- Merge + output projection + residual.
    merge_project(w.out_w, w.out_b, kEvSelf, kEvSelfGather, kEvOut);
    // -- LN2 + cross-attention query.
    {
      Slice<kD, kDCols> s;
      LoadSlice(w.cq_w, w.cq_b, rank * kDCols, s, keep, weights);
      if (staged && mma_cross) {
        for (int part = 1; part < kCrossStageCopies; ++part) stage_cross(layer, part);
      }
      wait(kEvOut, layer);
      norm(norms + 2 * kD, norms + 3 * kD);
      RunSlice(s, rank * kDCols, xn,
               [&](int col, float v, int sub) { Broadcast(qkv_s + col, v, sub, &events[kEvCq]); });
      done();
    }
    // -- Cross-attention over this block's staged keys.
    wait(kEvCq, layer);
    BarrierWait(&stage_bar, static_cast<unsigned>(layer & 1));
    inner(layer, 1);
    if (mma_cross) {  // (the block's partial into mine, then a block barrier)
      CrossAttentionMma(stage_k, stage_v, a1 - a0, region, qkv_s, p.scale, wpart, mine);
    } else if (attention && p.cluster_balanced_cross) {
      CrossAttentionBalanced(stage_k, stage_v, a1 - a0, qkv_s, p.scale, wpart);
    } else if (attention) {
      CrossAttentionWarps(stage_k, stage_v, a1 - a0, qkv_s, p.scale, wpart);
    }
    if (!mma_cross) __syncthreads();
    inner(layer, 2);
    if (!staged && layer + 1 < p.n_layers) stage_cross(layer + 1, 0);  // the stage is free
    if (mma_cross) {
      ScatterBlockPartial(mine, cpart, rank, &events[kEvCross]);
    } else {
      push_partial(kEvCross);
    }
    // The stage is free: this layer's FFN1 columns (issued after the partials are sent, where
    // ptxas keeps the kernel from spilling).
    if (ffn1_staged && threadIdx.x == stager) stage_ffn1(layer);
    done();
    // -- Merge + cross output projection + residual.
    merge_project(w.cout_w, w.cout_b, kEvCross, kEvCrossGather, kEvCout);
    // -- LN3 + FFN1 + GELU.
    {
      Slice<kD, kFfCols> s;
      if (ffn1_staged) {
        LoadSliceBias(w.ff1_b, rank * kFfCols, s);
      } else {
        LoadSlice(w.ff1_w, w.ff1_b, rank * kFfCols, s, keep, weights);
      }
      if (staged && threadIdx.x == stager) stage_ffn2(layer);  // the stage is free
      wait(kEvCout, layer);
      norm(norms + 4 * kD, norms + 5 * kD);
      if (layer + 1 < p.n_layers) stage_norms(layer + 1);  // LN3 has read this layer's
      if (ffn1_staged) {
        BarrierWait(&ffn1_bar, static_cast<unsigned>(layer & 1));
        LoadSliceStaged(staged_ffn1, s);
      }
      RunSlice(s, rank * kFfCols, xn, [&](int col, float v, int sub) {
        Broadcast(h_s + col, GeluExact(v), sub, &events[kEvFf1]);
      });
      done();
    }
    // -- FFN2 + residual.
    {
      Slice<kFf, kDCols> s;
      if (staged) {
        LoadSliceBias(w.ff2_b, rank * kDCols, s);
      } else {
        LoadSlice(w.ff2_w, w.ff2_b, rank * kDCols, s, keep, weights);
      }
      wait(kEvFf1, layer);
      if (staged && threadIdx.x == stager && layer + 1 < p.n_layers) stage_qkv(layer + 1);
      if (staged) {
        BarrierWait(&ffn2_bar, static_cast<unsigned>(layer & 1));
        LoadSliceStaged(staged_ffn2, s);
      }
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
#else
  __trap();  // never launched before sm_90 (ClusterDecoderAvailable)
#endif
}

// ---- The logits' kernel -------------------------------------------------------------------
// Shared memory of the tensor-core logits' A fragments: 24 k-steps x 32 lanes x 4 registers.
constexpr int kLogitsFragmentBytes = (kD / 16) * kWarp * 16;
// ... and of the wide tiles' B fragments (LogitsMmaWide): 24 k-steps x 32 lanes x 2 registers.
constexpr int kLogitsWideFragmentBytes = (kD / 16) * kWarp * 8;

#if WAAV_GPU_SM90_CODE  // (the logits kernel's parts: sm_90 passes only)
// Logits of staged columns [c0, staged_end) (rows swizzled, SwizzledOffset) on tensor cores:
// D (16 x 8 columns) += A (16 x 16) · B (16 x 8) per k-step, A's row r the batch row r's
// LayerNorm'ed input rounded to f16 and row r + 8 its rounding error (so each logit is the sum
// of two rows: as exact as f32 inputs times f16 weights), B the staged embedding rows. Warp w
// takes the 8-column tiles w, w + 16, ...; lane l writes (or reduces into `best`) row l / 4.
// `fragments`: kLogitsFragmentBytes of shared memory. Ends with the fragments still in use by
// other warps (no barrier after).
__device__ void LogitsMma(const PersistentDecoderParams& p, const float* xs, const __half* wstage,
                          uint4* fragments, int c0, int staged_end, bool reduce, Best& best,
                          const uint32_t* bits, int bits_word0, int bits_row_words) {
  constexpr int kSteps = kD / 16;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int quad_row = lane / 4, quad_col = lane % 4;
  // The A fragments of every k-step, once per block: lane l's registers of step k at [k][l].
  for (int i = threadIdx.x; i < kSteps * kWarp; i += kThreads) {
    const int step = i / kWarp, l = i % kWarp, r = l / 4;
    const int d = 16 * step + 2 * (l % 4);
    float hi[4], lo[4];
    const float x[4] = {
        r < p.batch ? xs[r * kD + d] : 0.0f, r < p.batch ? xs[r * kD + d + 1] : 0.0f,
        r < p.batch ? xs[r * kD + d + 8] : 0.0f, r < p.batch ? xs[r * kD + d + 9] : 0.0f};
    for (int j = 0; j < 4; ++j) SplitHalf(x[j], hi[j], lo[j]);
    fragments[i] = make_uint4(mma::PackHalf2(hi[0], hi[1]), mma::PackHalf2(lo[0], lo[1]),
                              mma::PackHalf2(hi[2], hi[3]), mma::PackHalf2(lo[2], lo[3]));
  }
  __syncthreads();
  const int n_cols = staged_end - c0, tiles = (n_cols + 7) / 8;
  for (int tile = warp; tile < tiles; tile += kWarps) {
    // ldmatrix rows: the tile's columns (beyond the staged ones: row 0, results dropped).
    const int row = 8 * tile + lane % 8 < n_cols ? 8 * tile + lane % 8 : 0;
    float acc[2][4] = {};  // even and odd k-steps (two independent chains)
#pragma unroll 4
    for (int pair = 0; pair < kSteps / 2; ++pair) {
      uint32_t b[4];
      mma::LdMatrix4(b, wstage + SwizzledOffset(row, 4 * pair + lane / 8));
      const uint4 a0 = fragments[(2 * pair) * kWarp + lane];
      const uint4 a1 = fragments[(2 * pair + 1) * kWarp + lane];
      const uint32_t fa0[4] = {a0.x, a0.y, a0.z, a0.w}, fa1[4] = {a1.x, a1.y, a1.z, a1.w};
      mma::Mma16816(acc[0], fa0, b[0], b[1]);
      mma::Mma16816(acc[1], fa1, b[2], b[3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int col = c0 + 8 * tile + 2 * quad_col + i;
      const float v = acc[0][i] + acc[0][2 + i] + acc[1][i] + acc[1][2 + i];
      if (col >= staged_end || quad_row >= p.batch) continue;
      if (reduce) {
        TakeLogit(p, p.batch, quad_row, col, v, best, bits, bits_word0, bits_row_words);
      } else if (p.logits != nullptr) {
        p.logits[static_cast<size_t>(quad_row) * p.vocab + col] = v;
      }
    }
  }
}

// The wide logits tiles (LogitsMmaWide) at up to four rows: D (16 columns x 8) += A (16 staged
// embedding rows x 16 k) · B (16 k x 8) per k-step, B's column 2r the batch row r's LayerNorm'ed
// input rounded to f16 and column 2r + 1 its rounding error, so that a logit is D[c][2r] +
// D[c][2r + 1] (as exact as f32 inputs times f16 weights). One mma.sync serves 16 columns
// (LogitsMma: 8). B's fragments, the same for every tile, are packed once per block into
// `fragments` (kLogitsWideFragmentBytes: lane l's two registers of k-step s at [s][l]; column
// n = l / 4, k = 16 s + 2 (l % 4) + {0, 1} and the same + 8). Every thread calls it; a barrier
// must follow before LogitsMmaWide.
__device__ void PackWideFragments(const PersistentDecoderParams& p, const float* xs,
                                  uint2* fragments) {
  for (int i = threadIdx.x; i < (kD / 16) * kWarp; i += kThreads) {
    const int step = i / kWarp, l = i % kWarp, n = l / 4, r = n / 2;
    uint32_t packed[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = 16 * step + 8 * h + 2 * (l % 4);
      float part[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float hi = 0.0f, lo = 0.0f;
        if (r < p.batch) SplitHalf(xs[r * kD + k + j], hi, lo);
        part[j] = n % 2 != 0 ? lo : hi;
      }
      packed[h] = mma::PackHalf2(part[0], part[1]);
    }
    fragments[i] = make_uint2(packed[0], packed[1]);
  }
}

// This warp's wide tiles of staged columns [c0, staged_end): tiles w, w + 16, ... for warp w.
// Lane l ends with D's rows l / 4 and l / 4 + 8 at columns 2 (l % 4) and 2 (l % 4) + 1: batch
// row l % 4's logits of two columns, handed to epi. B comes from `fragments` at every k-step
// (held in registers, ptxas spilled).
constexpr int kWideChains = 4;
template <typename Epi>
__device__ __forceinline__ void LogitsMmaWide(const PersistentDecoderParams& p,
                                              const __half* wstage, const uint2* fragments, int c0,
                                              int staged_end, Epi&& epi) {
  constexpr int kSteps = kD / 16;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int quad_row = lane / 4, quad_col = lane % 4;
  const int n_cols = staged_end - c0, tiles = (n_cols + 15) / 16;
  // ldmatrix addresses: lanes 0-7 rows 0-7 at chunk 2 s, 8-15 rows 8-15 at 2 s, 16-31 the same
  // at chunk 2 s + 1 (A's four 8 x 8 blocks in fragment order). A row's swizzle (row % 8) is
  // lane % 8 in every tile, so that chunk 2 s + l / 16 of the lane's row sits at 8 (s / 4) +
  // ((2 (s % 4) + l / 16) ^ (l % 8)): four offsets per lane, then steps of 8 chunks. (Rows past
  // the stage read row 0, results dropped.)
  const int tile_row = lane % 8 + 8 * ((lane / 8) % 2);
  int chunk_offset[kWideChains];
#pragma unroll
  for (int e = 0; e < kWideChains; ++e) chunk_offset[e] = 8 * ((2 * e + lane / 16) ^ (lane % 8));
  const uint2* lane_fragments = fragments + lane;
  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int row = 16 * tile + tile_row < n_cols ? 16 * tile + tile_row : 0;
    const __half* row_base = wstage + row * kD;
    // k-step s accumulates into chain s % kWideChains (independent mma chains; two measured
    // the same on an H100). Partly unrolled: fully, the odd warps' tiles, run while their
    // register-held columns' weights are live, spilled.
    float acc[kWideChains][4] = {};
#pragma unroll 1
    for (int first = 0; first < kSteps; first += kWideChains) {
#pragma unroll
      for (int e = 0; e < kWideChains; ++e) {
        uint32_t a[4];
        mma::LdMatrix4(a, row_base + 16 * first + chunk_offset[e]);
        const uint2 b = lane_fragments[(first + e) * kWarp];
        mma::Mma16816(acc[e], a, b.x, b.y);
      }
    }
    if (quad_col < p.batch) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int local = 16 * tile + quad_row + 8 * i;
        float v = 0.0f;
#pragma unroll
        for (int e = 0; e < kWideChains; ++e) v += acc[e][2 * i] + acc[e][2 * i + 1];
        if (local < n_cols) epi(quad_col, c0 + local, v);
      }
    }
  }
}
#endif  // WAAV_GPU_SM90_CODE

// Block b: columns [b · per_block, (b + 1) · per_block) of the tied embedding; the first `staged`
// of them copied into shared memory and the next LogitsRegPasses() passes loaded into registers
// before the wait for the layers; the rest (small grids only) loaded after.
template <int MaxB>
__global__ void __launch_bounds__(kThreads, 1)
    ClusterLogitsKernel(const __grid_constant__ PersistentDecoderParams p, float* x_final,
                        float* stats, int per_block, int staged) {
#if WAAV_GPU_SM90_CODE
  using G = Geom<kD>;
  AllowNextKernel();  // the next step's layers may start their prologue
  long long* const stamps = TimelineStamps(p);
  if (stamps != nullptr) stamps[kStampLogitsStart] = GlobalNs();
  // Paced loads (p.logits_pace_ns): block b starts loading (b % 8) paces later, so that the
  // 40 MB do not all stream from HBM while the layers' first layer waits on L2.
  if (p.logits_pace_ns > 0) {
    if (threadIdx.x == 0) {
      const long long until =
          GlobalNs() + static_cast<long long>(blockIdx.x % 8) * p.logits_pace_ns;
      while (GlobalNs() < until) __nanosleep(256);
    }
    __syncthreads();
  }
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);              // [MaxB][384]
  __half* wstage = reinterpret_cast<__half*>(xs + MaxB * kD);  // [staged][384]
  __shared__ Best warp_best[kWarps][MaxB];
  __shared__ bool last_block;
  // The suppression words of this block's columns: p.suppress_bits' (row 0's, for every row) or
  // each row's greedy-choice mask (p.choice_masks).
  constexpr int kBitWords = LogitsBitWords<MaxB>();
  __shared__ uint32_t suppress_words[MaxB][kBitWords];
  constexpr int kPasses = LogitsRegPasses<MaxB>();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int group = lane / G::kLanes, sub = lane % G::kLanes;
  const int c0 = min(p.vocab, static_cast<int>(blockIdx.x) * per_block);
  const int c1 = min(p.vocab, c0 + per_block);
  const int staged_end = min(c1, c0 + staged);
  const int pieces = (staged_end - c0) * (kD / 8);
  const __half* src = p.token_embedding + static_cast<size_t>(c0) * kD;
  // The embedding is read once per step: evict-first with the hints, so that it does not push
  // the layers' weights and cross K/V out of L2.
  const uint64_t stream =
      L2Policy(p.l2_hints >= kL2HintsStreamLogits ? L2Priority::kEvictFirst : L2Priority::kNormal);
  for (int i = threadIdx.x; i < pieces; i += kThreads) {
    CopyAsyncHinted(wstage + SwizzledOffset(i / kRowChunks, i % kRowChunks), src + 8 * i, stream);
  }
  WeightRegs<kD> regs[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    LoadWeightsHinted<kD>(p.token_embedding, nullptr, c1,
                          staged_end + (i * kWarps + warp) * G::kCols + group, regs[i], stream);
  }
  const NormRegs norm = LoadNorm<MaxB>(p.final_g, p.final_b);
  // The suppression bits of the block's columns into shared memory (read once per column). The
  // greedy choice's per-row masks always fit (the launcher checks per_block).
  const int word0 = c0 >> 5;
  const bool choice = p.choice_out != nullptr;
  const bool local_bits =
      choice || (p.suppress_bits != nullptr && c1 > c0 && ((c1 - 1) >> 5) - word0 < kBitWords);
  if (local_bits) LoadSuppressWords<MaxB, kBitWords>(p, c0, c1, suppress_words);
  const uint32_t* bits = local_bits ? &suppress_words[0][0] : nullptr;
  const int bits_word0 = local_bits ? word0 : 0;
  const int bits_row_words = choice ? kBitWords : 0;
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
      choice || p.best_token != nullptr || p.best_logprob != nullptr || p.logsumexp != nullptr;
  auto epi = [&](int r, int col, float v) {
    if (reduce) {
      TakeLogit(p, p.batch, r, col, v, best, bits, bits_word0, bits_row_words);
    } else if (r < p.batch && p.logits != nullptr) {
      p.logits[static_cast<size_t>(r) * p.vocab + col] = v;
    }
  };
  // The wide tiles (at most 4 rows): odd warps before their register-held columns, even warps
  // after, so that a multiprocessor's tensor cores and shared memory (the tiles) and its CUDA
  // cores (the register-held columns) work at once. The other paths' staged columns before the
  // register-held ones: on tensor cores (LogitsMma), or on the CUDA cores kSlots passes at a
  // time (independent chains, the rows' inputs read once).
  const bool wide = MaxB <= 4 && p.logits_mma_wide;
  auto* wide_fragments = reinterpret_cast<uint2*>(wstage + static_cast<size_t>(staged) * kD);
  if (wide) {
    PackWideFragments(p, xs, wide_fragments);
    __syncthreads();
    if (warp % 2 == 1) LogitsMmaWide(p, wstage, wide_fragments, c0, staged_end, epi);
  }
  constexpr int kSlots = MaxB <= 2 ? 4 : 2;
  constexpr int kPass = kWarps * G::kCols;  // columns per pass of the block
  if (p.logits_mma && !wide) {
    auto* fragments = reinterpret_cast<uint4*>(wstage + static_cast<size_t>(staged) * kD);
    Best mma_best{-INFINITY, 0.0f, INT_MAX};
    LogitsMma(p, xs, wstage, fragments, c0, staged_end, reduce, mma_best, bits, bits_word0,
              bits_row_words);
    if (reduce) {  // row r's partial into lane r's (FinishLogits' layout)
      mma_best = Merge(mma_best, ShuffleXor(mma_best, 1));
      mma_best = Merge(mma_best, ShuffleXor(mma_best, 2));
      const int from = 4 * (lane % 8);
      const Best row_best{__shfl_sync(kFullMask, mma_best.m, from),
                          __shfl_sync(kFullMask, mma_best.s, from),
                          __shfl_sync(kFullMask, mma_best.index, from)};
      if (lane < 8) best = Merge(best, row_best);
    }
  }
  for (int first = warp * G::kCols; !p.logits_mma && c0 + first < staged_end;
       first += kSlots * kPass) {
    WeightRegs<kD> w[kSlots];
    int cols[kSlots];
#pragma unroll
    for (int n = 0; n < kSlots; ++n) {
      const int local = first + n * kPass + group;
      cols[n] = c0 + local;
      w[n].bias = 0.0f;
#pragma unroll
      for (int j = 0; j < G::kPerLane; ++j) {
        w[n].v[j] = cols[n] < staged_end ? *reinterpret_cast<const uint4*>(
                                               wstage + SwizzledOffset(local, sub + j * G::kLanes))
                                         : make_uint4(0, 0, 0, 0);
      }
    }
    GemvColumns<MaxB, kSlots>(w, cols, staged_end, xs, epi);
  }
  if (stamps != nullptr && !wide) stamps[kStampLogitsStaged] = GlobalNs();
  // The columns in registers (loaded before the wait), then those loaded after it.
  {
    int cols[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) cols[i] = staged_end + (i * kWarps + warp) * G::kCols + group;
    if (staged_end + warp * G::kCols < c1) GemvColumns<MaxB, kPasses>(regs, cols, c1, xs, epi);
  }
  if (stamps != nullptr) stamps[kStampLogitsRegisters] = GlobalNs();
  for (int first = staged_end + (kPasses * kWarps + warp) * G::kCols; first < c1;
       first += kWarps * G::kCols) {
    WeightRegs<kD> wr;
    LoadWeightsHinted<kD>(p.token_embedding, nullptr, c1, first + group, wr, stream);
    GemvColumn<kD, MaxB>(wr, first + group, c1, xs, epi);
  }
  if (wide) {
    if (warp % 2 == 0) LogitsMmaWide(p, wstage, wide_fragments, c0, staged_end, epi);
    if (stamps != nullptr) stamps[kStampLogitsStaged] = GlobalNs();
  }
  if (stamps != nullptr) stamps[kStampLogitsDone] = GlobalNs();
  // Lane l's partials are all of row l % MaxB (GemvColumns, GemvColumn's lanes r and r + 16,
  // LogitsMma's lanes r < 8, LogitsMmaWide's lanes of row l % 4 < MaxB; the others nothing):
  // merged over each half-warp's lanes of a row, lanes r and r + 16 hold row r as FinishLogits
  // expects.
  if (reduce) {
#pragma unroll
    for (int o = MaxB; o < kWarp / 2; o *= 2) best = Merge(best, ShuffleXor(best, o));
  }
  if (reduce) FinishLogits<MaxB>(p, p.batch, best, stats, warp_best, &last_block);
#else
  __trap();  // never launched before sm_90 (ClusterDecoderAvailable)
#endif
}

// The logits launch's grid: the multiprocessors the layers leave idle when that is at least three
// quarters of them (they start early and load their weights meanwhile), else one block per
// multiprocessor (the shares of a smaller grid would not fit in shared memory and registers).
int LogitsGrid(int sm_count, int batch) {
  const int idle = sm_count - batch * kC;
  return 4 * idle >= 3 * sm_count ? idle : sm_count;
}

// Whether a logits block's columns fit its per-row suppression words (wherever they start).
bool LogitsBitsFit(int vocab, int grid, int batch) {
  const int per_block = (vocab + grid - 1) / grid;
  const int words = batch <= 4 ? LogitsBitWords<4>() : LogitsBitWords<8>();
  return (per_block + 31) / 32 + 1 <= words;
}

// Static shared memory the logits kernel declares (warp_best, last_block, the suppression
// words), rounded up.
constexpr int kLogitsStaticBytes = 2304;
static_assert(sizeof(persistent_detail::Best) * kWarps * 8 + 4 * 8 * LogitsBitWords<8>() + 16 <=
                  kLogitsStaticBytes,
              "the logits kernel's static shared memory");

template <int MaxB>
cudaError_t LaunchLogits(const LaunchContext& ctx, const PersistentDecoderParams& p, float* x_final,
                         float* stats, int optin) {
  const int grid = LogitsGrid(ctx.sm_count, p.batch);
  if (p.choice_out != nullptr && !LogitsBitsFit(p.vocab, grid, p.batch)) {
    return cudaErrorNotSupported;
  }
  const int per_block = (p.vocab + grid - 1) / grid;
  const size_t xs_bytes = sizeof(float) * MaxB * kD;
  const int fragment_bytes = !p.logits_mma       ? 0
                             : p.logits_mma_wide ? kLogitsWideFragmentBytes
                                                 : kLogitsFragmentBytes;
  const int room = optin - static_cast<int>(xs_bytes) - kLogitsStaticBytes - fragment_bytes;
  const int staged = std::max(0, std::min(per_block, room / (kD * 2)));
  const size_t smem = xs_bytes + size_t{2} * staged * kD + fragment_bytes;
  auto* kernel = ClusterLogitsKernel<MaxB>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  LaunchContext early = ctx;  // always with PDL: the overlap with the layers is the point
  early.pdl = true;
  early.pdl_max_blocks_per_sm = std::max(early.pdl_max_blocks_per_sm, 1);
  // Paced loads only where the blocks run beside the layers: on a full grid they start when the
  // layers end, and a delay would only add to the step.
  PersistentDecoderParams params = p;
  if (grid == ctx.sm_count) params.logits_pace_ns = 0;
  return Launch(early, kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, params,
                x_final, stats, per_block, staged);
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

// The layers' kernel of a configuration (scatter wins over half).
using LayersKernelFn = void (*)(PersistentDecoderParams, CrossStageMaps, float*);
// (`staged`: the level, StagedLevel.)
LayersKernelFn LayersKernel(bool scatter, bool half, int staged, bool mma_cross = false) {
  if (scatter && staged >= 2 && mma_cross) {
    return ClusterLayersKernel<PartialsMerge::kScatter, 2, true>;
  }
  if (scatter) {
    return staged >= 2   ? ClusterLayersKernel<PartialsMerge::kScatter, 2>
           : staged == 1 ? ClusterLayersKernel<PartialsMerge::kScatter, 1>
                         : ClusterLayersKernel<PartialsMerge::kScatter, 0>;
  }
  return half ? ClusterLayersKernel<PartialsMerge::kHalf, 0>
              : ClusterLayersKernel<PartialsMerge::kFull, 0>;
}
// The staged weights' level a step runs with: with the reduce-scatter merge only, and not in
// the profile modes without weights or without the layers' loop.
int StagedLevel(const PersistentDecoderParams& p) {
  if (!p.cluster_scatter_merge || p.profile_mode == kProfileNoWeights ||
      p.profile_mode == kProfileBarriersOnly) {
    return 0;
  }
  return std::clamp(p.cluster_staged_weights, 0, 2);
}

}  // namespace

bool ClusterDecoderAvailable(const PersistentDecoderParams& p) {
  if (!p.cross_f16 || p.batch < 1 || p.batch > kPersistentMaxBatch || p.n_layers < 1 ||
      p.n_layers > kPersistentMaxLayers || p.audio_ctx < 1 || p.text_ctx < 1 ||
      StageKeys(p.audio_ctx) > kCrossStageRows || !Sm90CodeRuns()) {
    return false;
  }
  // Once per device: the kernel's attributes (the non-portable cluster size, its dynamic shared
  // memory) and whether one cluster of it fits on the device.
  static std::atomic<int> cached_device{-1}, cached_clusters{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cached_device.load() != device) {
    int clusters = 0;
    const int optin = MaxSharedBytesPerBlock();
    const struct {
      LayersKernelFn kernel;
      int staged;
    } variants[] = {{LayersKernel(false, false, 0), 0}, {LayersKernel(false, true, 0), 0},
                    {LayersKernel(true, false, 0), 0},  {LayersKernel(true, false, 1), 1},
                    {LayersKernel(true, false, 2), 2},  {LayersKernel(true, false, 2, true), 2}};
    for (const auto& [fn, staged] : variants) {
      const void* kernel = reinterpret_cast<const void*>(fn);
      const size_t smem = LayerSmemBytes(staged);
      cudaFuncAttributes attributes = {};
      if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess ||
          smem + attributes.sharedSizeBytes > static_cast<size_t>(optin) ||
          cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
              cudaSuccess ||
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)) != cudaSuccess) {
        clusters = -1;
      }
    }
    if (clusters == 0) {
      cudaLaunchAttribute attribute[1];
      const cudaLaunchConfig_t config = LayersConfig(1, LayerSmemBytes(0), nullptr, attribute);
      if (cudaOccupancyMaxActiveClusters(&clusters, LayersKernel(true, false, 0), &config) !=
          cudaSuccess) {
        clusters = 0;
      }
    }
    (void)cudaGetLastError();  // a refusal above is an answer, not an error of the next launch
    cached_clusters.store(clusters);
    cached_device.store(device);
  }
  return cached_clusters.load() >= 1;
}

bool ClusterDecoderChooses(const PersistentDecoderParams& p, int sm_count) {
  return ClusterDecoderAvailable(p) &&
         LogitsBitsFit(p.vocab, LogitsGrid(sm_count, p.batch), p.batch);
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
  // Tensor-core logits: the wide tiles (embedding as A) at one to four rows; without them from
  // two rows up, as at one row the CUDA cores' four independent chains per lane group finished
  // sooner than LogitsMma's (H100: 99.8 against 103.1 us per step; at 8 rows 255.1 against
  // 232.1, docs/benchmarks.md).
  params.logits_mma_wide = p.logits_mma && p.logits_mma_wide && p.batch <= 4;
  params.logits_mma = p.logits_mma && (p.batch > 1 || params.logits_mma_wide);
  float* x_final = p.workspace + lay.x;
  float* stats = p.workspace + lay.stats;
  const int staged = StagedLevel(p);
  cudaLaunchAttribute attribute[2];
  const cudaLaunchConfig_t config =
      LayersConfig(p.batch, LayerSmemBytes(staged), ctx.stream, attribute, /*pdl=*/true);
  // The tensor-core cross-attention where its maps encode (a driver without tensor maps: the
  // CUDA cores, same shared memory).
  CrossStageMaps maps = {};
  const bool mma_cross = p.cluster_mma_cross && p.cluster_scatter_merge && staged >= 2 &&
                         EncodeCrossStageMaps(p, maps) == cudaSuccess;
  const auto kernel =
      LayersKernel(p.cluster_scatter_merge, p.cluster_half_partials, staged, mma_cross);
  cudaError_t err = cudaLaunchKernelEx(&config, kernel, params, maps, x_final);
  if (err != cudaSuccess || p.profile_mode == kProfileNoLogits) return err;
  const int optin = MaxSharedBytesPerBlock();
  if (p.batch == 1) return LaunchLogits<1>(ctx, params, x_final, stats, optin);
  if (p.batch == 2) return LaunchLogits<2>(ctx, params, x_final, stats, optin);
  if (p.batch <= 4) return LaunchLogits<4>(ctx, params, x_final, stats, optin);
  return LaunchLogits<8>(ctx, params, x_final, stats, optin);
}

#endif  // WAAV_HIP

}  // namespace waav::cuda

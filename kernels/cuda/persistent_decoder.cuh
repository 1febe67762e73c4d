// The persistent Whisper decoder step: one cooperative launch that runs a whole decoder step of
// Whisper tiny (d_model 384, 6 heads of 64, FFN 1536, up to 4 layers) for up to 8 rows, with
// grid-wide barriers between its phases instead of kernel boundaries. Per layer, by default
// (6 phases):
//
//   LN1 + QKV (K, V appended to the self cache)  | self-attention, one block per (row, head),
//   times that head's slice of W_o, added atomically into the residual  | LN2 + cross Q  |
//   cross-attention over the precomputed cross K/V (f32 or f16), keys split into about one
//   chunk per block, a partial (o, m, l) per chunk  | partials merged + out-proj + residual  |
//   LN3 + FFN1 + GELU of ~12 hidden units per block + their FFN2 share, added atomically into
//   the other residual buffer;
//
// then final LN + logits (tied embedding) with suppression, argmax and log-sum-exp reduced on
// the device (the last block to finish merges the blocks' partials). Knobs restore the unfused
// phases (8 per layer) and the first version's attention (warp items, last-warp merge).
//
// Every block recomputes the LayerNorms it needs (a few rows of 384) instead of a phase of their
// own. Barriers come in two halves: after a block's arrival it issues the next phase's loads
// that depend on nothing of this step (weights and biases into registers, LayerNorm gains, the
// attention's K/V tile and W_o slice into shared memory by cp.async), then waits. The blocks
// also prefetch the next layer's weights and cross K/V into L2 (cp.async.bulk.prefetch, sm_90)
// a layer ahead. Arithmetic: f16 weights widened exactly, f32 accumulation and activations,
// exact GELU and exp; the atomic sums make the rounding order vary from run to run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

inline constexpr int kPersistentMaxBatch = 8;
inline constexpr int kPersistentMaxLayers = 4;
inline constexpr int kPersistentDModel = 384;
inline constexpr int kPersistentHeads = 6;
inline constexpr int kPersistentFfn = 1536;
// Words of the zero-initialised synchronisation area (barrier, attention merge and logits
// counters); every launch leaves them as it found them.
inline constexpr int kPersistentSyncWords = 64;

struct PersistentDecoderLayer {
  const float *ln1_g, *ln1_b;
  const __half* qkv_w;  // [3·384, 384]
  const float* qkv_b;
  const __half* out_w;  // [384, 384]
  const float* out_b;
  const float *ln2_g, *ln2_b;
  const __half* cq_w;  // [384, 384]
  const float* cq_b;
  const __half* cout_w;  // [384, 384]
  const float* cout_b;
  const float *ln3_g, *ln3_b;
  const __half* ff1_w;  // [1536, 384]
  const float* ff1_b;
  const __half* ff2_w;  // [384, 1536]
  const float* ff2_b;
};

struct PersistentDecoderParams {
  int batch = 0;  // 1 ..= kPersistentMaxBatch
  int n_layers = 0;
  int vocab = 0;
  int text_ctx = 0;   // self cache rows per batch row
  int audio_ctx = 0;  // cross keys per batch row
  float scale = 0.125f;
  float eps = 1e-5f;
  // Step inputs, i32 [B]: token, position (where K/V go), length (keys attended, position + 1).
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* lengths = nullptr;
  const __half* token_embedding = nullptr;  // [vocab, 384], also the output projection
  const float* position_table = nullptr;    // [text_ctx, 384]
  PersistentDecoderLayer layers[kPersistentMaxLayers] = {};
  const float* final_g = nullptr;
  const float* final_b = nullptr;
  float* self_k[kPersistentMaxLayers] = {};  // f32 [B, text_ctx, 384]
  float* self_v[kPersistentMaxLayers] = {};
  const void* cross_k[kPersistentMaxLayers] = {};  // [B, audio_ctx, 384], f16 or f32
  const void* cross_v[kPersistentMaxLayers] = {};
  bool cross_f16 = false;
  // Workspace (PersistentWorkspaceFloats floats, 16-byte aligned) and the sync words.
  float* workspace = nullptr;
  size_t workspace_floats = 0;
  unsigned* sync = nullptr;
  // Outputs. logits may be null (then only the reductions are written).
  float* logits = nullptr;  // f32 [B, vocab], raw (before suppression)
  int32_t* best_token =
      nullptr;  // i32 [B]: argmax over the tokens not suppressed (lowest id on ties)
  float* best_logprob = nullptr;  // f32 [B]: its log-softmax value
  float* logsumexp = nullptr;     // f32 [B]: log Σ exp(logits) over the tokens not suppressed
  const uint32_t* suppress_bits = nullptr;  // bit t set: token t suppressed; null: none
  // The greedy choice as Backend::ArgmaxLogSumExp makes it, then Backend::FeedChoices, in the
  // logits launch (the cluster step only; with choice_out, suppress_bits and the outputs above
  // are not used): choice_masks [choice_num_masks, choice_mask_words] (bit set: token disabled),
  // choice_mask_index i32 [B] (the row's mask, -1: row left out), choice_out f32 [B, 5]; then,
  // with feed_tokens, each chosen row's token into feed_tokens[b], feed_positions[b] =
  // min(feed_positions[b] + 1, feed_max_position), feed_lengths[b] = that + 1 (the step's own
  // inputs: written once the layers' launch, which read them, has ended).
  const uint32_t* choice_masks = nullptr;
  int choice_mask_words = 0;
  int choice_num_masks = 0;
  const int32_t* choice_mask_index = nullptr;
  float* choice_out = nullptr;
  int32_t* feed_tokens = nullptr;
  int32_t* feed_positions = nullptr;
  int32_t* feed_lengths = nullptr;
  int feed_max_position = 0;
  // Tuning (kept as knobs so that the benchmark can measure each).
  // Attention by block chunks (default): each block takes a (row, head, key range) chunk, its K/V
  // tile copied into shared memory (cp.async) before the barrier that starts the phase, and
  // writes one partial (o, m, l); the output projection's blocks merge the partials. false: the
  // first version (warp items of split keys, merged by the last warp of each (row, head)).
  bool block_attention = true;
  // With block_attention: issue each block's first K/V tile before the barrier (self: before the
  // QKV phase, the new position's row re-read after it; cross: before the cross-Q phase).
  bool prefetch_kv_tiles = true;
  // Keys per warp item (first version), or the fewest keys of a block chunk (block_attention).
  int cross_split_keys = 32;
  int self_split_keys = 32;
  // Barriers in two halves (arrive, then the next phase's constant loads, then wait), so that the
  // arrival's release fence does not wait for those loads; false: loads, then the barrier.
  bool split_barrier = true;
  // LN3 + FFN1 + GELU + FFN2 as one phase: each block owns ~12 hidden units and adds its share
  // of FFN2 atomically into a second residual buffer (one barrier fewer per layer; sums in a
  // varying order).
  bool fuse_ffn = true;
  // With block_attention: the self-attention as one chunk per (row, head), whose block multiplies
  // its head's output by that head's slice of W_o (copied into shared memory before the barrier)
  // and adds it atomically into the residual stream: the output projection's phase and barrier
  // go (sums in a varying order).
  bool fuse_self_out = true;
  bool prefetch = true;           // L2 prefetch of the next layer's weights and cross K/V
  int logits_prefetch_layer = 3;  // prefetch the logits weights from this layer's start (-1: never)
  // The cluster step (cluster_decoder.cuh: one thread-block cluster per row, no grid barriers,
  // the logits in a second launch) where it runs: f16 cross K/V, a device with clusters of 16
  // and enough shared memory (ClusterDecoderAvailable); otherwise, and for the profile modes
  // other than kProfileNoLogits, the cooperative kernel.
  bool cluster = false;
  // The cluster step's L2 eviction priorities: kL2Hints* below (0: none).
  int l2_hints = 0;
  // The cluster step's logits of the staged embedding rows on tensor cores (the inputs split
  // into f16 high and low parts) at two rows or more; false: on the CUDA cores.
  bool logits_mma = false;
  // With logits_mma, at one to four rows: the staged embedding rows as the mma's A operand (16
  // columns per mma.sync) and the rows' inputs as B's columns (LogitsMmaWide); set by the
  // launcher only where it applies.
  bool logits_mma_wide = false;
  // The cluster step's logits blocks, where they run beside the layers (one row), start loading
  // their embedding columns (b % 8) times this many ns after they start (0: at once), spreading
  // the 40 MB over the layers' time instead of streaming them all during the first layer.
  int logits_pace_ns = 0;
  // The cluster step's LayerNorms by 12 warps in one pass (NormAllWarps) instead of by one.
  bool cluster_norm_all_warps = false;
  // The cluster step's attention partials exchanged with o as f16 (m, l f32): half the bytes.
  bool cluster_half_partials = false;
  // The cluster step's cross-attention by CrossAttentionBalanced (every lane busy).
  bool cluster_balanced_cross = false;
  // The cluster step's cross-attention on tensor cores (CrossAttentionMma), with
  // cluster_scatter_merge only; cluster_balanced_cross then has no effect.
  bool cluster_mma_cross = false;
  // The cluster step's attention partials merged by a reduce-scatter (each block merges 24 of
  // the 384 dims, then sends them to all) instead of every block sending its whole partial to
  // every block; cluster_half_partials then has no effect.
  bool cluster_scatter_merge = false;
  // The cluster step's weight columns staged in shared memory (PersistentStepTuning::
  // cluster_staged_weights: 2 FFN1, FFN2 and QKV; 1 FFN2 and QKV; 0 none), with
  // cluster_scatter_merge only.
  int cluster_staged_weights = 0;
  unsigned long long* error_word = nullptr;  // set by the launcher from the context
  // For timing only (outputs are wrong): kProfile* below, 0 for the real step.
  int profile_mode = 0;
};

// Profile modes: leave out one part of the step and keep the rest (its barriers included), so
// that the benchmark can attribute time by differences.
inline constexpr int kProfileBarriersOnly = 1;  // only the grid barriers of a step
inline constexpr int kProfileNoAttention = 2;   // skip the self- and cross-attention phases
inline constexpr int kProfileNoLogits = 3;      // skip the logits GEMV and its reduction
// The cluster step only (cluster_decoder.cuh): the GEMVs' weights not loaded (zeros: the cost
// of fetching them).
inline constexpr int kProfileNoWeights = 5;
// The cluster step with its blocks recording when their phases end (globaltimer), block 0 also
// clock64() when each phase starts (its inputs arrived) and ends, then globaltimer stamps of the
// two launches (cluster_decoder.cu): kClusterTimelineStamps int64 values in the last floats of
// the workspace (PersistentDecoderStep::ReadTimeline; batches of up to 4 rows, where the
// logits' per-block partials stay clear of them).
inline constexpr int kProfileTimeline = 6;
// The stamps: 16 blocks x 36 globaltimer values at their phases' ends, then 96 of block 0.
inline constexpr int kClusterTimelineStamps = 16 * 36 + 96;
// The cluster step's logits launch alone (its layers' launch returns at once).
inline constexpr int kProfileLogitsOnly = 7;

// The cluster step's L2 hints: the logits' embedding loads evict-first (streamed once per
// step); with kL2HintsKeepLayers the layers' weight loads also evict-last.
inline constexpr int kL2HintsStreamLogits = 1;
inline constexpr int kL2HintsKeepLayers = 2;

// Floats of workspace the step needs for `batch` rows on a grid of `max_blocks` blocks (the launch
// uses one block per multiprocessor: LaunchContext::sm_count).
size_t PersistentWorkspaceFloats(int batch, int audio_ctx, int text_ctx, int cross_split_keys,
                                 int self_split_keys, int max_blocks);

// Whether the kernel takes these shapes (else callers use the fused or unfused step).
bool PersistentDecoderSupported(int batch, int n_layers, int d_model, int n_heads, int ffn);

// The cooperative kernel's (the step where the cluster step does not run) shared memory for
// `batch` rows (1 to kPersistentMaxBatch) on `sm_count` multiprocessors: 118 KB at one row, 160
// KB at 5-8 on 108.
size_t PersistentDecoderSharedBytes(int batch, int sm_count);
// Whether that fits the current device's MaxSharedBytesPerBlock (device_caps.cuh): on an A100
// yes, on Ada and Ampere's 99 KB parts no. Its launch refuses (NotSupported) where not.
bool PersistentDecoderFits(int batch, int sm_count);

// One decoder step: one cooperative launch on ctx.stream (capturable). Bad index values are
// reported through ctx.error_word (tokens as Embed, positions as WriteRows, lengths as
// Attention); such a row's outputs are not meaningful and its caches are not written.
cudaError_t LaunchPersistentDecoder(const LaunchContext& ctx, const PersistentDecoderParams& p);

// dst[i] = f16(src[i]) (the cross K/V copies of the f16 variant).
cudaError_t LaunchFloatToHalf(const LaunchContext& ctx, const float* src, __half* dst, int64_t n);

}  // namespace waav::cuda

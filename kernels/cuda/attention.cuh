// Multi-head attention (Backend::Attention), two kernels:
//  * SplitAttention: f32 arithmetic (exact path, and every decoder step); K and V f32, or f16
//    (kv_half: an f16 cache, widened as it is loaded). A block takes up to 16
//    queries of one (batch row, head) and a contiguous range of keys, one key per thread per
//    chunk of 128, with an online softmax over the chunks. When there are few (row, head) pairs
//    (a decoder step at small batch) the keys are split over several blocks (flash-decoding);
//    the last block of a group to finish merges the partial results, so one launch suffices.
//  * FlashAttention (fast path, head_dim 64, CUDA only): f16 tensor cores (mma.sync m16n8k16)
//    with f32 accumulation and an f32 online softmax; 64 queries per block of 4 warps, K/V tiles
//    of 64 keys double-buffered through cp.async, keys split over blocks (merged by the last)
//    when the query blocks alone would not fill the chip. Inputs are first converted to f16 (one
//    kernel); Flash v2 also takes an f32 q over f16 K/V (kv_half) with q and the probabilities
//    split into f16 hi + lo parts, as exact as SplitAttention.
// Both follow the CPU backend's semantics: with kv_lengths row b sees keys [0, kv_lengths[b]);
// with `causal` query i sees keys at positions <= kv_lengths[b] − Tq + i; a query that sees no key
// outputs zeros. A length outside [0, Tk] is reported through the error word and the row is left
// unwritten.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

struct AttentionArgs {
  const float* q;             // [B, Tq, H·D]
  const float* k;             // [B, Tk, H·D]
  const float* v;             // [B, Tk, H·D]
  const int32_t* kv_lengths;  // [B] or null
  float* out;                 // [B, Tq, H·D]
  int64_t batch, q_len, kv_len;
  int heads, head_dim;
  float scale;
  bool causal;
  // Flash v2 only: q, k, v are f16 (f16 activations) at q16, k16, v16 (same shapes) and are
  // read as they are; q, k, v unused.
  bool half_inputs = false;
  const void *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;
  // q is f32 (q), k and v f16 at k16, v16 (an f16 K/V cache); k, v unused. SplitAttention, and
  // Flash v2 (its split-q form) from CudaBackendOptions::flash_half_kv_min_queries queries.
  bool kv_half = false;
  // The output rounded to f16 at out16 (out unused): SplitAttention and Flash v2 round as they
  // store; LaunchAttention runs the other kernels into f32 scratch and converts after them.
  bool out_half = false;
  void* out16 = nullptr;
};

// Largest head_dim SplitAttention handles.
inline constexpr int kMaxHeadDim = 256;

// How SplitAttention divides the work; depends only on shapes, so a captured graph keeps it.
struct SplitPlan {
  int splits = 1;            // key ranges per (row, head, query block)
  int64_t q_blocks = 1;      // blocks of 16 queries
  size_t partial_bytes = 0;  // scratch for partial results (0 when splits == 1)
  int64_t counters = 0;      // zeroed i32 arrival counters needed (0 when splits == 1)
};
// `max_counters`: how many counters the caller can provide; the plan never needs more. Keys are
// split until the grid has about `blocks_per_sm` blocks per multiprocessor.
SplitPlan PlanSplitAttention(const AttentionArgs& args, int sm_count, int64_t max_counters,
                             int blocks_per_sm = 8);
// `partials` and `counters` as the plan says; counters must be zero and are left zero.
cudaError_t LaunchSplitAttention(const LaunchContext& ctx, const AttentionArgs& args,
                                 const SplitPlan& plan, float* partials, int* counters);

// Whether FlashAttention can run these shapes in this build.
bool FlashAttentionSupported(const AttentionArgs& args);

// How FlashAttention divides the work; depends only on shapes.
struct FlashPlan {
  int splits = 1;            // key ranges per (row, head, block of 64 queries)
  size_t half_bytes = 0;     // f16 copies of q, k, v
  size_t partial_bytes = 0;  // partial results when splits > 1
  size_t scratch_bytes = 0;  // half_bytes + partial_bytes
  int64_t counters = 0;      // zeroed arrival counters needed (0 when splits == 1)
  int m_tiles = 1;           // Flash v2: m-tiles of 16 queries a warp (64·m_tiles a block)
};
FlashPlan PlanFlashAttention(const AttentionArgs& args, int sm_count, int64_t max_counters);
cudaError_t LaunchFlashAttention(const LaunchContext& ctx, const AttentionArgs& args,
                                 const FlashPlan& plan, void* scratch, int* counters);

// FlashAttention v2 (flash_attention.cu): the same arithmetic, tuned. Keys are split over blocks
// (up to 4 ranges, as many as one wave of resident blocks holds) so that the grid fills the chip,
// merged by the last block of each group with all its threads; K fragments through ldmatrix; masks
// only on the tiles that need them; q, k, v, out 16-byte aligned. Once per process and device,
// before the first launch (the shared-memory carveout).
cudaError_t PrepareFlashAttention2();
bool FlashAttention2Supported(const AttentionArgs& args);
// `force_splits` > 0: that many key ranges (at most 4) instead of the plan's choice.
// `m_tiles`: 16-query m-tiles a warp, 1 or 2, 0 the plan's choice (CudaBackendOptions::
// flash_m_tiles; the split-q form takes 1).
FlashPlan PlanFlashAttention2(const AttentionArgs& args, int sm_count, int64_t max_counters,
                              int force_splits = 0, int m_tiles = 0);
cudaError_t LaunchFlashAttention2(const LaunchContext& ctx, const AttentionArgs& args,
                                  const FlashPlan& plan, void* scratch, int* counters);

}  // namespace waav::cuda

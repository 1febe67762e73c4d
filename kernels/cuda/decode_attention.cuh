// DecodeAttention: one query per batch row (a decoder step) against a K/V cache, head_dim 64, all
// of a row's heads in one block, K and V f32 or f16 (widened as they are loaded), f32 q, out and
// arithmetic. For a step of many rows the cross-attention streams the whole cross cache from
// memory (64 rows of Whisper tiny: 147 MB per layer), so this kernel is written for the memory
// system: a block reads whole contiguous K and V rows (every head of a key, 768 bytes in f16)
// rather than one head's 128-byte slice of each, and each thread keeps 8 16-byte loads in flight.
//
// Layout: kLanes lanes (8 for f16, 16 for f32) hold one (key, head) pair, 16 bytes each; a pass
// of the block takes keys_per_pass consecutive keys with every head, so group g has head g % H
// for the whole kernel and keeps its query slice in registers. Each group runs an online softmax
// over its keys (no block barrier in the loop); the groups of a head are merged through shared
// memory at the end. Rows with few keys each split them over `splits` blocks, the last of which
// merges the partial results (flash-decoding), so one launch suffices.
//
// Semantics are Backend::Attention's for q_len 1: row b sees keys [0, kv_lengths[b]) (all with
// no lengths; `causal` changes nothing for one query), a row that sees no key outputs zeros, and a
// length outside [0, Tk] is reported through the error word and the row left unwritten.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

// How DecodeAttention divides the work; depends only on shapes (a captured graph keeps it).
struct DecodePlan {
  bool supported = false;    // false: these shapes go to SplitAttention
  int splits = 1;            // key ranges per batch row
  int keys_per_pass = 1;     // keys a block takes at once (with all their heads)
  int threads = 0;           // per block
  size_t partial_bytes = 0;  // scratch for partial results (0 when splits == 1)
  int64_t counters = 0;      // zeroed i32 arrival counters needed (0 when splits == 1)
  bool evict_first = false;  // K and V loaded evict-first in L2 (the caller's choice)
};

// Whether the shapes suit the kernel (q_len 1, head_dim 64, f32 q, 16-byte aligned K and V, at
// most 64 heads of f16 or 32 of f32), and if so the plan: `keys_per_pass` keys a pass (0: as many
// as 512 threads take), keys split until the grid has about `blocks_per_sm` blocks per
// multiprocessor, each range of a full cache keeping at least two iterations. (A row's split
// divides its own length: a short row's ranges are short.)
DecodePlan PlanDecodeAttention(const AttentionArgs& args, int sm_count, int64_t max_counters,
                               int blocks_per_sm = 1, int keys_per_pass = 0);
// `partials` and `counters` as the plan says; counters must be zero and are left zero.
cudaError_t LaunchDecodeAttention(const LaunchContext& ctx, const AttentionArgs& args,
                                  const DecodePlan& plan, float* partials, int* counters);

}  // namespace waav::cuda

// SharedKvAttention (Backend::SharedKvAttention): H query heads of width D over keys that are
// also the values, one K/V head shared by all (Whisper's cross-attention with the key and value
// projections absorbed, reading the f16 encoder output once per layer instead of the layer's
// K and V caches: half the bytes of a decoder step's largest read).
//
// On tensor cores (mma.sync m16n8k16, f16 operands, f32 accumulation). A block takes 8 queries
// of one batch row (a Whisper step's 6 heads) and a range of keys. Its 16 mma rows are the 8
// queries' f16 parts and their rounding errors (q − f16(q)), so that the scores are those of the
// f32 queries to ~2^-22 relative; the probabilities are split the same way for the weighted sum.
// D / 64 warps: for the scores warp w takes keys [8w, 8w + 8) of each tile of 8 · D / 64 keys
// (rounded up to 16) over the whole width; for the weighted sum it takes dims [64w, 64w + 64)
// over the tile's keys, its accumulators in registers. Tiles are loaded by cp.async into rows
// padded so that ldmatrix is conflict-free, through a ring of 2 to 6 buffers (one commit group a
// tile). The scores go through shared memory (two barriers a tile); every warp runs the same
// online softmax over them. Key ranges of one row are merged by the last block to finish
// (flash-decoding), so one launch suffices; its loads of the ranges' partial sums are issued
// together.
//
// An i8 kv (Backend::QuantizeChannels' output, kv_scales beside it) lands in a ring of i8 tiles,
// half an f16 one's bytes, so more of them are in flight at the same occupancy (3 stages on a
// Hopper). The scores run on the integer tensor cores (mma.sync m16n8k32, i8 operands, i32
// accumulation: exact): each query, multiplied by its channels' scales, is split into three i8
// terms with a scale each (the first two in the mma's 16 rows, the third in a second mma; the
// three within ~2e-7 relative of the f32 query's attention), stored with each 64 dims reordered
// so that a lane reads 16 dims of a key at once for two k-steps; the keys enter as they are.
// For the weighted sum each warp widens its 64 dims of 16 keys at a time into a buffer of its
// own (exactly: the integers are f16 values; ldmatrix.trans needs 16-bit elements), and the
// outputs are multiplied by the channels' scales at the end. Session 29's kernel widened the
// keys for an f16 mma instead: the integer mma took 256 rows' step from 698.8 to 657.9 µs on an
// H100 (session 30). No L2 hints for it (with them an i8 build of the kernel stopped on an
// illegal instruction on an H100, session 29; the hints measured a loss in serving anyway).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

// The widest kv the kernel takes (Backend::kMaxSharedKvWidth): D / 64 warps of 64 dims each.
constexpr int kSharedKvMaxWidth = 512;

struct SharedKvArgs {
  const float* q = nullptr;          // [B, queries, width], queries = Tq · H
  const void* kv = nullptr;          // f16 [B, kv_len, width], or i8 with kv_scales
  const float* kv_scales = nullptr;  // null (f16 kv), or [B, width]: kv's scale per channel
  void* out = nullptr;               // [B, queries, width], f32 or (out_f16) f16
  bool out_f16 = false;
  int64_t batch = 0, queries = 0, kv_len = 0;
  int width = 0;
  float scale = 1.0f;
};

// How the kernel divides the work; depends only on shapes (a captured graph keeps it).
struct SharedKvPlan {
  bool supported = false;  // false: no kernel for these arguments (see the .cu)
  int splits = 1;          // key ranges per (row, group of 8 queries)
  int64_t keys_per_split = 0;
  size_t partial_bytes = 0;  // scratch for partial results (0 when splits == 1)
  int64_t counters = 0;      // zeroed i32 arrival counters needed (0 when splits == 1)
  int stages = 2;            // tiles in shared memory (2: double-buffered; an i8 kv 2 or 3)
  // An i8 kv in one key range a row whose grid fits two blocks a multiprocessor: the queries'
  // first two terms held in registers (a kernel of two resident blocks).
  bool hold_queries = false;
  // L2 hints for kv: -1 or 0 none; else rows [0, retain_rows) are the launch's access-policy
  // window, their lines persisting in the L2 set aside (kept for the next layer's and the next
  // step's read of the same encoder output), the other rows' lines as usual.
  int64_t retain_rows = -1;
};

// Whether this build has the kernel (tensor cores: the CUDA build, not HIP's).
bool SharedKvAttentionAvailable();
// The plan for `gpu` (its multiprocessors and shared memory: CurrentGpuShape): supported for
// width a multiple of 64 in [64, 512], kv and out 16-byte aligned, and the block's tiles within
// the device's shared memory (87 KB at width 384: every GPU from sm_80 on; 148 KB at 512: not
// Ada; an i8 kv's two stages 62 KB and 98.5 KB, kv_scales 8-byte aligned); key ranges until the
// grid fills the resident blocks of every multiprocessor once, at most 16 and one per tile
// (`force_splits` > 0: that many, within the same bounds; for tests), one range when the counters
// would not do. `deep_pipeline`: where the device has room (a Hopper), one block per
// multiprocessor with as many tiles as fit (5 at width 384, 3 at 512; 4 or 2 of them in flight)
// instead of two double-buffered blocks. An i8 kv otherwise takes two stages, up to three blocks a
// multiprocessor (the kernel's launch bound) where shared memory holds them; `i8_stages` 3 takes
// three stages where they fit. `l2_retain_bytes` >= 0 (f16 kv): the L2 hints above, with as many
// whole rows kept as fit in that many bytes; -1: no hints.
SharedKvPlan PlanSharedKvAttention(const SharedKvArgs& args, const GpuShape& gpu,
                                   int64_t max_counters, int force_splits = 0,
                                   bool deep_pipeline = false, int64_t l2_retain_bytes = -1,
                                   int i8_stages = 0);
// The widest width (a multiple of 64, at most kSharedKvMaxWidth) whose two-tile block fits `gpu`'s
// shared memory: 512 from an A100 up, 384 on Ada; 0 without the kernel or a device.
int SharedKvMaxWidth(const GpuShape& gpu);
// The part of L2 kept for lines loaded evict-last (the retained rows above: the CUDA programming
// guide's set-aside for persisting accesses): `bytes` clamped to the device's maximum, the limit
// before into `previous`, the bytes set into `set`. RestorePersistingL2 puts the limit back and
// returns the kept lines to normal. (cudaErrorNotSupported where the device or build has no
// set-aside.)
cudaError_t SetAsidePersistingL2(size_t bytes, size_t* previous, size_t* set);
void RestorePersistingL2(size_t previous);
// `partials` and `counters` as the plan says; counters must be zero and are left zero.
cudaError_t LaunchSharedKvAttention(const LaunchContext& ctx, const SharedKvArgs& args,
                                    const SharedKvPlan& plan, float* partials, int* counters);

}  // namespace waav::cuda

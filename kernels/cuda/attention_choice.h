// Which kernel runs a Backend::Attention call on the CUDA backend, with its plan, and the launch
// of that choice. The choice depends only on shapes, dtypes and options, so a captured graph
// keeps it:
//  * DecodeAttention: one query per row, head_dim 64, f32 q (a decoder step), with
//    CudaBackendOptions::decode_attention;
//  * flash v2 / v1 (f16 tensor cores): kFast, several queries, K and V not an f16 cache;
//  * SplitAttention for the rest (f32 arithmetic, f16 caches widened as they are loaded).
// f16 q, k, v for a kernel that reads f32 are first converted into scratch; an f16 out
// (AttentionArgs::out_half) is rounded by SplitAttention as it stores, by a conversion after
// the others.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/decode_attention.cuh"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

struct AttentionChoice {
  bool flash = false, flash2 = false;  // flash v1 or v2 (else decode or split)
  SplitPlan split;
  FlashPlan flash_plan;
  DecodePlan decode;         // decode.supported: DecodeAttention
  size_t convert_bytes = 0;  // f32 copies of f16 q, k, v at the start of the scratch
  size_t out32_bytes = 0;    // an f32 out at the scratch's end, rounded into f16 (out_half)
  size_t scratch_bytes = 0;  // convert_bytes + the kernel's own + out32_bytes
  int64_t q_numel = 0, kv_numel = 0;
};

// `args` as the call gives them (half_inputs / kv_half with their f16 pointers); its half_inputs
// is cleared when the chosen kernel reads f32 copies.
AttentionChoice ChooseAttention(AttentionArgs& args, int64_t q_numel, int64_t kv_numel,
                                const CudaBackendOptions& options, int sm_count,
                                int64_t max_counters);
// Runs the choice: `scratch` of choice.scratch_bytes, `counters` zeroed (left zero); q16, k16,
// v16 the f16 inputs when there is something to convert.
cudaError_t LaunchAttention(const LaunchContext& ctx, AttentionArgs args,
                            const AttentionChoice& choice, void* scratch, int* counters);

}  // namespace waav::cuda

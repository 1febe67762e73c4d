// Backend::HeadScores on the CPU (head_scores.cc, compiled for the baseline target without
// floating-point contraction, so that each product and each sum is rounded as the contract
// says).
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/runtime/backend.h"
#include "kernels/cpu/kernels.h"

namespace waav::cpu {

// q f32 [B, q_len, channels], k (f32 or f16) [B, k_len, channels]; items already checked.
struct HeadScoresShape {
  int64_t q_len, k_len, channels, head_dim;
};
void HeadScoresKernel(const KernelContext& ctx, const float* q, const void* k, DType k_dtype,
                      const HeadScoresShape& shape, float scale,
                      absl::Span<const HeadScoresItem> items, float* out);

}  // namespace waav::cpu

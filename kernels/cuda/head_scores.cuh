// Backend::HeadScores on the GPU: chosen heads' query-key dot products, every product and sum
// rounded as the contract says (no fused multiply-add), so the floats equal the CPU backend's.
#pragma once

#include <cstdint>

#include "engine/runtime/head_scores_item.h"
#include "kernels/cuda/launch.h"

namespace waav::cuda {

// q f32 [B, q_len, channels], k [B, k_len, channels] (f16 with k_f16, else f32); `items`
// already checked. They travel in the launches' parameters, kHeadScoresPerLaunch a launch.
constexpr int kHeadScoresPerLaunch = 64;
cudaError_t LaunchHeadScores(const LaunchContext& ctx, const float* q, const void* k, bool k_f16,
                             int64_t q_len, int64_t k_len, int64_t channels, int head_dim,
                             float scale, const HeadScoresItem* items, int64_t count, float* out);

}  // namespace waav::cuda

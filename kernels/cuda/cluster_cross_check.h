// The cluster step's cross-attention building blocks (cluster_cross_mma.cuh and
// CrossAttentionBalanced in cluster_decoder_parts.cuh) run alone in one block, for tests: the
// layers' kernel only ever gives them ~94 keys (Whisper's 1500 over 16 blocks), this takes any
// count that fits in shared memory.
#pragma once

#include "kernels/cuda/gpu.h"

namespace waav::cuda {

// The most keys ClusterCrossAttentionCheck takes (its stage fits in one block's shared memory).
inline constexpr int kClusterCrossCheckMaxKeys = 120;

// One block's cross-attention over n_keys rows of 384 f16 (k, v: device, row-major) for the
// query q (384 f32, device), all six heads of 64 dims, with `scale`: the block's partial per
// head into out (device, 6 x 68 floats: o[64] unnormalised, m in natural log units, l, two
// unused), by the tensor cores (`mma`) or the CUDA cores (CrossAttentionBalanced, then
// MergeBlock). Synchronous. cudaErrorNotSupported below compute capability 9.0 and under HIP;
// cudaErrorInvalidValue for n_keys outside [0, kClusterCrossCheckMaxKeys].
cudaError_t ClusterCrossAttentionCheck(const void* k, const void* v, int n_keys, const float* q,
                                       float scale, bool mma, float* out);

}  // namespace waav::cuda

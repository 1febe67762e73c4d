// Row-wise log-softmax over the last dim; y may alias x.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

cudaError_t LaunchLogSoftmax(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                             float* y);

// Backend::ArgmaxLogSumExp: per row, the masked argmax, its logit and Σ exp(double(x − max)) as
// three floats (out [rows, 5]); rows whose mask_index is −1 are left out, a mask_index outside
// [−1, num_masks) is reported through the device error word. Sums in a tree order (f64). With
// cluster_blocks 8 or 16, on a thread-block cluster of that many blocks per row where the GPU
// has clusters (16 only while the rows' clusters are resident at once, else 8); 0, or without
// clusters, one block a row.
cudaError_t LaunchArgmaxLogSumExp(const LaunchContext& ctx, const float* logits, int64_t rows,
                                  int64_t cols, const int32_t* masks, int64_t mask_words,
                                  int64_t num_masks, const int32_t* mask_index, float* out,
                                  int cluster_blocks = 16);

// Backend::FeedChoices: per row whose mask_index is >= 0, the chosen token into tokens and the
// position advanced (at most max_position) into positions and lengths; a choice that is not a
// token id is reported through the device error word.
cudaError_t LaunchFeedChoices(const LaunchContext& ctx, const float* choices,
                              const int32_t* mask_index, int64_t rows, int32_t max_position,
                              int32_t* tokens, int32_t* positions, int32_t* lengths);

}  // namespace waav::cuda

// Backend::QuantizeChannels on the GPU: x f32 [B, T, C] -> q i8 [B, T, C] and scales f32 [B, C],
// scales[b, c] = max_t |x[b, t, c]| / 127, q = x / scale rounded to nearest even (0 where the
// scale is 0), the same integers as the CPU's (IEEE division and rounding on both).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

cudaError_t LaunchQuantizeChannels(const LaunchContext& ctx, const float* x, int64_t batch,
                                   int64_t rows, int64_t channels, int8_t* q, float* scales);

}  // namespace waav::cuda

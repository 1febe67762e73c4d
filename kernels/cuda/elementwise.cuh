// Elementwise kernels: y = a + b (b repeated every `period` values of a: Backend::Add's
// broadcast; 0 or n: no repeat), y = gelu(x). Outputs may alias inputs exactly.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

cudaError_t LaunchAdd(const LaunchContext& ctx, const float* a, const float* b, float* y, int64_t n,
                      int64_t period = 0);
cudaError_t LaunchGelu(const LaunchContext& ctx, const float* x, float* y, int64_t n);

}  // namespace waav::cuda

// Row-wise log-softmax over the last dim; y may alias x.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

cudaError_t LaunchLogSoftmax(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                             float* y);

}  // namespace waav::cuda

// Row-wise layer normalisation: y = (x − mean) / sqrt(var + eps) · gamma + beta; y may alias x.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

cudaError_t LaunchLayerNorm(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                            const float* gamma, const float* beta, float eps, void* y,
                            bool y_f16 = false);

}  // namespace waav::cuda

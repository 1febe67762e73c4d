// Conv1d as im2col + GEMM: this builds the column matrix; the GEMM (gemm.h) multiplies it by the
// weight seen as [Cout, Cin·K], whose row layout (c·K + j) the columns follow.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

struct Im2colShape {
  int64_t batch, time, in_channels, kernel_size, out_time;
  int stride, padding;
};

// col[b·out_time + t, c·K + j] = x[b, t·stride − padding + j, c] (0 outside [0, time)); `col`
// holds floats, or with `col_f16` the values rounded to __half (input of the f16 GEMM, which then
// needs no conversion pass).
cudaError_t LaunchIm2col(const LaunchContext& ctx, const float* x, const Im2colShape& shape,
                         void* col, bool col_f16 = false);

}  // namespace waav::cuda

// The activation after a GEMM's bias (Epilogue of linear.cuh), for every kernel that ends in one:
// SkinnyLinear / TiledLinear / Epilogue (linear.cu), the fused LayerNorm + GEMV (fused_linear.cu)
// and HalfGemm (half_gemm.cu).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

__device__ __forceinline__ float ApplyEpilogue(float v, Epilogue act) {
  switch (act) {
    case Epilogue::kGelu:
      return GeluExact(v);
    case Epilogue::kRelu:
      return v > 0.0f ? v : (v == v ? 0.0f : v);  // NaN stays NaN
    case Epilogue::kSigmoid:
      return 1.0f / (1.0f + expf(-v));
    case Epilogue::kNone:
      break;
  }
  return v;
}

// ApplyEpilogue for a value rounded to f16 next: GELU by GeluForHalf.
__device__ __forceinline__ float HalfEpilogue(float v, Epilogue act) {
  return act == Epilogue::kGelu ? GeluForHalf(v) : ApplyEpilogue(v, act);
}

// The first element of row `row` in plane `plane` of `out` (C = plane_cols): row · C, or in an
// appended cache (row · capacity + positions[row]) · C; −1 (the error reported) when that
// position is outside the cache.
__device__ __forceinline__ int64_t PlaneRowOffset(const PlaneOutputs& out, int plane, int64_t row,
                                                  int64_t plane_cols) {
  if (plane < out.first_appended) return row * plane_cols;
  const int32_t position = out.positions[row];
  if (position < 0 || position >= out.capacity) {
    ReportDeviceError(out.error_word, DeviceErrorOp::kWriteRows, row, position);
    return -1;
  }
  return (row * out.capacity + position) * plane_cols;
}

}  // namespace waav::cuda

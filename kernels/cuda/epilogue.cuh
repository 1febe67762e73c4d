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

}  // namespace waav::cuda

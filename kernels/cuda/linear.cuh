// Kernels behind Linear and Conv1d (gemm.cc chooses among them):
//  * SkinnyLinear: few rows (decoder steps). Reads each weight row once with 16-byte loads,
//    f32 or f16 widened exactly, f32 FMA; bias and activation fused. Exact f32 arithmetic.
//  * TiledLinear: a plain shared-memory tiled f32 GEMM with the same epilogue, for many rows
//    when cuBLAS is not available (and in the HIP build).
//  * ToHalf / SplitHalf: activations to f16 for the tensor-core GEMM (one f16, or hi + lo whose
//    sum carries 22 significant bits), and Epilogue: bias + activation after cuBLAS.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

// Activation applied after the bias. Values match nothing outside this folder.
enum class Epilogue : int { kNone = 0, kGelu = 1, kRelu = 2, kSigmoid = 3 };

// Rows up to which SkinnyLinear is the default (more rows go to cuBLAS when it is loaded).
inline constexpr int64_t kSkinnyMaxRows = 16;

// y[M, N] = act(x[M, K] · w[N, K]ᵀ + bias[N]); w is f32 or f16; bias may be null.
cudaError_t LaunchSkinnyLinear(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                               const void* w, bool w_f16, int64_t n, const float* bias,
                               Epilogue act, float* y);
cudaError_t LaunchTiledLinear(const LaunchContext& ctx, const float* x, int64_t m, int64_t k,
                              const void* w, bool w_f16, int64_t n, const float* bias, Epilogue act,
                              float* y);

// out[i] = f16(x[i]) (round to nearest) for i < n. `out` holds __half values.
cudaError_t LaunchToHalf(const LaunchContext& ctx, const float* x, int64_t n, void* out);
// out[i] = float(x[i]) for i < n (exact). `x` holds __half values.
cudaError_t LaunchToFloat(const LaunchContext& ctx, const void* x, int64_t n, float* out);
// out[r, c] = f16(act(in[r, c] + bias[c])) over rows × cols; bias may be null. `out` holds
// __half values (f16 activations for the next GEMM).
cudaError_t LaunchEpilogueToHalf(const LaunchContext& ctx, const float* in, int64_t rows,
                                 int64_t cols, const float* bias, Epilogue act, void* out);
// y[r, c] = f16(act(y[r, c] + bias[c])) over rows × cols, in place on f16 values (a cuBLAS GEMM's
// f16 output); bias may be null.
cudaError_t LaunchEpilogueHalfInPlace(const LaunchContext& ctx, void* y, int64_t rows, int64_t cols,
                                      const float* bias, Epilogue act);
// Where LinearPlanes writes: one pointer per plane (by value in the kernel's arguments).
inline constexpr int kMaxPlaneOutputs = 16;
struct PlaneOutputs {
  void* planes[kMaxPlaneOutputs];
  // Planes from first_appended on are f32 caches [rows, capacity, C] appended to as WriteRows
  // appends (LinearPlanesAppend): row r goes to [r, positions[r]]; a position outside
  // [0, capacity) is reported on error_word (DeviceErrorOp::kWriteRows) and not written.
  int first_appended = kMaxPlaneOutputs;
  const int32_t* positions = nullptr;
  int64_t capacity = 0;
  unsigned long long* error_word = nullptr;
};
// The planes of LinearPlanes: out.planes[c / C][r, c % C] = in[r, c] + bias[c] over rows × cols,
// cols a multiple of C (at most kMaxPlaneOutputs planes); the planes hold __half values when
// `out_f16`, else floats (appended planes: f32 only).
cudaError_t LaunchEpiloguePlanes(const LaunchContext& ctx, const float* in, int64_t rows,
                                 int64_t cols, int64_t plane_cols, const float* bias,
                                 const PlaneOutputs& out, bool out_f16);
// hi[i] = f16(x[i]), lo[i] = f16(x[i] − hi[i]).
cudaError_t LaunchSplitHalf(const LaunchContext& ctx, const float* x, int64_t n, void* hi,
                            void* lo);
// y[r, c] = act(y[r, c] + bias[c]) over rows × cols (in place); bias may be null. With
// `zero_input`, y's old contents are ignored (an empty sum: y = act(bias)).
cudaError_t LaunchEpilogue(const LaunchContext& ctx, float* y, int64_t rows, int64_t cols,
                           const float* bias, Epilogue act, bool zero_input);

}  // namespace waav::cuda

// FusedLinear: the skinny GEMM (few rows, see linear.cuh) with an optional LayerNorm of x before
// it and an output that is stored, added to y in place (a residual), or scattered as Q, K, V with
// K and V appended to caches. It folds LayerNorm + Linear + Add, or LayerNorm + three
// projections + two WriteRows, into one launch: the decoder step's kernel count drops from 75 to
// 34. Exact f32 arithmetic, like the skinny GEMM.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

enum class FusedOutput : int {
  kStore = 0,       // y[m, n] = v
  kAccumulate = 1,  // y[m, n] += v
  kQkv = 2,         // n < C: q[m, n]; C <= n < 2C: k_cache[m, positions[m], n − C]; then v_cache
};

struct FusedLinearParams {
  const float* x;  // [M, K]
  int64_t m, k;
  const float* gamma;  // LayerNorm of x first when not null
  const float* beta;
  float eps;
  const void* w;  // [N, K]
  bool w_f16;
  int64_t n;
  const float* bias;  // [N] or null
  Epilogue act;
  FusedOutput output;
  float* y;  // kStore, kAccumulate: [M, N]
  // kQkv: C = N / 3.
  float* q;
  float* k_cache;
  float* v_cache;
  const int32_t* positions;
  int64_t capacity;
  unsigned long long* error_word;  // set by the launcher from the context
};

// kQkv for more rows than the fused kernel takes: scatters src [M, 3C] (a plain GEMM's output)
// into q and the caches.
cudaError_t LaunchQkvScatter(const LaunchContext& ctx, const float* src, int64_t m,
                             int64_t channels, float* q, float* k_cache, float* v_cache,
                             const int32_t* positions, int64_t capacity);

// Rows up to which the fused kernel runs (like the skinny GEMM), and the widest K its LayerNorm
// prologue holds in shared memory.
inline constexpr int64_t kFusedMaxRows = 16;
inline constexpr int64_t kFusedMaxNormK = 1024;

// Whether the fused kernel takes these arguments (else the caller composes separate kernels).
bool FusedLinearSupported(const FusedLinearParams& p);
cudaError_t LaunchFusedLinear(const LaunchContext& ctx, const FusedLinearParams& p);

}  // namespace waav::cuda

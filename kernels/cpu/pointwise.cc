// ReLU / sigmoid and the complex magnitude: one pass over small tensors (Silero VAD calls them on
// a few thousand elements per stream), spread over the pool only for large inputs.
#include "kernels/cpu/pointwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_sigmoid.h"
#include "engine/runtime/thread_pool.h"

namespace waav::cpu {
namespace {

// Elements per chunk below which a job stays on the calling thread.
constexpr int64_t kElementGrain = 1 << 14;

template <typename F>
void Map(const KernelContext& ctx, const float* x, float* y, int64_t n, F fn) {
  ctx.pool->ParallelFor(
      n,
      [&](int64_t begin, int64_t end) {
        int64_t i = begin;
        for (; i + simd::kLanes <= end; i += simd::kLanes) {
          _mm256_storeu_ps(y + i, fn(_mm256_loadu_ps(x + i)));
        }
        if (i < end) {
          const __m256i mask = simd::TailMask(end - i);
          _mm256_maskstore_ps(y + i, mask, fn(_mm256_maskload_ps(x + i, mask)));
        }
      },
      kElementGrain);
}

}  // namespace

void ActivationKernel(const KernelContext& ctx, Pointwise fn, const float* x, float* y, int64_t n) {
  switch (fn) {
    case Pointwise::kRelu:
      Map(ctx, x, y, n, [](__m256 v) { return simd::Relu(v); });
      return;
    case Pointwise::kSigmoid:
      Map(ctx, x, y, n, [](__m256 v) { return simd::Sigmoid(v); });
      return;
  }
}

void ComplexMagnitudeKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t half,
                            float* y) {
  if (half == 0) return;
  ctx.pool->ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* re = x + r * 2 * half;
          const float* im = re + half;
          float* out = y + r * half;
          int64_t i = 0;
          for (; i + simd::kLanes <= half; i += simd::kLanes) {
            const __m256 a = _mm256_loadu_ps(re + i), b = _mm256_loadu_ps(im + i);
            _mm256_storeu_ps(out + i, _mm256_sqrt_ps(_mm256_fmadd_ps(a, a, _mm256_mul_ps(b, b))));
          }
          for (; i < half; ++i) out[i] = std::sqrt(std::fma(re[i], re[i], im[i] * im[i]));
        }
      },
      std::max<int64_t>(1, kElementGrain / half));
}

}  // namespace waav::cpu

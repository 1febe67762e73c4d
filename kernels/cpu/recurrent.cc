// One LSTM cell step: the two matrix products fused into one GEMM over [x | h] (LinearKernel,
// which picks its GEMV-like path for the few rows of a streaming batch), then the gate
// nonlinearities and the state update in one pass per row.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_sigmoid.h"
#include "engine/runtime/thread_pool.h"

namespace waav::cpu {
namespace {

// c_out = σ(f) ⊙ c + σ(i) ⊙ tanh(g); h_out = σ(o) ⊙ tanh(c_out), for one row. Reads c[j] before
// writing c_out[j], so c_out may be c.
void GateRow(const float* gates, const float* c, int64_t hidden, float* h_out, float* c_out) {
  const float* gi = gates;
  const float* gf = gates + hidden;
  const float* gg = gates + 2 * hidden;
  const float* go = gates + 3 * hidden;
  auto step = [](__m256 i, __m256 f, __m256 g, __m256 o, __m256 cv, __m256* h_new, __m256* c_new) {
    *c_new = _mm256_fmadd_ps(simd::Sigmoid(f), cv, _mm256_mul_ps(simd::Sigmoid(i), simd::Tanh(g)));
    *h_new = _mm256_mul_ps(simd::Sigmoid(o), simd::Tanh(*c_new));
  };
  int64_t j = 0;
  __m256 h_new, c_new;
  for (; j + simd::kLanes <= hidden; j += simd::kLanes) {
    step(_mm256_loadu_ps(gi + j), _mm256_loadu_ps(gf + j), _mm256_loadu_ps(gg + j),
         _mm256_loadu_ps(go + j), _mm256_loadu_ps(c + j), &h_new, &c_new);
    _mm256_storeu_ps(c_out + j, c_new);
    _mm256_storeu_ps(h_out + j, h_new);
  }
  if (j < hidden) {
    const __m256i mask = simd::TailMask(hidden - j);
    step(_mm256_maskload_ps(gi + j, mask), _mm256_maskload_ps(gf + j, mask),
         _mm256_maskload_ps(gg + j, mask), _mm256_maskload_ps(go + j, mask),
         _mm256_maskload_ps(c + j, mask), &h_new, &c_new);
    _mm256_maskstore_ps(c_out + j, mask, c_new);
    _mm256_maskstore_ps(h_out + j, mask, h_new);
  }
}

}  // namespace

void LstmCellKernel(const KernelContext& ctx, const LstmShape& s, const float* x, const float* h,
                    const float* c, const void* weight, DType weight_dtype, const float* bias,
                    float* xh, float* gates, float* h_out, float* c_out) {
  const int64_t width = s.input + s.hidden;
  if (s.batch == 0 || s.hidden == 0) return;
  // [x | h] is built before anything is written, so h_out may be h.
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(xh + b * width, x + b * s.input, static_cast<size_t>(s.input) * sizeof(float));
    std::memcpy(xh + b * width + s.input, h + b * s.hidden,
                static_cast<size_t>(s.hidden) * sizeof(float));
  }
  LinearKernel(ctx, xh, s.batch, width, weight, weight_dtype, 4 * s.hidden, bias,
               /*gelu=*/false, gates);
  ctx.pool->ParallelFor(
      s.batch,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          GateRow(gates + b * 4 * s.hidden, c + b * s.hidden, s.hidden, h_out + b * s.hidden,
                  c_out + b * s.hidden);
        }
      },
      std::max<int64_t>(1, 4096 / s.hidden));
}

}  // namespace waav::cpu

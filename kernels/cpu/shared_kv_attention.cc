// Attention of several query heads over keys that are also the values (Backend::SharedKvAttention).
//
// Per batch row, two sgemm calls over all heads at once (the heads share the keys, so the
// row's Tq·H queries are one matrix): S = Q·Kᵀ [Tq·H, Tk], a softmax of each row of S in place
// (scaled, max subtracted, sum in double), then O = P·K [Tq·H, D] divided by each row's sum.
// Not a hot path on the CPU (Whisper keeps its projected cross-attention there: the absorbed
// form costs H times the multiply-adds); it is the reference the GPU kernel is checked against.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/runtime/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"

namespace waav::cpu {

void SharedKvAttentionKernel(const KernelContext& ctx, const float* q, const SharedKvSource& kv,
                             const SharedKvAttentionShape& s, float scale, float* out) {
  const int64_t queries = s.q_len * s.heads;  // rows of Q in one batch row
  if (s.batch == 0 || queries == 0) return;
  ctx.pool->ParallelForIndexed(s.batch, [&](int thread, int64_t begin, int64_t end) {
    float* scores = ctx.scratch->Get(thread, static_cast<size_t>(queries * s.kv_len));
    if (scores == nullptr) return;
    std::vector<float> widened;  // an i8 row's values times their channels' scales
    for (int64_t b = begin; b < end; ++b) {
      const float* qb = q + b * queries * s.width;
      const float* kvb = kv.f32 + b * s.kv_len * s.width;
      if (kv.f32 == nullptr) {
        widened.resize(static_cast<size_t>(s.kv_len * s.width));
        const int8_t* row = kv.i8 + b * s.kv_len * s.width;
        const float* scales = kv.scales + b * s.width;
        for (int64_t i = 0; i < s.kv_len * s.width; ++i) {
          widened[static_cast<size_t>(i)] = static_cast<float>(row[i]) * scales[i % s.width];
        }
        kvb = widened.data();
      }
      float* ob = out + b * queries * s.width;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(queries),
                  static_cast<int>(s.kv_len), static_cast<int>(s.width), scale, qb,
                  static_cast<int>(s.width), kvb, static_cast<int>(s.width), 0.0f, scores,
                  static_cast<int>(s.kv_len));
      std::vector<float> inverse_sums(static_cast<size_t>(queries));
      for (int64_t r = 0; r < queries; ++r) {
        float* row = scores + r * s.kv_len;
        const float max = *std::max_element(row, row + s.kv_len);
        double sum = 0;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        inverse_sums[static_cast<size_t>(r)] = static_cast<float>(1.0 / sum);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(queries),
                  static_cast<int>(s.width), static_cast<int>(s.kv_len), 1.0f, scores,
                  static_cast<int>(s.kv_len), kvb, static_cast<int>(s.width), 0.0f, ob,
                  static_cast<int>(s.width));
      for (int64_t r = 0; r < queries; ++r) {
        const float inverse = inverse_sums[static_cast<size_t>(r)];
        for (int64_t d = 0; d < s.width; ++d) ob[r * s.width + d] *= inverse;
      }
    }
  });
}

void QuantizeChannelsKernel(const KernelContext& ctx, const float* x,
                            const QuantizeChannelsShape& s, int8_t* q, float* scales) {
  ctx.pool->ParallelFor(s.batch, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* xb = x + b * s.rows * s.channels;
      float* scale = scales + b * s.channels;
      std::fill(scale, scale + s.channels, 0.0f);
      for (int64_t t = 0; t < s.rows; ++t) {
        for (int64_t c = 0; c < s.channels; ++c) {
          scale[c] = std::max(scale[c], std::fabs(xb[t * s.channels + c]));
        }
      }
      for (int64_t c = 0; c < s.channels; ++c) scale[c] /= 127.0f;
      int8_t* qb = q + b * s.rows * s.channels;
      for (int64_t t = 0; t < s.rows; ++t) {
        for (int64_t c = 0; c < s.channels; ++c) {
          const int64_t i = t * s.channels + c;
          // |x| <= 127 · scale up to the division's rounding; the clamp keeps it in range (fmax
          // first, so that a NaN becomes -127 as on the GPU rather than an undefined cast).
          const float steps = scale[c] > 0.0f ? std::nearbyint(xb[i] / scale[c]) : 0.0f;
          qb[i] = static_cast<int8_t>(std::fmin(std::fmax(steps, -127.0f), 127.0f));
        }
      }
    }
  });
}

}  // namespace waav::cpu

#include "kernels/cpu/head_scores.h"

#include <algorithm>
#include <vector>

#include "engine/runtime/thread_pool.h"

namespace waav::cpu {

void HeadScoresKernel(const KernelContext& ctx, const float* q, const void* k, DType k_dtype,
                      const HeadScoresShape& shape, float scale,
                      absl::Span<const HeadScoresItem> items, float* out) {
  const int64_t d = shape.head_dim, width = shape.channels;
  // Items are independent blocks of out: one per chunk. Within an item the head's keys are
  // transposed to [d, keys] (f16 widened exactly), so that each query row's sums run over
  // contiguous keys in the order e = 0, 1, ... and the inner loop vectorises (with contraction
  // off, as a multiply and an add).
  ctx.pool->ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t begin, int64_t end) {
    std::vector<float> keys_t, key(static_cast<size_t>(d));
    for (int64_t i = begin; i < end; ++i) {
      const HeadScoresItem& it = items[static_cast<size_t>(i)];
      const int64_t n = it.keys, column = it.head * d;
      keys_t.resize(static_cast<size_t>(d * n));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = (it.row * shape.k_len + j) * width + column;
        if (k_dtype == DType::kF16) {
          HalfToFloatArray(static_cast<const uint16_t*>(k) + at, key.data(), key.size());
        } else {
          std::copy_n(static_cast<const float*>(k) + at, d, key.begin());
        }
        for (int64_t e = 0; e < d; ++e) {
          keys_t[static_cast<size_t>(e * n + j)] = key[static_cast<size_t>(e)];
        }
      }
      for (int64_t t = 0; t < it.queries; ++t) {
        const float* qt = q + (it.row * shape.q_len + t) * width + column;
        float* dots = out + it.offset + t * n;
        std::fill(dots, dots + n, 0.0f);
        for (int64_t e = 0; e < d; ++e) {
          const float qe = qt[e];
          const float* ke = keys_t.data() + e * n;
          for (int64_t j = 0; j < n; ++j) dots[j] += qe * ke[j];
        }
        for (int64_t j = 0; j < n; ++j) dots[j] *= scale;
      }
    }
  });
}

}  // namespace waav::cpu

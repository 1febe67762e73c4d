// Row-wise and elementwise kernels: LayerNorm, Add, GELU, LogSoftmax, Embed.
// Parallel over rows (or element ranges) only when there is enough work to pay for waking the
// pool: decoder steps call these on a few hundred elements.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/runtime/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd.h"

namespace waav::cpu {
namespace {

// Elements per chunk below which a job stays on the calling thread.
constexpr int64_t kElementGrain = 1 << 14;

inline int64_t RowGrain(int64_t cols) {
  return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(cols, 1));
}

void LayerNormRow(const float* x, int64_t n, const float* gamma, const float* beta, float eps,
                  float* y) {
  const int64_t body = n - n % simd::kLanes;
  // Two passes (mean, then squared deviations) in f32 with 8 lanes: no cancellation issue, and
  // each lane sums only n/8 terms.
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += simd::kLanes) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + j));
  float sum = simd::HorizontalSum(acc);
  for (int64_t j = body; j < n; ++j) sum += x[j];
  const float mean = sum / static_cast<float>(n);
  const __m256 vmean = _mm256_set1_ps(mean);
  acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += simd::kLanes) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), vmean);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  float squares = simd::HorizontalSum(acc);
  for (int64_t j = body; j < n; ++j) squares += (x[j] - mean) * (x[j] - mean);
  const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  const __m256 vrstd = _mm256_set1_ps(rstd);
  for (int64_t j = 0; j < body; j += simd::kLanes) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmean), vrstd);
    _mm256_storeu_ps(y + j,
                     _mm256_fmadd_ps(norm, _mm256_loadu_ps(gamma + j), _mm256_loadu_ps(beta + j)));
  }
  for (int64_t j = body; j < n; ++j) y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
}

// Max of x[0, n) and Σ exp(x − max).
void MaxAndSumExp(const float* x, int64_t n, float* max_out, float* sum_out) {
  const int64_t body = n - n % simd::kLanes;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < body; j += simd::kLanes)
    vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  float max = simd::HorizontalMax(vmax);
  for (int64_t j = body; j < n; ++j) max = std::max(max, x[j]);
  const __m256 shift = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += simd::kLanes) {
    vsum = _mm256_add_ps(vsum, simd::ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift)));
  }
  float sum = simd::HorizontalSum(vsum);
  for (int64_t j = body; j < n; ++j) sum += std::exp(x[j] - max);
  *max_out = max;
  *sum_out = sum;
}

void SubtractConstant(const float* x, int64_t n, float c, float* y) {
  const __m256 vc = _mm256_set1_ps(c);
  int64_t j = 0;
  for (; j + simd::kLanes <= n; j += simd::kLanes) {
    _mm256_storeu_ps(y + j, _mm256_sub_ps(_mm256_loadu_ps(x + j), vc));
  }
  for (; j < n; ++j) y[j] = x[j] - c;
}

template <typename TokenT, typename PositionT>
void EmbedRows(const int32_t* tokens, const int32_t* start_positions, int64_t time,
               const TokenT* token_table, const PositionT* position_table, int64_t channels,
               int64_t row_begin, int64_t row_end, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / time, t = r % time;
    const TokenT* tok = token_table + static_cast<int64_t>(tokens[r]) * channels;
    const PositionT* pos =
        position_table + (static_cast<int64_t>(start_positions[b]) + t) * channels;
    float* out = y + r * channels;
    int64_t c = 0;
    for (; c + simd::kLanes <= channels; c += simd::kLanes) {
      _mm256_storeu_ps(out + c, _mm256_add_ps(simd::Load8(tok + c), simd::Load8(pos + c)));
    }
    for (; c < channels; ++c) out[c] = simd::Load1(tok + c) + simd::Load1(pos + c);
  }
}

}  // namespace

void LayerNormKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t cols,
                     const float* gamma, const float* beta, float eps, float* y) {
  if (cols == 0) return;
  ctx.pool->ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          LayerNormRow(x + r * cols, cols, gamma, beta, eps, y + r * cols);
      },
      RowGrain(cols));
}

void AddKernel(const KernelContext& ctx, const float* a, const float* b, float* y, int64_t n,
               int64_t period) {
  if (n == 0) return;
  // Values [begin, end) of one period: b from its start.
  auto add = [](const float* a, const float* b, float* y, int64_t count) {
    int64_t i = 0;
    for (; i + simd::kLanes <= count; i += simd::kLanes) {
      _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    }
    for (; i < count; ++i) y[i] = a[i] + b[i];
  };
  if (period == n) {
    ctx.pool->ParallelFor(
        n, [&](int64_t begin, int64_t end) { add(a + begin, b + begin, y + begin, end - begin); },
        kElementGrain);
    return;
  }
  ctx.pool->ParallelFor(
      n / period,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) add(a + r * period, b, y + r * period, period);
      },
      std::max<int64_t>(1, kElementGrain / period));
}

void GeluKernel(const KernelContext& ctx, const float* x, float* y, int64_t n) {
  ctx.pool->ParallelFor(
      n,
      [&](int64_t begin, int64_t end) {
        int64_t i = begin;
        for (; i + simd::kLanes <= end; i += simd::kLanes) {
          _mm256_storeu_ps(y + i, simd::Gelu(_mm256_loadu_ps(x + i)));
        }
        if (i < end) {
          const __m256i mask = simd::TailMask(end - i);
          _mm256_maskstore_ps(y + i, mask, simd::Gelu(_mm256_maskload_ps(x + i, mask)));
        }
      },
      kElementGrain / 4);
}

void LogSoftmaxKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t cols,
                      float* y) {
  if (cols == 0) return;
  ThreadPool& pool = *ctx.pool;
  if (rows >= pool.num_threads() || cols < 2 * kElementGrain) {
    pool.ParallelFor(
        rows,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            float max, sum;
            MaxAndSumExp(x + r * cols, cols, &max, &sum);
            SubtractConstant(x + r * cols, cols, max + std::log(sum), y + r * cols);
          }
        },
        RowGrain(cols));
    return;
  }
  // Few long rows (logits of one decoder step): split each row across the pool, combining the
  // partial (max, sum) pairs as sum·exp(max − global max).
  const int threads = pool.num_threads();
  float* partial = ctx.scratch->Get(threads, 2 * static_cast<size_t>(threads));
  if (partial == nullptr) return;
  float* partial_max = partial;
  float* partial_sum = partial + threads;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    for (int t = 0; t < threads; ++t) {
      partial_max[t] = -std::numeric_limits<float>::infinity();
      partial_sum[t] = 0.0f;
    }
    pool.ParallelForIndexed(
        cols,
        [&](int thread, int64_t begin, int64_t end) {
          float max, sum;
          MaxAndSumExp(xr + begin, end - begin, &max, &sum);
          // A participant may run several chunks: merge into its slot.
          const float old_max = partial_max[thread];
          const float new_max = std::max(old_max, max);
          partial_sum[thread] =
              (partial_sum[thread] > 0.0f ? partial_sum[thread] * std::exp(old_max - new_max)
                                          : 0.0f) +
              sum * std::exp(max - new_max);
          partial_max[thread] = new_max;
        },
        kElementGrain);
    float max = partial_max[0];
    for (int t = 1; t < threads; ++t) max = std::max(max, partial_max[t]);
    double sum = 0.0;
    for (int t = 0; t < threads; ++t) {
      if (partial_sum[t] > 0.0f)
        sum += partial_sum[t] * std::exp(static_cast<double>(partial_max[t]) - max);
    }
    const float lse = max + static_cast<float>(std::log(sum));
    pool.ParallelFor(
        cols,
        [&](int64_t begin, int64_t end) {
          SubtractConstant(xr + begin, end - begin, lse, y + r * cols + begin);
        },
        kElementGrain);
  }
}

void EmbedKernel(const KernelContext& ctx, const int32_t* tokens, const int32_t* start_positions,
                 int64_t batch, int64_t time, const void* token_table, DType token_dtype,
                 const void* position_table, DType position_dtype, int64_t channels, float* y) {
  ctx.pool->ParallelFor(
      batch * time,
      [&](int64_t begin, int64_t end) {
        const bool tok16 = token_dtype == DType::kF16, pos16 = position_dtype == DType::kF16;
        const auto* tf = static_cast<const float*>(token_table);
        const auto* th = static_cast<const uint16_t*>(token_table);
        const auto* pf = static_cast<const float*>(position_table);
        const auto* ph = static_cast<const uint16_t*>(position_table);
        if (tok16 && pos16) {
          EmbedRows(tokens, start_positions, time, th, ph, channels, begin, end, y);
        } else if (tok16) {
          EmbedRows(tokens, start_positions, time, th, pf, channels, begin, end, y);
        } else if (pos16) {
          EmbedRows(tokens, start_positions, time, tf, ph, channels, begin, end, y);
        } else {
          EmbedRows(tokens, start_positions, time, tf, pf, channels, begin, end, y);
        }
      },
      RowGrain(channels));
}

}  // namespace waav::cpu

// Linear and Conv1d: GEMMs with a bias/GELU epilogue.
//
// Paths:
//  * few rows (decoder steps, M <= kSmallM): a GEMV-like kernel reading the weight once per
//    call straight from f32 or f16 (F16C widening), tiles of 2 rows × 4 outputs, parallel over N.
//    For the f16 logits projection (51864×384) this halves the memory traffic of an f32 copy.
//  * many rows, f32 weight: OpenBLAS sgemm, one single-threaded call per thread on a disjoint
//    block of the output (OpenBLAS runs with one thread; the pool does the parallelism).
//  * many rows, f16 weight: blocks of weight rows widened into per-thread scratch, then sgemm.
// The epilogue (bias, GELU) runs on each output block right after it is computed, while hot.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace waav::cpu {
namespace {

using detail::SgemmNT;
using detail::SmallGemm;
using simd::Load1;
using simd::Load8;

// Up to this many rows, the GEMV-like kernel beats widening + sgemm (Zen 5, K=384, N=1536:
// 1.2x at M=32, 1.5x at M=16 with f16 weights; on par with f32 weights).
constexpr int64_t kSmallM = 32;
// Weight rows widened from f16 per sgemm call on the many-rows path.
constexpr int64_t kF16BlockRows = 256;
// Output rows per im2col block of Conv1d: the block's columns should stay in L2.
constexpr int64_t kConvColumnBytes = 1 << 20;

// y[r, c] = act(y[r, c] + bias[c]) on a block of `rows` × `cols` with row stride ldy.
void BiasActivation(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias,
                    bool gelu) {
  if (bias == nullptr && !gelu) return;
  const __m256i tail_mask = simd::TailMask(cols % simd::kLanes);
  const int64_t body = cols - cols % simd::kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    for (int64_t c = 0; c < body; c += simd::kLanes) {
      __m256 v = _mm256_loadu_ps(row + c);
      if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + c));
      if (gelu) v = simd::Gelu(v);
      _mm256_storeu_ps(row + c, v);
    }
    if (body < cols) {
      __m256 v = _mm256_maskload_ps(row + body, tail_mask);
      if (bias != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + body, tail_mask));
      if (gelu) v = simd::Gelu(v);
      _mm256_maskstore_ps(row + body, tail_mask, v);
    }
  }
}

void WidenRows(const uint16_t* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + simd::kLanes <= count; i += simd::kLanes) _mm256_storeu_ps(dst + i, Load8(src + i));
  for (; i < count; ++i) dst[i] = Load1(src + i);
}

}  // namespace

void LinearKernel(const KernelContext& ctx, const float* x, int64_t m, int64_t k, const void* w,
                  DType w_dtype, int64_t n, const float* bias, bool gelu, float* y) {
  if (m == 0 || n == 0) return;
  ThreadPool& pool = *ctx.pool;
  const int threads = pool.num_threads();
  if (m <= kSmallM) {
    // Chunks of at least 64 outputs keep the per-thread weight streams long.
    pool.ParallelFor(
        n,
        [&](int64_t n_begin, int64_t n_end) {
          if (w_dtype == DType::kF16) {
            SmallGemm(x, k, m, static_cast<const uint16_t*>(w), k, k, n_begin, n_end, y, n);
          } else {
            SmallGemm(x, k, m, static_cast<const float*>(w), k, k, n_begin, n_end, y, n);
          }
          BiasActivation(y + n_begin, n, m, n_end - n_begin,
                         bias == nullptr ? nullptr : bias + n_begin, gelu);
        },
        /*grain=*/64);
    return;
  }

  if (w_dtype == DType::kF32) {
    const float* wf = static_cast<const float*>(w);
    // Split the output by columns when there are enough of them (each thread then reads only its
    // part of the weight), else by rows.
    const bool split_n = n >= 64 * threads || m < 16 * threads;
    if (split_n) {
      pool.ParallelFor((n + 15) / 16, [&](int64_t begin, int64_t end) {
        const int64_t n0 = begin * 16, n1 = std::min(n, end * 16);
        SgemmNT(m, n1 - n0, k, x, k, wf + n0 * k, k, y + n0, n);
        BiasActivation(y + n0, n, m, n1 - n0, bias == nullptr ? nullptr : bias + n0, gelu);
      });
    } else {
      pool.ParallelFor((m + 7) / 8, [&](int64_t begin, int64_t end) {
        const int64_t m0 = begin * 8, m1 = std::min(m, end * 8);
        SgemmNT(m1 - m0, n, k, x + m0 * k, k, wf, k, y + m0 * n, n);
        BiasActivation(y + m0 * n, n, m1 - m0, n, bias, gelu);
      });
    }
    return;
  }

  // f16 weight, many rows: widen blocks of weight rows into scratch, sgemm each block.
  const uint16_t* wh = static_cast<const uint16_t*>(w);
  const int64_t blocks = (n + kF16BlockRows - 1) / kF16BlockRows;
  pool.ParallelForIndexed(blocks, [&](int thread, int64_t begin, int64_t end) {
    float* wide = ctx.scratch->Get(thread, static_cast<size_t>(kF16BlockRows * k));
    if (wide == nullptr) return;
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = blk * kF16BlockRows, n1 = std::min(n, n0 + kF16BlockRows);
      WidenRows(wh + n0 * k, (n1 - n0) * k, wide);
      SgemmNT(m, n1 - n0, k, x, k, wide, k, y + n0, n);
      BiasActivation(y + n0, n, m, n1 - n0, bias == nullptr ? nullptr : bias + n0, gelu);
    }
  });
}

void Conv1dKernel(const KernelContext& ctx, const float* x, const void* w, DType w_dtype,
                  const float* bias, const Conv1dShape& s, bool gelu, float* y) {
  const int64_t cin = s.in_channels, cout = s.out_channels, ks = s.kernel_size;
  const int64_t ck = cin * ks;
  const int64_t rows = s.batch * s.out_time;
  if (rows == 0 || cout == 0) return;
  ThreadPool& pool = *ctx.pool;

  // Reorder the weight to [Cout, K, Cin] (f32) so that a column row is K input rows back to back.
  float* wp = ctx.scratch->Get(pool.num_threads(), static_cast<size_t>(cout * ck));
  if (wp == nullptr) return;
  pool.ParallelFor(
      cout,
      [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          for (int64_t c = 0; c < cin; ++c) {
            for (int64_t j = 0; j < ks; ++j) {
              const int64_t src = (o * cin + c) * ks + j;
              wp[o * ck + j * cin + c] = w_dtype == DType::kF16
                                             ? Load1(static_cast<const uint16_t*>(w) + src)
                                             : static_cast<const float*>(w)[src];
            }
          }
        }
      },
      /*grain=*/16);

  const int64_t block_rows =
      std::clamp<int64_t>(kConvColumnBytes / (ck * static_cast<int64_t>(sizeof(float))), 16, 512);
  pool.ParallelForIndexed(
      rows,
      [&](int thread, int64_t begin, int64_t end) {
        float* col = ctx.scratch->Get(thread, static_cast<size_t>(block_rows * ck));
        if (col == nullptr) return;
        for (int64_t r0 = begin; r0 < end; r0 += block_rows) {
          const int64_t r1 = std::min(end, r0 + block_rows);
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t b = r / s.out_time, t = r % s.out_time;
            const int64_t first = t * s.stride - s.padding;  // input row of kernel tap 0
            float* dst = col + (r - r0) * ck;
            for (int64_t j = 0; j < ks; ++j) {
              const int64_t in_t = first + j;
              if (in_t < 0 || in_t >= s.time) {
                std::memset(dst + j * cin, 0, static_cast<size_t>(cin) * sizeof(float));
              } else {
                std::memcpy(dst + j * cin, x + (b * s.time + in_t) * cin,
                            static_cast<size_t>(cin) * sizeof(float));
              }
            }
          }
          SgemmNT(r1 - r0, cout, ck, col, ck, wp, ck, y + r0 * cout, cout);
          BiasActivation(y + r0 * cout, cout, r1 - r0, cout, bias, gelu);
        }
      },
      /*grain=*/16);
}

}  // namespace waav::cpu

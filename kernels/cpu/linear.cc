// Linear and Conv1d: GEMMs with a bias/GELU epilogue.
//
// Paths:
//  * few rows (decoder steps, M <= kSmallM): a GEMV-like kernel reading the weight once per
//    call straight from f32 or f16 (F16C widening), tiles of 2 rows × 4 outputs, parallel over N.
//    For the f16 logits projection (51864×384) this halves the memory traffic of an f32 copy.
//  * many rows: OpenBLAS sgemm on output tiles, one single-threaded call per tile (OpenBLAS runs
//    with one thread; the pool does the parallelism); f16 weight blocks are first widened into
//    per-thread scratch.
// The epilogue (bias, GELU) runs on each output block right after it is computed, while hot.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/small_gemm.h"
#include "engine/runtime/thread_pool.h"

namespace waav::cpu {
namespace {

using detail::SgemmNT;
using detail::SmallGemm;
using simd::Load1;
using simd::Load8;

// Up to this many rows, the GEMV-like kernel beats widening + sgemm (Zen 5, K=384, N=1536:
// 1.2x at M=32, 1.5x at M=16 with f16 weights; on par with f32 weights).
constexpr int64_t kSmallM = 32;
// Largest output tile of the many-rows path (tiles shrink to even sizes and to give every thread
// work).
constexpr int64_t kTileRows = 512;
constexpr int64_t kTileCols = 256;
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

  // Many rows: tiles of about kTileRows × kTileCols outputs, ordered column block by column block
  // so that a thread walks down one block of weight rows (widened once if f16) before the next, and
  // the epilogue runs on each tile while it is still in L2.
  // Equal blocks (in multiples of 16) so that the contiguous ranges the threads get hold equal
  // work.
  const int64_t col_blocks = (n + kTileCols - 1) / kTileCols;
  const int64_t tile_cols = ((n + col_blocks - 1) / col_blocks + 15) / 16 * 16;
  int64_t wanted_row_blocks = (m + kTileRows - 1) / kTileRows;
  while (col_blocks * wanted_row_blocks < 2 * threads && m / (wanted_row_blocks + 1) >= 32) {
    ++wanted_row_blocks;
  }
  const int64_t tile_rows = (m + wanted_row_blocks - 1) / wanted_row_blocks;
  const int64_t row_blocks = (m + tile_rows - 1) / tile_rows;
  const bool f16 = w_dtype == DType::kF16;
  pool.ParallelForIndexed(
      (n + tile_cols - 1) / tile_cols * row_blocks, [&](int thread, int64_t begin, int64_t end) {
        float* wide = nullptr;
        if (f16) {
          wide = ctx.scratch->Get(thread, static_cast<size_t>(tile_cols * k));
          if (wide == nullptr) return;
        }
        int64_t widened = -1;  // column block now in `wide`
        for (int64_t item = begin; item < end; ++item) {
          const int64_t cb = item / row_blocks, rb = item % row_blocks;
          const int64_t n0 = cb * tile_cols, n1 = std::min(n, n0 + tile_cols);
          const int64_t m0 = rb * tile_rows, m1 = std::min(m, m0 + tile_rows);
          const float* wb = static_cast<const float*>(w) + n0 * k;
          if (f16) {
            if (cb != widened) {
              WidenRows(static_cast<const uint16_t*>(w) + n0 * k, (n1 - n0) * k, wide);
              widened = cb;
            }
            wb = wide;
          }
          SgemmNT(m1 - m0, n1 - n0, k, x + m0 * k, k, wb, k, y + m0 * n + n0, n);
          BiasActivation(y + m0 * n + n0, n, m1 - m0, n1 - n0,
                         bias == nullptr ? nullptr : bias + n0, gelu);
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

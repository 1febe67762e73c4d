// Inline GEMM helpers shared by the CPU kernels (compiled with -march=${WAAV_CPU_ARCH} only).
#pragma once

#include <cblas.h>

#include <cstdint>

#include "kernels/cpu/simd.h"

namespace waav::cpu::detail {

using simd::Load1;
using simd::Load8;

// y[m·ldy + n] = Σ_k x[m·ldx + k] · w[n·ldw + k] for m < MT, n < NT.
template <int MT, int NT, typename WT>
inline void DotTile(const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t k_len, float* y,
                    int64_t ldy) {
  __m256 acc[MT][NT];
  for (int m = 0; m < MT; ++m) {
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + simd::kLanes <= k_len; k += simd::kLanes) {
    __m256 xv[MT];
    for (int m = 0; m < MT; ++m) xv[m] = _mm256_loadu_ps(x + m * ldx + k);
    for (int n = 0; n < NT; ++n) {
      const __m256 wv = Load8(w + n * ldw + k);
      for (int m = 0; m < MT; ++m) acc[m][n] = _mm256_fmadd_ps(xv[m], wv, acc[m][n]);
    }
  }
  float tail[MT][NT] = {};
  for (; k < k_len; ++k) {
    for (int n = 0; n < NT; ++n) {
      const float wk = Load1(w + n * ldw + k);
      for (int m = 0; m < MT; ++m) tail[m][n] += x[m * ldx + k] * wk;
    }
  }
  for (int m = 0; m < MT; ++m) {
    if constexpr (NT % 4 == 0) {
      for (int n0 = 0; n0 < NT; n0 += 4) {
        alignas(16) float sums[4];
        _mm_store_ps(
            sums, simd::HorizontalSum4(acc[m][n0], acc[m][n0 + 1], acc[m][n0 + 2], acc[m][n0 + 3]));
        for (int n = 0; n < 4; ++n) y[m * ldy + n0 + n] = sums[n] + tail[m][n0 + n];
      }
    } else {
      for (int n = 0; n < NT; ++n) y[m * ldy + n] = simd::HorizontalSum(acc[m][n]) + tail[m][n];
    }
  }
}

// y[m, n] = x[m] · w[n] for all m < rows and n in [n_begin, n_end).
template <typename WT>
inline void SmallGemm(const float* x, int64_t ldx, int64_t rows, const WT* w, int64_t ldw,
                      int64_t k_len, int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  int64_t n = n_begin;
  if (rows == 1) {  // one row: 8 weight rows in flight keep more loads and FMA chains going
    for (; n + 8 <= n_end; n += 8) DotTile<1, 8>(x, ldx, w + n * ldw, ldw, k_len, y + n, ldy);
  }
  for (; n + 4 <= n_end; n += 4) {
    const WT* wn = w + n * ldw;
    int64_t m = 0;
    for (; m + 2 <= rows; m += 2)
      DotTile<2, 4>(x + m * ldx, ldx, wn, ldw, k_len, y + m * ldy + n, ldy);
    if (m < rows) DotTile<1, 4>(x + m * ldx, ldx, wn, ldw, k_len, y + m * ldy + n, ldy);
  }
  for (; n < n_end; ++n) {
    for (int64_t m = 0; m < rows; ++m) {
      DotTile<1, 1>(x + m * ldx, ldx, w + n * ldw, ldw, k_len, y + m * ldy + n, ldy);
    }
  }
}

// C[M, N] = A[M, K] · B[N, K]ᵀ, row-major, single-threaded OpenBLAS.
inline void SgemmNT(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
              c, static_cast<int>(ldc));
}

}  // namespace waav::cpu::detail

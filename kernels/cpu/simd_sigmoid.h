// AVX2 sigmoid and tanh for the pointwise and LSTM kernels (kernel sources only: compiled with
// -march=${WAAV_CPU_ARCH}). Kept apart from simd.h, which other kernels share.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/simd.h"

namespace waav::cpu::simd {

// σ(x) = 1 / (1 + e^−x): within a few ulp of exact (Exp is within 2 ulp, the rest is one add
// and one correctly rounded division); 0 below x ≈ −88.7, NaN → NaN.
inline __m256 Sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh(x), relative error below 5e-7 everywhere (odd in x, ±1 beyond |x| ≈ 9, NaN → NaN).
// For |x| >= 1/4: (1 − e) / (1 + e) with e = e^−2|x| <= 0.61, so 1 − e loses at most 1.3 bits.
// Below 1/4 that subtraction would cancel; the Taylor series to x⁹ is used there instead
// (truncation error below 1e-8 relative at |x| = 1/4).
inline __m256 Tanh(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign_bit, x);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = Exp(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
  const __m256 large = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 a2 = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(62.0f / 2835.0f);
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, a2), a, a);
  const __m256 magnitude =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
  return _mm256_or_ps(magnitude, _mm256_and_ps(x, sign_bit));
}

// max(x, 0) with NaN kept: MAXPS returns its second operand when either is NaN.
inline __m256 Relu(__m256 x) { return _mm256_max_ps(_mm256_setzero_ps(), x); }

}  // namespace waav::cpu::simd

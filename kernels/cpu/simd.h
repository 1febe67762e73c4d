// AVX2/FMA/F16C building blocks shared by the CPU kernels. Only kernel sources, which are
// compiled with -march=${WAAV_CPU_ARCH}, include this header.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace waav::cpu::simd {

inline constexpr int kLanes = 8;

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The four horizontal sums of a..d, in order, as one vector.
inline __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Mask selecting the first `n` (0..8) lanes, for maskload/maskstore of row tails.
inline __m256i TailMask(int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
}

// Loads 8 weights as f32 from f32 or f16 (F16C widening is exact).
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return _cvtsh_ss(*p); }

// e^x, relative error about 2 ulp for x in [-87.3, 88.7]; 0 below, +inf above, NaN for NaN.
// Cody-Waite reduction x = n·ln2 + r, |r| <= ln2/2, then the degree-7 Taylor polynomial of e^r
// (truncation error r^8/8! < 3e-9 relative) and a 2^n scale built in the exponent bits.
inline __m256 Exp(__m256 x) {
  const __m256 kLog2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 kLn2Hi = _mm256_set1_ps(0.693359375f);  // few mantissa bits: n·kLn2Hi is exact
  const __m256 kLn2Lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 kMax = _mm256_set1_ps(88.7228391f);
  const __m256 kMin = _mm256_set1_ps(-87.3365479f);
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, kMin), kMax);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, kLog2e),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, clamped);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n for n in [-126, 128]: n = 128 (x near the top) is split as 2^(n-1) · 2.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half_n = _mm256_srai_epi32(ni, 1);
  const __m256 scale_a =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half_n, _mm256_set1_epi32(127)), 23));
  const __m256 scale_b = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(ni, half_n), _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, scale_a), scale_b);
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(), _mm256_cmp_ps(x, kMin, _CMP_LT_OQ));
  result = _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_inff()),
                            _mm256_cmp_ps(x, kMax, _CMP_GT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// erf(x), relative error below 2e-7 (about 2 ulp). |x| in [0, 4) is split into 8 intervals of
// width 1/2, each with a degree-7 polynomial in (|x| − centre) whose coefficients are picked per
// lane with a permute; erf(|x| >= 4) rounds to 1 in f32. Coefficients from
// kernels/cpu/tools/fit_erf.py (least squares on Chebyshev nodes, relative weighting).
inline __m256 Erf(__m256 x) {
  alignas(32) static constexpr float kCoeff[8][8] = {
      {0.0f, 0.711155653f, 0.92290014f, 0.986671686f, 0.998537302f, 0.999899387f, 0.999995708f,
       0.999999881f},
      {1.12837923f, 0.642931044f, 0.236521125f, 0.0527749956f, 0.00714231934f, 0.000586277281f,
       2.91890119e-05f, 8.81428832e-07f},
      {-1.56721114e-06f, -0.482198149f, -0.295651734f, -0.092356205f, -0.0160701573f,
       -0.00161226746f, -9.48693341e-05f, -3.30607099e-06f},
      {-0.376077622f, 0.0267881006f, 0.16753605f, 0.0901573822f, 0.0217245109f, 0.00276038027f,
       0.000195812623f, 7.97032772e-06f},
      {-0.000563501206f, 0.15067561f, -0.00613196101f, -0.0481055267f, -0.0190882571f,
       -0.00325771049f, -0.000286169437f, -1.37854095e-05f},
      {0.115874603f, -0.0532091074f, -0.0471916944f, 0.00661859894f, 0.0106600877f, 0.00275629084f,
       0.000313628843f, 1.83300581e-05f},
      {-0.00800161995f, -0.0265825633f, 0.0205969494f, 0.00904952455f, -0.00277955667f,
       -0.00166785065f, -0.000273758458f, -2.06924215e-05f},
      {-0.0179786645f, 0.0178126246f, 0.00379214878f, -0.00593425566f, -0.000721785764f,
       0.000635817123f, 0.000173596607f, 1.71447282e-05f},
  };
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 sign = _mm256_and_ps(x, sign_bit);
  const __m256 z = _mm256_min_ps(_mm256_andnot_ps(sign_bit, x), _mm256_set1_ps(4.0f));
  // Interval index 0..7 (z = 4 maps to 7 and is clamped to 1 below).
  const __m256i index =
      _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_add_ps(z, z)), _mm256_set1_epi32(7));
  const __m256 centre = _mm256_permutevar8x32_ps(
      _mm256_setr_ps(0.0f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f), index);
  const __m256 t = _mm256_sub_ps(z, centre);
  __m256 p = _mm256_permutevar8x32_ps(_mm256_load_ps(kCoeff[7]), index);
  for (int k = 6; k >= 0; --k) {
    p = _mm256_fmadd_ps(p, t, _mm256_permutevar8x32_ps(_mm256_load_ps(kCoeff[k]), index));
  }
  p = _mm256_min_ps(p, _mm256_set1_ps(1.0f));
  // NaN inputs: min() above returned the non-NaN operand; restore the NaN.
  p = _mm256_blendv_ps(p, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_or_ps(p, sign);
}

// gelu(x) = x/2 · (1 + erf(x/√2)), the exact form Whisper uses.
inline __m256 Gelu(__m256 x) {
  const __m256 e = Erf(_mm256_mul_ps(x, _mm256_set1_ps(0.707106781186547524f)));
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace waav::cpu::simd

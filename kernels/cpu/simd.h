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

// e^x for x <= 0 (softmax numerators, exp(−x²/2)): as Exp without the overflow and NaN
// handling, about 20% fewer instructions; 0 below −87.3.
inline __m256 ExpNonPositive(__m256 x) {
  const __m256 kMin = _mm256_set1_ps(-87.3365479f);
  const __m256 clamped = _mm256_max_ps(x, kMin);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), clamped);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [−126, 0]: 2^n is a normal float built in the exponent bits.
  const __m256 scale = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  return _mm256_and_ps(_mm256_mul_ps(p, scale), _mm256_cmp_ps(x, kMin, _CMP_GE_OQ));
}

// gelu(x) = x · Φ(x), Φ(x) = erfc(−x/√2) / 2: the exact (erf) GELU that Whisper uses, written
// with erfc so that negative x keeps its relative accuracy (1 + erf(x/√2) would cancel).
// erfc(z) = exp(−z²) · R(z) with R smooth on [0, 8): 8 unit intervals, a degree-8 polynomial
// each, coefficients picked per lane with a permute (kernels/cpu/tools/fit_erfc.py fits them;
// erfc relative error < 3e-7). z² = x²/2 is formed exactly as hi + lo with an FMA, so exp(−z²)
// does not inherit the rounding of z. Error: below 3e-7 of |gelu(x)| wherever the result is a
// normal f32 (Φ(x) rounds to 0 or 1 beyond |x| = 14); gelu(+inf) = +inf, gelu(−inf) = NaN as
// in PyTorch, NaN → NaN.
inline __m256 Gelu(__m256 x) {
  alignas(32) static constexpr float kCoeff[9][8] = {
      {0.615690351f, 0.321585417f, 0.21080637f, 0.155293658f, 0.122484803f, 0.100962222f,
       0.0858056694f, 0.0745736957f},
      {-0.512688518f, -0.163622901f, -0.074347347f, -0.0413235761f, -0.026015928f, -0.0177947655f,
       -0.0129054561f, -0.00977377128f},
      {0.359346598f, 0.0761510506f, 0.0249379966f, 0.0106611336f, 0.00541312527f, 0.00309101259f,
       0.00192020787f, 0.00127040944f},
      {-0.222028837f, -0.0329314545f, -0.00800160132f, -0.0026730774f, -0.00110457651f,
       -0.000529463869f, -0.000282736495f, -0.000163800345f},
      {0.124161467f, 0.013377252f, 0.00246703532f, 0.000652686344f, 0.000221266469f,
       8.94808036e-05f, 4.12103582e-05f, 2.09534574e-05f},
      {-0.063702926f, -0.0051380056f, -0.00073313422f, -0.000155425703f, -4.35448746e-05f,
       -1.49266607e-05f, -5.94740868e-06f, -2.65969402e-06f},
      {0.0307276156f, 0.00188531785f, 0.000210963524f, 3.61765269e-05f, 8.42858753e-06f,
       2.45927822e-06f, 8.50170522e-07f, 3.35074873e-07f},
      {-0.0153115336f, -0.000704117585f, -6.1293038e-05f, -8.46758576e-06f, -1.63716629e-06f,
       -4.06135086e-07f, -1.21732143e-07f, -4.22655155e-08f},
      {0.00629259227f, 0.000233192433f, 1.64629728e-05f, 1.87824901e-06f, 3.06034678e-07f,
       6.51915002e-08f, 1.70556511e-08f, 5.24083132e-09f},
  };
  // Beyond |x| = 14, Φ is 0 or 1 in f32; clamping keeps exp() and the FMA finite (NaN inputs
  // become finite here and come back through the final multiply by x).
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-14.0f)), _mm256_set1_ps(14.0f));
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), xc),
                                 _mm256_set1_ps(0.707106781186547524f));
  const __m256i index = _mm256_min_epi32(_mm256_cvttps_epi32(z), _mm256_set1_epi32(7));
  const __m256 t = _mm256_sub_ps(z, _mm256_add_ps(_mm256_cvtepi32_ps(index), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_permutevar8x32_ps(_mm256_load_ps(kCoeff[8]), index);
  for (int k = 7; k >= 0; --k) {
    r = _mm256_fmadd_ps(r, t, _mm256_permutevar8x32_ps(_mm256_load_ps(kCoeff[k]), index));
  }
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 sq = _mm256_mul_ps(xc, xc);
  const __m256 sq_lo = _mm256_fmsub_ps(xc, xc, sq);  // x² = sq + sq_lo exactly
  const __m256 e = _mm256_mul_ps(ExpNonPositive(_mm256_mul_ps(sq, _mm256_set1_ps(-0.5f))),
                                 _mm256_fnmadd_ps(sq_lo, half, _mm256_set1_ps(1.0f)));
  const __m256 half_erfc = _mm256_mul_ps(_mm256_mul_ps(r, e), half);  // Φ(−|x|)
  const __m256 phi = _mm256_blendv_ps(half_erfc, _mm256_sub_ps(_mm256_set1_ps(1.0f), half_erfc),
                                      _mm256_cmp_ps(xc, _mm256_setzero_ps(), _CMP_GE_OQ));
  return _mm256_mul_ps(x, phi);
}

}  // namespace waav::cpu::simd

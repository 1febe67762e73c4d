#include "engine/frontend/real_fft.h"

#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace waav::frontend {
namespace {

constexpr int kLanes = BatchedRealFft::kLanes;

TEST(RealFftTest, SupportedSizes) {
  for (int n : {2, 4, 6, 10, 14, 118, 320, 400, 480, 512, 1024}) {
    EXPECT_TRUE(BatchedRealFft::SupportsSize(n)) << n;
  }
  for (int n : {0, 1, 3, 401, -2}) EXPECT_FALSE(BatchedRealFft::SupportsSize(n)) << n;
  EXPECT_FALSE(BatchedRealFft::SupportsSize(2 * 67));  // prime factor above kMaxRadix
}

// Every radix path (4, 2, 3, 5, generic 7/11/59) against a direct DFT in double on random
// frames. The bound is relative to the frame's largest power: measured 1e-7 .. 6e-7 for these
// sizes (float rounding through a few passes); 2e-6 leaves a factor of 3 or more.
TEST(RealFftTest, MatchesNaiveDftOnRandomFrames) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);

  for (int n : {2, 4, 6, 10, 14, 22, 42, 118, 320, 400, 480, 512, 1024}) {
    SCOPED_TRACE(::testing::Message() << "n = " << n);
    const BatchedRealFft fft(n);
    ASSERT_EQ(fft.num_bins(), n / 2 + 1);
    std::vector<float> in(static_cast<size_t>(n) * kLanes);
    for (float& v : in) v = noise(rng);
    std::vector<float> scratch(static_cast<size_t>(fft.scratch_floats()), NAN);
    std::vector<float> out(static_cast<size_t>(fft.num_bins()) * kLanes, NAN);
    fft.Power(in.data(), scratch.data(), out.data());

    double worst_relative = 0;
    for (int l = 0; l < kLanes; ++l) {
      std::vector<double> reference(fft.num_bins());
      double peak = 0;
      for (int k = 0; k < fft.num_bins(); ++k) {
        double re = 0, im = 0;
        for (int t = 0; t < n; ++t) {
          const double angle = -2.0 * std::numbers::pi * static_cast<double>(k) * t / n;
          re += in[static_cast<size_t>(t) * kLanes + l] * std::cos(angle);
          im += in[static_cast<size_t>(t) * kLanes + l] * std::sin(angle);
        }
        reference[k] = re * re + im * im;
        peak = std::max(peak, reference[k]);
      }
      double worst = 0;
      for (int k = 0; k < fft.num_bins(); ++k) {
        worst = std::max(worst, std::abs(out[static_cast<size_t>(k) * kLanes + l] - reference[k]));
      }
      EXPECT_LE(worst / peak, 2e-6) << "lane " << l;
      worst_relative = std::max(worst_relative, worst / peak);
    }
    std::printf("n = %4d: max power error / peak power %.3g\n", n, worst_relative);
  }
}

TEST(RealFftTest, KnownSpectra) {
  constexpr int kN = 400;
  const BatchedRealFft fft(kN);
  std::vector<float> in(kN * kLanes);
  // Lane 0: constant 1 (all power at DC: n²). Lane 1: cos at bin 10 (power (n/2)² at bin 10).
  // Lane 2: alternating ±1 (all power at Nyquist). Others: zeros.
  for (int t = 0; t < kN; ++t) {
    in[t * kLanes + 0] = 1.0f;
    in[t * kLanes + 1] = static_cast<float>(std::cos(2 * std::numbers::pi * 10 * t / kN));
    in[t * kLanes + 2] = t % 2 == 0 ? 1.0f : -1.0f;
  }
  std::vector<float> scratch(static_cast<size_t>(fft.scratch_floats()));
  std::vector<float> out(static_cast<size_t>(fft.num_bins()) * kLanes);
  fft.Power(in.data(), scratch.data(), out.data());
  const auto power = [&](int k, int lane) { return out[static_cast<size_t>(k) * kLanes + lane]; };
  EXPECT_NEAR(power(0, 0), kN * kN, 1e-2);
  EXPECT_NEAR(power(10, 1), (kN / 2) * (kN / 2), 1e-2);
  EXPECT_NEAR(power(kN / 2, 2), kN * kN, 1e-2);
  for (int k = 0; k < fft.num_bins(); ++k) {
    if (k != 0) {
      EXPECT_LT(power(k, 0), 1e-6) << k;
    }
    if (k != 10) {
      EXPECT_LT(power(k, 1), 1e-6) << k;
    }
    if (k != kN / 2) {
      EXPECT_LT(power(k, 2), 1e-6) << k;
    }
    for (int l = 3; l < kLanes; ++l) EXPECT_EQ(power(k, l), 0.0f);
  }
}

}  // namespace
}  // namespace waav::frontend

#include "engine/runtime/dtype.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace waav {
namespace {

TEST(DTypeTest, HalfRoundTripIsExactForEveryHalf) {
  // Every finite half converts to float and back unchanged: the widening is exact.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = HalfToFloat(half);
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), half) << "half bits " << h;
  }
}

TEST(DTypeTest, HalfKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_EQ(FloatToHalf(65536.0f), 0x7c00);
}

TEST(DTypeTest, FloatToHalfRoundsToNearest) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    const float rounded = HalfToFloat(FloatToHalf(x));
    // Relative error of half rounding is at most 2^-11.
    EXPECT_LE(std::fabs(rounded - x), std::fabs(x) * 4.9e-4f + 6e-8f) << x;
  }
}

}  // namespace
}  // namespace waav

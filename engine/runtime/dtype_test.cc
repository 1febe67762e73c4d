#include "engine/runtime/dtype.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>
#include <bit>

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

TEST(DTypeTest, HalfArrayConversionEqualsTheScalarOneForEveryHalf) {
  // Every bit pattern, at an odd byte offset (model files need not align their f16 data).
  std::vector<uint8_t> bytes(1 + 2 * 0x10000u);
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    bytes[1 + 2 * h] = static_cast<uint8_t>(h & 0xffu);
    bytes[2 + 2 * h] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> out(0x10000u);
  HalfToFloatArray(bytes.data() + 1, out.data(), out.size());
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float want = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[h])) << "half bits " << h;
      EXPECT_EQ(std::signbit(out[h]), std::signbit(want)) << "half bits " << h;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(out[h]), std::bit_cast<uint32_t>(want))
          << "half bits " << h;
    }
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

#include "engine/audio/g711.h"

#include <cmath>
#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace waav::audio {
namespace {

// Reconstruction values written from ITU-T G.711 Tables 1a (A-law) and 2a (mu-law) rather than
// from the bit arithmetic the decoder uses: each segment's first decision value and step size,
// the value being the middle of step q. Both on the law's own scale (A-law 0..4096,
// mu-law 0..8159).
int MulawReference(int segment, int q) {
  // Segment 0 starts with the half-width interval 0..1 (value 0), then steps of 2 centred on 2q.
  if (segment == 0) return 2 * q;
  static constexpr int kFirstDecision[8] = {0, 31, 95, 223, 479, 991, 2015, 4063};
  const int step = 2 << segment;
  return kFirstDecision[segment] + step * q + step / 2;
}

int AlawReference(int segment, int q) {
  static constexpr int kFirstDecision[8] = {0, 32, 64, 128, 256, 512, 1024, 2048};
  const int step = segment <= 1 ? 2 : 1 << segment;
  return kFirstDecision[segment] + step * q + step / 2;
}

// Line codes: the sign bit is 1 for positive values in both laws; mu-law inverts the other seven
// bits, A-law inverts the even bits (mask 0x55).
uint8_t MulawCode(bool positive, int segment, int q) {
  return static_cast<uint8_t>((positive ? 0x80 : 0) | (~((segment << 4) | q) & 0x7F));
}
uint8_t AlawCode(bool positive, int segment, int q) {
  return static_cast<uint8_t>(((positive ? 0x80 : 0) | (segment << 4) | q) ^ 0x55);
}

TEST(G711Test, MulawMatchesItuTable) {
  std::set<uint8_t> codes;
  int previous = -1;
  for (int segment = 0; segment < 8; ++segment) {
    for (int q = 0; q < 16; ++q) {
      const int magnitude = MulawReference(segment, q) * 4;  // 14-bit scale to 16-bit
      EXPECT_GT(magnitude, previous) << "values must grow with the code";
      previous = magnitude;
      for (bool positive : {true, false}) {
        const uint8_t code = MulawCode(positive, segment, q);
        codes.insert(code);
        EXPECT_EQ(MulawToLinear16(code), positive ? magnitude : -magnitude)
            << "code 0x" << std::hex << int{code};
      }
    }
  }
  EXPECT_EQ(codes.size(), 256u);
}

TEST(G711Test, AlawMatchesItuTable) {
  std::set<uint8_t> codes;
  int previous = -1;
  for (int segment = 0; segment < 8; ++segment) {
    for (int q = 0; q < 16; ++q) {
      const int magnitude = AlawReference(segment, q) * 8;  // 13-bit scale to 16-bit
      EXPECT_GT(magnitude, previous);
      previous = magnitude;
      for (bool positive : {true, false}) {
        const uint8_t code = AlawCode(positive, segment, q);
        codes.insert(code);
        EXPECT_EQ(AlawToLinear16(code), positive ? magnitude : -magnitude)
            << "code 0x" << std::hex << int{code};
      }
    }
  }
  EXPECT_EQ(codes.size(), 256u);
}

// Values of the Sun/CCITT reference implementation (g711.c), used by SoX and most tools.
TEST(G711Test, AnchorValuesOfTheReferenceImplementation) {
  EXPECT_EQ(MulawToLinear16(0x80), 32124);
  EXPECT_EQ(MulawToLinear16(0x00), -32124);
  EXPECT_EQ(MulawToLinear16(0xFF), 0);
  EXPECT_EQ(MulawToLinear16(0x7F), 0);
  EXPECT_EQ(MulawToLinear16(0xFE), 8);
  EXPECT_EQ(MulawToLinear16(0xEF), 132);
  EXPECT_EQ(AlawToLinear16(0xD5), 8);
  EXPECT_EQ(AlawToLinear16(0x55), -8);
  EXPECT_EQ(AlawToLinear16(0xAA), 32256);
  EXPECT_EQ(AlawToLinear16(0x2A), -32256);
  EXPECT_EQ(AlawToLinear16(0xD4), 24);
}

// The segmented laws approximate the continuous companding curves: mu-law
// x = ((1 + mu)^|y| - 1) / mu with mu = 255, A-law x = e^(|y|(1 + ln A) - 1) / A (A = 87.6) above
// 1 / (1 + ln A). Each segment is a chord of the curve over a doubling of x, which sags below
// it by up to ~9% of the segment (1.4 steps for mu-law, 1.6 for A-law at the code's mid-point),
// so every value lies within 2 steps of the curve; a wrong segment or sign would be 8+ steps off.
TEST(G711Test, FollowsTheContinuousCompandingLaws) {
  for (int segment = 1; segment < 8; ++segment) {
    for (int q = 0; q < 16; ++q) {
      const double y = (segment * 16 + q + 0.5) / 128.0;
      const double mulaw_curve = (std::pow(256.0, y) - 1) / 255.0 * 8159;
      EXPECT_NEAR(MulawToLinear16(MulawCode(true, segment, q)) / 4.0, mulaw_curve,
                  2 * (2 << segment))
          << segment << " " << q;
      const double a = 87.6;
      const double alaw_curve = std::exp(y * (1 + std::log(a)) - 1) / a * 4096;
      if (y > 1 / (1 + std::log(a))) {
        EXPECT_NEAR(AlawToLinear16(AlawCode(true, segment, q)) / 8.0, alaw_curve,
                    2 * (segment <= 1 ? 2 : 1 << segment))
            << segment << " " << q;
      }
    }
  }
}

}  // namespace
}  // namespace waav::audio

// The comparisons kernel tests rely on must be able to fail: each failure mode once.
#include "tests/support/kernel_test_util.h"

#include <cmath>
#include <limits>
#include <vector>

namespace waav::testing {
namespace {

TEST(KernelTestUtilTest, CloseIsRelativeL2AgainstTheResult) {
  // ‖got − want‖ = 0.01 · √2 / ‖want‖ = 5 · √2: relative error 0.002.
  const std::vector<double> want = {5.0, -5.0};
  const std::vector<float> got = {5.01f, -5.01f};
  EXPECT_TRUE(Close(got, want, 2.1e-3));
  EXPECT_FALSE(Close(got, want, 1.9e-3));
  EXPECT_TRUE(Close({5.0f, -5.0f}, want));
}

TEST(KernelTestUtilTest, NormFloorOnlyRaisesTheDenominator) {
  const std::vector<double> want = {1e-3};
  const std::vector<float> got = {2e-3f};
  EXPECT_FALSE(Close(got, want, 1e-2));
  EXPECT_TRUE(Close(got, want, 1e-2, /*norm_floor=*/1.0));
  EXPECT_FALSE(Close(got, want, 1e-2, /*norm_floor=*/1e-4));  // below ‖want‖: no effect
}

TEST(KernelTestUtilTest, CloseToScaleUsesTheScaleNorm) {
  const std::vector<double> want = {1e-4};
  const std::vector<float> got = {1e-4f + 1e-6f};
  EXPECT_FALSE(CloseToScale(got, want, {1e-4}, 1e-3));
  EXPECT_TRUE(CloseToScale(got, want, {10.0}, 1e-6));
  EXPECT_FALSE(CloseToScale(got, want, {1.0, 1.0}, 1.0)) << "scale of another size";
}

TEST(KernelTestUtilTest, NonFiniteOrMisSizedOutputFails) {
  const std::vector<double> want = {1.0, 2.0};
  EXPECT_FALSE(Close({1.0f, std::numeric_limits<float>::quiet_NaN()}, want, 1e9));
  EXPECT_FALSE(Close({1.0f, std::numeric_limits<float>::infinity()}, want, 1e9));
  EXPECT_FALSE(Close({1.0f}, want, 1e9));
  EXPECT_FALSE(Close({1.0f, 2.0f, 3.0f}, want, 1e9));
  EXPECT_FALSE(Close({0.5f}, {0.0}, 0.1)) << "zero reference: the absolute error counts";
  EXPECT_TRUE(Close({0.05f}, {0.0}, 0.1));
}

}  // namespace
}  // namespace waav::testing

#include "engine/runtime/transpose.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace waav {
namespace {

// Shapes around and across the tile size, including a log-mel window's [80, 3000].
TEST(TransposeTiledTest, EqualsTheElementwiseDefinition) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},   {1, 70},  {33, 1},   {31, 32},
                                                           {32, 33}, {65, 97}, {80, 3000}};
  for (const auto& [rows, cols] : shapes) {
    std::vector<float> src(static_cast<size_t>(rows * cols));
    for (float& v : src) v = value(rng);
    std::vector<float> dst(src.size(), std::nanf(""));
    TransposeTiled(src.data(), rows, cols, dst.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(dst[static_cast<size_t>(c * rows + r)], src[static_cast<size_t>(r * cols + c)])
            << rows << " x " << cols << " at (" << r << ", " << c << ")";
      }
    }
  }
}

// A block of a larger matrix into a block of another: elements outside the blocks untouched.
TEST(TransposeTiledTest, StridedBlocksLeaveTheRestAlone) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int64_t rows = 37, cols = 70, src_stride = 101, dst_stride = 45;
  std::vector<float> src(static_cast<size_t>(rows * src_stride));
  for (float& v : src) v = value(rng);
  constexpr float kUntouched = 7.0f;
  std::vector<float> dst(static_cast<size_t>(cols * dst_stride), kUntouched);
  TransposeTiled(src.data(), rows, cols, src_stride, dst.data(), dst_stride);
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < dst_stride; ++r) {
      const float got = dst[static_cast<size_t>(c * dst_stride + r)];
      if (r < rows) {
        ASSERT_EQ(got, src[static_cast<size_t>(r * src_stride + c)]) << r << ", " << c;
      } else {
        ASSERT_EQ(got, kUntouched) << "wrote outside the block at " << r << ", " << c;
      }
    }
  }
}

}  // namespace
}  // namespace waav

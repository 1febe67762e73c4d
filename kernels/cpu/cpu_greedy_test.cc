// Tests of the CPU backend's greedy-decoding kernels: ArgmaxLogSumExp against the host loop of
// greedy sampling, and FeedChoices (the next step's inputs from the choices) with its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/runtime/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class CpuBackendTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 2}); }
};

// Random logits with ties at the maximum, random masks (one disabling everything), rows left out:
// the CPU op equals the host loop of greedy sampling (mask to −inf, std::max_element, a sequential
// f64 log-sum-exp) bit for bit.
TEST_F(CpuBackendTest, ArgmaxLogSumExpEqualsTheHostLoop) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t cols : {int64_t{51864}, int64_t{7}, int64_t{33}}) {
    const int64_t rows = 6, masks = 3, words = (cols + 31) / 32;
    SCOPED_TRACE(absl::StrCat(rows, "x", cols));
    std::vector<float> x = Random(rows * cols, -20.0f, 20.0f);
    // Row 1: its maximum twice (the lower id wins); row 2: every logit equal.
    const int64_t a = RandomInt(0, static_cast<int>(cols) - 1),
                  b = RandomInt(0, static_cast<int>(cols) - 1);
    x[static_cast<size_t>(cols + a)] = x[static_cast<size_t>(cols + b)] = 25.0f;
    std::fill(x.begin() + 2 * cols, x.begin() + 3 * cols, 1.5f);
    std::vector<int32_t> bits(static_cast<size_t>(masks * words));
    for (int64_t w = 0; w < words; ++w) {
      bits[static_cast<size_t>(w)] = static_cast<int32_t>(rng_());  // random
      bits[static_cast<size_t>(words + w)] = 0;                     // nothing disabled
      bits[static_cast<size_t>(2 * words + w)] = -1;                // everything disabled
    }
    const std::vector<int32_t> index = {0, 1, 1, -1, 2, 0};
    Tensor out = F32({rows, 5}, std::vector<float>(static_cast<size_t>(rows * 5), kNaN));
    ASSERT_TRUE(backend_
                    ->ArgmaxLogSumExp(F32({rows, cols}, x), I32({masks, words}, bits),
                                      I32({rows}, index), out)
                    .ok());
    auto got = Download<float>(*backend_, out);
    ASSERT_TRUE(got.ok());
    for (int64_t r = 0; r < rows; ++r) {
      const float* o = got->data() + r * 5;
      if (index[static_cast<size_t>(r)] < 0) {
        for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(o[i])) << "row " << r << " written";
        continue;
      }
      std::vector<float> masked(x.begin() + r * cols, x.begin() + (r + 1) * cols);
      const int32_t* m = bits.data() + index[static_cast<size_t>(r)] * words;
      for (int64_t t = 0; t < cols; ++t) {
        if ((static_cast<uint32_t>(m[t / 32]) >> (t % 32)) & 1u)
          masked[static_cast<size_t>(t)] = kNegInf;
      }
      const auto best = std::max_element(masked.begin(), masked.end());
      double sum = 0;
      if (*best != kNegInf) {
        for (float v : masked) sum += std::exp(static_cast<double>(v - *best));
      }
      EXPECT_EQ(o[0], static_cast<float>(best - masked.begin())) << "row " << r;
      EXPECT_EQ(o[1], *best) << "row " << r;
      EXPECT_EQ(JoinF64(o + 2), sum) << "row " << r;
    }
    EXPECT_EQ(got->at(5 * 1), static_cast<float>(std::min(a, b)));
    EXPECT_EQ(got->at(5 * 2), 0.0f);
    EXPECT_EQ(got->at(5 * 4 + 1), kNegInf);
    EXPECT_EQ(JoinF64(got->data() + 5 * 4 + 2), 0.0);
    // A mask index outside [−1, M).
    const Tensor bad = I32({rows}, {0, 1, 3, -1, 0, 0});
    EXPECT_EQ(
        backend_->ArgmaxLogSumExp(F32({rows, cols}, x), I32({masks, words}, bits), bad, out).code(),
        absl::StatusCode::kInvalidArgument);
  }
  // Shapes: masks of the wrong width.
  EXPECT_EQ(backend_
                ->ArgmaxLogSumExp(F32({2, 40}, Random(80)), I32({1, 1}, {0}), I32({2}, {0, 0}),
                                  F32({2, 5}, Random(10)))
                .code(),
            absl::StatusCode::kInvalidArgument);
  // SplitF64 / JoinF64 round-trip exactly.
  for (int i = 0; i < 1000; ++i) {
    const double v =
        std::ldexp(static_cast<double>(rng_()) + static_cast<double>(rng_()) / 4294967296.0,
                   RandomInt(-40, 0));
    float parts[3];
    SplitF64(v, parts);
    ASSERT_EQ(JoinF64(parts), v) << v;
  }
}

// The greedy loop's next inputs from the choices: rows with a mask index take the chosen token
// and the next position (at most max_position, lengths one more), rows without are left alone;
// tokens as [B] or [B, 1]. Refused: a choice that is no token id, shapes, dtypes, overlaps and
// max_position outside [0, 2^24).
TEST_F(CpuBackendTest, FeedChoicesWritesTheNextInputs) {
  const int rows = 5;
  const std::vector<float> choices = {7, 1, 1, 0, 0, 51863, 2, 1,  0, 0, 3, 0, 1,
                                      0, 0, 0, 5, 1, 0,     0, 99, 0, 1, 0, 0};
  const std::vector<int32_t> index = {0, 1, -1, 3, 0};
  for (const Shape& token_shape : {Shape{rows}, Shape{rows, 1}}) {
    const Tensor tokens = I32(token_shape, {10, 11, 12, 13, 14});
    const Tensor positions = I32({rows}, {0, 446, 5, 447, 20});
    const Tensor lengths = I32({rows}, {1, 447, 6, 448, 21});
    ASSERT_TRUE(backend_
                    ->FeedChoices(F32({rows, 5}, choices), I32({rows}, index), 447, tokens,
                                  positions, lengths)
                    .ok());
    auto t = Download<int32_t>(*backend_, tokens);
    auto p = Download<int32_t>(*backend_, positions);
    auto l = Download<int32_t>(*backend_, lengths);
    ASSERT_TRUE(t.ok() && p.ok() && l.ok());
    EXPECT_EQ(*t, (std::vector<int32_t>{7, 51863, 12, 0, 99}));
    EXPECT_EQ(*p, (std::vector<int32_t>{1, 447, 5, 447, 21}));
    EXPECT_EQ(*l, (std::vector<int32_t>{2, 448, 6, 448, 22}));
  }
  const Tensor tokens = I32({rows}, {0, 0, 0, 0, 0});
  const Tensor positions = I32({rows}, {0, 0, 0, 0, 0});
  const Tensor lengths = I32({rows}, {1, 1, 1, 1, 1});
  const Tensor idx = I32({rows}, index);
  for (const float bad : {-1.0f, 2.5f, 16777216.0f, std::nanf("")}) {
    std::vector<float> c = choices;
    c[5 * 3] = bad;  // row 3 has a mask: refused
    EXPECT_EQ(backend_->FeedChoices(F32({rows, 5}, c), idx, 447, tokens, positions, lengths).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    c = choices;
    c[5 * 2] = bad;  // row 2 has none: its choice is not read
    EXPECT_TRUE(backend_->FeedChoices(F32({rows, 5}, c), idx, 447, tokens, positions, lengths).ok())
        << bad;
  }
  const Tensor c = F32({rows, 5}, choices);
  auto refused = [&](const Tensor& choices_t, const Tensor& index_t, int32_t max_position,
                     const Tensor& tokens_t, const Tensor& positions_t, const Tensor& lengths_t) {
    return backend_->FeedChoices(choices_t, index_t, max_position, tokens_t, positions_t, lengths_t)
               .code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused(F32({rows, 4}, Random(rows * 4)), idx, 447, tokens, positions, lengths));
  EXPECT_TRUE(refused(c, I32({rows - 1}, {0, 0, 0, 0}), 447, tokens, positions, lengths));
  EXPECT_TRUE(refused(c, F32({rows}, Random(rows)), 447, tokens, positions, lengths));
  EXPECT_TRUE(refused(c, idx, 447, F32({rows}, Random(rows)), positions, lengths));
  EXPECT_TRUE(refused(c, idx, 447, I32({rows, 2}, std::vector<int32_t>(10)), positions, lengths));
  EXPECT_TRUE(refused(c, idx, 447, tokens, I32({rows + 1}, std::vector<int32_t>(6)), lengths));
  EXPECT_TRUE(refused(c, idx, 447, tokens, positions, positions));
  EXPECT_TRUE(refused(c, idx, -1, tokens, positions, lengths));
  EXPECT_TRUE(refused(c, idx, 1 << 24, tokens, positions, lengths));
  EXPECT_TRUE(refused(c, idx, 447, Tensor(), positions, lengths));
}

}  // namespace
}  // namespace waav

// Backend::HeadScores on CUDA against the CPU backend on fresh random inputs: the contract fixes
// every rounding, so the scores must be equal bit for bit (f32 and f16 keys, head widths over
// and under the kernel's 64-dim chunk, blocks larger than its 32 x 32 tiles, more items than one
// launch carries), elements no item covers untouched, and the same refusals. Skips and says why
// without a usable GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace waav {
namespace {

class CudaHeadScoresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto gpu = CreateCudaBackend({});
    if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << gpu.status().message();
    gpu_ = std::move(*gpu);
    cpu_ = CreateCpuBackend({.num_threads = 2});
  }
  void TearDown() override {
    if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
  }
  int RandomInt(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> value(-3.0f, 3.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = value(rng_);
    return v;
  }
  // `values` on `backend` as `dtype` (f16: the f32 values rounded).
  static Tensor Upload(Backend& backend, const Shape& shape, const std::vector<float>& values,
                       DType dtype) {
    Tensor t = backend.Allocate(shape, dtype).value();
    if (dtype == DType::kF16) {
      std::vector<uint16_t> halves(values.size());
      for (size_t i = 0; i < values.size(); ++i) halves[i] = FloatToHalf(values[i]);
      EXPECT_TRUE(backend.CopyFromHost(halves.data(), halves.size() * 2, t).ok());
    } else {
      EXPECT_TRUE(backend.CopyFromHost(values.data(), values.size() * 4, t).ok());
    }
    return t;
  }
  static std::vector<float> Read(Backend& backend, const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(backend.CopyToHost(t, v.data(), v.size() * 4).ok());
    return v;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(CudaHeadScoresTest, EqualsTheCpuBitForBit) {
  struct Case {
    int64_t batch, q_len, k_len, channels, head_dim;
    DType k_dtype;
    int items;
  };
  // Whisper tiny's cross keys (f16, 1500 positions, 6 heads of 64), a head of 80 (two chunks, the
  // second partial), one of 130 (three), odd widths and more items than a launch's 64.
  for (const Case& c :
       {Case{3, 40, 1500, 384, 64, DType::kF16, 9}, Case{2, 33, 70, 240, 80, DType::kF32, 12},
        Case{2, 5, 37, 260, 130, DType::kF16, 6}, Case{4, 9, 65, 24, 3, DType::kF32, 150}}) {
    SCOPED_TRACE(absl::StrCat("B ", c.batch, " Tq ", c.q_len, " Tk ", c.k_len, " C ", c.channels,
                              " D ", c.head_dim, " ", std::string(DTypeName(c.k_dtype)), " ",
                              c.items, " items"));
    const int64_t heads = c.channels / c.head_dim;
    const std::vector<float> q = Random(c.batch * c.q_len * c.channels);
    const std::vector<float> k = Random(c.batch * c.k_len * c.channels);
    std::vector<HeadScoresItem> items;
    int64_t at = 1;
    for (int i = 0; i < c.items; ++i) {
      HeadScoresItem it{.row = RandomInt(0, static_cast<int>(c.batch) - 1),
                        .head = RandomInt(0, static_cast<int>(heads) - 1),
                        .queries = RandomInt(1, static_cast<int>(c.q_len)),
                        .keys = RandomInt(1, static_cast<int>(c.k_len)),
                        .offset = at};
      at += it.queries * it.keys + RandomInt(0, 2);
      items.push_back(it);
    }
    const std::vector<float> sentinel(static_cast<size_t>(at + 2), -5.0f);
    std::vector<float> results[2];
    Backend* backends[2] = {cpu_.get(), gpu_.get()};
    for (int b = 0; b < 2; ++b) {
      Backend& backend = *backends[b];
      const Tensor tq = Upload(backend, {c.batch, c.q_len, c.channels}, q, DType::kF32);
      const Tensor tk = Upload(backend, {c.batch, c.k_len, c.channels}, k, c.k_dtype);
      const Tensor out =
          Upload(backend, {static_cast<int64_t>(sentinel.size())}, sentinel, DType::kF32);
      const absl::Status status =
          backend.HeadScores(tq, tk, static_cast<int>(c.head_dim), 0.125f, items, out);
      ASSERT_TRUE(status.ok()) << backend.name() << ": " << status;
      results[b] = Read(backend, out);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < results[0].size(); ++i) {
      if (results[0][i] != results[1][i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++differ;
      }
    }
    EXPECT_EQ(differ, 0) << "first at " << first << ": cuda "
                         << (first >= 0 ? results[1][static_cast<size_t>(first)] : 0.0f) << ", cpu "
                         << (first >= 0 ? results[0][static_cast<size_t>(first)] : 0.0f);
    EXPECT_EQ(results[1].front(), -5.0f);  // before the first item
    EXPECT_EQ(results[1].back(), -5.0f);   // after the last
  }
}

TEST_F(CudaHeadScoresTest, RefusesWhatTheCpuRefuses) {
  for (Backend* backend : {cpu_.get(), gpu_.get()}) {
    SCOPED_TRACE(std::string(backend->name()));
    const Tensor q = Upload(*backend, {2, 4, 16}, Random(128), DType::kF32);
    const Tensor k = Upload(*backend, {2, 6, 16}, Random(192), DType::kF16);
    const Tensor out = Upload(*backend, {50}, std::vector<float>(50, 0.0f), DType::kF32);
    const HeadScoresItem a{.row = 0, .head = 1, .queries = 4, .keys = 6, .offset = 0};
    const HeadScoresItem overlapping{.row = 1, .head = 2, .queries = 1, .keys = 6, .offset = 20};
    const HeadScoresItem outside{.row = 1, .head = 2, .queries = 2, .keys = 6, .offset = 40};
    for (const std::vector<HeadScoresItem>& items :
         {std::vector<HeadScoresItem>{a, overlapping}, std::vector<HeadScoresItem>{outside}}) {
      const absl::Status status = backend->HeadScores(q, k, 4, 1.0f, items, out);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    }
  }
}

}  // namespace
}  // namespace waav

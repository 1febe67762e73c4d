// GrowingLogMel against LogMel::Compute, bit for bit: inputs that grow by random amounts (a
// sample, less than a hop, whole seconds), shrink to a prefix, change key, change content under
// the same key, and the edges (no samples, fewer than half a window, frames 0 and all of them);
// Whisper's 80 mel bins and large-v3's 128.
#include "engine/frontend/growing_log_mel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/transpose.h"

namespace waav::frontend {
namespace {

// Frames [0, frames) of Compute(samples), time-major.
std::vector<float> Want(const LogMel& log_mel, absl::Span<const float> samples, int64_t frames) {
  const LogMel::Features f = log_mel.Compute(samples);
  std::vector<float> out(static_cast<size_t>(frames) * static_cast<size_t>(f.n_mels));
  if (frames > 0) {
    TransposeTiled(f.data.data(), f.n_mels, frames, f.n_frames, out.data(), f.n_mels);
  }
  return out;
}

::testing::AssertionResult Same(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "value " << i << ": " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class GrowingLogMelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto log_mel = LogMel::Create({.n_mels = GetParam()});
    ASSERT_TRUE(log_mel.ok()) << log_mel.status();
    log_mel_ = *log_mel;
  }
  void TearDown() override {
    if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
  }
  // Speech-like: a few tones with a slow envelope, noise, and silent stretches.
  std::vector<float> Audio(int64_t n) {
    std::normal_distribution<float> noise(0.0f, 0.05f);
    std::uniform_real_distribution<float> freq(80.0f, 3000.0f);
    const float f1 = freq(rng_), f2 = freq(rng_);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float t = static_cast<float>(i) / 16000.0f;
      const float envelope = (i / 8000) % 5 == 4 ? 0.0f : 0.5f + 0.5f * std::sin(3.0f * t);
      x[static_cast<size_t>(i)] =
          envelope * (0.3f * std::sin(6.2832f * f1 * t) + 0.2f * std::sin(6.2832f * f2 * t)) +
          noise(rng_);
    }
    return x;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  LogMel log_mel_;
};

TEST_P(GrowingLogMelTest, GrowingInputEqualsComputeBitForBit) {
  const std::vector<float> audio = Audio(16000 * 31);
  GrowingLogMel growing;
  std::uniform_int_distribution<int> step_kind(0, 5);
  int64_t n = 0;
  int calls = 0, reused = 0;
  while (n <= static_cast<int64_t>(audio.size())) {
    const absl::Span<const float> samples(audio.data(), static_cast<size_t>(n));
    const int64_t total = log_mel_.NumFrames(n);
    // What the streaming window takes: all but Compute's last frame, at most 3000.
    for (const int64_t frames : {std::min<int64_t>(3000, std::max<int64_t>(0, total - 1)), total}) {
      const int64_t kept_before = growing.kept_frames();
      std::vector<float> got;
      ASSERT_TRUE(growing.TimeMajor(log_mel_, 7, samples, frames, &got).ok());
      ASSERT_TRUE(Same(got, Want(log_mel_, samples, frames))) << n << " samples, " << frames;
      reused += kept_before > 0 ? 1 : 0;
      ++calls;
    }
    switch (step_kind(rng_)) {
      case 0: n += 1; break;
      case 1: n += std::uniform_int_distribution<int>(0, 159)(rng_); break;
      case 2: n += 8000; break;  // a partial's 500 ms
      case 3: n += std::uniform_int_distribution<int>(1000, 40000)(rng_); break;
      case 4: n = std::max<int64_t>(0, n - std::uniform_int_distribution<int>(0, 4000)(rng_)); n += 16000; break;
      default: n += 1600; break;
    }
  }
  std::cout << GetParam() << " mel bins: " << calls << " windows, " << reused
            << " of them reusing kept frames\n";
  EXPECT_GT(reused, calls / 2);
}

// A prefix of the last input (a final shorter than the partial before it), a new key, and the
// same key over other samples: each equals Compute.
TEST_P(GrowingLogMelTest, PrefixesKeysAndChangedSamplesEqualCompute) {
  std::vector<float> audio = Audio(16000 * 6);
  GrowingLogMel growing;
  std::vector<float> got;
  auto check = [&](uint64_t key, int64_t n, const std::string& what) {
    const absl::Span<const float> samples(audio.data(), static_cast<size_t>(n));
    const int64_t frames = log_mel_.NumFrames(n);
    ASSERT_TRUE(growing.TimeMajor(log_mel_, key, samples, frames, &got).ok()) << what;
    EXPECT_TRUE(Same(got, Want(log_mel_, samples, frames))) << what;
  };
  check(1, 16000 * 5, "5 s");
  EXPECT_GT(growing.kept_frames(), 490);
  check(1, 16000 * 3 + 77, "a prefix of 3 s");
  check(1, 16000 * 6, "6 s again");
  check(2, 16000 * 4, "another key");
  for (float& v : audio) v *= 0.5f;  // other samples under the same key: the probes see it
  check(2, 16000 * 5, "changed samples, same key");
  check(2, 0, "no samples");
  check(2, 150, "fewer than half a window");
  EXPECT_EQ(growing.kept_frames(), 0);
  check(2, 201, "one stable frame");
  EXPECT_EQ(growing.kept_frames(), 1);
}

TEST_P(GrowingLogMelTest, RefusesFramesItDoesNotHave) {
  const std::vector<float> audio = Audio(16000);
  GrowingLogMel growing;
  std::vector<float> out;
  EXPECT_EQ(growing.TimeMajor(log_mel_, 1, audio, log_mel_.NumFrames(16000) + 1, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(growing.TimeMajor(log_mel_, 1, audio, -1, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(growing.TimeMajor(log_mel_, 1, audio, 0, &out).ok());
  EXPECT_TRUE(out.empty());
}

// Other front-end options under the same key start over (a kept frame of 80 bins is not one of
// 128).
TEST(GrowingLogMelOptionsTest, OtherOptionsStartOver) {
  std::vector<float> audio(16000 * 2);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (float& v : audio) v = noise(rng);
  auto mel80 = LogMel::Create({.n_mels = 80});
  auto mel128 = LogMel::Create({.n_mels = 128});
  ASSERT_TRUE(mel80.ok() && mel128.ok());
  GrowingLogMel growing;
  std::vector<float> got;
  ASSERT_TRUE(growing.TimeMajor(*mel80, 3, audio, 100, &got).ok());
  ASSERT_TRUE(growing.TimeMajor(*mel128, 3, audio, 100, &got).ok());
  EXPECT_TRUE(Same(got, Want(*mel128, audio, 100)));
}

INSTANTIATE_TEST_SUITE_P(MelBins, GrowingLogMelTest, ::testing::Values(80, 128));

}  // namespace
}  // namespace waav::frontend

#include "engine/audio/resampler.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "engine/audio/wav_test_util.h"
#include "gtest/gtest.h"

namespace waav::audio {
namespace {

std::vector<float> Sine(double freq_hz, double amplitude, int rate_hz, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * freq_hz * i / rate_hz));
  }
  return v;
}

struct SineFit {
  double amplitude = 0;
  double correlation = 0;  // normalised correlation with the ideal sine at zero phase
};

// Compares `y` (at rate_hz) with sin(2π f t) over the interior, skipping `edge` samples at each
// end where the resampler's filter sees the signal start or stop.
SineFit FitSine(const std::vector<float>& y, double freq_hz, int rate_hz, size_t edge) {
  double yy = 0, ss = 0, ys = 0, yc = 0;
  for (size_t i = edge; i + edge < y.size(); ++i) {
    const double phase = 2 * std::numbers::pi * freq_hz * i / rate_hz;
    yy += double{y[i]} * y[i];
    ss += std::sin(phase) * std::sin(phase);
    ys += y[i] * std::sin(phase);
    yc += y[i] * std::cos(phase);
  }
  const double n = static_cast<double>(y.size() - 2 * edge);
  return {2 * std::hypot(ys, yc) / n, ys / std::sqrt(yy * ss)};
}

TEST(ResamplerTest, SineKeepsFrequencyAmplitudeAndPhase) {
  for (int from_hz : {22050, 44100, 8000}) {
    SCOPED_TRACE(from_hz);
    const size_t n = static_cast<size_t>(from_hz);  // one second
    const std::vector<float> in = Sine(1000, 0.5, from_hz, n);
    absl::StatusOr<std::vector<float>> out = Resample(in, from_hz, kWhisperSampleRateHz);
    ASSERT_TRUE(out.ok()) << out.status();
    // Length: n·to/from, to within a sample of rounding.
    EXPECT_NEAR(static_cast<double>(out->size()), 16000.0, 1.0);
    const SineFit fit = FitSine(*out, 1000, kWhisperSampleRateHz, 200);
    // soxr HQ passes 1 kHz flat (ripple ≪ 0.01 dB) and removes its own delay, so the output is the
    // same sine sampled at 16 kHz, in phase: correlation 1 - 1e-6 leaves room only for noise
    // ~60 dB down, far above soxr's ~120 dB but far below any frequency or phase error.
    EXPECT_NEAR(fit.amplitude, 0.5, 0.5e-3);
    EXPECT_GT(fit.correlation, 1 - 1e-6);
  }
}

TEST(ResamplerTest, LengthsFollowTheRateRatio) {
  const std::vector<float> in(12345, 0.1f);
  for (auto [from_hz, to_hz] :
       {std::pair{22050, 16000}, {44100, 16000}, {8000, 16000}, {16000, 48000}, {48000, 8000}}) {
    absl::StatusOr<std::vector<float>> out = Resample(in, from_hz, to_hz);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NEAR(static_cast<double>(out->size()), 12345.0 * to_hz / from_hz, 1.0)
        << from_hz << " -> " << to_hz;
  }
}

TEST(ResamplerTest, SameRateIsACopy) {
  const std::vector<float> in = {0.1f, -0.2f, 0.3f};
  absl::StatusOr<std::vector<float>> out = Resample(in, 16000, 16000);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, in);
}

TEST(ResamplerTest, EmptyInputGivesEmptyOutput) {
  absl::StatusOr<std::vector<float>> out = Resample({}, 22050, 16000);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->empty());
}

TEST(ResamplerTest, InvalidRates) {
  const std::vector<float> in = {0.1f};
  EXPECT_EQ(Resample(in, 0, 16000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Resample(in, 16000, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StreamingResampler::Create(0, 16000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

std::vector<float> StreamInRandomPieces(StreamingResampler& resampler, const std::vector<float>& in,
                                        std::mt19937& rng) {
  std::vector<float> out;
  size_t pos = 0;
  while (pos < in.size()) {
    // Pieces from empty to a few hundred ms, as a network client would send them.
    const size_t piece = std::min<size_t>(in.size() - pos, rng() % 5000);
    absl::StatusOr<std::vector<float>> part =
        resampler.Process(absl::MakeConstSpan(in).subspan(pos, piece));
    EXPECT_TRUE(part.ok()) << part.status();
    if (part.ok()) out.insert(out.end(), part->begin(), part->end());
    pos += piece;
  }
  absl::StatusOr<std::vector<float>> tail = resampler.Flush();
  EXPECT_TRUE(tail.ok()) << tail.status();
  if (tail.ok()) out.insert(out.end(), tail->begin(), tail->end());
  return out;
}

TEST(ResamplerTest, StreamingEqualsOneShot) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> in(40000);
  for (float& s : in) s = noise(rng);

  for (auto [from_hz, to_hz] :
       {std::pair{22050, 16000}, {44100, 16000}, {8000, 16000}, {16000, 16000}}) {
    SCOPED_TRACE(::testing::Message() << from_hz << " -> " << to_hz);
    absl::StatusOr<std::vector<float>> one_shot = Resample(in, from_hz, to_hz);
    ASSERT_TRUE(one_shot.ok()) << one_shot.status();
    absl::StatusOr<StreamingResampler> resampler = StreamingResampler::Create(from_hz, to_hz);
    ASSERT_TRUE(resampler.ok()) << resampler.status();
    // Twice through the same resampler: Flush() must leave it ready for a new signal.
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> streamed = StreamInRandomPieces(*resampler, in, rng);
      ASSERT_EQ(streamed.size(), one_shot->size()) << "round " << round;
      float max_error = 0;
      for (size_t i = 0; i < streamed.size(); ++i) {
        max_error = std::max(max_error, std::abs(streamed[i] - (*one_shot)[i]));
      }
      EXPECT_LE(max_error, 1e-6f) << "round " << round;
    }
  }
}

TEST(ResamplerTest, LoadAudio16kResamplesStereoFile) {
  const int from_hz = 22050;
  const std::vector<float> mono = Sine(440, 0.25, from_hz, 11025);
  std::vector<float> stereo;
  for (float s : mono) {
    stereo.push_back(s);
    stereo.push_back(s);
  }
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "waav_load_audio_16k.wav").string();
  const wav_test::Bytes file = wav_test::SimpleWavFloat(stereo, 2, from_hz);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
  }
  absl::StatusOr<Audio> audio = LoadAudio16k(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_EQ(audio->sample_rate_hz, 16000);
  EXPECT_NEAR(static_cast<double>(audio->samples.size()), 8000.0, 1.0);
  const SineFit fit = FitSine(audio->samples, 440, 16000, 200);
  EXPECT_NEAR(fit.amplitude, 0.25, 0.25e-3);
  EXPECT_GT(fit.correlation, 1 - 1e-6);
}

TEST(ResamplerTest, LoadAudio16kPassesErrorsThrough) {
  EXPECT_EQ(LoadAudio16k("/nonexistent/waav.wav").status().code(), absl::StatusCode::kNotFound);
}

TEST(ResamplerTest, JfkSampleFromSharedData) {
  const char* shared = std::getenv("WAAV_SHARED_DATA");
  const std::filesystem::path path =
      std::filesystem::path(shared != nullptr ? shared : "") / "speech" / "jfk.wav";
  if (shared == nullptr || !std::filesystem::exists(path)) {
    GTEST_SKIP() << "WAAV_SHARED_DATA unset or " << path << " absent; skipping the jfk.wav check";
  }
  absl::StatusOr<Audio> audio = LoadAudio16k(path.string());
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_EQ(audio->sample_rate_hz, 16000);
  EXPECT_EQ(audio->samples.size(), 176000u);  // 11 s of 16 kHz mono 16-bit PCM
  float peak = 0;
  for (float s : audio->samples) peak = std::max(peak, std::abs(s));
  EXPECT_GT(peak, 0.1f);  // speech, not silence
  EXPECT_LE(peak, 1.0f);
}

}  // namespace
}  // namespace waav::audio

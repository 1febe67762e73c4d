#include "server/energy_vad.h"

#include <cmath>
#include <random>

#include "engine/audio/wav_reader.h"
#include "gtest/gtest.h"
#include "tests/support/test_env.h"

namespace waav::server {
namespace {

constexpr int kFrame = EnergyVad::kFrameSamples;

// Probabilities of consecutive frames of `samples` for one stream.
std::vector<float> Probabilities(EnergyVad& vad, const std::vector<float>& samples) {
  auto state = vad.NewState();
  std::vector<float> out;
  streaming::VadStreamState* states[] = {state.get()};
  for (size_t i = 0; i + kFrame <= samples.size(); i += kFrame) {
    float p = -1;
    EXPECT_TRUE(
        vad.Process(absl::MakeConstSpan(samples.data() + i, kFrame), states, absl::MakeSpan(&p, 1))
            .ok());
    out.push_back(p);
  }
  return out;
}

double ShareAbove(const std::vector<float>& p, float threshold) {
  int n = 0;
  for (float v : p) n += v >= threshold;
  return p.empty() ? 0 : static_cast<double>(n) / p.size();
}

TEST(EnergyVadTest, SilenceIsNotSpeech) {
  EnergyVad vad;
  for (float p : Probabilities(vad, std::vector<float>(16000 * 3, 0.0f))) EXPECT_LT(p, 0.05f);
  // Very quiet noise (-70 dBFS) is silence too.
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 3e-4f);
  std::vector<float> quiet(16000 * 3);
  for (float& x : quiet) x = noise(rng);
  for (float p : Probabilities(vad, quiet)) EXPECT_LT(p, 0.05f);
}

TEST(EnergyVadTest, SteadyNoiseIsNotSpeech) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  EnergyVad vad;
  // Loud white noise: crosses zero on about half of its samples.
  std::normal_distribution<float> white(0.0f, 0.1f);
  std::vector<float> noise(16000 * 4);
  for (float& x : noise) x = white(rng);
  EXPECT_EQ(ShareAbove(Probabilities(vad, noise), 0.5f), 0.0) << "seed " << seed;
  // A loud steady hum: voiced-like, but never above its own floor.
  std::vector<float> hum(16000 * 4);
  for (size_t i = 0; i < hum.size(); ++i) hum[i] = 0.3f * std::sin(2 * M_PI * 100.0 * i / 16000);
  EXPECT_EQ(ShareAbove(Probabilities(vad, hum), 0.5f), 0.0);
}

TEST(EnergyVadTest, SpeechIsSpeech) {
  const auto jfk = waav::testing::SpeechFile("jfk.wav");
  if (!jfk) GTEST_SKIP() << "shared speech data absent";
  auto audio = audio::ReadWavFile(*jfk);
  ASSERT_TRUE(audio.ok());
  ASSERT_EQ(audio->sample_rate_hz, 16000);
  std::vector<float> samples(8000, 0.0f);  // 0.5 s of silence first
  samples.insert(samples.end(), audio->samples.begin(), audio->samples.end());
  EnergyVad vad;
  const std::vector<float> p = Probabilities(vad, samples);
  // JFK speaks most of the 11 s, with pauses.
  EXPECT_GT(ShareAbove(p, 0.5f), 0.4);
  EXPECT_LT(ShareAbove(p, 0.5f), 0.95);
  for (int i = 0; i < 15; ++i) EXPECT_LT(p[i], 0.5f) << "frame " << i << " of the silence";
}

TEST(EnergyVadTest, StreamsInABatchAreIndependent) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 0.05f);
  std::vector<float> a(kFrame * 40), b(kFrame * 40, 0.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = n(rng) * static_cast<float>(std::sin(i * 0.01));
  EnergyVad vad;
  const std::vector<float> alone_a = Probabilities(vad, a);
  const std::vector<float> alone_b = Probabilities(vad, b);
  auto sa = vad.NewState();
  auto sb = vad.NewState();
  streaming::VadStreamState* states[] = {sa.get(), sb.get()};
  std::vector<float> frames(2 * kFrame);
  for (size_t f = 0; f < alone_a.size(); ++f) {
    std::copy(a.begin() + f * kFrame, a.begin() + (f + 1) * kFrame, frames.begin());
    std::copy(b.begin() + f * kFrame, b.begin() + (f + 1) * kFrame, frames.begin() + kFrame);
    float p[2];
    ASSERT_TRUE(vad.Process(frames, states, absl::MakeSpan(p, 2)).ok());
    EXPECT_EQ(p[0], alone_a[f]);
    EXPECT_EQ(p[1], alone_b[f]);
  }
}

TEST(EnergyVadTest, WrongShapesAreErrors) {
  EnergyVad vad;
  auto state = vad.NewState();
  streaming::VadStreamState* states[] = {state.get()};
  std::vector<float> frame(kFrame - 1);
  float p = 0;
  EXPECT_EQ(vad.Process(frame, states, absl::MakeSpan(&p, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  streaming::VadStreamState foreign;
  streaming::VadStreamState* bad[] = {&foreign};
  frame.resize(kFrame);
  EXPECT_EQ(vad.Process(frame, bad, absl::MakeSpan(&p, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace waav::server

// WordGapDetector on synthetic speech-like levels: a drop between two loud stretches is one
// gap, in the frame where it starts; shallow dips, quiet stretches that never rose, and a long
// quiet run are not (more) gaps.
#include "engine/streaming/word_gaps.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

constexpr int kFrame = 512;  // the VAD's frame: 32 ms

// Noise at `db` dBFS (RMS), `ms` long.
std::vector<float> Noise(float db, int ms, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, std::pow(10.0f, db / 20.0f));
  std::vector<float> out(static_cast<size_t>(ms) * 16);
  for (float& x : out) x = normal(*rng);
  return out;
}

// Feeds `audio` frame by frame; returns the start sample of each frame that started a gap.
std::vector<int> Gaps(WordGapDetector& detector, const std::vector<float>& audio) {
  std::vector<int> gaps;
  for (size_t start = 0; start + kFrame <= audio.size(); start += kFrame) {
    if (detector.Push(absl::MakeConstSpan(audio.data() + start, kFrame))) {
      gaps.push_back(static_cast<int>(start));
    }
  }
  return gaps;
}

std::vector<float> Join(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(WordGapDetectorTest, ADropBetweenWordsIsOneGapWhereItStarts) {
  std::mt19937 rng(7);
  // Silence, a 320 ms "word" at -10 dB, a 64 ms drop to -35 dB, another word, then a long
  // quiet stretch at -40 dB.
  const std::vector<float> audio =
      Join({Noise(-60, 128, &rng), Noise(-10, 320, &rng), Noise(-35, 64, &rng),
            Noise(-10, 320, &rng), Noise(-40, 640, &rng)});
  WordGapDetector detector(15);
  const std::vector<int> gaps = Gaps(detector, audio);
  // The first word ends at 448 ms = sample 7168, the start of frame 14; the second at 832 ms =
  // sample 13312, frame 26. The quiet stretch after it is one gap, not twenty.
  EXPECT_EQ(gaps, (std::vector<int>{7168, 13312}));
}

TEST(WordGapDetectorTest, ShallowDipsAndQuietWithoutSpeechAreNoGaps) {
  std::mt19937 rng(11);
  // 10 dB dips are less than the 15 asked for; silence before any speech cannot drop.
  const std::vector<float> audio =
      Join({Noise(-60, 320, &rng), Noise(-10, 320, &rng), Noise(-20, 64, &rng),
            Noise(-10, 320, &rng), Noise(-20, 64, &rng), Noise(-10, 320, &rng)});
  WordGapDetector detector(15);
  EXPECT_TRUE(Gaps(detector, audio).empty());
  WordGapDetector looser(8);  // the same dips count at 8 dB
  EXPECT_EQ(Gaps(looser, audio).size(), 2u);
}

TEST(WordGapDetectorTest, TheLevelMustRiseAgainBeforeTheNextGap) {
  std::mt19937 rng(3);
  // After the drop the level comes back only to -25 dB (not within 6 dB of the -10 dB peak):
  // the second drop is part of the same gap. Once the peak has aged out (0.6 s) the -25 dB
  // stretch is the new reference and a drop from it is a gap again.
  const std::vector<float> audio =
      Join({Noise(-10, 320, &rng), Noise(-40, 64, &rng), Noise(-25, 160, &rng),
            Noise(-45, 64, &rng), Noise(-25, 800, &rng), Noise(-45, 96, &rng)});
  WordGapDetector detector(15);
  const std::vector<int> gaps = Gaps(detector, audio);
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_EQ(gaps[0], 320 * 16);
  EXPECT_EQ(gaps[1], (320 + 64 + 160 + 64 + 800) * 16);
}

TEST(WordGapDetectorTest, APartialPieceAtTheEndIsIgnored) {
  std::mt19937 rng(5);
  WordGapDetector detector(15);
  const std::vector<float> loud = Noise(-10, 320, &rng);
  EXPECT_FALSE(detector.Push(loud));
  // 100 samples (less than an 8 ms piece) of silence: not looked at.
  const std::vector<float> bit(100, 0.0f);
  EXPECT_FALSE(detector.Push(bit));
  EXPECT_TRUE(detector.Push(std::vector<float>(kFrame, 0.0f)));
}

}  // namespace
}  // namespace waav::streaming

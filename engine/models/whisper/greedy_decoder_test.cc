// The decoding rules on synthetic logits, with the real tiny.en vocabulary.
#include "engine/models/whisper/greedy_decoder.h"

#include <cmath>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/tiny_en_vocabulary.h"

namespace waav::whisper {
namespace {

class LogitRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocabulary = waav::testing::LoadTinyEnVocabulary();
    if (absl::IsNotFound(vocabulary.status())) GTEST_SKIP() << vocabulary.status().message();
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    vocabulary_ = std::move(*vocabulary);
    s_ = vocabulary_->special();
  }

  std::vector<float> Apply(const std::vector<int>& sampled, std::vector<float> logits = {}) {
    if (logits.empty()) logits.assign(51864, 0.0f);
    LogitRules(*vocabulary_, GreedyOptions{}).Apply(sampled, absl::MakeSpan(logits));
    return logits;
  }
  int Ts(int index) const { return s_.timestamp_begin + index; }
  static bool Off(const std::vector<float>& l, int id) {
    return std::isinf(l[static_cast<size_t>(id)]);
  }

  std::unique_ptr<Vocabulary> vocabulary_;
  SpecialTokens s_;
};

TEST_F(LogitRulesTest, FirstStepAllowsOnlyEarlyTimestamps) {
  const auto l = Apply({});
  for (int id = 0; id < s_.timestamp_begin; ++id) ASSERT_TRUE(Off(l, id)) << id;
  for (int i = 0; i <= 50; ++i) EXPECT_FALSE(Off(l, Ts(i))) << i;
  EXPECT_TRUE(Off(l, Ts(51)));
  EXPECT_TRUE(Off(l, 51863));
}

TEST_F(LogitRulesTest, SuppressedTokensAndNoTimestampsAreAlwaysOff) {
  std::vector<float> logits(51864, 0.0f);
  logits[100] = 50.0f;  // a dominant text token, so timestamps are not forced
  const auto l = Apply({Ts(0), 100}, logits);
  for (int id : vocabulary_->SuppressedTokens()) EXPECT_TRUE(Off(l, id)) << id;
  EXPECT_TRUE(Off(l, s_.no_timestamps));
  EXPECT_FALSE(Off(l, 100));
  EXPECT_FALSE(Off(l, s_.eot));
  EXPECT_FALSE(Off(l, 220));  // blank suppression applies to the first step only
}

TEST_F(LogitRulesTest, LikelyTimestampsForceATimestamp) {
  // Uniform logits: 1501 timestamps together outweigh any single text token.
  const auto l = Apply({Ts(0), 100});
  for (int id = 0; id < s_.timestamp_begin; ++id) ASSERT_TRUE(Off(l, id)) << id;
  EXPECT_FALSE(Off(l, Ts(1)));
}

TEST_F(LogitRulesTest, OpenTimestampAllowsAnotherTimestampOrTheEnd) {
  std::vector<float> logits(51864, 0.0f);
  logits[100] = 50.0f;
  logits[static_cast<size_t>(s_.eot)] = 60.0f;  // likelier than all timestamps together
  const auto l = Apply({Ts(0), 100, Ts(7)}, logits);
  EXPECT_TRUE(Off(l, 100));      // no text inside a timestamp pair
  EXPECT_FALSE(Off(l, s_.eot));  // the end may follow a single timestamp
  EXPECT_TRUE(Off(l, Ts(6)));    // never backwards
  EXPECT_FALSE(Off(l, Ts(7)));
  EXPECT_FALSE(Off(l, Ts(8)));
}

TEST_F(LogitRulesTest, TimestampsAfterTextMoveStrictlyForward) {
  std::vector<float> logits(51864, 0.0f);
  logits[100] = 50.0f;
  const auto l = Apply({Ts(0), 100, Ts(7), Ts(7), 200}, logits);
  EXPECT_TRUE(Off(l, Ts(6)));
  EXPECT_TRUE(Off(l, Ts(7)));  // a segment cannot end where it started
  EXPECT_FALSE(Off(l, Ts(8)));
  EXPECT_FALSE(Off(l, 100));
}

TEST_F(LogitRulesTest, ClosedPairRequiresText) {
  const auto l = Apply({Ts(0), 100, Ts(7), Ts(7)});
  for (int id = s_.timestamp_begin; id < 51864; ++id) ASSERT_TRUE(Off(l, id)) << id;
  EXPECT_FALSE(Off(l, 100));
  EXPECT_FALSE(Off(l, s_.eot));
}

TEST_F(LogitRulesTest, SecondStepAfterTimestampMustBeText) {
  // A single leading timestamp counts as a closed pair (it is its own penultimate).
  const auto l = Apply({Ts(3)});
  for (int id = s_.timestamp_begin; id < 51864; ++id) ASSERT_TRUE(Off(l, id)) << id;
  EXPECT_FALSE(Off(l, 100));
}

TEST_F(LogitRulesTest, WithoutTimestampsNoTimestampIsEverSampled) {
  LogitRules rules(*vocabulary_, GreedyOptions{}, /*timestamps=*/false);
  for (const std::vector<int>& sampled : {std::vector<int>{}, std::vector<int>{100, 200}}) {
    std::vector<float> l(51864, 0.0f);
    rules.Apply(sampled, absl::MakeSpan(l));
    for (int id = s_.timestamp_begin; id < 51864; ++id) ASSERT_TRUE(Off(l, id)) << id;
    EXPECT_FALSE(Off(l, 100));
    EXPECT_EQ(Off(l, s_.eot), sampled.empty());  // blank suppression at the first step only
    // " " is token 220 in Whisper's byte-level BPE; the vocabulary tokenized it once.
    EXPECT_EQ(vocabulary_->blank_token(), 220);
    EXPECT_EQ(Off(l, 220), sampled.empty());
  }
}

TEST_F(LogitRulesTest, SpecialTokensAreWhereTheModelExpectsThem) {
  EXPECT_EQ(s_.eot, 50256);
  EXPECT_EQ(s_.sot, 50257);
  EXPECT_EQ(s_.no_timestamps, 50362);
  EXPECT_EQ(s_.timestamp_begin, 50363);
  EXPECT_EQ(vocabulary_->SotSequence(), std::vector<int>{s_.sot});
  EXPECT_EQ(vocabulary_->DecodeText({s_.sot, 843, Ts(3), s_.eot}),
            vocabulary_->tokenizer().Decode(std::vector<int>{843}));
}

// The table of tokens whose text begins with a space (a word's first token) against decoding
// each token, on random ids below <|endoftext|>; special tokens and ids out of range are none.
TEST_F(LogitRulesTest, TokensThatBeginWithASpace) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> id(0, s_.eot - 1);
  int spaced = 0;
  for (int i = 0; i < 2000; ++i) {
    const int token = id(rng);
    const std::string piece = vocabulary_->tokenizer().Decode(std::vector<int>{token});
    const bool want = !piece.empty() && piece[0] == ' ';
    ASSERT_EQ(vocabulary_->BeginsWithSpace(token), want) << token << " '" << piece << "'";
    spaced += want ? 1 : 0;
  }
  EXPECT_GT(spaced, 0);
  EXPECT_LT(spaced, 2000);
  EXPECT_TRUE(vocabulary_->BeginsWithSpace(220));  // " "
  for (const int token : {-1, s_.eot, s_.sot, s_.no_timestamps, Ts(3), 1 << 20}) {
    EXPECT_FALSE(vocabulary_->BeginsWithSpace(token)) << token;
  }
}

// Wherever FixedMask names a mask, Apply disables exactly that mask's tokens and leaves every
// other logit as it was, on random logits after random histories of text and timestamps.
TEST_F(LogitRulesTest, FixedMasksEqualApplyWhereTheyApply) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::uniform_int_distribution<int> text(0, s_.eot - 1), ts(0, 1500), length(0, 5), coin(0, 1);
  const size_t words = (51864 + 31) / 32;
  int checked[LogitRules::kNumFixedMasks] = {};
  for (bool timestamps : {false, true}) {
    const LogitRules rules(*vocabulary_, GreedyOptions{}, timestamps);
    const std::vector<int32_t> bits = rules.FixedMaskBits();
    ASSERT_EQ(bits.size(), LogitRules::kNumFixedMasks * words);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int> sampled;
      const int n = length(rng);
      for (int i = 0; i < n; ++i) sampled.push_back(coin(rng) ? text(rng) : Ts(ts(rng)));
      if (trial % 4 == 0 && timestamps) sampled = {Ts(3), text(rng), Ts(7), Ts(7)};  // a pair
      const int mask = rules.FixedMask(sampled);
      if (mask < 0) continue;
      ++checked[mask];
      std::vector<float> logits(51864);
      for (float& v : logits) v = logit(rng);
      const std::vector<float> before = logits;
      rules.Apply(sampled, absl::MakeSpan(logits));
      for (size_t t = 0; t < logits.size(); ++t) {
        const bool off =
            (static_cast<uint32_t>(bits[static_cast<size_t>(mask) * words + t / 32]) >> (t % 32)) &
            1u;
        if (off) {
          ASSERT_TRUE(std::isinf(logits[t]) && logits[t] < 0)
              << "mask " << mask << " token " << t << " seed " << seed;
        } else {
          ASSERT_EQ(logits[t], before[t]) << "mask " << mask << " token " << t << " seed " << seed;
        }
      }
    }
  }
  EXPECT_GT(checked[LogitRules::kTextFirst] + checked[LogitRules::kText], 0);
  EXPECT_GT(checked[LogitRules::kTimestampFirst], 0);
  // The no-speech masks: all allowed; only <|nospeech|> allowed.
  const std::vector<int32_t> bits = LogitRules(*vocabulary_, GreedyOptions{}).FixedMaskBits();
  for (size_t t = 0; t < 51864; ++t) {
    const auto bit = [&](int row) {
      return (static_cast<uint32_t>(bits[static_cast<size_t>(row) * words + t / 32]) >> (t % 32)) &
             1u;
    };
    ASSERT_EQ(bit(LogitRules::kAllowAll), 0u) << t;
    ASSERT_EQ(bit(LogitRules::kOnlyNoSpeech), t == static_cast<size_t>(s_.no_speech) ? 0u : 1u)
        << t;
  }
}

}  // namespace
}  // namespace waav::whisper

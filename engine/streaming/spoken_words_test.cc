// RestartWatch: where it stops a partial's tokens, and that a partial stopped there shows what
// the whole decode's partial shows (UtteranceDecoder cuts the restart either way).
#include "engine/streaming/spoken_words.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/streaming/utterance_decoder.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_en_vocabulary.h"

namespace waav::streaming {
namespace {

class RestartWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocabulary = testing::LoadTinyEnVocabulary();
    if (absl::IsNotFound(vocabulary.status())) GTEST_SKIP() << vocabulary.status().message();
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    vocabulary_ = std::move(*vocabulary);
  }

  std::vector<int> Encode(const std::string& text) const {
    return vocabulary_->tokenizer().Encode(text);
  }
  std::string Decode(const std::vector<int>& tokens) const {
    return vocabulary_->tokenizer().Decode(tokens);
  }

  // The tokens of `sampled` a row keeps when the watch stops it (all of them if it never does).
  std::vector<int> Kept(const std::vector<int>& committed, const std::vector<int>& sampled,
                        int run_words) const {
    RestartWatch watch(*vocabulary_, committed, run_words);
    for (size_t i = 0; i < sampled.size(); ++i) {
      if (watch.StopsBefore(sampled[i])) return {sampled.begin(), sampled.begin() + i};
    }
    return sampled;
  }

  // A stream's first partial of `decoded` (tokens after no committed words).
  std::string Partial(const std::vector<int>& decoded) const {
    UtteranceDecoder utterance(*vocabulary_, StreamOptions{});
    whisper::GreedyResult result;
    result.tokens = decoded;
    result.token_logprobs.assign(decoded.size(), -0.1f);
    result.sum_logprob = -0.1 * static_cast<double>(decoded.size() + 1);
    return utterance.Finish(result, 0, 16000 * 5, /*is_final=*/false, EndReason::kSilence)
        .transcript;
  }

  std::unique_ptr<whisper::Vocabulary> vocabulary_;
};

// Whisper's restart on a short window (LJ001-0002's words): the watch stops before the word
// after a run of 3 repeated words; the partial of what was kept equals the whole decode's.
TEST_F(RestartWatchTest, StopsAfterARunOfRepeatedWords) {
  const std::vector<int> sampled = Encode(
      " in being comparatively modern. In being comparatively modern. In being comparatively "
      "modern.");
  const std::vector<int> kept = Kept({}, sampled, 3);
  EXPECT_EQ(Decode(kept), " in being comparatively modern. In being comparatively");
  EXPECT_EQ(Partial(kept), "in being comparatively modern.");
  EXPECT_EQ(Partial(kept), Partial(sampled));
  // A run of 2 stops a word sooner, of 4 a word later.
  EXPECT_EQ(Decode(Kept({}, sampled, 2)), " in being comparatively modern. In being");
  EXPECT_EQ(Decode(Kept({}, sampled, 4)),
            " in being comparatively modern. In being comparatively modern.");
  // Below 2 counts as 2: a single repeated word is no restart.
  EXPECT_EQ(Kept({}, sampled, 1), Kept({}, sampled, 2));
}

// Words that come back without restarting the utterance's words, and runs shorter than asked:
// nothing stops.
TEST_F(RestartWatchTest, RepeatsThatAreNoRestartDoNotStop) {
  for (const std::string text :
       {" And so my fellow Americans, ask not what your country can do for you, ask what you can "
        "do for your country.",
        " Ask not what your country can do for you, ask not what I",  // a run of 3, asked 4
        " the the the the cat sat on the mat.",  // a restart must begin at word 2 or later
        " One, two, three."}) {
    const std::vector<int> sampled = Encode(text);
    const int run = text.starts_with(" Ask not") ? 4 : 3;
    EXPECT_EQ(Kept({}, sampled, run), sampled) << text;
  }
}

// The committed words are where the utterance starts: their restart in the sampled tokens
// stops the row (the partial keeps the committed words), and so does one that begins in them.
TEST_F(RestartWatchTest, TheCommittedWordsCount) {
  const std::vector<int> committed = Encode(" And so my");
  const std::vector<int> sampled = Encode(" fellow Americans. And so my fellow Americans.");
  EXPECT_EQ(Decode(Kept(committed, sampled, 3)), " fellow Americans. And so my");
  // Without the committed words the same tokens restart nowhere.
  EXPECT_EQ(Kept({}, sampled, 3), sampled);
}

// Words are compared without case or punctuation; words of punctuation alone are left out.
TEST_F(RestartWatchTest, WordsAreComparedAsThePartialCutCompares) {
  const std::vector<int> sampled = Encode(" Hello, world... HELLO world! ... hello");
  EXPECT_EQ(Decode(Kept({}, sampled, 2)), " Hello, world... HELLO world!");
  EXPECT_EQ(ComparedWord(*vocabulary_, Encode(" Americans,")), "americans");
  EXPECT_EQ(ComparedWord(*vocabulary_, Encode(" ...")), "");
  EXPECT_TRUE(StartsWord(*vocabulary_, Encode(" Hello")[0]));
  EXPECT_FALSE(StartsWord(*vocabulary_, Encode(",")[0]));
  EXPECT_TRUE(StartsWord(*vocabulary_, vocabulary_->special().eot));
}

// A restart that leaves out the utterance's first one or two words (misheard on the window's
// start, said right the second time) stops the row once it runs 4 words, whatever run_words
// asks below that; a run of 3 such words does not, nor does speech that repeats three words.
TEST_F(RestartWatchTest, ARestartThatLeavesOutFirstWordsStopsAfterFourWords) {
  const std::vector<int> sampled =
      Encode(" invention of movable metal letters. The invention of movable metal letters.");
  for (const int run : {2, 3, 4}) {
    EXPECT_EQ(Decode(Kept(Encode(" in the"), sampled, run)),
              " invention of movable metal letters. The invention of movable")
        << run;
  }
  // From the third word: two misheard words before it.
  EXPECT_EQ(Decode(Kept(Encode(" and in the"), sampled, 4)),
            " invention of movable metal letters. The invention of movable");
  // From the fourth: no restart.
  EXPECT_EQ(Kept(Encode(" and so in the"), sampled, 4), sampled);
  // "The invention of" is whole (the next word starts) and one word short of a skipping run.
  const std::vector<int> three = Encode(" invention of it. The invention of the art.");
  EXPECT_EQ(Kept(Encode(" in the"), three, 3), three);
  const std::vector<int> genuine = Encode(
      " The invention of movable metal letters in the middle of the 15th century may justly be "
      "considered as the invention of the art of printing.");
  EXPECT_EQ(Kept({}, genuine, 4), genuine);
}

TEST(RestartStartTest, FindsTheEarliestRestartThatRunsToTheEnd) {
  using Words = std::vector<std::string>;
  EXPECT_EQ(RestartStart({"in", "being", "in", "being"}, 2), 2u);
  EXPECT_EQ(RestartStart({"in", "being", "modern", "in"}, 2), 4u);  // 1 word: too short
  EXPECT_EQ(RestartStart({"in", "being", "modern", "in", "being"}, 3), 5u);
  const Words skipping = {"in",  "the",       "invention", "of",     "movable",
                          "the", "invention", "of",        "movable"};
  EXPECT_EQ(RestartStart(skipping, 2), 5u);
  EXPECT_EQ(RestartStart(Words(skipping.begin(), skipping.end() - 1), 2), 8u);    // 3 words
  EXPECT_EQ(RestartStart({"a", "b", "c", "d", "e", "c", "d", "e", "f"}, 2), 9u);  // not to the end
  EXPECT_EQ(RestartStart({"a", "b", "c", "d", "e", "f", "c", "d", "e", "f"}, 2), 6u);
  EXPECT_EQ(RestartStart({"a", "b", "c", "d", "e", "f", "g", "d", "e", "f", "g"}, 2), 11u);
  EXPECT_EQ(RestartStart({}, 2), 0u);
  EXPECT_EQ(RestartStart({"a", "a"}, 2), 2u);
}

// Special tokens are no words and split none.
TEST_F(RestartWatchTest, SpecialTokensAreNoWords) {
  std::vector<int> sampled = Encode(" go home");
  sampled.push_back(vocabulary_->special().no_timestamps);
  for (const int token : Encode(" go home go")) sampled.push_back(token);
  const std::vector<int> kept = Kept({}, sampled, 2);
  EXPECT_EQ(kept.size(), sampled.size() - 1);
}

}  // namespace
}  // namespace waav::streaming

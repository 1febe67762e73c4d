// UtteranceDecoder's word times: a final with word time offsets takes them from the alignment
// callback (offset by the utterance's start, clamped to its audio); partials, finals whose
// alignment fails and finals without a callback keep the estimate. The alignment here is a fake
// with known times; the real one is tested in engine/models/whisper/word_alignment_*_test.
#include "engine/streaming/utterance_decoder.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/streaming/spoken_words.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_en_vocabulary.h"

namespace waav::streaming {
namespace {

class UtteranceDecoderWordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocabulary = testing::LoadTinyEnVocabulary();
    if (absl::IsNotFound(vocabulary.status())) GTEST_SKIP() << vocabulary.status().message();
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    vocabulary_ = std::move(*vocabulary);
    options_.word_time_offsets = true;
    // " Hello, big world." -> tokens; log-probabilities −0.1 each except the last (−0.5).
    decoded_.tokens = vocabulary_->tokenizer().Encode(" Hello, big world.");
    decoded_.token_logprobs.assign(decoded_.tokens.size(), -0.1f);
    decoded_.token_logprobs.back() = -0.5f;
    decoded_.sum_logprob = -1.0;
  }

  // The fake alignment: the words faster-whisper would make, at fixed times (ms in the window).
  absl::StatusOr<std::vector<whisper::TimedWord>> Align(const std::vector<int>& text_tokens) {
    ++align_calls_;
    aligned_tokens_ = text_tokens;
    std::vector<whisper::TimedWord> words = whisper::SplitWords(*vocabulary_, text_tokens);
    int t = 100;
    for (whisper::TimedWord& w : words) {
      w.start_ms = t;
      w.end_ms = t += 400;
    }
    whisper::PostProcessWords(words);
    return words;
  }

  std::unique_ptr<whisper::Vocabulary> vocabulary_;
  StreamOptions options_;
  whisper::GreedyResult decoded_;
  int align_calls_ = 0;
  std::vector<int> aligned_tokens_;
};

// Prepare's window through an utterance's partials and final, then the next utterance: each
// equals the window computed from scratch (LogMel::Compute, all frames but its last, at most
// the model's 3000), bit for bit, and the prompt holds what earlier finals committed.
TEST_F(UtteranceDecoderWordsTest, PreparedWindowsEqualComputedOnes) {
  UtteranceDecoder decoder(*vocabulary_, options_);
  const frontend::LogMel log_mel;
  std::vector<float> audio(16000 * 32);
  for (size_t i = 0; i < audio.size(); ++i) {
    audio[i] = 0.3f * std::sin(0.05f * static_cast<float>(i)) * std::sin(1e-4f * i);
  }
  auto check = [&](size_t samples, int64_t start_ms) {
    const absl::Span<const float> a(audio.data(), samples);
    auto input = decoder.Prepare(log_mel, 3000, a, start_ms);
    ASSERT_TRUE(input.ok()) << input.status();
    const frontend::LogMel::Features f = log_mel.Compute(a);
    const int frames = std::max(0, std::min(3000, f.n_frames - 1));
    ASSERT_EQ(input->mel.size(), static_cast<size_t>(frames) * 80) << samples;
    for (int t = 0; t < frames; ++t) {
      for (int m = 0; m < 80; ++m) {
        ASSERT_EQ(input->mel[static_cast<size_t>(t) * 80 + m],
                  f.data[static_cast<size_t>(m) * f.n_frames + t])
            << samples << " samples, frame " << t << ", bin " << m;
      }
    }
  };
  for (size_t n = 8000; n <= 16000 * 31; n += 8000 * 7) check(n, 1000);  // partials, past 30 s
  check(16000 * 20, 1000);  // a final shorter than the partial before it
  decoder.Finish(decoded_, 1000, 16000 * 20, /*is_final=*/true, EndReason::kSilence);
  check(12000, 23000);  // the next utterance, elsewhere in the stream
  auto input = decoder.Prepare(log_mel, 3000, absl::Span<const float>(audio.data(), 24000), 23000);
  ASSERT_TRUE(input.ok());
  const std::vector<int> said = vocabulary_->tokenizer().Encode(" Hello, big world.");
  EXPECT_NE(std::search(input->prompt.begin(), input->prompt.end(), said.begin(), said.end()),
            input->prompt.end());
}

TEST_F(UtteranceDecoderWordsTest, FinalTakesAlignedTimes) {
  UtteranceDecoder decoder(*vocabulary_, options_);
  // 1 s of audio starting at 5 s.
  const RecognitionResult r =
      decoder.Finish(decoded_, 5000, 16000, /*is_final=*/true, EndReason::kSilence,
                     [this](const std::vector<int>& t) { return Align(t); });
  EXPECT_EQ(align_calls_, 1);
  EXPECT_EQ(aligned_tokens_, decoded_.tokens);
  ASSERT_EQ(r.words.size(), 3u);
  EXPECT_EQ(r.words[0].word, "Hello,");
  EXPECT_EQ(r.words[0].start_ms, 5100);
  EXPECT_EQ(r.words[0].end_ms, 5500);  // "," merged: Hello's own end
  EXPECT_EQ(r.words[1].word, "big");
  EXPECT_EQ(r.words[2].word, "world.");
  // " world" runs 1300..1700 ms in the window, past the 1 s of audio: clamped to its end.
  EXPECT_EQ(r.words[2].start_ms, 6000);
  EXPECT_EQ(r.words[2].end_ms, 6000);
  EXPECT_NEAR(r.words[2].confidence, std::exp((-0.1 - 0.5) / 2), 1e-6);
  for (const WordResult& w : r.words) EXPECT_TRUE(w.stable);
  EXPECT_FLOAT_EQ(r.stability, 1.0f);
}

TEST_F(UtteranceDecoderWordsTest, FinalKeepsThePartialsWordSplit) {
  // faster-whisper splits " well-known" into " well" and "-known"; a partial shows one word, and
  // a stable word keeps its text in the final: one word, from " well"'s start to "-known"'s end.
  decoded_.tokens = vocabulary_->tokenizer().Encode(" A well-known fact.");
  decoded_.token_logprobs.assign(decoded_.tokens.size(), -0.1f);
  UtteranceDecoder decoder(*vocabulary_, options_);
  const RecognitionResult r =
      decoder.Finish(decoded_, 0, 160000, /*is_final=*/true, EndReason::kSilence,
                     [this](const std::vector<int>& t) { return Align(t); });
  ASSERT_EQ(r.words.size(), 3u);
  EXPECT_EQ(r.words[1].word, "well-known");
  // Aligned words: " A" 100-500, " well" 500-900, "-known" 900-1300, " fact." 1300-1700.
  EXPECT_EQ(r.words[1].start_ms, 500);
  EXPECT_EQ(r.words[1].end_ms, 1300);
  EXPECT_EQ(r.words[2].word, "fact.");
  EXPECT_EQ(r.words[2].start_ms, 1300);
}

TEST_F(UtteranceDecoderWordsTest, PartialsAndFailuresAreEstimated) {
  UtteranceDecoder decoder(*vocabulary_, options_);
  auto align = [this](const std::vector<int>& t) { return Align(t); };
  const RecognitionResult partial =
      decoder.Finish(decoded_, 0, 32000, /*is_final=*/false, EndReason::kSilence, align);
  EXPECT_EQ(align_calls_, 0);
  ASSERT_FALSE(partial.words.empty());
  EXPECT_EQ(partial.words.front().start_ms, 0);  // the estimate spans the whole utterance
  EXPECT_EQ(partial.words.back().end_ms, 2000);

  auto failing = [](const std::vector<int>&) -> absl::StatusOr<std::vector<whisper::TimedWord>> {
    return absl::InternalError("no alignment");
  };
  const RecognitionResult final =
      decoder.Finish(decoded_, 0, 32000, /*is_final=*/true, EndReason::kSilence, failing);
  ASSERT_FALSE(final.words.empty());
  EXPECT_EQ(final.words.front().start_ms, 0);
  EXPECT_EQ(final.words.back().end_ms, 2000);
}

// Trailing words of their own without a letter or digit (Whisper's " ..." over the silence after
// speech) are left out of partials, finals and the final's alignment; punctuation that belongs
// to a word ("you...", "not!") and such words inside the utterance stay.
TEST_F(UtteranceDecoderWordsTest, TrailingPunctuationWordsAreLeftOut) {
  auto decode = [&](const std::string& text, bool is_final, std::vector<int>* aligned = nullptr) {
    whisper::GreedyResult decoded;
    decoded.tokens = vocabulary_->tokenizer().Encode(text);
    decoded.token_logprobs.assign(decoded.tokens.size(), -0.1f);
    UtteranceDecoder decoder(*vocabulary_, options_);
    if (aligned != nullptr) *aligned = decoder.FinalTextTokens(decoded);
    return decoder.Finish(decoded, 0, 32000, is_final, EndReason::kSilence,
                          [this](const std::vector<int>& t) { return Align(t); });
  };
  std::vector<int> aligned;
  RecognitionResult r = decode(" Ask not! ...", /*is_final=*/true, &aligned);
  EXPECT_EQ(r.transcript, "Ask not!");
  ASSERT_EQ(r.words.size(), 2u);
  EXPECT_EQ(r.words[1].word, "not!");
  EXPECT_EQ(aligned, vocabulary_->tokenizer().Encode(" Ask not!"));
  EXPECT_EQ(aligned_tokens_, aligned);  // what the final aligned is what FinalTextTokens said
  EXPECT_EQ(decode(" Ask not! . . . -", /*is_final=*/false).transcript, "Ask not!");
  EXPECT_EQ(decode(" Ask what you...", /*is_final=*/false).transcript, "Ask what you...");
  EXPECT_EQ(decode(" One ... two", /*is_final=*/true).transcript, "One ... two");
  EXPECT_EQ(decode(" 1999 ...", /*is_final=*/true).transcript, "1999");
  EXPECT_EQ(decode(" ...", /*is_final=*/true).transcript, "");
  EXPECT_TRUE(decode(" ...", /*is_final=*/false).words.empty());
}

// A partial whose words start over from the utterance's first (Whisper on a short window) keeps
// what came before; a final, a repetition that does not start from the first word, and a
// one-word stutter are kept whole.
TEST_F(UtteranceDecoderWordsTest, APartialThatStartsOverIsCut) {
  auto finish = [&](UtteranceDecoder& decoder, const std::string& text, bool is_final) {
    whisper::GreedyResult decoded;
    decoded.tokens = vocabulary_->tokenizer().Encode(text);
    decoded.token_logprobs.assign(decoded.tokens.size(), -0.1f);
    return decoder.Finish(decoded, 0, 32000, is_final, EndReason::kSilence, nullptr);
  };
  auto result = [&](UtteranceDecoder& decoder, const std::string& text, bool is_final) {
    return finish(decoder, text, is_final).transcript;
  };
  auto partial = [&](const std::string& text) {
    UtteranceDecoder decoder(*vocabulary_, options_);
    return result(decoder, text, false);
  };
  EXPECT_EQ(partial(" in being comparatively modern in being comparatively modern"),
            "in being comparatively modern");
  EXPECT_EQ(partial(" And so my fellow Americans. And so my fellow Americans. And so"),
            "And so my fellow Americans.");
  EXPECT_EQ(partial(" For although the Chinese took impression, for although the Chinese"),
            "For although the Chinese took impression,");
  EXPECT_EQ(partial(" ask not what you can do, ask not what"), "ask not what you can do,");
  const std::string genuine =
      " And so my fellow Americans, ask not what your country can do for you, ask what you can "
      "do for your country.";
  EXPECT_EQ(partial(genuine), genuine.substr(1));
  EXPECT_EQ(partial(" No, no, no."), "No, no, no.");
  EXPECT_EQ(partial(" And so my fellow Americans. And"), "And so my fellow Americans. And");
  // A restart that leaves out misheard first words counts from 4 words on.
  EXPECT_EQ(partial(" in the invention of movable metal. The invention of movable metal."),
            "in the invention of movable metal.");
  EXPECT_EQ(partial(" in the invention of it. The invention of"),
            "in the invention of it. The invention of");
  const std::string considered =
      " The invention of movable metal letters in the middle of the 15th century may justly be "
      "considered as the invention of the art";
  EXPECT_EQ(partial(considered), considered.substr(1));
  {
    UtteranceDecoder decoder(*vocabulary_, options_);
    EXPECT_EQ(result(decoder, " in being modern in being modern", true),
              "in being modern in being modern");
  }
  {
    // Committed words count: two partials agree on the first words, then the next one (decoded
    // after what they committed, the forced prefix) restarts.
    UtteranceDecoder decoder(*vocabulary_, options_);
    result(decoder, " in being comparatively", false);
    const std::string committed =
        finish(decoder, " in being comparatively", false).stable_transcript;
    ASSERT_FALSE(committed.empty());
    const std::string whole = " in being comparatively modern in being";
    ASSERT_EQ(whole.substr(0, committed.size() + 1), " " + committed);
    EXPECT_EQ(result(decoder, whole.substr(committed.size() + 1), false),
              "in being comparatively modern");
  }
}

// The prompt ends with the committed tokens and says how many (UtteranceInput::committed_tokens):
// the engine watches a partial's decode for a restart from them (RestartWatch), and a decode
// stopped there shows what the whole decode's partial shows.
TEST_F(UtteranceDecoderWordsTest, ThePromptNamesItsCommittedTokens) {
  const frontend::LogMel log_mel;
  const std::vector<float> audio(16000 * 2, 0.0f);
  auto decode = [&](UtteranceDecoder& decoder, const std::vector<int>& tokens) {
    whisper::GreedyResult decoded;
    decoded.tokens = tokens;
    decoded.token_logprobs.assign(tokens.size(), -0.1f);
    return decoder.Finish(decoded, 0, audio.size(), /*is_final=*/false, EndReason::kSilence);
  };
  UtteranceDecoder decoder(*vocabulary_, options_);
  auto first = decoder.Prepare(log_mel, 3000, audio, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->committed_tokens, 0u);
  const std::vector<int> said = vocabulary_->tokenizer().Encode(" And so my fellow");
  decode(decoder, said);
  const std::string committed = decode(decoder, said).stable_transcript;
  ASSERT_FALSE(committed.empty());
  auto input = decoder.Prepare(log_mel, 3000, audio, 0);
  ASSERT_TRUE(input.ok()) << input.status();
  ASSERT_GT(input->committed_tokens, 0u);
  ASSERT_LE(input->committed_tokens, input->prompt.size());
  const std::vector<int> tail(input->prompt.end() - static_cast<ptrdiff_t>(input->committed_tokens),
                              input->prompt.end());
  EXPECT_EQ(vocabulary_->DecodeText(tail), " " + committed);
  // After the committed words the decode goes on, then starts them over.
  const std::string full = " And so my fellow Americans. And so my fellow Americans. And so";
  ASSERT_EQ(full.substr(0, committed.size() + 1), " " + committed);
  const std::vector<int> rest = vocabulary_->tokenizer().Encode(full.substr(committed.size() + 1));
  RestartWatch watch(*vocabulary_, tail, 4);
  size_t kept = 0;
  while (kept < rest.size() && !watch.StopsBefore(rest[kept])) ++kept;
  ASSERT_LT(kept, rest.size()) << "the restart was not seen";
  UtteranceDecoder whole_decoder = decoder;
  const std::string whole = decode(whole_decoder, rest).transcript;
  const std::string stopped =
      decode(decoder, std::vector<int>(rest.begin(), rest.begin() + kept)).transcript;
  EXPECT_EQ(stopped, whole);
  EXPECT_EQ(stopped, "And so my fellow Americans.");
}

// A final that goes on after the committed words with words the model is unsure of (below
// Whisper's log_prob_threshold, -1 a token on average) at its end leaves those out; sure words,
// unsure words before sure ones, or an unsure decode with nothing committed are kept.
TEST_F(UtteranceDecoderWordsTest, AnUnsureTailAfterCommittedWordsIsLeftOut) {
  auto result = [&](UtteranceDecoder& decoder, const std::string& text, float logprob,
                    bool is_final) {
    whisper::GreedyResult decoded;
    decoded.tokens = vocabulary_->tokenizer().Encode(text);
    decoded.token_logprobs.assign(decoded.tokens.size(), logprob);
    decoded.sum_logprob = logprob * static_cast<double>(decoded.tokens.size() + 1);
    std::vector<int> aligned = decoder.FinalTextTokens(decoded);
    RecognitionResult r = decoder.Finish(decoded, 0, 32000, is_final, EndReason::kSilence, nullptr);
    if (is_final) {
      EXPECT_EQ(vocabulary_->DecodeText(aligned), " " + r.transcript) << "FinalTextTokens";
    }
    return r;
  };
  for (const float tail_logprob : {-1.9f, -0.2f}) {
    UtteranceDecoder decoder(*vocabulary_, options_);
    result(decoder, " Ask what you can do for your country.", -0.1f, false);
    const RecognitionResult second =
        result(decoder, " Ask what you can do for your country.", -0.1f, false);
    const std::string committed = second.stable_transcript;
    ASSERT_FALSE(committed.empty());
    const std::string whole = " Ask what you can do for your country. Aah!";
    ASSERT_EQ(whole.substr(0, committed.size() + 1), " " + committed);
    const RecognitionResult final_result =
        result(decoder, whole.substr(committed.size() + 1), tail_logprob, true);
    if (tail_logprob < -1.0f) {
      EXPECT_EQ(final_result.transcript, committed);
    } else {
      EXPECT_EQ(final_result.transcript, whole.substr(1));
    }
  }
  UtteranceDecoder fresh(*vocabulary_, options_);
  EXPECT_EQ(result(fresh, " Aah!", -1.9f, true).transcript, "Aah!");
  {
    // Sure words, then the unsure one: only it goes.
    UtteranceDecoder decoder(*vocabulary_, options_);
    result(decoder, " Ask what", -0.1f, false);
    const std::string committed = result(decoder, " Ask what", -0.1f, false).stable_transcript;
    ASSERT_FALSE(committed.empty());
    whisper::GreedyResult decoded;
    const std::string whole = " Ask what you can do. Aah!";
    decoded.tokens = vocabulary_->tokenizer().Encode(whole.substr(committed.size() + 1));
    const size_t unsure = vocabulary_->tokenizer().Encode(" Aah!").size();
    decoded.token_logprobs.assign(decoded.tokens.size(), -0.1f);
    std::fill(decoded.token_logprobs.end() - static_cast<std::ptrdiff_t>(unsure),
              decoded.token_logprobs.end(), -1.9f);
    decoded.token_logprobs.front() = -1.9f;  // an unsure word before sure ones stays
    EXPECT_EQ(decoder.Finish(decoded, 0, 32000, true, EndReason::kSilence, nullptr).transcript,
              "Ask what you can do.");
  }
}

// Partials from windows under commit_min_audio_ms commit nothing, however they agree; the first
// window at the minimum commits what it shares with the one before it. With no minimum the
// second short window commits.
TEST_F(UtteranceDecoderWordsTest, AShortWindowCommitsNoWord) {
  whisper::GreedyResult decoded;
  decoded.tokens = vocabulary_->tokenizer().Encode(" In the invention of");
  decoded.token_logprobs.assign(decoded.tokens.size(), -0.1f);
  auto stable = [&](UtteranceDecoder& decoder, int audio_ms) {
    return decoder
        .Finish(decoded, 0, static_cast<size_t>(audio_ms) * 16, false, EndReason::kSilence)
        .stable_transcript;
  };
  options_.commit_min_audio_ms = 1000;
  UtteranceDecoder decoder(*vocabulary_, options_);
  EXPECT_EQ(stable(decoder, 300), "");
  EXPECT_EQ(stable(decoder, 600), "");
  EXPECT_EQ(stable(decoder, 999), "");
  EXPECT_EQ(stable(decoder, 1000), "In the invention of");

  options_.commit_min_audio_ms = 0;
  UtteranceDecoder eager(*vocabulary_, options_);
  EXPECT_EQ(stable(eager, 300), "");
  EXPECT_EQ(stable(eager, 600), "In the invention of");
}

TEST_F(UtteranceDecoderWordsTest, NoWordsWithoutWordTimeOffsets) {
  options_.word_time_offsets = false;
  UtteranceDecoder decoder(*vocabulary_, options_);
  const RecognitionResult r =
      decoder.Finish(decoded_, 0, 16000, /*is_final=*/true, EndReason::kSilence,
                     [this](const std::vector<int>& t) { return Align(t); });
  EXPECT_EQ(align_calls_, 0);
  EXPECT_TRUE(r.words.empty());
  EXPECT_FALSE(r.transcript.empty());
}

}  // namespace
}  // namespace waav::streaming

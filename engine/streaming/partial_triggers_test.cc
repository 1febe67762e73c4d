// PartialTriggers frame by frame: which VAD frames of an utterance get an interim decode, and the
// audio each covers, for the start, pause, gap and interval triggers and the loads that hold
// them back.
#include "engine/streaming/partial_triggers.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

constexpr int64_t kFrame = 512;  // the VAD's frame: 32 ms
constexpr int64_t kPad = 480;    // speech padding of 30 ms
constexpr int64_t Ms(int ms) { return int64_t{ms} * 16; }

StreamOptions Options() {
  StreamOptions options;
  options.partial_interval_ms = 500;
  options.pause_partial_ms = 32;
  options.start_partial_ms = 0;
  options.gap_partial_min_ms = 200;
  return options;
}

// Frames of speech: every frame is speech, its padded end runs kPad past the audio heard.
HeardSpeech Speaking(int64_t samples, bool word_gap = false) {
  return {.samples = samples,
          .in_speech = true,
          .silence_since = -1,
          .padded_speech_end = samples + kPad,
          .word_gap = word_gap};
}

// A frame in a pause that began at `since` (the speech ended there).
HeardSpeech Pausing(int64_t samples, int64_t since) {
  return {.samples = samples,
          .in_speech = true,
          .silence_since = since,
          .padded_speech_end = since + kPad,
          .word_gap = false};
}

// Feeds speech frames up to `until` samples; returns the frame ends that got a partial.
std::vector<int64_t> SpeakUntil(PartialTriggers& triggers, int64_t* heard, int64_t until) {
  std::vector<int64_t> partials;
  while (*heard + kFrame <= until) {
    *heard += kFrame;
    if (const auto end = triggers.Judge(Speaking(*heard), {})) {
      EXPECT_EQ(*end, *heard) << "a partial in speech covers all that was heard";
      partials.push_back(*heard);
    }
  }
  return partials;
}

TEST(PartialTriggersTest, TheStartPartialComesAtOnceThenTheInterval) {
  PartialTriggers triggers(Options());
  int64_t heard = 8 * kFrame;  // the VAD confirmed the start after 256 ms
  triggers.UtteranceStarted(heard);
  const std::vector<int64_t> partials = SpeakUntil(triggers, &heard, Ms(2000));
  ASSERT_GE(partials.size(), 3u);
  EXPECT_EQ(partials[0], 9 * kFrame) << "the first frame after the start";
  for (size_t i = 1; i < partials.size(); ++i) {
    EXPECT_GE(partials[i] - partials[i - 1], Ms(500));
    EXPECT_LT(partials[i] - partials[i - 1], Ms(500) + kFrame);
  }
}

TEST(PartialTriggersTest, AStartDelayWaitsAndNoneLeavesOnlyTheInterval) {
  StreamOptions delayed = Options();
  delayed.start_partial_ms = 200;
  PartialTriggers later(delayed);
  int64_t heard = 0;
  later.UtteranceStarted(heard);
  std::vector<int64_t> partials = SpeakUntil(later, &heard, Ms(600));
  ASSERT_FALSE(partials.empty());
  EXPECT_GE(partials[0], Ms(200));
  EXPECT_LT(partials[0], Ms(200) + kFrame);

  StreamOptions none = Options();
  none.start_partial_ms = -1;
  PartialTriggers interval_only(none);
  heard = 0;
  interval_only.UtteranceStarted(heard);
  partials = SpeakUntil(interval_only, &heard, Ms(1200));
  ASSERT_EQ(partials.size(), 2u);
  EXPECT_GE(partials[0], Ms(500));
  EXPECT_LT(partials[0], Ms(500) + kFrame);
}

TEST(PartialTriggersTest, AnUtteranceThatEndsDropsItsStartPartial) {
  StreamOptions options = Options();
  options.start_partial_ms = 100;
  PartialTriggers triggers(options);
  triggers.UtteranceStarted(0);
  triggers.UtteranceEnded();
  int64_t heard = 0;
  const std::vector<int64_t> partials = SpeakUntil(triggers, &heard, Ms(480));
  EXPECT_TRUE(partials.empty()) << "the next partial waits for the interval";
}

TEST(PartialTriggersTest, APauseGetsOnePartialUpToThePaddedSpeechEnd) {
  StreamOptions options = Options();
  options.start_partial_ms = -1;
  PartialTriggers triggers(options);
  triggers.UtteranceStarted(0);
  int64_t heard = 0;
  SpeakUntil(triggers, &heard, Ms(300));  // no partial yet: under the interval
  const int64_t since = heard;
  heard += kFrame;  // the first silent frame: 32 ms of pause
  const std::optional<int64_t> end = triggers.Judge(Pausing(heard, since), {});
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(*end, std::min(heard, since + kPad));
  for (int i = 0; i < 40; ++i) {  // 1.3 s more of the same pause: no more decodes
    heard += kFrame;
    EXPECT_FALSE(triggers.Judge(Pausing(heard, since), {}).has_value()) << "frame " << i;
  }
}

TEST(PartialTriggersTest, APauseWhileBehindOrDecodingGetsNoneAndIsNotRetried) {
  for (const DecodeLoad load : {DecodeLoad{.scheduler_behind = true, .stream_decoding = false},
                                DecodeLoad{.scheduler_behind = false, .stream_decoding = true}}) {
    PartialTriggers triggers(Options());
    triggers.UtteranceStarted(0);
    int64_t heard = 0;
    SpeakUntil(triggers, &heard, Ms(300));
    const int64_t since = heard;
    heard += kFrame;
    EXPECT_FALSE(triggers.Judge(Pausing(heard, since), load).has_value());
    heard += kFrame;
    EXPECT_FALSE(triggers.Judge(Pausing(heard, since), {}).has_value())
        << "the same pause, now idle: its turn has passed";
    // Speech resumes; a new pause gets its partial.
    heard += kFrame;
    EXPECT_FALSE(triggers.Judge(Speaking(heard), {}).has_value());
    const int64_t second = heard;
    heard += kFrame;
    EXPECT_TRUE(triggers.Judge(Pausing(heard, second), {}).has_value());
  }
}

TEST(PartialTriggersTest, APauseIsDecodedOnlyUpToItsPaddedEnd) {
  StreamOptions options = Options();
  options.pause_partial_ms = 0;  // only the interval
  options.start_partial_ms = -1;
  PartialTriggers triggers(options);
  triggers.UtteranceStarted(0);
  int64_t heard = 0;
  ASSERT_EQ(SpeakUntil(triggers, &heard, Ms(520)).size(), 1u);
  // A long pause (shorter than the endpoint's): its padded end never moves. The interval
  // decodes once more, for the padding the partial in speech could not yet cover, then never.
  const int64_t since = heard;
  std::vector<int64_t> ends;
  for (int i = 0; i < 40; ++i) {
    heard += kFrame;
    if (const auto end = triggers.Judge(Pausing(heard, since), {})) ends.push_back(*end);
  }
  EXPECT_EQ(ends, std::vector<int64_t>{since + kPad});
}

TEST(PartialTriggersTest, AWordGapTriggersAfterTheMinimumUnlessTheStreamIsDecoding) {
  StreamOptions options = Options();
  options.start_partial_ms = -1;
  PartialTriggers triggers(options);
  triggers.UtteranceStarted(0);
  int64_t heard = 4 * kFrame;  // 128 ms: under the 200 ms minimum
  EXPECT_FALSE(triggers.Judge(Speaking(heard, /*word_gap=*/true), {}).has_value());
  heard = 8 * kFrame;  // 256 ms
  EXPECT_FALSE(
      triggers.Judge(Speaking(heard, true), {.scheduler_behind = false, .stream_decoding = true})
          .has_value());
  heard += kFrame;
  EXPECT_EQ(triggers.Judge(Speaking(heard, true), {}), std::optional<int64_t>(heard));
  // The interval now counts from the gap's partial.
  const std::vector<int64_t> partials = SpeakUntil(triggers, &heard, Ms(1000));
  ASSERT_EQ(partials.size(), 1u);
  EXPECT_GE(partials[0] - 9 * kFrame, Ms(500));
}

TEST(PartialTriggersTest, NoInterimResultsNoPartials) {
  StreamOptions options = Options();
  options.interim_results = false;
  PartialTriggers triggers(options);
  triggers.UtteranceStarted(0);
  int64_t heard = 0;
  EXPECT_TRUE(SpeakUntil(triggers, &heard, Ms(2000)).empty());
  EXPECT_FALSE(triggers.Judge(Speaking(heard + kFrame, true), {}).has_value());
  EXPECT_FALSE(triggers.Judge(Pausing(heard + 2 * kFrame, heard), {}).has_value());
}

TEST(PartialTriggersTest, OutsideSpeechNothingIsDecoded) {
  PartialTriggers triggers(Options());
  for (int64_t heard = kFrame; heard < Ms(2000); heard += kFrame) {
    HeardSpeech silence = Speaking(heard);
    silence.in_speech = false;
    EXPECT_FALSE(triggers.Judge(silence, {}).has_value());
  }
}

}  // namespace
}  // namespace waav::streaming

#include "engine/streaming/endpointer.h"

#include <vector>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

constexpr int kFrame = 512;  // 32 ms

struct FeedLog {
  std::vector<Endpointer::Update> updates;
  std::vector<int64_t> frame_starts;
};

// Feeds probabilities frame by frame and records every update with its frame.
FeedLog Feed(Endpointer& e, const std::vector<float>& probabilities) {
  FeedLog run;
  int64_t t = 0;
  for (float p : probabilities) {
    run.updates.push_back(e.Push(p, t, kFrame));
    run.frame_starts.push_back(t);
    t += kFrame;
  }
  return run;
}

std::vector<float> Repeat(float p, int frames) { return std::vector<float>(frames, p); }
std::vector<float> Concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(EndpointerTest, SilenceNeverStartsAnUtterance) {
  Endpointer e(EndpointConfig{});
  const FeedLog run = Feed(e, Repeat(0.1f, 500));
  for (const auto& u : run.updates) {
    EXPECT_FALSE(u.started);
    EXPECT_FALSE(u.ended);
  }
  EXPECT_FALSE(e.Finish(500 * kFrame));
}

TEST(EndpointerTest, ShortBlipsAreIgnored) {
  Endpointer e(EndpointConfig{});  // min speech 250 ms = 7.8 frames
  const FeedLog run = Feed(e, Concat({Repeat(0.1f, 10), Repeat(0.9f, 5), Repeat(0.1f, 40)}));
  for (const auto& u : run.updates) EXPECT_FALSE(u.started);
}

TEST(EndpointerTest, SpeechThenSilenceGivesOneUtteranceWithPadding) {
  EndpointConfig config;
  Endpointer e(config);
  // 1 s silence, 2 s speech, 1 s silence.
  const FeedLog run = Feed(e, Concat({Repeat(0.05f, 31), Repeat(0.95f, 63), Repeat(0.05f, 31)}));
  int starts = 0, ends = 0;
  for (size_t i = 0; i < run.updates.size(); ++i) {
    if (run.updates[i].started) {
      ++starts;
      EXPECT_EQ(run.updates[i].started->start_sample, 31 * kFrame - 400 * 16);  // padded
    }
    if (run.updates[i].ended) {
      ++ends;
      EXPECT_EQ(run.updates[i].ended->reason, EndReason::kSilence);
      EXPECT_EQ(run.updates[i].ended->end_sample, (31 + 63) * kFrame + 200 * 16);
      // Confirmed after silence_ms (500 ms) of silence.
      EXPECT_GE(run.updates[i].ended->detected_sample - (31 + 63) * kFrame, 500 * 16);
      EXPECT_LT(run.updates[i].ended->detected_sample - (31 + 63) * kFrame, 500 * 16 + kFrame);
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(ends, 1);
}

TEST(EndpointerTest, AColdStartIsPaddedMoreThanTheRest) {
  EndpointConfig config;
  config.cold_start_pad_ms = 640;  // 20 frames
  config.speech_pad_ms = 96;       // 3 frames
  config.cold_after_ms = 2000;     // 62.5 frames
  Endpointer e(config);
  // Silence, speech, a short pause (40 frames), speech, a long pause (70), speech, silence.
  const FeedLog run =
      Feed(e, Concat({Repeat(0.05f, 30), Repeat(0.95f, 40), Repeat(0.05f, 40), Repeat(0.95f, 40),
                      Repeat(0.05f, 70), Repeat(0.95f, 40), Repeat(0.05f, 30)}));
  std::vector<UtteranceStart> starts;
  std::vector<UtteranceEnd> ends;
  for (const auto& u : run.updates) {
    if (u.started) starts.push_back(*u.started);
    if (u.ended) ends.push_back(*u.ended);
  }
  ASSERT_EQ(starts.size(), 3u);
  ASSERT_EQ(ends.size(), 3u);
  // The stream's first start: cold.
  EXPECT_EQ(starts[0].start_sample, (30 - 20) * kFrame);
  EXPECT_EQ(ends[0].end_sample, (30 + 40 + 3) * kFrame);
  // 37 frames after the first's padded end: warm, the usual padding.
  EXPECT_EQ(starts[1].start_sample, (150 - 40 - 3) * kFrame);
  EXPECT_EQ(ends[1].end_sample, (150 + 3) * kFrame);
  // 67 frames after the second's padded end: cold again.
  EXPECT_EQ(starts[2].start_sample, (220 - 20) * kFrame);

  // Speech from the stream's first frames: the start is the stream's start.
  Endpointer early(config);
  const FeedLog run2 = Feed(early, Concat({Repeat(0.05f, 5), Repeat(0.95f, 20)}));
  bool started = false;
  for (const auto& u : run2.updates) {
    if (u.started) {
      EXPECT_EQ(u.started->start_sample, 0);
      started = true;
    }
  }
  EXPECT_TRUE(started);
}

TEST(EndpointerTest, AStartNeverReachesBackIntoThePreviousUtterance) {
  EndpointConfig config;
  config.silence_ms = 160;     // 5 frames
  config.speech_pad_ms = 640;  // 20 frames: more than the gap between the two
  Endpointer e(config);
  // Speech, 10 frames of silence (the endpoint after 5), speech again.
  const FeedLog run =
      Feed(e, Concat({Repeat(0.95f, 30), Repeat(0.05f, 10), Repeat(0.95f, 30), Repeat(0.05f, 10)}));
  std::vector<UtteranceStart> starts;
  std::vector<UtteranceEnd> ends;
  for (const auto& u : run.updates) {
    if (u.started) starts.push_back(*u.started);
    if (u.ended) ends.push_back(*u.ended);
  }
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_GE(ends.size(), 1u);
  // The first ends where the endpoint was confirmed (its padding reaches no further).
  EXPECT_EQ(ends[0].end_sample, (30 + 5) * kFrame);
  // The second start is padded back to the first's end, not 20 frames.
  EXPECT_EQ(starts[1].start_sample, ends[0].end_sample);
  EXPECT_GT(starts[1].detected_sample, ends[0].detected_sample);
}

TEST(EndpointerTest, HysteresisKeepsSpeechThroughUncertainFrames) {
  Endpointer e(EndpointConfig{});  // threshold 0.5, silence below 0.35
  const FeedLog run = Feed(e, Concat({Repeat(0.9f, 20), Repeat(0.4f, 60), Repeat(0.9f, 5)}));
  for (const auto& u : run.updates) EXPECT_FALSE(u.ended);
  EXPECT_TRUE(e.in_speech());
}

TEST(EndpointerTest, TwoUtterancesSeparatedBySilence) {
  Endpointer e(EndpointConfig{});
  const FeedLog run =
      Feed(e, Concat({Repeat(0.9f, 40), Repeat(0.1f, 40), Repeat(0.9f, 40), Repeat(0.1f, 40)}));
  int starts = 0, ends = 0;
  for (const auto& u : run.updates) {
    starts += u.started ? 1 : 0;
    ends += u.ended ? 1 : 0;
  }
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(ends, 2);
}

TEST(EndpointerTest, MaxLengthCutsAndEndOfAudioCloses) {
  EndpointConfig config;
  config.max_utterance_ms = 2000;
  Endpointer e(config);
  const FeedLog run = Feed(e, Repeat(0.9f, 100));  // 3.2 s of speech
  int max_cuts = 0;
  for (const auto& u : run.updates) {
    if (u.ended) {
      EXPECT_EQ(u.ended->reason, EndReason::kMaxLength);
      ++max_cuts;
    }
  }
  EXPECT_EQ(max_cuts, 1);
  // The next utterance reaches back over the cut by the padding (200 ms): a word at the cut is
  // heard by both, the rest of the first by the first alone.
  int next_starts = 0;
  for (size_t i = 0; i < run.updates.size(); ++i) {
    if (!run.updates[i].started || run.updates[i].started->start_sample == 0) continue;
    ++next_starts;
    int64_t cut = 0;
    for (const auto& u : run.updates) {
      if (u.ended) cut = u.ended->end_sample;
    }
    EXPECT_EQ(run.updates[i].started->start_sample, cut - 200 * 16);
  }
  EXPECT_EQ(next_starts, 1);
  const auto end = e.Finish(100 * kFrame);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->reason, EndReason::kEndOfAudio);
  EXPECT_EQ(end->end_sample, 100 * kFrame);  // speech up to the last frame: nothing to trim
}

TEST(EndpointerTest, EndOfAudioAndInterimsStopAtThePaddedSpeechEnd) {
  EndpointConfig config;  // 500 ms endpoint, 200 ms padding
  Endpointer e(config);
  // 1 s of speech, then 320 ms of silence: not yet an endpoint.
  const FeedLog run = Feed(e, Concat({Repeat(0.9f, 31), Repeat(0.1f, 10)}));
  for (const auto& u : run.updates) EXPECT_FALSE(u.ended);
  ASSERT_TRUE(e.in_speech());
  const int64_t speech_end = 31 * kFrame;
  const int64_t pad = 200 * Endpointer::kSampleRateHz / 1000;
  EXPECT_EQ(e.padded_speech_end(), speech_end + pad);
  const auto end = e.Finish(41 * kFrame);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end_sample, speech_end + pad);
  EXPECT_EQ(end->detected_sample, 41 * kFrame);
}

TEST(EndpointerTest, ConfigValidation) {
  EXPECT_TRUE(EndpointConfig{}.Validate().ok());
  EndpointConfig bad;
  bad.threshold = 1.5f;
  EXPECT_FALSE(bad.Validate().ok());
  bad = EndpointConfig{};
  bad.silence_ms = 10;
  EXPECT_FALSE(bad.Validate().ok());
  bad = EndpointConfig{};
  bad.cold_start_pad_ms = -1;
  EXPECT_FALSE(bad.Validate().ok());
  bad.cold_start_pad_ms = 1001;
  EXPECT_FALSE(bad.Validate().ok());
  bad = EndpointConfig{};
  bad.cold_after_ms = -1;
  EXPECT_FALSE(bad.Validate().ok());
  bad = EndpointConfig{};
  bad.max_utterance_ms = 60000;
  EXPECT_FALSE(bad.Validate().ok());
  bad = EndpointConfig{};
  bad.hysteresis = 0.6f;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace waav::streaming

#include "server/stream_responses.h"

#include "gtest/gtest.h"

namespace waav::server {
namespace {

streaming::RecognitionResult Interim() {
  streaming::RecognitionResult r;
  r.utterance_index = 2;
  r.transcript = "ask not what";
  r.stable_transcript = "ask not";
  r.stability = 2.0f / 3;
  r.confidence = 0.8f;
  r.start_ms = 1000;
  r.end_ms = 2500;
  r.words = {{"ask", 1000, 1400, 0.9f, true},
             {"not", 1400, 1900, 0.8f, true},
             {"what", 1900, 2500, 0.5f, false}};
  r.latency.encoder_ms = 40;
  r.latency.decoder_ms = 10;
  r.latency.decoder_steps = 5;
  return r;
}

TEST(StreamResponsesTest, InterimAndFinalResults) {
  v1::StreamingRecognitionResult out;
  FillResult(Interim(), "en", false, &out);
  EXPECT_FALSE(out.is_final());
  EXPECT_EQ(out.utterance_index(), 2u);
  EXPECT_EQ(out.alternatives(0).transcript(), "ask not what");
  EXPECT_EQ(out.alternatives(0).confidence(), 0.0f);  // interim: no confidence
  EXPECT_EQ(out.stable_transcript(), "ask not");
  EXPECT_FLOAT_EQ(out.stability(), 2.0f / 3);
  EXPECT_EQ(out.end_reason(), v1::UTTERANCE_END_REASON_UNSPECIFIED);
  EXPECT_EQ(out.alternatives(0).words_size(), 3);
  EXPECT_FALSE(out.alternatives(0).words(2).stable());
  EXPECT_EQ(out.latency().decoder_steps(), 5u);
  EXPECT_EQ(out.latency().batch_size(), 1u);

  streaming::RecognitionResult final_result = Interim();
  final_result.is_final = true;
  final_result.end_reason = streaming::EndReason::kEndOfAudio;
  v1::StreamingRecognitionResult f;
  FillResult(final_result, "en", false, &f);
  EXPECT_EQ(f.stability(), 1.0f);
  EXPECT_EQ(f.stable_transcript(), "ask not what");
  EXPECT_FLOAT_EQ(f.alternatives(0).confidence(), 0.8f);
  EXPECT_TRUE(f.alternatives(0).words(2).stable());
  EXPECT_EQ(f.end_reason(), v1::UTTERANCE_END_REASON_END_OF_AUDIO);
  FillResult(final_result, "en", true, &f);
  EXPECT_EQ(f.end_reason(), v1::UTTERANCE_END_REASON_STREAM_LIMIT);
}

TEST(StreamResponsesTest, StableWordsKeepTheirFirstOffsets) {
  std::vector<v1::WordInfo> stable;
  v1::StreamingRecognitionResult first;
  FillResult(Interim(), "en", false, &first);
  KeepStableWords(&first, &stable);
  ASSERT_EQ(stable.size(), 2u);

  // The engine re-estimates times as the utterance grows; the stable words keep theirs.
  streaming::RecognitionResult later = Interim();
  later.transcript = "ask not what your";
  later.stable_transcript = "ask not what";
  later.words = {{"ask", 1000, 1300, 0.1f, true},
                 {"not", 1300, 1600, 0.1f, true},
                 {"what", 1350, 2000, 0.6f, true},
                 {"your", 2000, 2400, 0.7f, false}};
  v1::StreamingRecognitionResult second;
  FillResult(later, "en", false, &second);
  KeepStableWords(&second, &stable);
  const auto& words = second.alternatives(0).words();
  EXPECT_EQ(words[0].end_ms(), 1400u);
  EXPECT_EQ(words[1].start_ms(), 1400u);
  EXPECT_EQ(words[1].end_ms(), 1900u);
  EXPECT_FLOAT_EQ(words[1].confidence(), 0.8f);
  EXPECT_EQ(words[2].start_ms(), 1900u);  // newly stable: after the kept words
  EXPECT_EQ(stable.size(), 3u);
}

TEST(StreamResponsesTest, FinalKeepsItsAlignedOffsets) {
  std::vector<v1::WordInfo> stable;
  v1::StreamingRecognitionResult first;
  FillResult(Interim(), "en", false, &first);
  KeepStableWords(&first, &stable);
  ASSERT_EQ(stable.size(), 2u);

  streaming::RecognitionResult final_result = Interim();
  final_result.is_final = true;
  final_result.words = {{"ask", 1100, 1350, 0.1f, true},
                        {"not", 1350, 1500, 0.1f, true},
                        {"what", 1500, 1800, 0.6f, true}};
  v1::StreamingRecognitionResult f;
  FillResult(final_result, "en", false, &f);
  KeepStableWords(&f, &stable);
  const auto& words = f.alternatives(0).words();
  EXPECT_EQ(words[0].start_ms(), 1100u);  // the final's own offsets
  EXPECT_EQ(words[1].end_ms(), 1500u);
  EXPECT_EQ(words[2].start_ms(), 1500u);
  EXPECT_FLOAT_EQ(words[1].confidence(), first.alternatives(0).words(1).confidence());
}

TEST(StreamResponsesTest, FinalFromTheLastInterimKeepsOnlyStableText) {
  v1::StreamingRecognitionResult interim;
  FillResult(Interim(), "en", false, &interim);
  v1::StreamingRecognitionResult f;
  FinalFromLastInterim(interim, &f);
  EXPECT_TRUE(f.is_final());
  EXPECT_EQ(f.alternatives(0).transcript(), "ask not");
  EXPECT_EQ(f.stable_transcript(), "ask not");
  EXPECT_EQ(f.alternatives(0).words_size(), 2);
  EXPECT_EQ(f.stability(), 1.0f);
}

TEST(StreamResponsesTest, EventsAndTimes) {
  v1::SpeechEvent e;
  FillSpeechEvent(v1::SpeechEvent::SPEECH_ENDED, 3, 5000, 4000, &e);
  EXPECT_EQ(e.detected_at_ms(), 5000u);  // never before the change itself
  EXPECT_EQ(ToApiMs(-5), 0u);
  EXPECT_EQ(ToApiMs(int64_t{1} << 40), 0xffffffffu);
}

}  // namespace
}  // namespace waav::server

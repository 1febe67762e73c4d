// The latency accounting of one stream: word ends, matching interim words to final ones,
// reference word times, utterance-end fallback, speed, and no latencies without pacing.
#include "load-tests/stream_record.h"

#include "gtest/gtest.h"
#include "load-tests/reference_words.h"

namespace waav::load {
namespace {

ObservedResult Result(double received_s, uint32_t utterance, bool final, uint32_t end_ms,
                      std::vector<ObservedWord> words, bool has_text = true) {
  ObservedResult r;
  r.received_s = received_s;
  r.utterance = utterance;
  r.is_final = final;
  r.end_ms = end_ms;
  r.words = std::move(words);
  r.has_text = has_text;
  return r;
}

TEST(NormalizeWordTest, LowercasesAndDropsPunctuation) {
  EXPECT_EQ(NormalizeWord("Hello,"), "hello");
  EXPECT_EQ(NormalizeWord("\"Don't!\""), "don't");
  EXPECT_EQ(NormalizeWord("'tis'"), "tis");
  EXPECT_EQ(NormalizeWord("U.S.A."), "usa");
  EXPECT_EQ(NormalizeWord("42%"), "42");
  EXPECT_EQ(NormalizeWord("--"), "--");  // nothing left: kept as it was
  EXPECT_EQ(NormalizeWord("\xC3\x89t\xC3\xA9"), "t");
}

TEST(AnalyzeStreamTest, WordEndsFromFinalWordsAndEarliestMatchingPartial) {
  StreamRecord record;
  record.speed = 1;
  record.results = {
      Result(0.9, 0, false, 850, {{"hello", 600}}),
      Result(1.2, 0, false, 1150, {{"hello", 620}, {"word", 1000}}),  // "world" misheard
      Result(1.3, 0, false, 1250, {{"hello", 610}, {"world", 1000}, {"extra", 1240}}),
      Result(1.6, 0, true, 1000, {{"hello", 600}, {"world", 1000}}),
      // Utterance 1: "the" twice; a partial with only the first "the" (at a far-off time: the
      // same occurrence still matches) shows the first, not the second.
      Result(2.5, 1, false, 2450, {{"the", 900}, {"cat", 2000}}),
      Result(2.6, 1, false, 2550, {{"the", 1000}, {"cat", 2000}, {"the", 2400}}),
      Result(3.0, 1, true, 2400, {{"the", 1900}, {"cat", 2000}, {"the", 2400}}),
  };
  const StreamLatencies l = AnalyzeStream(record, 500);
  EXPECT_EQ(l.reference, Reference::kWordEnds);
  EXPECT_EQ(l.finals, 2u);
  EXPECT_EQ(l.words, 5u);
  ASSERT_EQ(l.first_partial_ms.size(), 5u);
  EXPECT_NEAR(l.first_partial_ms[0], 300, 1e-9);  // 0.9 s - 0.6 s
  EXPECT_NEAR(l.first_partial_ms[1], 300, 1e-9);  // 1.3 s - 1.0 s (the 1.2 s one was wrong)
  EXPECT_NEAR(l.first_partial_ms[2], 600, 1e-9);  // 2.5 s - 1.9 s: first "the", same occurrence
  EXPECT_NEAR(l.first_partial_ms[3], 500, 1e-9);  // 2.5 s - 2.0 s
  EXPECT_NEAR(l.first_partial_ms[4], 200, 1e-9);  // 2.6 s - 2.4 s: the second "the" came later
  ASSERT_EQ(l.final_ms.size(), 5u);
  EXPECT_NEAR(l.final_ms[0], 1000, 1e-9);
  EXPECT_NEAR(l.final_ms[1], 600, 1e-9);
  EXPECT_NEAR(l.final_ms[2], 1100, 1e-9);
  EXPECT_NEAR(l.final_ms[3], 1000, 1e-9);
  EXPECT_NEAR(l.final_ms[4], 600, 1e-9);
  ASSERT_EQ(l.utterance_final_ms.size(), 2u);
  EXPECT_NEAR(l.utterance_final_ms[0], 600, 1e-9);
  EXPECT_NEAR(l.utterance_final_ms[1], 600, 1e-9);

  // With a slack of 5 ms only exact sightings match: still the same first ones here.
  const StreamLatencies tight = AnalyzeStream(record, 5);
  EXPECT_NEAR(tight.first_partial_ms[0], 300, 1e-9);
  EXPECT_NEAR(tight.first_partial_ms[1], 300, 1e-9);
}

TEST(AnalyzeStreamTest, StableLatencyIsTheFirstResultMarkingTheWordStable) {
  StreamRecord record;
  record.speed = 1;
  record.results = {
      Result(0.9, 0, false, 850, {{"hello", 600, false}}),
      Result(1.2, 0, false, 1150, {{"hello", 610, true}, {"world", 1000, false}}),
      Result(1.6, 0, true, 1000, {{"hello", 600, true}, {"world", 1000, true}}),
  };
  const StreamLatencies l = AnalyzeStream(record, 500);
  ASSERT_EQ(l.first_stable_ms.size(), 2u);
  EXPECT_NEAR(l.first_stable_ms[0], 600, 1e-9);  // 1.2 s - 0.6 s: stable in the 2nd partial
  EXPECT_NEAR(l.first_stable_ms[1], 600, 1e-9);  // 1.6 s - 1.0 s: only the final has it
  EXPECT_NEAR(l.first_partial_ms[0], 300, 1e-9);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_LE(l.first_partial_ms[i], l.first_stable_ms[i]);
    EXPECT_LE(l.first_stable_ms[i], l.final_ms[i]);
  }
}

TEST(AnalyzeStreamTest, WordSeenOnlyInTheFinalHasEqualLatenciesAndSpeedScalesReference) {
  StreamRecord record;
  record.speed = 2;  // stream time 1000 ms is spoken 0.5 s after t0
  record.results = {Result(0.8, 0, true, 1000, {{"one", 1000}})};
  const StreamLatencies l = AnalyzeStream(record, 500);
  ASSERT_EQ(l.final_ms.size(), 1u);
  EXPECT_NEAR(l.final_ms[0], 300, 1e-9);
  EXPECT_NEAR(l.first_partial_ms[0], 300, 1e-9);
}

TEST(AnalyzeStreamTest, NegativeLatenciesAreKept) {
  StreamRecord record;
  record.speed = 1;
  record.results = {Result(0.5, 0, false, 500, {{"early", 800}}),
                    Result(1.5, 0, true, 800, {{"early", 800}})};
  const StreamLatencies l = AnalyzeStream(record, 500);
  EXPECT_NEAR(l.first_partial_ms[0], -300, 1e-9);
}

TEST(AnalyzeStreamTest, WithoutWordsUtteranceEndsFromSpeechEnded) {
  StreamRecord record;
  record.speed = 1;
  record.results = {
      Result(0.7, 0, false, 650, {}),
      Result(1.1, 0, false, 1050, {}),  // has decoded past the speech end (1000)
      Result(1.6, 0, true, 1010, {}),
      Result(2.9, 1, false, 2900, {}, /*has_text=*/false),  // empty: does not count
      Result(3.1, 1, true, 2500, {}),
  };
  record.events = {{1.5, v1::SpeechEvent::SPEECH_ENDED, 0, 1000}};  // utterance 1 has none
  const StreamLatencies l = AnalyzeStream(record, 500);
  EXPECT_EQ(l.reference, Reference::kUtteranceEnds);
  ASSERT_EQ(l.final_ms.size(), 2u);
  EXPECT_NEAR(l.final_ms[0], 600, 1e-9);          // 1.6 s - 1.0 s (the event's offset)
  EXPECT_NEAR(l.first_partial_ms[0], 100, 1e-9);  // 1.1 s - 1.0 s
  EXPECT_NEAR(l.final_ms[1], 600, 1e-9);          // 3.1 s - 2.5 s (the final's end_ms)
  EXPECT_NEAR(l.first_partial_ms[1], 600, 1e-9);
  EXPECT_NEAR(l.utterance_final_ms[0], 590, 1e-9);  // against the final's own end_ms
}

TEST(AnalyzeStreamTest, NoPacingMeansNoLatencies) {
  StreamRecord record;
  record.speed = 0;
  record.audio_us = 2'000'000;
  record.done_s = 0.5;
  record.results = {Result(0.2, 0, true, 1000, {{"a", 400}, {"b", 900}})};
  const StreamLatencies l = AnalyzeStream(record, 500);
  EXPECT_EQ(l.finals, 1u);
  EXPECT_EQ(l.words, 2u);
  EXPECT_TRUE(l.first_partial_ms.empty());
  EXPECT_TRUE(l.final_ms.empty());
  EXPECT_TRUE(l.utterance_final_ms.empty());
  EXPECT_DOUBLE_EQ(StreamRtf(record), 0.25);
  record.audio_us = 0;
  EXPECT_DOUBLE_EQ(StreamRtf(record), 0);
}

TEST(ObserveResultTest, CopiesWhatTheAccountingNeeds) {
  v1::StreamingRecognitionResult result;
  result.set_utterance_index(3);
  result.set_is_final(true);
  result.set_end_ms(1234);
  v1::SpeechRecognitionAlternative* top = result.add_alternatives();
  top->set_transcript("Hi, you.");
  top->add_words()->set_word("Hi,");
  top->mutable_words(0)->set_end_ms(300);
  top->add_words()->set_word("you.");
  top->mutable_words(1)->set_end_ms(700);
  result.mutable_latency()->set_decoder_ms(12.5f);
  const ObservedResult r = ObserveResult(result, 4.5);
  EXPECT_EQ(r.utterance, 3u);
  EXPECT_TRUE(r.is_final && r.has_text);
  EXPECT_EQ(r.end_ms, 1234u);
  ASSERT_EQ(r.words.size(), 2u);
  EXPECT_EQ(r.words[0].text, "hi");
  EXPECT_EQ(r.words[1].end_ms, 700u);
  EXPECT_FLOAT_EQ(r.latency.decoder_ms(), 12.5f);
  EXPECT_DOUBLE_EQ(r.received_s, 4.5);
}

// With reference words each final word is measured from its reference word's end: the first of
// the same text after the last one taken, within 2 s; a final word with none is left out and
// counted.
TEST(AnalyzeStreamTest, ReferenceWordTimesReplaceTheServers) {
  const std::vector<ReferenceWord> reference = {
      {"and", 300}, {"so", 620}, {"and", 1250}, {"so", 2800}, {"end", 5600}};
  StreamRecord record;
  record.speed = 1;
  // The server's final places every word 100 ms before the reference (the last "so" 1.4 s
  // before: a word that ran into a pause) and adds a word the reference does not have ("um"),
  // and one far from where the reference has it ("end").
  record.results = {
      Result(0.8, 0, false, 250, {{"and", 250}}),
      Result(1.0, 0, true, 520, {{"and", 200}, {"so", 520}}),
      Result(1.9, 1, false, 1400, {{"and", 1150}, {"so", 1400}}),
      Result(2.2, 1, true, 1600, {{"and", 1150}, {"um", 1300}, {"so", 1400}, {"end", 1600}}),
  };
  const StreamLatencies own = AnalyzeStream(record, 500);
  const StreamLatencies l = AnalyzeStream(record, 500, &reference);
  EXPECT_EQ(own.first_partial_ms.size(), 6u);
  EXPECT_EQ(l.reference_matched, 4u);
  EXPECT_EQ(l.reference_unmatched, 2u);
  ASSERT_EQ(l.first_partial_ms.size(), 4u);
  EXPECT_NEAR(l.first_partial_ms[0], 800 - 300, 1e-9);
  EXPECT_NEAR(l.first_partial_ms[1], 1000 - 620, 1e-9);   // first seen in the final
  EXPECT_NEAR(l.first_partial_ms[2], 1900 - 1250, 1e-9);  // the second "and", not the first
  EXPECT_NEAR(l.first_partial_ms[3], 1900 - 2800, 1e-9);
  ASSERT_EQ(l.final_ms.size(), 4u);
  EXPECT_NEAR(l.final_ms[0], 1000 - 300, 1e-9);
  EXPECT_NEAR(l.final_ms[3], 2200 - 2800, 1e-9);
  // Which reference word each measured word was, and whether only the final showed it.
  EXPECT_EQ(l.reference_index, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(l.first_shown_by_final, (std::vector<bool>{false, true, false, false}));
  EXPECT_TRUE(own.reference_index.empty());
  EXPECT_EQ(own.first_shown_by_final, (std::vector<bool>{false, true, false, true, false, true}));
  // The server's own times.
  EXPECT_NEAR(own.first_partial_ms[0], 800 - 200, 1e-9);
  EXPECT_NEAR(own.first_partial_ms[4], 1900 - 1400, 1e-9);  // [3] is "um"
  // A reference whose words all end over 2 s from the server's: nothing is measured.
  const std::vector<ReferenceWord> far = {{"and", 4000}, {"so", 4100}};
  const StreamLatencies none = AnalyzeStream(record, 500, &far);
  EXPECT_EQ(none.reference_matched, 0u);
  EXPECT_EQ(none.reference_unmatched, 6u);
  EXPECT_TRUE(none.first_partial_ms.empty());
  EXPECT_TRUE(none.final_ms.empty());
  EXPECT_TRUE(none.reference_index.empty());
  EXPECT_TRUE(none.first_shown_by_final.empty());
}

}  // namespace
}  // namespace waav::load

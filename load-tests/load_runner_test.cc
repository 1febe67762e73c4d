// waav-load against the scripted fake Recognizer over real gRPC: streams, repetitions, word-end
// accounting, and errors by status code (RESOURCE_EXHAUSTED at admission, INVALID_ARGUMENT mid-
// stream, UNAVAILABLE with nothing listening). Paced faster than real time to stay quick; no
// assertion depends on timing.
#include "load-tests/load_runner.h"

#include <set>

#include "engine/audio/wav_test_util.h"
#include "gtest/gtest.h"
#include "tests/support/fake_recognizer.h"

namespace waav::load {
namespace {

using testing::FakeRecognizer;
using testing::FakeRecognizerOptions;

FakeRecognizerOptions Script() {
  FakeRecognizerOptions o;
  o.script = {{{{"Hello,", 300, 600}, {"world.", 700, 1000}}}, {{{"Again", 2000, 2400}}}};
  return o;
}

// 3 s of a constant at 16 kHz: what the fake hears is decided by its script, not the samples.
std::vector<std::shared_ptr<const cli::ClientAudio>> ThreeSeconds() {
  const auto wav = audio::wav_test::SimpleWav16(std::vector<int16_t>(48000, 300), 1, 16000);
  absl::StatusOr<cli::ClientAudio> a = cli::MakeClientAudio(wav, "three.wav", {});
  EXPECT_TRUE(a.ok()) << a.status();
  return {std::make_shared<const cli::ClientAudio>(std::move(*a))};
}

LoadOptions Options(const std::string& server) {
  LoadOptions o;
  o.server = server;
  o.stream.speed = 15;  // 3 s of audio in 0.2 s
  return o;
}

TEST(LoadRunnerTest, StreamsRepeatPerSlotAndEveryWordIsAccounted) {
  auto fake = FakeRecognizer::Start(Script());
  ASSERT_NE(fake, nullptr);
  LoadOptions options = Options(fake->address());
  options.repetitions = 2;
  options.stagger_ms = 5;
  double wall_s = 0;
  const auto records = RunStep(options, ThreeSeconds(), 3, &wall_s);
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(fake->streams_opened(), 6);
  EXPECT_GT(wall_s, 0);
  std::set<std::string> ids;
  for (const StreamRecord& r : records) {
    EXPECT_EQ(r.code, grpc::StatusCode::OK) << r.message;
    EXPECT_TRUE(r.got_started);
    EXPECT_EQ(r.last_processed_ms, 2900u);  // the last response: the final at 2400 + 500 ms
    EXPECT_EQ(r.audio_us, 3'000'000);
    ids.insert(r.request_id);
    const StreamLatencies l = AnalyzeStream(r, options.match_slack_ms);
    EXPECT_EQ(l.reference, Reference::kWordEnds);
    EXPECT_EQ(l.finals, 2u);
    EXPECT_EQ(l.words, 3u);
    ASSERT_EQ(l.first_partial_ms.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_LE(l.first_partial_ms[i], l.final_ms[i]);
    // Events: STARTED/ENDED for both utterances, in order.
    ASSERT_EQ(r.events.size(), 4u);
    EXPECT_EQ(r.events[0].type, v1::SpeechEvent::SPEECH_STARTED);
    EXPECT_EQ(r.events[3].type, v1::SpeechEvent::SPEECH_ENDED);
    EXPECT_EQ(r.events[3].offset_ms, 2400u);
  }
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_TRUE(ids.count("waav-load-n3-s0-r1") && ids.count("waav-load-n3-s2-r2"));
  const v1::StreamingRecognitionConfig config = fake->last_config();
  EXPECT_TRUE(config.recognition().enable_word_time_offsets());
  EXPECT_TRUE(config.interim_results());

  const StepReport step = Aggregate(3, records, options, wall_s);
  EXPECT_EQ(step.streams_ok, 6);
  EXPECT_EQ(step.finals, 12u);
  EXPECT_EQ(step.words, 18u);
  EXPECT_EQ(step.first_partial_ms.count, 18u);
  EXPECT_EQ(step.final_ms.count, 18u);
  EXPECT_EQ(step.utterance_final_ms.count, 12u);
  EXPECT_EQ(step.rtf.count, 6u);
  EXPECT_DOUBLE_EQ(step.audio_s, 18);
  EXPECT_EQ(step.server_stages.at("decoder").count, step.server_stages.at("server").count);
}

TEST(LoadRunnerTest, WithoutWordOffsetsLatencyIsPerUtteranceEnd) {
  FakeRecognizerOptions script = Script();
  script.send_words = false;
  auto fake = FakeRecognizer::Start(script);
  double wall_s = 0;
  const auto records = RunStep(Options(fake->address()), ThreeSeconds(), 2, &wall_s);
  const StepReport step = Aggregate(2, records, Options(fake->address()), wall_s);
  EXPECT_EQ(step.streams_ok, 2);
  EXPECT_EQ(step.streams_utterance_reference, 2);
  EXPECT_EQ(step.streams_word_reference, 0);
  EXPECT_EQ(step.final_ms.count, 4u);  // one point per utterance
  EXPECT_EQ(step.words, 0u);
}

TEST(LoadRunnerTest, AdmissionLimitGivesResourceExhausted) {
  FakeRecognizerOptions script = Script();
  script.max_streams = 2;
  auto fake = FakeRecognizer::Start(script);
  LoadOptions options = Options(fake->address());
  options.stream.speed = 3;  // streams of 1 s: the first admitted are still open
  double wall_s = 0;
  const auto records = RunStep(options, ThreeSeconds(), 5, &wall_s);
  const StepReport step = Aggregate(5, records, options, wall_s);
  ASSERT_EQ(step.streams, 5);
  EXPECT_GE(step.streams_ok, 2);
  ASSERT_TRUE(step.errors.count("RESOURCE_EXHAUSTED"));
  EXPECT_EQ(step.errors.at("RESOURCE_EXHAUSTED"), fake->streams_refused());
  EXPECT_EQ(step.streams_ok + fake->streams_refused(), 5);
  EXPECT_EQ(step.errors.size(), 1u);
  EXPECT_FALSE(step.keeps_up);
  EXPECT_NE(step.error_sample.at("RESOURCE_EXHAUSTED").find("limit of 2"), std::string::npos);
}

TEST(LoadRunnerTest, MidStreamFailureKeepsWhatArrivedBefore) {
  FakeRecognizerOptions script = Script();
  script.fail_code = grpc::StatusCode::INVALID_ARGUMENT;
  script.fail_after_ms = 1700;  // after utterance 0's final (1500), before utterance 1's
  auto fake = FakeRecognizer::Start(script);
  double wall_s = 0;
  const auto records = RunStep(Options(fake->address()), ThreeSeconds(), 2, &wall_s);
  ASSERT_EQ(records.size(), 2u);
  for (const StreamRecord& r : records) {
    EXPECT_EQ(r.code, grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(AnalyzeStream(r, 500).finals, 1u);
  }
  const StepReport step = Aggregate(2, records, Options(fake->address()), wall_s);
  EXPECT_EQ(step.errors.at("INVALID_ARGUMENT"), 2);
  EXPECT_EQ(step.final_ms.count, 4u);  // "Hello," and "world." of each stream
}

TEST(LoadRunnerTest, NothingListeningIsUnavailable) {
  std::string address;
  {
    auto fake = FakeRecognizer::Start({});
    address = fake->address();
  }
  double wall_s = 0;
  const auto records = RunStep(Options(address), ThreeSeconds(), 3, &wall_s);
  const StepReport step = Aggregate(3, records, Options(address), wall_s);
  EXPECT_EQ(step.streams_ok, 0);
  EXPECT_EQ(step.errors.at("UNAVAILABLE"), 3);
  EXPECT_EQ(step.failures.front(), "3 of 3 streams failed (UNAVAILABLE x3)");
}

TEST(LoadRunnerTest, UnpacedStreamsReportRtfOnly) {
  auto fake = FakeRecognizer::Start(Script());
  LoadOptions options = Options(fake->address());
  options.stream.speed = 0;
  options.stream.interim_results = false;
  double wall_s = 0;
  const auto records = RunStep(options, ThreeSeconds(), 2, &wall_s);
  const StepReport step = Aggregate(2, records, options, wall_s);
  EXPECT_EQ(step.streams_ok, 2);
  EXPECT_FALSE(step.paced);
  EXPECT_EQ(step.finals, 4u);
  EXPECT_EQ(step.final_ms.count, 0u);
  EXPECT_EQ(step.rtf.count, 2u);
  EXPECT_FALSE(fake->last_config().interim_results());
  for (const StreamRecord& r : records) {
    for (const ObservedResult& result : r.results) EXPECT_TRUE(result.is_final);
  }
}

TEST(LoadRunnerTest, DurationModeAndSharedConnections) {
  auto fake = FakeRecognizer::Start(Script());
  LoadOptions options = Options(fake->address());
  options.duration_s = 0.05;  // every slot opens one stream, then the time is up
  options.spread_ms = 20;
  options.connections = 1;
  double wall_s = 0;
  const auto records = RunStep(options, ThreeSeconds(), 4, &wall_s);
  EXPECT_GE(records.size(), 4u);
  for (const StreamRecord& r : records) EXPECT_EQ(r.code, grpc::StatusCode::OK) << r.message;
}

TEST(LoadRunnerTest, RampStopsAtTheFirstStepThatDoesNotKeepUp) {
  auto fake = FakeRecognizer::Start(Script());
  LoadOptions options = Options(fake->address());
  // Verdicts decided by the criteria alone, not by how fast this machine is.
  options.criteria.max_final_ms = 1e9;
  options.criteria.max_backlog_ms = 1e9;
  options.criteria.max_send_delay_ms = 1e9;
  std::vector<int> seen;
  RampReport ramp = RunRamp(options, ThreeSeconds(), {1, 2, 3}, false, 0,
                            [&](const StepReport& s) { seen.push_back(s.concurrency); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ramp.largest_keeping_up, 3);

  options.criteria.max_final_ms = -1e9;  // nothing can keep up
  ramp = RunRamp(options, ThreeSeconds(), {1, 2, 3}, false, 0, nullptr);
  EXPECT_EQ(ramp.steps.size(), 1u);
  EXPECT_EQ(ramp.largest_keeping_up, 0);
  ramp = RunRamp(options, ThreeSeconds(), {1, 2}, true, 0, nullptr);
  EXPECT_EQ(ramp.steps.size(), 2u);
}

}  // namespace
}  // namespace waav::load

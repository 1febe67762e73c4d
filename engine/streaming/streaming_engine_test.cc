// The streaming engine on real speech with real Whisper weights. The voice-activity model here
// is a test stand-in (frame energy), so these tests exercise the engine's mechanics: ordering,
// stability, endpointing, admission, cancellation. Silero VAD is tested against onnxruntime in
// its own parity test, and the daemon's integration tests use it end to end.
#include "engine/streaming/streaming_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "engine/audio/resampler.h"
#include "engine/metrics/batch_metrics.h"
#include "engine/metrics/registry.h"
#include "engine/metrics/stage_metrics.h"
#include "engine/runtime/backend_registry.h"
#include "engine/streaming/engine_test_sinks.h"
#include "engine/streaming/silero_voice_activity.h"
#include "engine/streaming/word_gaps.h"
#include "gtest/gtest.h"
#include "tests/support/test_env.h"
#include "tests/support/text_compare.h"

namespace waav::streaming {
namespace {

using testing::ArrivalGatedSink;
using testing::EnergyVad;
using testing::Event;
using testing::Gate;
using testing::GatedSink;
using testing::RecordingSink;
using testing::ResultGatedSink;

class StreamingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto model = waav::testing::TinyEnModelDir();
    const auto jfk = waav::testing::SpeechFile("jfk.wav");
    if (!model) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    if (!jfk) GTEST_SKIP() << "shared speech data absent (../shared/data/speech/jfk.wav)";
    auto backend = CreateBackend("cpu", {});
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(*backend);
    auto transcriber = whisper::Transcriber::Load(*model, *backend_);
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    transcriber_ = std::move(*transcriber);
    auto audio = audio::LoadAudio16k(*jfk);
    ASSERT_TRUE(audio.ok());
    jfk_ = audio->samples;
  }

  std::unique_ptr<StreamingEngine> MakeEngine(EngineOptions options = {}) {
    auto engine = StreamingEngine::Create(options, *transcriber_, vad_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  // Pushes `samples` in 100 ms chunks as fast as the engine takes them.
  static void PushAll(StreamingEngine& engine, uint64_t id, const std::vector<float>& samples) {
    for (size_t i = 0; i < samples.size(); i += 1600) {
      const size_t n = std::min<size_t>(1600, samples.size() - i);
      ASSERT_TRUE(engine.PushAudio(id, absl::MakeConstSpan(samples.data() + i, n)).ok());
    }
  }

  // Waits until the frontend worker has drained the ingest ring.
  static void WaitDrained(StreamingEngine& engine) {
    for (int i = 0; i < 60000 && engine.ingest_depth() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(engine.ingest_depth(), 0u) << "the frontend worker did not drain the ring";
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<whisper::Transcriber> transcriber_;
  EnergyVad vad_;
  std::vector<float> jfk_;
};

std::string Normalize(std::string s) {
  std::string out;
  for (char c : s) {
    if (absl::ascii_isalnum(c) || c == ' ') out += absl::ascii_tolower(c);
  }
  return out;
}

TEST_F(StreamingEngineTest, SpeechGivesOrderedEventsStablePrefixesAndAFinal) {
  auto engine = MakeEngine();
  auto sink = std::make_shared<RecordingSink>();
  StreamOptions options;
  options.endpoint.silence_ms = 1500;  // jfk pauses mid-sentence; keep it one utterance
  auto id = engine->OpenStream(options, sink);
  ASSERT_TRUE(id.ok());
  std::vector<float> audio(16000, 0.0f);  // 1 s of silence first
  audio.insert(audio.end(), jfk_.begin(), jfk_.end());
  PushAll(*engine, *id, audio);
  ASSERT_TRUE(engine->FinishStream(*id).ok());
  ASSERT_TRUE(sink->Wait().ok());

  const std::vector<Event> events = sink->events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind, "started");
  std::string stable;
  int finals = 0;
  std::string final_text;
  for (const Event& e : events) {
    if (e.kind != "partial" && e.kind != "final") continue;
    // A stable prefix, once reported, starts every later result of the utterance.
    EXPECT_TRUE(absl::StartsWith(e.result.transcript, stable))
        << "'" << stable << "' withdrawn in '" << e.result.transcript << "'";
    EXPECT_TRUE(absl::StartsWith(e.result.transcript, e.result.stable_transcript));
    EXPECT_GE(e.result.stable_transcript.size(), stable.size());
    stable = e.result.stable_transcript;
    if (e.kind == "final") {
      ++finals;
      final_text = e.result.transcript;
      EXPECT_EQ(e.result.stability, 1.0f);
    }
  }
  EXPECT_GE(finals, 1);
  EXPECT_EQ(events.back().kind, "ended");
  EXPECT_EQ(Normalize(final_text),
            "and so my fellow americans ask not what your country can do for you ask what you "
            "can do for your country");
}

// On the CPU a partial encodes a window of its audio's length (EngineOptions::partial_window_ms):
// the audio and 2 s of silence, rounded up to 5 s steps; finals keep 30 s windows. With 0 every
// window is whole. Either way the final is the reference's text, give or take a word: the
// partials' committed words are the final's forced prefix, and partials on short windows at
// this pace commit more of them ("what you are country" was seen; bench/streaming_wer.py
// measures the finals' error rate over 33 clips either way).
TEST_F(StreamingEngineTest, PartialsEncodeWindowsOfTheirAudiosLength) {
  for (const int window_ms : {5000, 0}) {
    EngineOptions engine_options;
    engine_options.partial_window_ms = window_ms;
    auto engine = MakeEngine(engine_options);
    auto sink = std::make_shared<RecordingSink>();
    StreamOptions options;
    options.endpoint.silence_ms = 1500;
    auto id = engine->OpenStream(options, sink);
    ASSERT_TRUE(id.ok());
    // At 4x real time, so that partials are decoded rather than all replaced by later ones
    // (a stream's queued partials coalesce) when the machine is busy.
    for (size_t i = 0; i < jfk_.size(); i += 1600) {
      const size_t n = std::min<size_t>(1600, jfk_.size() - i);
      ASSERT_TRUE(engine->PushAudio(*id, absl::MakeConstSpan(jfk_.data() + i, n)).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(engine->FinishStream(*id).ok());
    ASSERT_TRUE(sink->Wait().ok());
    int partials = 0, short_windows = 0;
    std::string final_text;
    for (const Event& e : sink->events()) {
      if (e.kind != "partial" && e.kind != "final") continue;
      const int positions = e.result.latency.encoder_positions;
      if (e.kind == "final" || window_ms == 0) {
        EXPECT_EQ(positions, 1500) << e.kind << " \"" << e.result.transcript << "\"";
        if (e.kind == "final") final_text = e.result.transcript;
        continue;
      }
      ++partials;
      short_windows += positions < 1500 ? 1 : 0;
      EXPECT_EQ(positions % 250, 0) << positions;
      // The window holds the partial's audio and 2 s of silence.
      const int64_t audio_positions = (e.result.end_ms - e.result.start_ms) / 20;
      EXPECT_GE(positions, std::min<int64_t>(1500, audio_positions + 100))
          << e.result.start_ms << ".." << e.result.end_ms << " ms";
    }
    if (window_ms > 0) {
      EXPECT_GT(partials, 0);
      EXPECT_EQ(short_windows, partials) << "jfk's utterances are shorter than 28 s";
    }
    EXPECT_LE(waav::testing::WordEditDistance(
                  "and so my fellow americans ask not what your country can do for you ask what "
                  "you can do for your country",
                  waav::testing::NormalizeText(final_text)),
              2)
        << "partial_window_ms " << window_ms << ": " << final_text;
  }
}

// Word times of a final come from the cross-attention alignment: in order, inside the result,
// and where faster-whisper puts them (word_alignment_parity_test compares the alignment itself;
// here the window starts where the VAD put the utterance, so allow some slack).
TEST_F(StreamingEngineTest, FinalWordTimesAreAligned) {
  ASSERT_NE(transcriber_->word_aligner(), nullptr) << "config.json without alignment_heads";
  auto engine = MakeEngine();
  auto sink = std::make_shared<RecordingSink>();
  StreamOptions options;
  options.endpoint.silence_ms = 1500;  // one utterance
  options.word_time_offsets = true;
  auto id = engine->OpenStream(options, sink);
  ASSERT_TRUE(id.ok());
  std::vector<float> audio(16000, 0.0f);  // 1 s of silence first: file time + 1000 ms
  audio.insert(audio.end(), jfk_.begin(), jfk_.end());
  PushAll(*engine, *id, audio);
  ASSERT_TRUE(engine->FinishStream(*id).ok());
  ASSERT_TRUE(sink->Wait().ok());
  // faster-whisper on jfk.wav alone (tests/reference/word_timestamps_reference.py), in ms.
  const std::vector<std::pair<std::string, int>> anchors = {
      {"fellow", 1460}, {"your", 5700}, {"country", 6020}, {"country.", 10220}};
  int finals = 0;
  for (const Event& e : sink->events()) {
    if (e.kind != "final") continue;
    ++finals;
    const RecognitionResult& r = e.result;
    ASSERT_FALSE(r.words.empty());
    int64_t previous_start = r.start_ms;
    for (const WordResult& w : r.words) {
      EXPECT_GE(w.start_ms, previous_start) << w.word;
      EXPECT_LE(w.start_ms, w.end_ms) << w.word;
      EXPECT_LE(w.end_ms, r.end_ms) << w.word;
      EXPECT_TRUE(w.stable);
      previous_start = w.start_ms;
    }
    int anchored = 0;
    for (const auto& [word, start_ms] : anchors) {
      const auto it = std::find_if(r.words.begin(), r.words.end(),
                                   [&](const WordResult& w) { return w.word == word; });
      if (it == r.words.end()) continue;
      ++anchored;
      EXPECT_NEAR(static_cast<double>(it->start_ms), 1000.0 + start_ms, 200.0)
          << word << " in '" << r.transcript << "'";
    }
    EXPECT_GE(anchored, 3) << r.transcript;
  }
  EXPECT_EQ(finals, 1);
}

TEST_F(StreamingEngineTest, ResultsStopAtThePaddedEndOfSpeech) {
  auto engine = MakeEngine();
  auto sink = std::make_shared<RecordingSink>();
  StreamOptions options;
  options.endpoint.silence_ms = 3000;  // the pause below is not an endpoint
  auto id = engine->OpenStream(options, sink);
  ASSERT_TRUE(id.ok());
  // 2 s of speech, then 1.5 s of silence before the stream ends: no result (interim or final)
  // may cover more of the pause than the 200 ms padding (+ one 32 ms VAD frame of rounding).
  std::vector<float> audio(jfk_.begin(), jfk_.begin() + 2 * 16000);
  audio.resize(audio.size() + 24000, 0.0f);
  PushAll(*engine, *id, audio);
  ASSERT_TRUE(engine->FinishStream(*id).ok());
  ASSERT_TRUE(sink->Wait().ok());
  int results = 0;
  for (const Event& e : sink->events()) {
    if (e.kind != "partial" && e.kind != "final") continue;
    ++results;
    EXPECT_LE(e.result.end_ms, 2000 + 200 + 32) << e.kind << " '" << e.result.transcript << "'";
  }
  EXPECT_GE(results, 1);
}

// A pause shorter than the endpoint sends the words before it at once (pause_partial_ms), not
// after the next partial interval; off (0), nothing does here. The speech is pushed, then the
// test waits for the partial before finishing, so that the final cannot replace it.
TEST_F(StreamingEngineTest, APauseSendsAPartialAtOnce) {
  for (const int pause_ms : {100, 0}) {
    auto engine = MakeEngine();
    auto sink = std::make_shared<RecordingSink>();
    StreamOptions options;
    options.endpoint.silence_ms = 3000;   // the pause is not an endpoint
    options.partial_interval_ms = 10000;  // and no interval partial comes in 2 s of speech
    options.start_partial_ms = -1;        // nor one at the utterance's start
    options.pause_partial_ms = pause_ms;
    auto id = engine->OpenStream(options, sink);
    ASSERT_TRUE(id.ok());
    std::vector<float> audio(jfk_.begin(), jfk_.begin() + 2 * 16000);
    audio.resize(audio.size() + 8000, 0.0f);  // 500 ms of pause
    PushAll(*engine, *id, audio);
    WaitDrained(*engine);
    auto partials = [&] {
      int n = 0;
      for (const Event& e : sink->events()) n += e.kind == "partial" ? 1 : 0;
      return n;
    };
    for (int i = 0; i < 600 && pause_ms > 0 && partials() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // More pause: still one partial for this pause (no new speech since).
    PushAll(*engine, *id, std::vector<float>(16000, 0.0f));
    ASSERT_TRUE(engine->FinishStream(*id).ok());
    ASSERT_TRUE(sink->Wait().ok());
    int results = 0;
    for (const Event& e : sink->events()) {
      if (e.kind != "partial") continue;
      ++results;
      EXPECT_FALSE(e.result.transcript.empty());
      // It covers the speech and at most the padding after it (+ one VAD frame).
      EXPECT_LE(e.result.end_ms, 2000 + 200 + 32) << e.result.transcript;
    }
    EXPECT_EQ(results, pause_ms > 0 ? 1 : 0) << "pause_partial_ms " << pause_ms;
  }
}

// A pause heard while the scheduler is behind (its latest round left streams waiting) gets no
// partial: extra work at a load where it costs more than it saves. The scheduler (one stream a
// round) is held inside a round by gated sinks, so that what it left waiting is known: behind
// with a second stream waiting, not behind without one; the pause's partial shows only then.
TEST_F(StreamingEngineTest, APauseWhileTheSchedulerIsBehindSendsNoPartial) {
  std::vector<float> speech(jfk_.begin(), jfk_.begin() + 16000);
  for (const bool behind : {true, false}) {
    EngineOptions one_a_round;
    one_a_round.max_batch = 1;
    auto engine = MakeEngine(one_a_round);
    StreamOptions options;
    options.endpoint.silence_ms = 3000;
    options.partial_interval_ms = 10000;  // no interval partials: only a pause's
    options.start_partial_ms = -1;
    options.pause_partial_ms = 32;
    Gate first_gate, second_gate;
    std::atomic<bool> first_arrived{false}, second_arrived{false};
    auto wait_for = [](const std::atomic<bool>& flag) {
      for (int i = 0; i < 6000 && !flag.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_TRUE(flag.load()) << "the scheduler did not reach the gate";
    };
    // Every pushed frame through the VAD: the frontend drains the ring and then runs all that it
    // took before it drains again, so once a later push (silence, to a stream that queues
    // nothing) has been drained too, the earlier audio's jobs are queued.
    auto marker = std::make_shared<RecordingSink>();
    auto marker_id = engine->OpenStream(options, marker);
    ASSERT_TRUE(marker_id.ok());
    auto frontend_barrier = [&] {
      WaitDrained(*engine);
      ASSERT_TRUE(engine->PushAudio(*marker_id, std::vector<float>(512, 0.0f)).ok());
      WaitDrained(*engine);
    };
    // Round 1 takes the first stream alone and waits in its sink.
    auto first = std::make_shared<ArrivalGatedSink>(&first_gate, &first_arrived);
    auto first_id = engine->OpenStream(options, first);
    ASSERT_TRUE(first_id.ok());
    PushAll(*engine, *first_id, speech);
    wait_for(first_arrived);
    // Round 2 takes the second stream, leaving the third waiting (behind) or nothing.
    auto second = std::make_shared<ArrivalGatedSink>(&second_gate, &second_arrived);
    auto second_id = engine->OpenStream(options, second);
    ASSERT_TRUE(second_id.ok());
    PushAll(*engine, *second_id, speech);
    frontend_barrier();  // queued before the third
    std::optional<uint64_t> third_id;
    auto third = std::make_shared<RecordingSink>();
    if (behind) {
      auto id = engine->OpenStream(options, third);
      ASSERT_TRUE(id.ok());
      third_id = *id;
      PushAll(*engine, *third_id, speech);
      frontend_barrier();
    }
    first_gate.Open();
    wait_for(second_arrived);
    // The stream that pauses, heard while round 2 is held.
    auto pausing = std::make_shared<RecordingSink>();
    auto pausing_id = engine->OpenStream(options, pausing);
    ASSERT_TRUE(pausing_id.ok());
    std::vector<float> audio(jfk_.begin(), jfk_.begin() + 2 * 16000);
    audio.resize(audio.size() + 8000, 0.0f);
    PushAll(*engine, *pausing_id, audio);
    frontend_barrier();
    second_gate.Open();
    // Once every queued stream has been picked up (the pausing one's jobs with it), a partial
    // queued for the pause is decoded whatever comes after it.
    for (int i = 0; i < 6000 && engine->scheduler_depth() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(engine->scheduler_depth(), 0u);
    auto partials = [&] {
      int n = 0;
      for (const Event& e : pausing->events()) n += e.kind == "partial" ? 1 : 0;
      return n;
    };
    for (int i = 0; i < 600 && !behind && partials() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (uint64_t id : {*first_id, *second_id, *pausing_id, *marker_id}) {
      ASSERT_TRUE(engine->FinishStream(id).ok());
    }
    if (third_id) {
      ASSERT_TRUE(engine->FinishStream(*third_id).ok());
    }
    const std::vector<RecordingSink*> sinks = {first.get(), second.get(), pausing.get(),
                                               marker.get()};
    for (RecordingSink* sink : sinks) {
      ASSERT_TRUE(sink->Wait().ok());
    }
    if (third_id) {
      ASSERT_TRUE(third->Wait().ok());
    }
    EXPECT_EQ(partials(), behind ? 0 : 1) << (behind ? "behind" : "not behind");
  }
}

// A pause heard while the stream's previous window is still being decoded gets no partial: on a
// CPU at its limit a round takes every stream, so no stream is left waiting, yet each extra
// window adds to the backlog. The first pause's partial is held in its sink (inside the round);
// a second pause heard meanwhile gets none, and gets one when the round is over.
TEST_F(StreamingEngineTest, APauseWhileItsWindowIsDecodedSendsNoPartial) {
  std::vector<float> said(jfk_.begin(), jfk_.begin() + 2 * 16000);
  said.resize(said.size() + 8000, 0.0f);  // 2 s of speech, 500 ms of pause
  for (const bool in_flight : {true, false}) {
    auto engine = MakeEngine();
    StreamOptions options;
    options.endpoint.silence_ms = 3000;
    options.partial_interval_ms = 10000;  // no interval partials: only the pauses'
    options.start_partial_ms = -1;
    options.pause_partial_ms = 32;
    Gate gate;
    std::atomic<bool> arrived{false};
    auto sink = std::make_shared<ResultGatedSink>(&gate, &arrived);
    auto id = engine->OpenStream(options, sink);
    ASSERT_TRUE(id.ok());
    auto marker = std::make_shared<RecordingSink>();
    auto marker_id = engine->OpenStream(options, marker);
    ASSERT_TRUE(marker_id.ok());
    auto partials = [&] {
      int n = 0;
      for (const Event& e : sink->events()) n += e.kind == "partial" ? 1 : 0;
      return n;
    };
    if (!in_flight) gate.Open();
    PushAll(*engine, *id, said);
    for (int i = 0; i < 6000 && !arrived.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(arrived.load()) << "the first pause's partial never came";
    if (!in_flight) {
      for (int i = 0; i < 600 && partials() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      // The round ends just after its last result is delivered.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    // The second pause, through the VAD (a later push to another stream drained too).
    PushAll(*engine, *id, said);
    WaitDrained(*engine);
    ASSERT_TRUE(engine->PushAudio(*marker_id, std::vector<float>(512, 0.0f)).ok());
    WaitDrained(*engine);
    gate.Open();
    ASSERT_TRUE(engine->FinishStream(*id).ok());
    ASSERT_TRUE(engine->FinishStream(*marker_id).ok());
    ASSERT_TRUE(sink->Wait().ok());
    ASSERT_TRUE(marker->Wait().ok());
    EXPECT_EQ(partials(), in_flight ? 1 : 2) << (in_flight ? "in flight" : "not in flight");
  }
}

// Streams `speech` at once, waits for its first partial (up to 60 s; or 1.5 s when none is
// expected) and 1.5 s more for any after it, then finishes; returns the partials. (Finishing
// first would queue the final, which drops the partials still waiting.)
std::vector<Event> PartialsOf(StreamingEngine& engine, const StreamOptions& options,
                              const std::vector<float>& speech, bool expect_one) {
  auto sink = std::make_shared<RecordingSink>();
  auto id = engine.OpenStream(options, sink);
  EXPECT_TRUE(id.ok());
  if (!id.ok()) return {};
  for (size_t at = 0; at < speech.size(); at += 1600) {
    const size_t n = std::min<size_t>(1600, speech.size() - at);
    EXPECT_TRUE(engine.PushAudio(*id, absl::MakeConstSpan(speech.data() + at, n)).ok());
  }
  auto partials = [&] {
    std::vector<Event> out;
    for (const Event& e : sink->events()) {
      if (e.kind == "partial") out.push_back(e);
    }
    return out;
  };
  for (int i = 0; i < (expect_one ? 600 : 15) && partials().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(engine.FinishStream(*id).ok());
  EXPECT_TRUE(sink->Wait().ok());
  return partials();
}

// The utterance's start sends a partial at once (start_partial_ms 0), of the speech heard up to
// the start's detection (jfk.wav's "And" begins at ~0.35 s; the VAD confirms it 250 ms and a
// frame or two later), with no interval partial in the 1.2 s; off (-1), none comes.
TEST_F(StreamingEngineTest, TheUtterancesStartSendsAPartialAtOnce) {
  const std::vector<float> speech(jfk_.begin(), jfk_.begin() + 1200 * 16);
  for (const int start_ms : {0, -1}) {
    auto engine = MakeEngine();
    StreamOptions options;
    options.endpoint.silence_ms = 3000;
    options.partial_interval_ms = 10000;
    options.pause_partial_ms = 0;
    options.start_partial_ms = start_ms;
    const std::vector<Event> partials = PartialsOf(*engine, options, speech, start_ms >= 0);
    if (start_ms < 0) {
      EXPECT_TRUE(partials.empty()) << partials.front().result.transcript;
      continue;
    }
    ASSERT_EQ(partials.size(), 1u);
    EXPECT_GE(partials[0].result.end_ms, 500);
    EXPECT_LE(partials[0].result.end_ms, 800);
  }
}

// A gap between words sends a partial at once (gap_partial_db): in jfk.wav's first 2.4 s ("And
// so my fellow Americans") the level drops between the words. Every partial ends where a
// WordGapDetector run over the same audio finds a gap, at least gap_partial_min_ms after the
// one before (a gap met while the stream's previous window is decoded sends none, so not every
// gap has one). Off (0), or with a spacing longer than the speech, none comes.
TEST_F(StreamingEngineTest, AGapBetweenWordsSendsAPartial) {
  const std::vector<float> speech(jfk_.begin(), jfk_.begin() + 2400 * 16);
  std::set<int64_t> gap_ends_ms;
  WordGapDetector detector(12);
  const int frame = vad_.frame_samples();
  for (size_t at = 0; at + frame <= speech.size(); at += frame) {
    if (detector.Push(absl::MakeConstSpan(speech.data() + at, static_cast<size_t>(frame)))) {
      gap_ends_ms.insert(static_cast<int64_t>(at + frame) / 16);
    }
  }
  ASSERT_GE(gap_ends_ms.size(), 3u);
  struct Case {
    int drop_db;
    int min_ms;
  };
  for (const Case c : {Case{12, 200}, Case{0, 200}, Case{12, 10000}}) {
    auto engine = MakeEngine();
    StreamOptions options;
    options.endpoint.silence_ms = 3000;
    options.partial_interval_ms = 10000;
    options.pause_partial_ms = 0;
    options.start_partial_ms = -1;
    options.gap_partial_db = c.drop_db;
    options.gap_partial_min_ms = c.min_ms;
    const bool expected = c.drop_db > 0 && c.min_ms < 2000;
    const std::vector<Event> partials = PartialsOf(*engine, options, speech, expected);
    if (!expected) {
      EXPECT_TRUE(partials.empty()) << c.drop_db << " dB, " << c.min_ms << " ms";
      continue;
    }
    ASSERT_GE(partials.size(), 1u);
    int64_t previous_end = 0;
    for (const Event& e : partials) {
      EXPECT_TRUE(gap_ends_ms.count(e.result.end_ms)) << e.result.end_ms << " ms is no gap";
      EXPECT_GE(e.result.end_ms - previous_end, 200) << e.result.transcript;
      previous_end = e.result.end_ms;
    }
  }
}

TEST_F(StreamingEngineTest, SilenceGivesNoTranscript) {
  auto engine = MakeEngine();
  auto sink = std::make_shared<RecordingSink>();
  auto id = engine->OpenStream(StreamOptions{}, sink);
  ASSERT_TRUE(id.ok());
  PushAll(*engine, *id, std::vector<float>(16000 * 5, 0.0f));
  ASSERT_TRUE(engine->FinishStream(*id).ok());
  ASSERT_TRUE(sink->Wait().ok());
  EXPECT_TRUE(sink->events().empty());
}

TEST_F(StreamingEngineTest, AdmissionLimitRefusesAtOnce) {
  EngineOptions options;
  options.max_streams = 2;
  auto engine = MakeEngine(options);
  auto a = engine->OpenStream(StreamOptions{}, std::make_shared<RecordingSink>());
  auto b = engine->OpenStream(StreamOptions{}, std::make_shared<RecordingSink>());
  auto c = engine->OpenStream(StreamOptions{}, std::make_shared<RecordingSink>());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  engine->CancelStream(*a);
  // The slot frees once the cancellation is processed.
  for (int i = 0; i < 200 && engine->active_streams() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(engine->OpenStream(StreamOptions{}, std::make_shared<RecordingSink>()).ok());
  engine->StopAccepting();
  EXPECT_EQ(engine->OpenStream(StreamOptions{}, std::make_shared<RecordingSink>()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(StreamingEngineTest, CancelledStreamEndsWithCancelledAndRejectsAudio) {
  auto engine = MakeEngine();
  auto sink = std::make_shared<RecordingSink>();
  auto id = engine->OpenStream(StreamOptions{}, sink);
  ASSERT_TRUE(id.ok());
  PushAll(*engine, *id, jfk_);
  engine->CancelStream(*id);
  EXPECT_EQ(sink->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(engine->PushAudio(*id, jfk_).code(), absl::StatusCode::kNotFound);
}

// Several streams speaking at once are decoded in shared batches (the batch observer and the
// results' batch_size see it), and every stream's finals are exactly those of an engine that
// decodes one window at a time.
// Scheduling under load: a final is decoded in a round of its own rather than alongside other
// streams' partials, and a stream's partials queued before its final are never decoded.
TEST_F(StreamingEngineTest, FinalsGoFirstAndPartialsBeforeAFinalAreSkipped) {
  const auto short_clip = waav::testing::SpeechFile("ljspeech/LJ001-0002.wav");
  if (!short_clip) GTEST_SKIP() << "shared speech data absent (ljspeech/LJ001-0002.wav)";
  auto clip = audio::LoadAudio16k(*short_clip);
  ASSERT_TRUE(clip.ok()) << clip.status();

  Gate gate;  // outlives the engine, whose sinks point to it
  auto engine = MakeEngine();
  // The scheduler takes the blocker's first job and is held at its speech start while the
  // others queue everything: the next round finds the blocker's and `talking`'s partials and
  // `ending`'s partials, final and speech end all ready at once.
  auto blocker = std::make_shared<GatedSink>(&gate);
  auto talking = std::make_shared<RecordingSink>();
  auto ending = std::make_shared<RecordingSink>();
  std::vector<float> speech(jfk_.begin(), jfk_.begin() + 3 * 16000);  // no endpoint in it
  std::vector<float> utterance = clip->samples;
  utterance.resize(utterance.size() + 24000, 0.0f);  // 1.5 s of silence: an endpoint
  StreamOptions no_endpoint;
  no_endpoint.endpoint.silence_ms = 3000;  // jfk pauses after "Americans"; not an end here
  auto blocker_id = engine->OpenStream(no_endpoint, blocker);
  ASSERT_TRUE(blocker_id.ok());
  PushAll(*engine, *blocker_id, speech);
  WaitDrained(*engine);
  auto talking_id = engine->OpenStream(no_endpoint, talking);
  auto ending_id = engine->OpenStream(StreamOptions{}, ending);
  ASSERT_TRUE(talking_id.ok() && ending_id.ok());
  PushAll(*engine, *talking_id, speech);
  PushAll(*engine, *ending_id, utterance);
  WaitDrained(*engine);
  auto quiet = std::make_shared<RecordingSink>();  // see ConcurrentStreamsShareBatches...
  auto quiet_id = engine->OpenStream(StreamOptions{}, quiet);
  ASSERT_TRUE(quiet_id.ok());
  ASSERT_TRUE(engine->PushAudio(*quiet_id, std::vector<float>(1600, 0.0f)).ok());
  WaitDrained(*engine);
  gate.Open();
  // The others end only after `ending`'s final: their end-of-audio finals would share its round.
  auto has_final = [&] {
    for (const Event& e : ending->events()) {
      if (e.kind == "final") return true;
    }
    return false;
  };
  for (int i = 0; i < 120000 && !has_final(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t id : {*blocker_id, *talking_id, *ending_id, *quiet_id}) {
    ASSERT_TRUE(engine->FinishStream(id).ok());
  }
  for (RecordingSink* sink :
       {static_cast<RecordingSink*>(blocker.get()), talking.get(), ending.get(), quiet.get()}) {
    ASSERT_TRUE(sink->Wait().ok());
  }

  int finals = 0;
  for (const Event& e : ending->events()) {
    EXPECT_NE(e.kind, "partial") << "a partial queued before the final was decoded: '"
                                 << e.result.transcript << "'";
    if (e.kind != "final" || e.result.utterance_index != 0) continue;
    ++finals;
    EXPECT_EQ(e.result.latency.batch_size, 1) << "the final shared its round with partials";
    EXPECT_EQ(Normalize(e.result.transcript), "in being comparatively modern");
  }
  EXPECT_EQ(finals, 1);
}

TEST_F(StreamingEngineTest, ConcurrentStreamsShareBatchesAndMatchUnbatched) {
  std::vector<std::vector<float>> clips = {jfk_};
  for (const char* name :
       {"ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav", "ljspeech/LJ001-0008.wav"}) {
    const auto path = waav::testing::SpeechFile(name);
    if (!path) GTEST_SKIP() << "shared speech data absent (" << name << ")";
    auto audio = audio::LoadAudio16k(*path);
    ASSERT_TRUE(audio.ok()) << audio.status();
    clips.push_back(std::move(audio->samples));
  }
  // Each stream: two clips with a second of silence between, so at least two utterances, the
  // second prompted with the first's text.
  std::vector<std::vector<float>> streams;
  for (size_t i = 0; i < clips.size(); ++i) {
    std::vector<float> audio = clips[i];
    audio.insert(audio.end(), 16000, 0.0f);
    const auto& next = clips[(i + 1) % clips.size()];
    audio.insert(audio.end(), next.begin(), next.end());
    streams.push_back(std::move(audio));
  }
  StreamOptions stream_options;
  // Finals only: which partials get decoded depends on timing, and their committed prefixes
  // would steer the finals.
  stream_options.interim_results = false;

  struct Run {
    std::vector<std::vector<std::pair<std::string, float>>> finals;  // per stream
    int largest_batch = 0;
    int largest_result_batch = 0;
  };
  auto run = [&](int max_batch, bool gated, int encoder_batch = 0) {
    Run out;
    std::atomic<int> largest{0};
    EngineOptions options;
    options.max_batch = max_batch;
    options.encoder_batch = encoder_batch;
    // Batched runs prepare their windows on 3 threads (more than this machine's cores, so
    // they interleave); the one-window run prepares serially; both must decode the same.
    options.prepare_threads = max_batch > 1 ? 3 : 1;
    options.batch_observer = [&](int n) {
      if (n > largest.load()) largest.store(n);
    };
    Gate gate;  // outlives the engine, whose sinks point to it
    if (!gated) gate.Open();
    auto engine = MakeEngine(options);
    std::vector<std::shared_ptr<GatedSink>> sinks;
    std::vector<uint64_t> ids;
    for (const auto& audio : streams) {
      sinks.push_back(std::make_shared<GatedSink>(&gate));
      auto id = engine->OpenStream(stream_options, sinks.back());
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
      PushAll(*engine, *id, audio);
      EXPECT_TRUE(engine->FinishStream(*id).ok());
    }
    if (gated) {
      // The scheduler is held at its first sink call (a speech start, before any decode) while
      // the frontend queues every stream's jobs. Once the ring is drained, one more chunk
      // (a silent stream's) drained after it proves that the round that drained the rest has
      // queued its jobs: the next rounds find every stream ready at once.
      WaitDrained(*engine);
      auto quiet = std::make_shared<RecordingSink>();
      auto quiet_id = engine->OpenStream(stream_options, quiet);
      EXPECT_TRUE(quiet_id.ok());
      EXPECT_TRUE(engine->PushAudio(*quiet_id, std::vector<float>(1600, 0.0f)).ok());
      WaitDrained(*engine);
      gate.Open();
      EXPECT_TRUE(engine->FinishStream(*quiet_id).ok());
      EXPECT_TRUE(quiet->Wait().ok());
    }
    for (auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait().ok());
      auto& finals = out.finals.emplace_back();
      for (const Event& e : sink->events()) {
        if (e.kind != "final") continue;
        finals.emplace_back(e.result.transcript, e.result.confidence);
        out.largest_result_batch = std::max(out.largest_result_batch, e.result.latency.batch_size);
      }
      EXPECT_GE(finals.size(), 2u);
    }
    out.largest_batch = largest.load();
    return out;
  };

  const Run batched = run(8, /*gated=*/true);
  const Run alone = run(1, /*gated=*/false);
  std::cout << "largest batch: " << batched.largest_batch << "\n";
  EXPECT_GE(batched.largest_batch, 2);
  EXPECT_GE(batched.largest_result_batch, 2);
  EXPECT_LE(batched.largest_batch, 8);
  EXPECT_EQ(alone.largest_batch, 1);
  EXPECT_EQ(alone.largest_result_batch, 1);
  ASSERT_EQ(batched.finals.size(), alone.finals.size());
  for (size_t i = 0; i < alone.finals.size(); ++i) {
    EXPECT_EQ(batched.finals[i], alone.finals[i]) << "stream " << i;
  }
  // The batched encoder, forced on the CPU (passes of 4 and fewer windows): its output differs
  // from the one-window output in the last bits, so the transcripts must match, the confidences
  // only closely.
  const Run encoded_together = run(8, /*gated=*/true, /*encoder_batch=*/4);
  EXPECT_GE(encoded_together.largest_batch, 2);
  ASSERT_EQ(encoded_together.finals.size(), alone.finals.size());
  for (size_t i = 0; i < alone.finals.size(); ++i) {
    ASSERT_EQ(encoded_together.finals[i].size(), alone.finals[i].size()) << "stream " << i;
    for (size_t j = 0; j < alone.finals[i].size(); ++j) {
      EXPECT_EQ(encoded_together.finals[i][j].first, alone.finals[i][j].first) << "stream " << i;
      EXPECT_NEAR(encoded_together.finals[i][j].second, alone.finals[i][j].second, 1e-3)
          << "stream " << i;
    }
  }
}

TEST_F(StreamingEngineTest, BadOptionsAreRefused) {
  auto engine = MakeEngine();
  StreamOptions options;
  options.endpoint.threshold = 2.0f;
  EXPECT_EQ(engine->OpenStream(options, std::make_shared<RecordingSink>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto with = [](auto set) {
    StreamOptions o;
    set(o);
    return o;
  };
  for (const auto& [bad, what] : std::vector<std::pair<StreamOptions, std::string>>{
           {with([](StreamOptions& o) { o.start_partial_ms = -2; }), "start partial"},
           {with([](StreamOptions& o) { o.start_partial_ms = 10001; }), "start partial"},
           {with([](StreamOptions& o) { o.gap_partial_db = -1; }), "gap partial drop"},
           {with([](StreamOptions& o) { o.gap_partial_db = 61; }), "gap partial drop"},
           {with([](StreamOptions& o) { o.gap_partial_min_ms = -1; }), "gap partial spacing"},
           {with([](StreamOptions& o) { o.commit_min_audio_ms = 30001; }), "commit minimum"}}) {
    const absl::Status status = engine->OpenStream(bad, std::make_shared<RecordingSink>()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(what), absl::string_view::npos) << status;
  }
  for (int pause_ms : {-1, 10001}) {
    StreamOptions bad_pause;
    bad_pause.pause_partial_ms = pause_ms;
    const absl::Status status =
        engine->OpenStream(bad_pause, std::make_shared<RecordingSink>()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("pause partial"), absl::string_view::npos) << status;
  }
  EngineOptions bad;
  bad.max_streams = 0;
  EXPECT_FALSE(StreamingEngine::Create(bad, *transcriber_, vad_).ok());
  for (int max_batch : {0, 257}) {
    EngineOptions bad_batch;
    bad_batch.max_batch = max_batch;
    auto engine = StreamingEngine::Create(bad_batch, *transcriber_, vad_);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("max_batch"), absl::string_view::npos);
  }
  for (int window_ms : {-1, 999, 30001}) {
    EngineOptions bad_window;
    bad_window.partial_window_ms = window_ms;
    auto engine = StreamingEngine::Create(bad_window, *transcriber_, vad_);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("partial_window_ms"), absl::string_view::npos);
  }
  for (int run_words : {-1, 1, 17}) {
    EngineOptions bad_stop;
    bad_stop.restart_stop_words = run_words;
    auto engine = StreamingEngine::Create(bad_stop, *transcriber_, vad_);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("restart_stop_words"), absl::string_view::npos);
  }
  for (int encoder_batch : {-1, 257}) {
    EngineOptions bad_encoder;
    bad_encoder.encoder_batch = encoder_batch;
    auto engine = StreamingEngine::Create(bad_encoder, *transcriber_, vad_);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("encoder_batch"), absl::string_view::npos);
  }
  for (int threads : {-1, 65}) {
    EngineOptions bad_threads;
    bad_threads.prepare_threads = threads;
    auto engine = StreamingEngine::Create(bad_threads, *transcriber_, vad_);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("prepare_threads"), absl::string_view::npos);
  }
}

// A series' value in the exposition, or NaN (and a failure) when it is not there.
double Sample(const metrics::Registry& registry, const std::string& series) {
  const std::string text = registry.Serialize();
  const std::string prefix = series + " ";
  const size_t at = text.find("\n" + prefix);
  EXPECT_NE(at, std::string::npos) << series << " not in\n" << text;
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + 1 + prefix.size(), nullptr);
}
double StageCount(const metrics::Registry& r, const std::string& stage) {
  return Sample(r, "waav_stage_latency_seconds_count{stage=\"" + stage + "\"}");
}
double StageSum(const metrics::Registry& r, const std::string& stage) {
  return Sample(r, "waav_stage_latency_seconds_sum{stage=\"" + stage + "\"}");
}

// The engine stamps its stages and batch sizes once per unit of work: per frontend round
// (ingest_wait, preprocessing, frontend = one VAD batch) and per decode (queue, encoder,
// decoder_step, stt, end to end), and the counts agree with the work the sink saw.
TEST_F(StreamingEngineTest, StagesAndBatchesCountTheWork) {
  metrics::Registry registry;
  auto stages = metrics::StageMetrics::Create(&registry, metrics::LatencyBudgets{});
  ASSERT_TRUE(stages.ok()) << stages.status();
  auto batches = metrics::BatchMetrics::Create(&registry);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EngineOptions options;
  options.stage_metrics = stages->get();
  options.batch_metrics = batches->get();
  auto engine = MakeEngine(options);

  // Two streams at once, of random lengths of silence around the speech.
  std::mt19937 rng(std::random_device{}());
  const uint32_t seed = rng();
  rng.seed(seed);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<uint64_t> ids;
  int64_t frames = 0;
  std::vector<std::vector<float>> audio;
  for (int i = 0; i < 2; ++i) {
    std::vector<float> a(std::uniform_int_distribution<size_t>(0, 16000)(rng), 0.0f);
    a.insert(a.end(), jfk_.begin(), jfk_.end());
    a.resize(a.size() + std::uniform_int_distribution<size_t>(8000, 24000)(rng), 0.0f);
    frames += static_cast<int64_t>(a.size()) / vad_.frame_samples();
    audio.push_back(std::move(a));
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = engine->OpenStream(StreamOptions{}, sinks.back());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (int i = 0; i < 2; ++i) {
    PushAll(*engine, ids[i], audio[i]);
    ASSERT_TRUE(engine->FinishStream(ids[i]).ok());
  }
  int results = 0;
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait().ok());
    for (const Event& e : sink->events()) results += e.kind == "partial" || e.kind == "final";
  }
  ASSERT_GE(results, 2) << "seed " << seed;

  // Per decode: a decode with an empty transcript sends nothing, so decodes >= results.
  const double decodes = StageCount(registry, "encoder");
  EXPECT_GE(decodes, results) << "seed " << seed;
  for (const char* stage : {"stt", "queue"}) {
    EXPECT_EQ(StageCount(registry, stage), decodes) << stage << ", seed " << seed;
  }
  // decoder_step: one observation per batch of windows (the per-step time of the batch).
  EXPECT_GE(StageCount(registry, "decoder_step"), 1) << "seed " << seed;
  EXPECT_LE(StageCount(registry, "decoder_step"), decodes) << "seed " << seed;
  EXPECT_EQ(Sample(registry, "waav_end_to_end_latency_seconds_count"), decodes);
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"whisper_encoder\"}"), decodes);
  EXPECT_GE(Sample(registry, "waav_batch_size_count{model=\"whisper_decoder\"}"), decodes);
  EXPECT_GT(StageSum(registry, "stt"), 0);
  EXPECT_LE(StageSum(registry, "encoder"), StageSum(registry, "stt"));

  // Per frontend round: preprocessing spans ingest_wait and the round's VAD batches.
  const double rounds = StageCount(registry, "ingest_wait");
  EXPECT_GE(rounds, 1);
  EXPECT_EQ(StageCount(registry, "preprocessing"), rounds);
  EXPECT_GE(StageSum(registry, "preprocessing"), StageSum(registry, "ingest_wait"));
  EXPECT_GE(StageSum(registry, "preprocessing"), StageSum(registry, "frontend"));
  EXPECT_GT(StageSum(registry, "preprocessing"), 0);
  // Every full VAD frame of both streams went through the VAD once, in batches of <= 2.
  const double vad_batches = Sample(registry, "waav_batch_size_count{model=\"vad\"}");
  EXPECT_EQ(vad_batches, StageCount(registry, "frontend"));
  EXPECT_EQ(Sample(registry, "waav_batch_size_sum{model=\"vad\"}"), static_cast<double>(frames))
      << "seed " << seed;
  EXPECT_EQ(Sample(registry, "waav_batch_size_bucket{model=\"vad\",le=\"2\"}"), vad_batches);
  // Nothing here feeds these stages.
  for (const char* stage : {"capture", "processing", "tts", "output"}) {
    EXPECT_EQ(StageCount(registry, stage), 0) << stage;
  }
  EXPECT_EQ(engine->scheduler_depth(), 0u);
}

// With Silero VAD, as the daemon runs: white noise and silence give no transcript, speech does.
TEST_F(StreamingEngineTest, SileroVadKeepsNoiseOutAndSpeechIn) {
  const auto vad_dir = waav::testing::SileroVadDir();
  if (!vad_dir) GTEST_SKIP() << "models/silero-vad absent: run scripts/setup";
  // The frontend worker runs the VAD on its own thread, so on its own backend.
  BackendOptions one_thread;
  one_thread.num_threads = 1;
  auto vad_backend = CreateBackend("cpu", one_thread);
  ASSERT_TRUE(vad_backend.ok());
  auto silero = SileroVoiceActivity::Load(*vad_dir + "/silero_vad_16k_op15.onnx", **vad_backend);
  ASSERT_TRUE(silero.ok()) << silero.status();
  auto engine = StreamingEngine::Create(EngineOptions{}, *transcriber_, **silero);
  ASSERT_TRUE(engine.ok());

  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> gauss(0.0f, 0.05f);
  std::vector<float> noise(16000 * 4);
  for (float& x : noise) x = gauss(rng);
  auto quiet = std::make_shared<RecordingSink>();
  auto quiet_id = (*engine)->OpenStream(StreamOptions{}, quiet);
  ASSERT_TRUE(quiet_id.ok());
  std::vector<float> silence_then_noise(16000 * 2, 0.0f);
  silence_then_noise.insert(silence_then_noise.end(), noise.begin(), noise.end());
  PushAll(**engine, *quiet_id, silence_then_noise);
  ASSERT_TRUE((*engine)->FinishStream(*quiet_id).ok());
  ASSERT_TRUE(quiet->Wait().ok());
  for (const Event& e : quiet->events()) {
    EXPECT_NE(e.kind, "partial");
    EXPECT_NE(e.kind, "final") << e.result.transcript;
  }

  auto speech = std::make_shared<RecordingSink>();
  StreamOptions options;
  options.endpoint.silence_ms = 1500;
  auto speech_id = (*engine)->OpenStream(options, speech);
  ASSERT_TRUE(speech_id.ok());
  PushAll(**engine, *speech_id, jfk_);
  ASSERT_TRUE((*engine)->FinishStream(*speech_id).ok());
  ASSERT_TRUE(speech->Wait().ok());
  std::string finals;
  for (const Event& e : speech->events()) {
    if (e.kind == "final") finals += " " + e.result.transcript;
  }
  EXPECT_EQ(Normalize(std::string(absl::StripAsciiWhitespace(finals))),
            "and so my fellow americans ask not what your country can do for you ask what you "
            "can do for your country");
}

}  // namespace
}  // namespace waav::streaming

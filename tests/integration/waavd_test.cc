// waavd end to end: a real daemon process on loopback ports chosen at run time, real Whisper
// weights, real speech, the generated gRPC stubs. Each suite starts its own daemon with the
// limits it tests (the small-limit and SIGTERM suites are in waavd_limits_test.cc). Audio is sent
// at real-time pace in one test and faster elsewhere, to keep the suite within a few minutes on a
// 2-core machine.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/audio/wav_reader.h"
#include "engine/models/whisper/transcriber.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/integration/daemon_suite.h"
#include "tests/integration/stream_client.h"
#include "tests/integration/waavd_process.h"
#include "tests/support/test_env.h"

namespace waav::testing {
namespace {

// ---- A daemon with everyday limits ----------------------------------------------------------

class WaavdServing : public DaemonSuite {
 protected:
  static void SetUpTestSuite() {
    StartDaemon({"--log-level", "debug", "--max-streams", "24", "--idle-timeout-s", "2",
                 "--max-message-bytes", "1048576", "--max-stream-duration-s", "60"});
  }
  static void TearDownTestSuite() { StopDaemon(); }

  // jfk with silence around it, streamed at `pace`; its finals against the offline text.
  // `max_missed_words`: words of the offline text the streamed one may miss or get wrong; words
  // it adds are printed, not counted (see the comment above the tests).
  void StreamJfk(double pace, int max_missed_words) {
    auto jfk = LoadClip("jfk.wav");
    ASSERT_TRUE(jfk);
    Clip clip{Silence(jfk->rate_hz, 0.5), jfk->rate_hz};
    Append(&clip.samples, jfk->samples);
    Append(&clip.samples, Silence(jfk->rate_hz, 2.0));
    const std::string offline = OfflineText(*jfk);
    EXPECT_EQ(NormalizeText(offline), kJfkText);

    StreamPlan plan = Linear16Plan(clip, pace, "jfk-" + std::to_string(pace));
    // JFK pauses for up to ~0.7 s mid-sentence. With the default 500 ms endpoint the fallback
    // energy VAD cuts the sentence into three utterances and decodes "ask" at the start of the
    // third as "as" (its onset is clipped); 1500 ms keeps one utterance, as the offline path sees
    // it, so the texts compare word for word. The 2 s of trailing silence end it by silence.
    plan.config.mutable_endpointing()->set_silence_ms(1500);
    const StreamRun run = RunStream(*stub_, plan);
    ASSERT_TRUE(run.status.ok()) << run.status.error_code() << " " << run.status.error_message();
    EXPECT_EQ(CheckStreamContract(run, plan.config.request_id()), "");
    int words = 0;
    const int errors =
        WordEditDistance(NormalizeText(offline), NormalizeText(run.FinalText()), &words);
    const int missed = MissedWords(NormalizeText(offline), NormalizeText(run.FinalText()));
    if (errors > 0) {
      std::cout << "streamed text differs from offline by " << errors << " of " << words
                << " words (" << missed
                << " missed, the rest added):\n  streamed: " << run.FinalText()
                << "\n  offline:  " << offline << "\n";
    }
    EXPECT_LE(missed, max_missed_words)
        << "streamed: " << run.FinalText() << "\noffline: " << offline;
    EXPECT_EQ(run.Finals().size(), 1u);
    EXPECT_EQ(run.CountEvents(v1::SpeechEvent::SPEECH_STARTED), 1);

    // Interim results come before each final (in stream order, which CheckStreamContract
    // checks) and cover no more of the audio than it does. Only at real-time pace is it also
    // asserted that one arrives while the utterance is still being spoken, i.e. before the client
    // had sent the audio where the final ends: that compares the server's decode latency with the
    // client's wall-clock sending, and at 4x the client sends jfk's 11 s in under 3 s, while on a
    // loaded 2-core machine a partial's encoder pass alone took 2.3 to 2.9 s (ctest -j2 beside
    // eight busy loops; 3 of 4 runs then had no partial in time). Interim decodes are best effort
    // (the engine keeps only the newest queued partial), so a 4x stream on a busy machine gets
    // fewer, later partials but still gets them: the first partial job is queued ~1 s into the
    // speech, ~2.5 s (wall) before the final's.
    int early_partials = 0;
    std::map<uint32_t, uint32_t> final_end_ms;
    std::map<uint32_t, int> interims;
    for (const auto& f : run.Finals()) final_end_ms[f.utterance_index()] = f.end_ms();
    for (const Received& r : run.responses) {
      if (!r.response.has_result() || r.response.result().is_final()) continue;
      const v1::StreamingRecognitionResult& interim = r.response.result();
      const auto it = final_end_ms.find(interim.utterance_index());
      if (it == final_end_ms.end()) continue;
      ++interims[interim.utterance_index()];
      EXPECT_LE(interim.end_ms(), it->second) << interim.alternatives(0).transcript();
      // Sent audio counts from the start of the clip: 0.5 s of silence come first.
      if (r.sent_ms < it->second) ++early_partials;
    }
    for (const auto& [utterance, end_ms] : final_end_ms) {
      EXPECT_GT(interims[utterance], 0)
          << "no interim result before the final of utterance " << utterance;
    }
    std::cout << "pace " << pace << ": " << early_partials
              << " interim results arrived before the client had sent the final's end\n";
    if (pace <= 1.0) {
      EXPECT_GT(early_partials, 0);
    }

    // For the record (not asserted): where the time went, per result kind.
    for (bool final_results : {false, true}) {
      std::vector<float> audio_to_result, server, encoder, decoder, queue;
      for (const Received& r : run.responses) {
        if (!r.response.has_result() || r.response.result().is_final() != final_results) continue;
        const v1::ResultLatency& l = r.response.result().latency();
        audio_to_result.push_back(l.audio_to_result_ms());
        server.push_back(l.server_ms());
        encoder.push_back(l.encoder_ms());
        decoder.push_back(l.decoder_ms());
        queue.push_back(l.queue_ms());
      }
      if (audio_to_result.empty()) continue;
      for (auto* v : {&audio_to_result, &server, &encoder, &decoder, &queue}) {
        std::sort(v->begin(), v->end());
      }
      std::cout << "pace " << pace << ", " << audio_to_result.size()
                << (final_results ? " final" : " interim") << " results: audio_to_result_ms p50 "
                << audio_to_result[audio_to_result.size() / 2] << " max " << audio_to_result.back()
                << "; server_ms p50 " << server[server.size() / 2] << " max " << server.back()
                << "; p50 queue " << queue[queue.size() / 2] << " encoder "
                << encoder[encoder.size() / 2] << " decoder " << decoder[decoder.size() / 2]
                << "\n";
    }

    // Words, latency and the effective config are filled in.
    const auto& started = run.responses.front().response.started();
    EXPECT_EQ(started.effective_config().recognition().model(), "whisper-tiny.en");
    EXPECT_TRUE(started.effective_config().endpointing().has_silence_ms());
    EXPECT_TRUE(started.model().loaded());
    for (const auto& f : run.Finals()) {
      EXPECT_GT(f.alternatives(0).words_size(), 0);
      EXPECT_GT(f.latency().encoder_ms(), 0);
      EXPECT_GE(f.latency().server_ms(), f.latency().encoder_ms());
      EXPECT_GT(f.end_ms(), f.start_ms());
    }
  }
};

TEST_F(WaavdServing, HealthReflectionAndModels) {
  EXPECT_EQ(daemon_->HealthStatus(), "SERVING");
  v1::ListModelsResponse models;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ListModels(&context, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.default_model(), "whisper-tiny.en");
  EXPECT_TRUE(models.models(0).loaded());
  EXPECT_TRUE(models.models(0).streaming());
  EXPECT_FALSE(models.server_version().empty());

  // Server reflection lists the services and serves their descriptors (what grpcurl uses).
  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(daemon_->channel());
  grpc::ClientContext reflection_context;
  auto stream = reflection->ServerReflectionInfo(&reflection_context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.push_back(s.name());
  EXPECT_NE(std::find(services.begin(), services.end(), "waav.v1.Recognizer"), services.end());
  EXPECT_NE(std::find(services.begin(), services.end(), "grpc.health.v1.Health"), services.end());
  request.set_file_containing_symbol("waav.v1.Recognizer");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_GT(response.file_descriptor_response().file_descriptor_proto_size(), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Differences seen between the streamed and the offline text (tiny.en, energy VAD), all from
// the engine's streaming policy rather than the transport: at real-time pace a partial is decoded
// every 500 ms of speech, often with a word cut in half at its end, and LocalAgreement-2 commits
// a word two consecutive partials agree on, never to withdraw it: "Watch" for "What" was seen.
// (Partials used to be decoded over the trailing silence while the endpoint waited for it, and a
// hallucination there, "Ah. Ah.", "I", "I'm not sure.", could end the final; they now stop at the
// padded end of speech.)
// At 4x on a loaded machine (ctest -j2 beside the parity tests) fewer partials get decoded, and
// one run in ~8 committed "asked" for "ask" twice ("...Americans asked not what your country can
// do for you, asked what you can..."): the same policy, from a partial that ended in the next
// word's onset. So the tests bound the offline words the stream misses (1 of 22 seen at real
// time, 2 at 4x under load, none at 4x otherwise) and print every difference, added words
// included.
TEST_F(WaavdServing, RealTimeStreamMatchesOfflineTranscript) { StreamJfk(1.0, 2); }

TEST_F(WaavdServing, FourTimesRealTimeStreamMatchesOfflineTranscript) { StreamJfk(4.0, 2); }

TEST_F(WaavdServing, SilenceAndNoiseGiveNoTranscript) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  std::normal_distribution<float> white(0.0f, 0.05f);
  Clip noise_clip{std::vector<float>(16000 * 4), 16000};
  for (float& x : noise_clip.samples) x = white(rng);
  const Clip& noise = noise_clip;
  const Clip silence{Silence(16000, 4.0), 16000};
  for (const Clip* clip : {&silence, &noise}) {
    const StreamRun run = RunStream(*stub_, Linear16Plan(*clip, 0));
    ASSERT_TRUE(run.status.ok()) << run.status.error_message() << " seed " << seed;
    EXPECT_EQ(run.CountResults(), 0) << run.FinalText() << " seed " << seed;
    EXPECT_EQ(CheckStreamContract(run, ""), "");
  }
}

TEST_F(WaavdServing, TwoUtterancesSeparatedBySilenceGiveTwoFinals) {
  auto first = LoadClip("ljspeech/LJ001-0002.wav");   // "in being comparatively modern."
  auto second = LoadClip("ljspeech/LJ001-0008.wav");  // "has never been surpassed."
  if (!first || !second) GTEST_SKIP() << "LJSpeech clips absent";
  // 22.05 kHz LINEAR16: the server resamples. Default endpointing (500 ms of silence).
  Clip clip{Silence(first->rate_hz, 0.5), first->rate_hz};
  Append(&clip.samples, first->samples);
  Append(&clip.samples, Silence(first->rate_hz, 2.0));
  Append(&clip.samples, second->samples);
  Append(&clip.samples, Silence(first->rate_hz, 1.0));
  const StreamRun run = RunStream(*stub_, Linear16Plan(clip, 4.0, "two"));
  ASSERT_TRUE(run.status.ok()) << run.status.error_message();
  EXPECT_EQ(CheckStreamContract(run, "two"), "");
  const auto finals = run.Finals();
  ASSERT_EQ(finals.size(), 2u) << run.FinalText();
  EXPECT_EQ(NormalizeText(finals[0].alternatives(0).transcript()), "in being comparatively modern");
  EXPECT_EQ(NormalizeText(finals[1].alternatives(0).transcript()), "has never been surpassed");
  EXPECT_LT(finals[0].end_ms(), finals[1].start_ms());
  EXPECT_EQ(finals[0].end_reason(), v1::UTTERANCE_END_REASON_SILENCE);
  EXPECT_EQ(run.CountEvents(v1::SpeechEvent::SPEECH_STARTED), 2);
  EXPECT_EQ(run.CountEvents(v1::SpeechEvent::SPEECH_ENDED), 2);
  // Offsets are stream time of the 22.05 kHz input: the second clip starts after 0.5 + 1.9 + 2 s.
  EXPECT_NEAR(finals[1].start_ms(), 4400, 400);
}

TEST_F(WaavdServing, SingleUtteranceEndsTheStreamAfterTheFirst) {
  auto first = LoadClip("ljspeech/LJ001-0002.wav");
  auto second = LoadClip("ljspeech/LJ001-0008.wav");
  if (!first || !second) GTEST_SKIP() << "LJSpeech clips absent";
  Clip clip{Silence(first->rate_hz, 0.3), first->rate_hz};
  Append(&clip.samples, first->samples);
  Append(&clip.samples, Silence(first->rate_hz, 1.5));
  Append(&clip.samples, second->samples);
  // Like a microphone, the client goes on sending (at real-time pace) after the first utterance
  // has ended: a loaded machine may take longer than the test daemon's 2 s idle timeout to
  // decode the final, and a client that has stopped sending would be cut off as idle.
  Append(&clip.samples, Silence(first->rate_hz, 3.0));
  StreamPlan plan = Linear16Plan(clip, 1.0, "single");
  plan.config.set_single_utterance(true);
  plan.half_close = false;  // the server ends the stream by itself
  const StreamRun run = RunStream(*stub_, plan);
  ASSERT_TRUE(run.status.ok()) << run.status.error_message();
  EXPECT_EQ(CheckStreamContract(run, "single"), "");
  ASSERT_EQ(run.Finals().size(), 1u);
  EXPECT_EQ(NormalizeText(run.FinalText()), "in being comparatively modern");
  EXPECT_EQ(run.CountEvents(v1::SpeechEvent::END_OF_SINGLE_UTTERANCE), 1);
  // END_OF_SINGLE_UTTERANCE comes after SPEECH_ENDED and before the final.
  int ended_at = -1, end_of_single_at = -1, final_at = -1;
  for (size_t i = 0; i < run.responses.size(); ++i) {
    const auto& r = run.responses[i].response;
    if (r.has_event() && r.event().type() == v1::SpeechEvent::SPEECH_ENDED) ended_at = i;
    if (r.has_event() && r.event().type() == v1::SpeechEvent::END_OF_SINGLE_UTTERANCE) {
      end_of_single_at = i;
    }
    if (r.has_result() && r.result().is_final()) final_at = i;
  }
  EXPECT_LT(ended_at, end_of_single_at);
  EXPECT_LT(end_of_single_at, final_at);
}

// 20 streams at once, each at 4x real time (20 x 4 = 80 times real-time audio in total would
// be far beyond what 2 cores decode: the engine coalesces partials, so what is checked is that
// every stream completes with the right text, not its latency).
TEST_F(WaavdServing, TwentyConcurrentStreamsAllComplete) {
  auto jfk = LoadClip("jfk.wav");
  ASSERT_TRUE(jfk);
  Clip clip{Silence(jfk->rate_hz, 0.3), jfk->rate_hz};
  Append(&clip.samples, jfk->samples);
  Append(&clip.samples, Silence(jfk->rate_hz, 2.0));
  const std::string offline = NormalizeText(OfflineText(*jfk));
  constexpr int kStreams = 20;
  std::vector<StreamRun> runs(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      StreamPlan plan = Linear16Plan(clip, 4.0, absl::StrCat("concurrent-", i));
      plan.config.mutable_endpointing()->set_silence_ms(1500);
      plan.deadline_s = 170;
      runs[i] = RunStream(*stub_, plan);
    });
  }
  for (std::thread& t : threads) t.join();
  int differing = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    ASSERT_TRUE(runs[i].status.ok())
        << runs[i].status.error_code() << " " << runs[i].status.error_message();
    EXPECT_EQ(CheckStreamContract(runs[i], absl::StrCat("concurrent-", i)), "");
    const int errors = WordEditDistance(offline, NormalizeText(runs[i].FinalText()));
    if (errors > 0) {
      ++differing;
      std::cout << "stream " << i << " differs by " << errors << " words: " << runs[i].FinalText()
                << "\n";
    }
    EXPECT_LE(MissedWords(offline, NormalizeText(runs[i].FinalText())), 2) << runs[i].FinalText();
  }
  std::cout << differing << " of " << kStreams << " streams differ from the offline text\n";
}

// One call per bad request: its status code, and a message that names what is wrong.
struct BadCase {
  std::string name;
  std::vector<v1::StreamingRecognizeRequest> messages;
  grpc::StatusCode code;
  std::string message_part;
  bool half_close = true;
};

v1::StreamingRecognizeRequest ConfigMessage(const v1::StreamingRecognitionConfig& config) {
  v1::StreamingRecognizeRequest r;
  *r.mutable_config() = config;
  return r;
}

v1::StreamingRecognizeRequest AudioMessage(std::string bytes) {
  v1::StreamingRecognizeRequest r;
  r.set_audio(std::move(bytes));
  return r;
}

grpc::Status Call(v1::Recognizer::Stub& stub, const BadCase& c, int* responses) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub.StreamingRecognize(&context);
  for (const auto& m : c.messages) {
    if (!stream->Write(m)) break;
  }
  if (c.half_close) stream->WritesDone();
  v1::StreamingRecognizeResponse response;
  *responses = 0;
  while (stream->Read(&response)) ++*responses;
  return stream->Finish();
}

TEST_F(WaavdServing, EveryBadInputGetsItsStatusCode) {
  const v1::StreamingRecognitionConfig good = Linear16Config(16000, "bad-input");
  auto with = [&](auto mutate) {
    v1::StreamingRecognitionConfig c = good;
    mutate(c);
    return c;
  };
  const std::string one_second = ToLinear16(Silence(16000, 1.0));
  std::string flac_garbage = "fLaC";
  flac_garbage += std::string("\x80\x00\x00\x22", 4);  // last block, STREAMINFO, 34 bytes
  flac_garbage += std::string(34, '\0');               // a sample rate of 0
  flac_garbage += std::string(1000, '\x5a');

  std::vector<BadCase> cases = {
      {"audio first",
       {AudioMessage(one_second)},
       grpc::StatusCode::INVALID_ARGUMENT,
       "first message of a stream must be a config"},
      {"empty first message",
       {v1::StreamingRecognizeRequest()},
       grpc::StatusCode::INVALID_ARGUMENT,
       "must be a config"},
      {"half-close before config", {}, grpc::StatusCode::INVALID_ARGUMENT, "before its config"},
      {"unspecified encoding",
       {ConfigMessage(with([](auto& c) {
         c.mutable_recognition()->mutable_audio_format()->set_encoding(
             v1::AUDIO_ENCODING_UNSPECIFIED);
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "UNSPECIFIED"},
      {"unknown encoding",
       {ConfigMessage(with([](auto& c) {
         c.mutable_recognition()->mutable_audio_format()->set_encoding(
             static_cast<v1::AudioEncoding>(99));
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "encoding 99"},
      {"no audio format",
       {ConfigMessage(with([](auto& c) { c.mutable_recognition()->clear_audio_format(); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "audio_format is missing"},
      {"sample rate too low",
       {ConfigMessage(with([](auto& c) {
         c.mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(4000);
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "sample_rate_hz 4000"},
      {"sample rate missing",
       {ConfigMessage(with([](auto& c) {
         c.mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(0);
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "missing"},
      {"nine channels",
       {ConfigMessage(with(
           [](auto& c) { c.mutable_recognition()->mutable_audio_format()->set_channels(9); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "channels"},
      {"unknown model",
       {ConfigMessage(with([](auto& c) { c.mutable_recognition()->set_model("whisper-huge"); }))},
       grpc::StatusCode::NOT_FOUND,
       "whisper-tiny.en"},
      {"language the model lacks",
       {ConfigMessage(with([](auto& c) { c.mutable_recognition()->set_language("de-DE"); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "language 'de-DE'"},
      {"endpointing out of range",
       {ConfigMessage(with([](auto& c) { c.mutable_endpointing()->set_silence_ms(50); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "endpointing.silence_ms"},
      {"vad threshold out of range",
       {ConfigMessage(with([](auto& c) { c.mutable_endpointing()->set_vad_threshold(1.5f); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "vad_threshold"},
      {"too many alternatives",
       {ConfigMessage(with([](auto& c) { c.mutable_recognition()->set_max_alternatives(11); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "max_alternatives"},
      {"request id not printable",
       {ConfigMessage(with([](auto& c) { c.set_request_id("tab\there"); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "request_id"},
      {"second config",
       {ConfigMessage(good), AudioMessage(one_second), ConfigMessage(good)},
       grpc::StatusCode::INVALID_ARGUMENT,
       "a second config"},
      {"message with nothing set",
       {ConfigMessage(good), v1::StreamingRecognizeRequest()},
       grpc::StatusCode::INVALID_ARGUMENT,
       "neither config nor audio"},
      {"malformed FLAC",
       {ConfigMessage(with([](auto& c) {
          auto* f = c.mutable_recognition()->mutable_audio_format();
          f->set_encoding(v1::AUDIO_ENCODING_FLAC);
          f->set_sample_rate_hz(0);
        })),
        AudioMessage(flac_garbage)},
       grpc::StatusCode::INVALID_ARGUMENT,
       "FLAC"},
      {"FLOAT32 NaN",
       {ConfigMessage(with([](auto& c) {
          c.mutable_recognition()->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_FLOAT32);
        })),
        AudioMessage(std::string("\x00\x00\xc0\x7f", 4))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "FLOAT32"},
      {"oversized message",
       {ConfigMessage(good), AudioMessage(std::string(1200 * 1024, '\0'))},
       grpc::StatusCode::RESOURCE_EXHAUSTED,
       ""},
      {"idle timeout",
       {ConfigMessage(good), AudioMessage(one_second)},
       grpc::StatusCode::DEADLINE_EXCEEDED,
       "idle timeout",
       /*half_close=*/false},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    int responses = 0;
    const grpc::Status status = Call(*stub_, c, &responses);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), c.message_part))
        << status.error_message();
    // The request id is in the message once the config named one.
    if (c.code == grpc::StatusCode::INVALID_ARGUMENT && responses > 0) {
      EXPECT_TRUE(absl::StrContains(status.error_message(), "bad-input")) << status.error_message();
    }
  }
  // None of it disturbed the daemon.
  EXPECT_EQ(daemon_->HealthStatus(), "SERVING");
}

TEST_F(WaavdServing, RecognizeWholeFiles) {
  auto jfk = LoadClip("jfk.wav");
  ASSERT_TRUE(jfk);
  EXPECT_EQ(NormalizeText(OfflineText(*jfk)), kJfkText);

  // FLOAT32 at 22.05 kHz, with word offsets.
  auto lj = LoadClip("ljspeech/LJ001-0008.wav");
  if (lj) {
    v1::RecognizeRequest request;
    auto* format = request.mutable_config()->mutable_audio_format();
    format->set_encoding(v1::AUDIO_ENCODING_FLOAT32);
    format->set_sample_rate_hz(lj->rate_hz);
    request.mutable_config()->set_enable_word_time_offsets(true);
    request.set_request_id("recognize-float");
    request.set_audio(std::string(reinterpret_cast<const char*>(lj->samples.data()),
                                  lj->samples.size() * sizeof(float)));
    v1::RecognizeResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Recognize(&context, request, &response).ok());
    EXPECT_EQ(response.request_id(), "recognize-float");
    EXPECT_EQ(response.model(), "whisper-tiny.en");
    EXPECT_NEAR(response.audio_duration_ms(), 1783, 2);
    ASSERT_EQ(response.results_size(), 1);
    EXPECT_EQ(NormalizeText(response.results(0).alternatives(0).transcript()),
              "has never been surpassed");
    EXPECT_EQ(response.results(0).alternatives(0).words_size(), 4);
    EXPECT_GT(response.processing_ms(), 0);
  }
}

// Recognize's word offsets are the offline Transcriber's aligned word times (cross-attention DTW,
// what `waav transcribe --json --word-timestamps` prints), not an estimate: the daemon's words on
// jfk.wav against the engine's, run here in-process on the same samples. Tolerance: one
// alignment step (20 ms) per time, in case another summation order moves a DTW step (both run the
// CPU backend on all cores, but waavd re-executes itself for OpenBLAS's SkylakeX kernels on
// AVX-512 CPUs and this process does not; equal times were seen). The character-spread estimate
// the RPC returned before fails this test on most words.
TEST_F(WaavdServing, RecognizeWordTimesAreTheOfflineAlignment) {
  constexpr double kToleranceMs = 20;
  auto jfk = LoadClip("jfk.wav");
  ASSERT_TRUE(jfk);
  ASSERT_EQ(jfk->rate_hz, 16000) << "the engine below takes the samples as they are";

  // FLOAT32: the daemon decodes exactly these samples.
  v1::RecognizeRequest request;
  auto* format = request.mutable_config()->mutable_audio_format();
  format->set_encoding(v1::AUDIO_ENCODING_FLOAT32);
  format->set_sample_rate_hz(jfk->rate_hz);
  request.mutable_config()->set_enable_word_time_offsets(true);
  request.set_audio(std::string(reinterpret_cast<const char*>(jfk->samples.data()),
                                jfk->samples.size() * sizeof(float)));
  v1::RecognizeResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub_->Recognize(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();

  std::unique_ptr<Backend> backend = CreateCpuBackend({});
  auto transcriber = whisper::Transcriber::Load(*TinyEnModelDir(), *backend);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  ASSERT_NE((*transcriber)->word_aligner(), nullptr) << "the model lists no alignment heads";
  whisper::TranscribeOptions options;
  options.word_timestamps = true;
  auto transcript = (*transcriber)->Transcribe(jfk->samples, options);
  ASSERT_TRUE(transcript.ok()) << transcript.status();
  std::vector<whisper::Word> want;
  for (const whisper::Segment& segment : transcript->segments) {
    for (const whisper::Word& w : segment.words) {
      const std::string text(absl::StripAsciiWhitespace(w.word));
      if (!text.empty()) want.push_back({text, w.start_s * 1000, w.end_s * 1000, w.probability});
    }
  }
  ASSERT_GE(want.size(), 20u);  // 22 words

  std::vector<const v1::WordInfo*> got;
  for (const v1::RecognitionResult& result : response.results()) {
    ASSERT_GT(result.alternatives_size(), 0);
    const v1::SpeechRecognitionAlternative& top = result.alternatives(0);
    EXPECT_GT(top.words_size(), 0) << top.transcript();
    uint32_t previous_start = result.start_ms();
    for (const v1::WordInfo& w : top.words()) {
      EXPECT_TRUE(absl::StrContains(top.transcript(), w.word())) << w.word();
      EXPECT_GE(w.start_ms(), previous_start) << w.word();  // in order, inside the result
      EXPECT_LE(w.start_ms(), w.end_ms()) << w.word();
      EXPECT_LE(w.end_ms(), result.end_ms()) << w.word();
      EXPECT_TRUE(w.stable());
      previous_start = w.start_ms();
      got.push_back(&w);
    }
  }
  ASSERT_EQ(got.size(), want.size()) << response.ShortDebugString();
  double max_diff_ms = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("word ", i, " '", want[i].word, "'"));
    EXPECT_EQ(got[i]->word(), want[i].word);
    EXPECT_NEAR(got[i]->start_ms(), want[i].start_s, kToleranceMs);
    EXPECT_NEAR(got[i]->end_ms(), want[i].end_s, kToleranceMs);
    EXPECT_NEAR(got[i]->confidence(), want[i].probability, 1e-3);
    max_diff_ms = std::max({max_diff_ms, std::abs(got[i]->start_ms() - want[i].start_s),
                            std::abs(got[i]->end_ms() - want[i].end_s)});
  }
  std::cout << want.size() << " words; largest difference from the engine's times: " << max_diff_ms
            << " ms\n";
}

// Recognize's refusals, with word offsets asked for: the status code, a message naming what is
// wrong (and the request id, once valid), and a daemon that goes on serving.
TEST_F(WaavdServing, RecognizeBadRequestsGetTheirStatusCodes) {
  v1::RecognizeRequest good;
  good.set_request_id("bad-recognize");
  auto* format = good.mutable_config()->mutable_audio_format();
  format->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
  format->set_sample_rate_hz(16000);
  good.mutable_config()->set_enable_word_time_offsets(true);
  good.set_audio(ToLinear16(Silence(16000, 0.5)));
  auto with = [&](auto mutate) {
    v1::RecognizeRequest r = good;
    mutate(r);
    return r;
  };
  std::string flac_garbage = "fLaC";
  flac_garbage += std::string("\x80\x00\x00\x22", 4);  // last block, STREAMINFO, 34 bytes
  flac_garbage += std::string(34, '\0');               // a sample rate of 0
  flac_garbage += std::string(1000, '\x5a');
  struct Case {
    std::string name;
    v1::RecognizeRequest request;
    grpc::StatusCode code;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"no config", with([](auto& r) { r.clear_config(); }), grpc::StatusCode::INVALID_ARGUMENT,
       "config is missing"},
      {"no audio", with([](auto& r) { r.clear_audio(); }), grpc::StatusCode::INVALID_ARGUMENT,
       "audio is empty"},
      {"unspecified encoding", with([](auto& r) {
         r.mutable_config()->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_UNSPECIFIED);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "UNSPECIFIED"},
      {"language the model lacks", with([](auto& r) { r.mutable_config()->set_language("de-DE"); }),
       grpc::StatusCode::INVALID_ARGUMENT, "language 'de-DE'"},
      {"unknown model", with([](auto& r) { r.mutable_config()->set_model("whisper-huge"); }),
       grpc::StatusCode::NOT_FOUND, "whisper-tiny.en"},
      {"request id not printable", with([](auto& r) { r.set_request_id("tab\there"); }),
       grpc::StatusCode::INVALID_ARGUMENT, "request_id"},
      {"malformed FLAC", with([&](auto& r) {
         auto* f = r.mutable_config()->mutable_audio_format();
         f->set_encoding(v1::AUDIO_ENCODING_FLAC);
         f->set_sample_rate_hz(0);
         r.set_audio(flac_garbage);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "FLAC"},
      {"FLOAT32 NaN", with([](auto& r) {
         r.mutable_config()->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_FLOAT32);
         r.set_audio(std::string("\x00\x00\xc0\x7f", 4));
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "FLOAT32"},
      // 61 s of 8 kHz mu-law (488 KB, under the 1 MiB message limit) against the daemon's
      // --max-stream-duration-s 60.
      {"longer than the maximum duration", with([](auto& r) {
         auto* f = r.mutable_config()->mutable_audio_format();
         f->set_encoding(v1::AUDIO_ENCODING_MULAW);
         f->set_sample_rate_hz(8000);
         r.set_audio(std::string(8000 * 61, '\xff'));  // mu-law silence
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "longer than the server's maximum of 60 s"},
      {"oversized message", with([](auto& r) { r.set_audio(std::string(1200 * 1024, '\0')); }),
       grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const grpc::Status status = stub_->Recognize(&context, c.request, &response);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), c.message_part))
        << status.error_message();
    if (c.code == grpc::StatusCode::INVALID_ARGUMENT && c.name != "request id not printable") {
      EXPECT_TRUE(absl::StrContains(status.error_message(), "bad-recognize"))
          << status.error_message();
    }
  }
  EXPECT_EQ(daemon_->HealthStatus(), "SERVING");
}

// The value of one series (name and labels exactly as exported) in an exposition, or -1.
double SeriesValue(const std::string& exposition, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double value = -1;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
  }
  return -1;
}

TEST_F(WaavdServing, MetricsCountStreamsAndPassPromtool) {
  auto lj = LoadClip("ljspeech/LJ001-0008.wav");
  if (!lj) GTEST_SKIP() << "LJSpeech clips absent";
  Clip clip{Silence(lj->rate_hz, 0.3), lj->rate_hz};
  Append(&clip.samples, lj->samples);
  Append(&clip.samples, Silence(lj->rate_hz, 1.0));
  const std::string before = daemon_->HttpGet("/metrics").body;
  ASSERT_TRUE(RunStream(*stub_, Linear16Plan(clip, 0)).status.ok());
  // A refused stream: a config the server rejects still counts as started and finished (error).
  {
    grpc::ClientContext context;
    auto stream = stub_->StreamingRecognize(&context);
    v1::StreamingRecognizeRequest request;
    request.set_audio("x");
    stream->Write(request);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  // The server counts a stream when its call is over on the server's side, which the client
  // does not wait for: poll until every series checked below has been updated. Neither the
  // active gauge (it can reach 0 before the last stream's counters are added) nor the last
  // series a stream's end updates is enough: a scrape is not atomic, so it can see the served
  // stream's real-time factor but not its audio seconds, added just before (each seen once in
  // CI).
  WaavdProcess::HttpResponse metrics;
  const std::string failed = "waav_streams_finished_total{kind=\"stt\",outcome=\"error\"}";
  const std::string ok = "waav_streams_finished_total{kind=\"stt\",outcome=\"ok\"}";
  const std::string served = "waav_stream_real_time_factor_count{kind=\"stt\"}";
  const std::string audio = "waav_audio_processed_seconds_total{kind=\"stt\"}";
  auto grew = [&](const std::string& series, double by) {
    return SeriesValue(metrics.body, series) - SeriesValue(before, series) >= by;
  };
  for (int i = 0; i < 250; ++i) {
    metrics = daemon_->HttpGet("/metrics");
    if (grew(failed, 1) && grew(ok, 1) && grew(served, 1) && grew(audio, 3.0) &&
        absl::StrContains(metrics.body, "waav_streams_active{kind=\"stt\"} 0\n")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(metrics.status, 200);
  EXPECT_TRUE(absl::StrContains(metrics.headers, "text/plain; version=0.0.4"));
  auto delta = [&](const std::string& series) {
    return SeriesValue(metrics.body, series) - SeriesValue(before, series);
  };
  EXPECT_EQ(delta("waav_streams_started_total{kind=\"stt\"}"), 2);
  EXPECT_EQ(delta("waav_streams_finished_total{kind=\"stt\",outcome=\"ok\"}"), 1);
  EXPECT_EQ(delta("waav_streams_finished_total{kind=\"stt\",outcome=\"error\"}"), 1);
  EXPECT_NEAR(delta("waav_audio_processed_seconds_total{kind=\"stt\"}"), 0.3 + 1.78 + 1.0, 0.05);
  EXPECT_GT(delta("waav_stage_latency_seconds_count{stage=\"encoder\"}"), 0);
  EXPECT_GT(delta("waav_stage_latency_seconds_count{stage=\"processing\"}"), 0);
  EXPECT_GT(delta("waav_stream_real_time_factor_count{kind=\"stt\"}"), 0);
  for (const char* line : {"waav_streams_active{kind=\"stt\"} 0",
                           "waav_admission_rejections_total{kind=\"stt\",reason=\"capacity\"} 0",
                           "waav_build_info{", "waav_model_load_duration_seconds{"}) {
    EXPECT_TRUE(absl::StrContains(metrics.body, line)) << line;
  }
  EXPECT_EQ(daemon_->HttpGet("/readyz").status, 200);
  EXPECT_EQ(daemon_->HttpGet("/healthz").status, 200);

  // The real Prometheus tools accept what the daemon serves.
  if (RunCommand("command -v promtool >/dev/null 2>&1") != 0) {
    std::cout << "promtool absent (Debian package prometheus): exposition not linted\n";
    return;
  }
  const auto dir = MakeTempDir("waavd-metrics");
  const std::string file = (dir / "metrics.txt").string();
  std::ofstream(file) << metrics.body;
  EXPECT_EQ(RunCommand("promtool check metrics < " + file), 0) << metrics.body;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace waav::testing

// waavd end to end: a real daemon process on loopback ports chosen at run time, real Whisper
// weights, real speech, the generated gRPC stubs. Each suite starts its own daemon with the
// limits it tests. Audio is sent at real-time pace in one test and faster elsewhere, to keep
// the suite within a few minutes on a 2-core machine.
#include <signal.h>

#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/audio/wav_reader.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_client.h"
#include "tests/integration/waavd_process.h"
#include "tests/support/test_env.h"

namespace waav::testing {
namespace {

constexpr char kJfkText[] =
    "and so my fellow americans ask not what your country can do for you ask what you can do "
    "for your country";

struct Clip {
  std::vector<float> samples;
  int rate_hz = 0;
};

std::optional<Clip> LoadClip(const std::string& name) {
  const auto path = SpeechFile(name);
  if (!path) return std::nullopt;
  auto audio = audio::ReadWavFile(*path);
  if (!audio.ok()) return std::nullopt;
  return Clip{std::move(audio->samples), audio->sample_rate_hz};
}

std::vector<float> Silence(int rate_hz, double seconds) {
  return std::vector<float>(static_cast<size_t>(rate_hz * seconds), 0.0f);
}

void Append(std::vector<float>* out, const std::vector<float>& more) {
  out->insert(out->end(), more.begin(), more.end());
}

// Shared by every suite: one daemon per suite (each test binary process runs one test).
class DaemonSuite : public ::testing::Test {
 protected:
  static void StartDaemon(const std::vector<std::string>& args) {
    const auto model = TinyEnModelDir();
    if (!model) {
      skip_reason_ = "models/whisper-tiny.en absent: run scripts/setup";
      return;
    }
    if (!SpeechFile("jfk.wav")) {
      skip_reason_ = "shared speech data absent (../shared/data/speech)";
      return;
    }
    std::string error;
    daemon_ = WaavdProcess::Start(WAAVD_PATH, *model, args, &error);
    if (daemon_ == nullptr) start_error_ = error;
  }
  static void StopDaemon() { daemon_.reset(); }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_NE(daemon_, nullptr) << start_error_;
    stub_ = v1::Recognizer::NewStub(daemon_->channel());
  }
  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "---- waavd log ----\n" << daemon_->Log();
  }

  StreamPlan Linear16Plan(const Clip& clip, double pace, const std::string& request_id = "") {
    StreamPlan plan;
    plan.config = Linear16Config(clip.rate_hz, request_id);
    plan.audio = ToLinear16(clip.samples);
    plan.bytes_per_ms = clip.rate_hz * 2 / 1000.0;
    plan.chunk_bytes = static_cast<size_t>(clip.rate_hz / 10 * 2);  // 100 ms
    plan.pace = pace;
    return plan;
  }

  // The offline path (Transcriber) on the same audio, through the daemon's Recognize.
  std::string OfflineText(const Clip& clip) {
    v1::RecognizeRequest request;
    request.mutable_config()->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
    request.mutable_config()->mutable_audio_format()->set_sample_rate_hz(clip.rate_hz);
    request.set_audio(ToLinear16(clip.samples));
    v1::RecognizeResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->Recognize(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::string text;
    for (const auto& r : response.results()) text += " " + r.alternatives(0).transcript();
    return text;
  }

  static inline std::unique_ptr<WaavdProcess> daemon_;
  static inline std::string skip_reason_;
  static inline std::string start_error_;
  std::unique_ptr<v1::Recognizer::Stub> stub_;
};

// ---- A daemon with everyday limits ----------------------------------------------------------

class WaavdServing : public DaemonSuite {
 protected:
  static void SetUpTestSuite() {
    StartDaemon({"--log-level", "debug", "--max-streams", "24", "--idle-timeout-s", "2",
                 "--max-message-bytes", "1048576", "--max-stream-duration-s", "60"});
  }
  static void TearDownTestSuite() { StopDaemon(); }

  // jfk with silence around it, streamed at `pace`; its finals against the offline text.
  // `max_word_errors`: words the streamed text may differ by (printed when it does).
  void StreamJfk(double pace, int max_word_errors) {
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
    if (errors > 0) {
      std::cout << "streamed text differs from offline by " << errors << " of " << words
                << " words:\n  streamed: " << run.FinalText() << "\n  offline:  " << offline
                << "\n";
    }
    EXPECT_LE(errors, max_word_errors)
        << "streamed: " << run.FinalText() << "\noffline: " << offline;
    EXPECT_EQ(run.Finals().size(), 1u);
    EXPECT_EQ(run.CountEvents(v1::SpeechEvent::SPEECH_STARTED), 1);

    // Interim results arrive while the utterance is still being spoken: before the client had
    // sent the audio where that utterance's final ends.
    int early_partials = 0;
    std::map<uint32_t, uint32_t> final_end_ms;
    for (const auto& f : run.Finals()) final_end_ms[f.utterance_index()] = f.end_ms();
    for (const Received& r : run.responses) {
      if (!r.response.has_result() || r.response.result().is_final()) continue;
      const auto it = final_end_ms.find(r.response.result().utterance_index());
      // Sent audio counts from the start of the clip: 0.5 s of silence come first.
      if (it != final_end_ms.end() && r.sent_ms < it->second) ++early_partials;
    }
    EXPECT_GT(early_partials, 0);

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
}

// At real-time pace the engine decodes a partial every 500 ms of speech, often with a word cut
// in half at its end; LocalAgreement-2 can then commit a wrong word when two consecutive partials
// agree on it ("watch" for "what" was seen), and a committed word is never withdrawn. So this
// test allows 2 of the 22 words to differ, and prints the difference.
TEST_F(WaavdServing, RealTimeStreamMatchesOfflineTranscript) { StreamJfk(1.0, 2); }

TEST_F(WaavdServing, FourTimesRealTimeStreamMatchesOfflineTranscript) { StreamJfk(4.0, 0); }

}  // namespace
}  // namespace waav::testing

// Shared by the waavd end-to-end suites (waavd_test.cc, waavd_limits_test.cc): the jfk text,
// speech clips, and DaemonSuite, one waavd process per suite on loopback ports chosen at run
// time (each test binary process runs one test).
#pragma once

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/audio/wav_reader.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_client.h"
#include "tests/integration/waavd_process.h"
#include "tests/support/test_env.h"

namespace waav::testing {

inline constexpr char kJfkText[] =
    "and so my fellow americans ask not what your country can do for you ask what you can do "
    "for your country";

struct Clip {
  std::vector<float> samples;
  int rate_hz = 0;
};

inline std::optional<Clip> LoadClip(const std::string& name) {
  const auto path = SpeechFile(name);
  if (!path) return std::nullopt;
  auto audio = audio::ReadWavFile(*path);
  if (!audio.ok()) return std::nullopt;
  return Clip{std::move(audio->samples), audio->sample_rate_hz};
}

inline std::vector<float> Silence(int rate_hz, double seconds) {
  return std::vector<float>(static_cast<size_t>(rate_hz * seconds), 0.0f);
}

inline void Append(std::vector<float>* out, const std::vector<float>& more) {
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

}  // namespace waav::testing

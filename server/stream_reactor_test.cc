// The stream reactor against a scripted fake engine, over a real in-process gRPC server: what
// cannot be forced with a real engine (a full ingest ring, an engine error, an utterance whose
// final holds no words) and the ordering the server imposes on the engine's output.
#include "server/stream_reactor.h"

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/recognizer_service.h"

namespace waav::server {
namespace {

using streaming::RecognitionResult;

// The engine's side of one scripted session: what the fake does when the client half-closes.
using Script = std::function<void(streaming::StreamSink& sink)>;

class FakeEngine final : public StreamEngine {
 public:
  ~FakeEngine() override { JoinAll(); }

  absl::StatusOr<uint64_t> OpenStream(const streaming::StreamOptions& options,
                                      std::shared_ptr<streaming::StreamSink> sink) override {
    std::lock_guard lock(mu_);
    if (!open_status_.ok()) return open_status_;
    sink_ = std::move(sink);
    options_ = options;
    return 7;
  }
  absl::Status PushAudio(uint64_t id, absl::Span<const float> samples) override {
    EXPECT_EQ(id, 7u);
    if (rejections_left_.load() > 0) {
      --rejections_left_;
      ++rejected_;
      return absl::ResourceExhaustedError("ring full");
    }
    samples_ += static_cast<int64_t>(samples.size());
    return absl::OkStatus();
  }
  absl::Status FinishStream(uint64_t id) override {
    // Engine output comes from an engine thread, never from inside the caller's call.
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, sink = sink_, script = script_] {
      script(*sink);
      sink->OnDone(done_status_, samples_.load() / 16);
    });
    return absl::OkStatus();
  }
  void CancelStream(uint64_t id) override {
    cancelled_ = true;
    std::lock_guard lock(mu_);
    if (sink_ == nullptr) return;
    threads_.emplace_back([sink = sink_] { sink->OnDone(absl::CancelledError("cancelled"), 0); });
  }
  void StopAccepting() override {}
  size_t ingest_depth() const override { return 0; }
  size_t scheduler_depth() const override { return 0; }

  void JoinAll() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  std::mutex mu_;
  std::shared_ptr<streaming::StreamSink> sink_;
  streaming::StreamOptions options_;
  absl::Status open_status_;
  absl::Status done_status_;
  Script script_ = [](streaming::StreamSink&) {};
  std::atomic<int> rejections_left_{0};
  std::atomic<int> rejected_{0};
  std::atomic<int64_t> samples_{0};
  std::atomic<bool> cancelled_{false};
  std::vector<std::thread> threads_;
};

RecognitionResult Result(int utterance, bool is_final, const std::string& text,
                         const std::string& stable) {
  RecognitionResult r;
  r.utterance_index = utterance;
  r.is_final = is_final;
  r.transcript = text;
  r.stable_transcript = stable;
  r.start_ms = 100;
  r.end_ms = 900;
  return r;
}

class StreamReactorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.idle_timeout_s = 5;
    auto metrics = ServerMetrics::Create(&registry_);
    ASSERT_TRUE(metrics.ok());
    metrics_ = std::move(*metrics);
    admission_ = std::make_unique<Admission>(2, &metrics_->streams_active());
    watchdog_ = std::make_unique<StreamWatchdog>(std::chrono::milliseconds(5));
    model_.name = "whisper-tiny.en";
    model_.languages = {"en"};
    model_.backend = "cpu";
    runtime_.config = &config_;
    runtime_.state = &state_;
    runtime_.model = &model_;
    runtime_.engine = &engine_;
    runtime_.admission = admission_.get();
    runtime_.watchdog = watchdog_.get();
    runtime_.metrics = metrics_.get();
    state_.SetLoaded();
    service_ = std::make_unique<RecognizerService>(runtime_, "test");
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::Recognizer::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                        grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    stub_.reset();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    engine_.JoinAll();
  }

  // Sends a LINEAR16 16 kHz config and `audio_ms` of silence in 100 ms messages, half-closes,
  // and collects every response and the status.
  grpc::Status Stream(int audio_ms, std::vector<v1::StreamingRecognizeResponse>* responses,
                      bool cancel = false) {
    grpc::ClientContext context;
    auto stream = stub_->StreamingRecognize(&context);
    v1::StreamingRecognizeRequest request;
    auto* format = request.mutable_config()->mutable_recognition()->mutable_audio_format();
    format->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
    format->set_sample_rate_hz(16000);
    request.mutable_config()->set_request_id("fake");
    stream->Write(request);
    for (int ms = 0; ms < audio_ms; ms += 100) {
      v1::StreamingRecognizeRequest audio;
      audio.set_audio(std::string(3200, '\0'));
      if (!stream->Write(audio)) break;
    }
    if (cancel) {
      v1::StreamingRecognizeResponse started;
      stream->Read(&started);  // admitted and open in the engine
      context.TryCancel();
    } else {
      stream->WritesDone();
    }
    v1::StreamingRecognizeResponse response;
    while (stream->Read(&response)) responses->push_back(response);
    return stream->Finish();
  }

  ServerConfig config_;
  metrics::Registry registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<StreamWatchdog> watchdog_;
  ServerState state_;
  ModelDescription model_;
  FakeEngine engine_;
  ServiceRuntime runtime_;
  std::unique_ptr<RecognizerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Recognizer::Stub> stub_;
};

TEST_F(StreamReactorTest, AFullRingPausesTheStreamAndNoAudioIsLost) {
  engine_.rejections_left_ = 25;  // the ring refuses 25 pushes in a row, then takes them
  std::vector<v1::StreamingRecognizeResponse> responses;
  const grpc::Status status = Stream(2000, &responses);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(engine_.rejected_.load(), 25);
  EXPECT_EQ(engine_.samples_.load(), 32000) << "audio was dropped or duplicated";
  ASSERT_FALSE(responses.empty());
  EXPECT_TRUE(responses.front().has_started());
}

TEST_F(StreamReactorTest, SpeechEndedComesBeforeTheFinalAndEmptyUtterancesGetAFinal) {
  engine_.script_ = [](streaming::StreamSink& sink) {
    sink.OnSpeechStarted(0, 100, 350);
    sink.OnResult(Result(0, false, "hello wor", "hello"));
    sink.OnResult(Result(0, true, "hello world", "hello world"));  // the engine's order
    sink.OnSpeechEnded(0, 900, 1400);
    sink.OnSpeechStarted(1, 2000, 2250);
    sink.OnResult(Result(1, false, "um", ""));  // interim text, then no words after all
    sink.OnSpeechEnded(1, 2500, 3000);
  };
  std::vector<v1::StreamingRecognizeResponse> responses;
  const grpc::Status status = Stream(300, &responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::string> kinds;
  for (const auto& r : responses) {
    EXPECT_EQ(r.request_id(), "fake");
    if (r.has_started()) kinds.push_back("started");
    if (r.has_event()) kinds.push_back(v1::SpeechEvent::Type_Name(r.event().type()));
    if (r.has_result()) {
      kinds.push_back((r.result().is_final() ? "final:" : "interim:") +
                      r.result().alternatives(0).transcript());
    }
  }
  const std::vector<std::string> expected = {
      "started",        "SPEECH_STARTED", "interim:hello wor", "SPEECH_ENDED", "final:hello world",
      "SPEECH_STARTED", "interim:um",     "SPEECH_ENDED",      "final:"};
  EXPECT_EQ(kinds, expected);
  // The final made from the last interim result keeps what was stable (nothing) and says so.
  const auto& last = responses.back().result();
  EXPECT_EQ(last.stability(), 1.0f);
  EXPECT_EQ(last.stable_transcript(), "");
  EXPECT_EQ(last.utterance_index(), 1u);
}

TEST_F(StreamReactorTest, AnEngineErrorEndsTheStreamWithItsCode) {
  engine_.done_status_ = absl::InternalError("decoding failed: boom");
  std::vector<v1::StreamingRecognizeResponse> responses;
  const grpc::Status status = Stream(300, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "boom"));
  EXPECT_TRUE(absl::StrContains(status.error_message(), "[request_id fake]"));
}

TEST_F(StreamReactorTest, EngineAdmissionErrorsReachTheClient) {
  engine_.open_status_ = absl::ResourceExhaustedError("the engine is full");
  std::vector<v1::StreamingRecognizeResponse> responses;
  EXPECT_EQ(Stream(0, &responses).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(responses.empty());
  engine_.open_status_ = absl::UnavailableError("draining");
  EXPECT_EQ(Stream(0, &responses).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(StreamReactorTest, ACancelledClientCancelsTheEngineSessionAndFreesItsSlot) {
  std::vector<v1::StreamingRecognizeResponse> responses;
  const grpc::Status status = Stream(500, &responses, /*cancel=*/true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 500 && (admission_->active() > 0 || !engine_.cancelled_); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(engine_.cancelled_.load());
  EXPECT_EQ(admission_->active(), 0);
}

TEST_F(StreamReactorTest, DrainingAndLoadingRefuseNewStreams) {
  state_.StartDraining();
  std::vector<v1::StreamingRecognizeResponse> responses;
  const grpc::Status status = Stream(0, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "shutting down"));
  EXPECT_EQ(admission_->active(), 0);
}

}  // namespace
}  // namespace waav::server

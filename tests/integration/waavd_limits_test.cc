// waavd end to end under small limits (admission, maximum duration, a second daemon on the same
// port) and on SIGTERM (grace period, draining). The everyday suite is waavd_test.cc.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_suite.h"

namespace waav::testing {
namespace {

// ---- A daemon with small limits ---------------------------------------------------------------

class WaavdLimits : public DaemonSuite {
 protected:
  static void SetUpTestSuite() {
    StartDaemon({"--max-streams", "2", "--max-stream-duration-s", "3", "--log-level", "debug"});
  }
  static void TearDownTestSuite() { StopDaemon(); }

  // An open stream that has been admitted and started.
  struct OpenStream {
    std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>>
        stream;
  };
  OpenStream Open(const std::string& request_id) {
    OpenStream s;
    s.stream = stub_->StreamingRecognize(s.context.get());
    v1::StreamingRecognizeRequest request;
    *request.mutable_config() = Linear16Config(16000, request_id);
    s.stream->Write(request);
    return s;
  }
};

TEST_F(WaavdLimits, AdmissionOverTheLimitIsRefusedAtOnceAndCancelFreesTheSlot) {
  OpenStream a = Open("a");
  OpenStream b = Open("b");
  v1::StreamingRecognizeResponse response;
  ASSERT_TRUE(a.stream->Read(&response));
  ASSERT_TRUE(response.has_started());
  ASSERT_TRUE(b.stream->Read(&response));
  ASSERT_TRUE(response.has_started());

  // The third is refused before it sends anything: no config needed to learn it.
  {
    grpc::ClientContext context;
    auto c = stub_->StreamingRecognize(&context);
    EXPECT_FALSE(c->Read(&response));
    const grpc::Status status = c->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), "limit of 2"));
  }

  // The client cancels a: its slot comes free (the server notices asynchronously, so retry).
  a.context->TryCancel();
  a.stream->Finish();
  grpc::Status admitted;
  for (int attempt = 0; attempt < 100; ++attempt) {
    OpenStream d = Open("d");
    if (d.stream->Read(&response) && response.has_started()) {
      admitted = grpc::Status::OK;
      d.context->TryCancel();
      d.stream->Finish();
      break;
    }
    admitted = d.stream->Finish();
    EXPECT_EQ(admitted.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(admitted.ok()) << "the cancelled stream's slot never came free";
  b.context->TryCancel();
  b.stream->Finish();
}

TEST_F(WaavdLimits, StreamOverTheMaximumDurationGetsFinalsThenDeadlineExceeded) {
  // 9.7 s of continuous speech ("Printing, in the only sense ...") into a 3 s limit: the
  // speech in progress at 3 s gets its final result (STREAM_LIMIT), then the stream ends with
  // DEADLINE_EXCEEDED.
  auto clip = LoadClip("ljspeech/LJ001-0001.wav");
  ASSERT_TRUE(clip);
  StreamPlan plan = Linear16Plan(*clip, 0, "too-long");
  const StreamRun run = RunStream(*stub_, plan);
  EXPECT_EQ(run.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << run.status.error_message();
  EXPECT_TRUE(absl::StrContains(run.status.error_message(), "maximum duration of 3 s"));
  EXPECT_EQ(CheckStreamContract(run, "too-long"), "");
  const auto finals = run.Finals();
  ASSERT_FALSE(finals.empty());
  EXPECT_EQ(finals.back().end_reason(), v1::UTTERANCE_END_REASON_STREAM_LIMIT);
  EXPECT_LE(finals.back().end_ms(), 3000u);
  EXPECT_TRUE(absl::StartsWith(NormalizeText(run.FinalText()), "printing")) << run.FinalText();
}

TEST_F(WaavdLimits, ASecondDaemonOnTheSamePortFailsToStart) {
  // gRPC would share the port (SO_REUSEPORT) unless told not to; waavd must refuse instead.
  const std::string command = std::string("timeout 60 ") + WAAVD_PATH + " --model-dir " +
                              *TinyEnModelDir() + " --listen " + daemon_->grpc_address() +
                              " --metrics-listen 127.0.0.1:0 >/dev/null 2>&1";
  const int status = RunCommand(command);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

// ---- SIGTERM
// --------------------------------------------------------------------------------------

// Each test starts its own daemon (it ends it).
class WaavdShutdown : public DaemonSuite {
 protected:
  void SetUp() override {}
  void Begin(const std::vector<std::string>& args) {
    StartDaemon(args);
    DaemonSuite::SetUp();
  }
  void TearDown() override {
    DaemonSuite::TearDown();
    StopDaemon();
  }
};

TEST_F(WaavdShutdown, StreamsStillOpenWhenTheGracePeriodEndsGetUnavailable) {
  Begin({"--shutdown-grace-s", "1"});
  if (IsSkipped() || HasFatalFailure()) return;
  StreamPlan plan;
  plan.config = Linear16Config(16000, "too-slow");
  plan.audio = ToLinear16(Silence(16000, 30.0));
  plan.pace = 1.0;  // 30 s of audio at real time: still streaming when the grace period ends
  StreamRun run;
  std::thread client([&] { run = RunStream(*stub_, plan); });
  for (int i = 0; i < 200 && !absl::StrContains(daemon_->Log(), "request_id=too-slow"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  daemon_->Signal(SIGTERM);
  client.join();
  EXPECT_EQ(run.status.error_code(), grpc::StatusCode::UNAVAILABLE) << run.status.error_message();
  EXPECT_TRUE(absl::StrContains(run.status.error_message(), "grace period"));
  EXPECT_LT(run.sent_ms, 30000);
  stub_.reset();
  daemon_->CloseChannel();
  const std::optional<int> code = daemon_->WaitForExit(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

TEST_F(WaavdShutdown, SigtermDrainsInFlightStreamsThenExitsZero) {
  Begin({"--shutdown-grace-s", "60"});
  if (IsSkipped() || HasFatalFailure()) return;
  auto jfk = LoadClip("jfk.wav");
  ASSERT_TRUE(jfk);
  Clip clip{Silence(jfk->rate_hz, 0.3), jfk->rate_hz};
  Append(&clip.samples, jfk->samples);
  Append(&clip.samples, Silence(jfk->rate_hz, 2.0));
  // In flight at 2x real time (about 6 s), while the daemon drains.
  StreamRun in_flight;
  std::thread client([&] {
    StreamPlan plan = Linear16Plan(clip, 2.0, "in-flight");
    plan.config.mutable_endpointing()->set_silence_ms(1500);
    in_flight = RunStream(*stub_, plan);
  });
  // Wait until the stream is admitted (its start is logged), then SIGTERM.
  for (int i = 0; i < 200 && !absl::StrContains(daemon_->Log(), "request_id=in-flight"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  daemon_->Signal(SIGTERM);
  std::string health;
  for (int i = 0; i < 200 && (health = daemon_->HealthStatus()) == "SERVING"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(health, "NOT_SERVING");
  EXPECT_EQ(daemon_->HttpGet("/readyz").status, 503);
  EXPECT_EQ(daemon_->HttpGet("/healthz").status, 200);

  // A new stream is refused with UNAVAILABLE.
  {
    grpc::ClientContext context;
    auto stream = stub_->StreamingRecognize(&context);
    v1::StreamingRecognizeResponse response;
    EXPECT_FALSE(stream->Read(&response));
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), "shutting down"));
  }

  client.join();
  EXPECT_TRUE(in_flight.status.ok()) << in_flight.status.error_message();
  EXPECT_EQ(CheckStreamContract(in_flight, "in-flight"), "");
  EXPECT_LE(MissedWords(kJfkText, NormalizeText(in_flight.FinalText())), 2)
      << in_flight.FinalText();

  stub_.reset();
  daemon_->CloseChannel();
  const std::optional<int> code = daemon_->WaitForExit(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "waavd did not exit after draining";
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace waav::testing

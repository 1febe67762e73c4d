// `waav stream`, `recognize` and `health` end to end against the scripted fake Recognizer on a
// loopback port: argument parsing, what is printed, exit codes and the status code named in
// each failure (UNAVAILABLE, RESOURCE_EXHAUSTED, INVALID_ARGUMENT ...).
#include <FLAC/stream_encoder.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "engine/audio/wav_test_util.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/support/fake_recognizer.h"
#include "tests/support/test_env.h"
#include "tools/waav/grpc_client.h"
#include "tools/waav/health_command.h"
#include "tools/waav/recognize_command.h"
#include "tools/waav/stream_command.h"

namespace waav::cli {
namespace {

using testing::FakeRecognizer;
using testing::FakeRecognizerOptions;

// Two utterances in 3 s of audio: "Hello, world." and "Again".
FakeRecognizerOptions Script() {
  FakeRecognizerOptions o;
  o.script = {{{{"Hello,", 300, 600}, {"world.", 700, 1000}}}, {{{"Again", 2000, 2400}}}};
  return o;
}

class ClientCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waav::testing::MakeTempDir("waav_client_commands");
    const auto wav = audio::wav_test::SimpleWav16(std::vector<int16_t>(48000, 300), 1, 16000);
    wav_ = (dir_ / "three_seconds.wav").string();
    std::ofstream(wav_, std::ios::binary)
        .write(reinterpret_cast<const char*>(wav.data()), static_cast<std::streamsize>(wav.size()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // An address where nothing listens: a fake's, after it has shut down.
  static std::string ClosedAddress() {
    auto fake = FakeRecognizer::Start({});
    return fake->address();
  }

  struct Output {
    int code = 0;
    std::string out;
    std::string err;
  };

  Output Stream(StreamArgs args) {
    std::ostringstream out, err;
    Output o;
    o.code = RunStream(args, {out, err, false, 80});
    o.out = out.str();
    o.err = err.str();
    return o;
  }
  Output Recognize(RecognizeArgs args) {
    std::ostringstream out, err;
    Output o;
    o.code = RunRecognize(args, {out, err, false, 80});
    o.out = out.str();
    o.err = err.str();
    return o;
  }
  Output Health(HealthArgs args) {
    std::ostringstream out, err;
    Output o;
    o.code = RunHealth(args, {out, err, false, 80});
    o.out = out.str();
    o.err = err.str();
    return o;
  }

  StreamArgs FastStream(const std::string& server) {
    StreamArgs args;
    args.file = wav_;
    args.server = server;
    args.fast = true;
    return args;
  }

  std::filesystem::path dir_;
  std::string wav_;
};

TEST_F(ClientCommandsTest, ParsesStreamOptions) {
  CLI::App app;
  StreamArgs args;
  AddStreamCommand(app, &args);
  app.parse(
      "stream a.wav --server h:7 --no-interim --chunk-ms 20 --encoding mulaw --json -v "
      "--speed 2.5 --words --silence-ms 800 --request-id r1",
      false);
  EXPECT_EQ(args.file, "a.wav");
  EXPECT_EQ(args.server, "h:7");
  EXPECT_FALSE(args.interim);
  EXPECT_EQ(args.chunk_ms, 20);
  EXPECT_EQ(args.encoding, "mulaw");
  EXPECT_TRUE(args.json && args.verbose && args.words);
  EXPECT_DOUBLE_EQ(args.speed, 2.5);
  EXPECT_EQ(args.silence_ms, 800);
  EXPECT_EQ(args.request_id, "r1");

  StreamArgs defaults;
  CLI::App app2;
  AddStreamCommand(app2, &defaults);
  app2.parse("stream b.wav", false);
  EXPECT_EQ(defaults.server, "127.0.0.1:50051");
  EXPECT_TRUE(defaults.interim);
  EXPECT_FALSE(defaults.fast);
  EXPECT_EQ(defaults.chunk_ms, 100);

  CLI::App app3;
  StreamArgs missing;
  AddStreamCommand(app3, &missing);
  EXPECT_THROW(app3.parse("stream", false), CLI::ParseError);
}

TEST_F(ClientCommandsTest, StreamPrintsFinalsAndSendsTheConfig) {
  auto fake = FakeRecognizer::Start(Script());
  ASSERT_NE(fake, nullptr);
  StreamArgs args = FastStream(fake->address());
  args.request_id = "cli-test";
  args.words = true;
  args.silence_ms = 400;
  const Output o = Stream(args);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "Hello, world.\nAgain\n");
  EXPECT_EQ(o.err, "");
  const v1::StreamingRecognitionConfig config = fake->last_config();
  EXPECT_EQ(config.recognition().audio_format().encoding(), v1::AUDIO_ENCODING_LINEAR16);
  EXPECT_EQ(config.recognition().audio_format().sample_rate_hz(), 16000u);
  EXPECT_TRUE(config.recognition().enable_word_time_offsets());
  EXPECT_TRUE(config.interim_results());
  EXPECT_EQ(config.endpointing().silence_ms(), 400u);
  EXPECT_EQ(config.request_id(), "cli-test");
  EXPECT_EQ(fake->audio_bytes(), 96000);
}

TEST_F(ClientCommandsTest, StreamPacedAndVerboseReportsEventsAndSummary) {
  auto fake = FakeRecognizer::Start(Script());
  StreamArgs args = FastStream(fake->address());
  args.fast = false;
  args.speed = 30;  // paced, but quick
  args.verbose = true;
  const Output o = Stream(args);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "Hello, world.\nAgain\n");
  EXPECT_NE(o.err.find("model fake-tiny.en (cpu), interim results on"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("SPEECH_STARTED, utterance 0, at 0.30 s (detected at 0.55 s)"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("final 1: 2.00 s to 2.40 s, ended by silence"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("3.00 s of audio streamed"), std::string::npos) << o.err;
}

TEST_F(ClientCommandsTest, StreamJsonIsOneParsableResponsePerLine) {
  auto fake = FakeRecognizer::Start(Script());
  StreamArgs args = FastStream(fake->address());
  args.json = true;
  args.interim = false;
  const Output o = Stream(args);
  ASSERT_EQ(o.code, 0) << o.err;
  std::istringstream lines(o.out);
  std::string line;
  std::vector<v1::StreamingRecognizeResponse> responses;
  while (std::getline(lines, line)) {
    v1::StreamingRecognizeResponse r;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &r).ok()) << line;
    responses.push_back(r);
  }
  // StreamStarted; then per utterance STARTED, ENDED, final; no interim results.
  ASSERT_EQ(responses.size(), 7u) << o.out;
  EXPECT_TRUE(responses[0].has_started());
  EXPECT_FALSE(responses[0].started().effective_config().interim_results());
  int finals = 0;
  for (const auto& r : responses) {
    if (r.has_result()) {
      EXPECT_TRUE(r.result().is_final());
      ++finals;
    }
  }
  EXPECT_EQ(finals, 2);
  EXPECT_FALSE(fake->last_config().interim_results());
}

TEST_F(ClientCommandsTest, StreamSendsFlacAsItIs) {
  // FLAC of the same three seconds; the fake decodes it to count stream time.
  std::vector<uint8_t> flac;
  FLAC__StreamEncoder* enc = FLAC__stream_encoder_new();
  FLAC__stream_encoder_set_channels(enc, 1);
  FLAC__stream_encoder_set_bits_per_sample(enc, 16);
  FLAC__stream_encoder_set_sample_rate(enc, 16000);
  auto write = [](const FLAC__StreamEncoder*, const FLAC__byte buf[], size_t bytes, uint32_t,
                  uint32_t, void* client) {
    auto* out = static_cast<std::vector<uint8_t>*>(client);
    out->insert(out->end(), buf, buf + bytes);
    return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
  };
  ASSERT_EQ(FLAC__stream_encoder_init_stream(enc, write, nullptr, nullptr, nullptr, &flac),
            FLAC__STREAM_ENCODER_INIT_STATUS_OK);
  std::vector<FLAC__int32> samples(48000, 300);
  ASSERT_TRUE(FLAC__stream_encoder_process_interleaved(enc, samples.data(), 48000));
  ASSERT_TRUE(FLAC__stream_encoder_finish(enc));
  FLAC__stream_encoder_delete(enc);
  const std::string path = (dir_ / "three.flac").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(flac.data()), static_cast<std::streamsize>(flac.size()));

  auto fake = FakeRecognizer::Start(Script());
  StreamArgs args = FastStream(fake->address());
  args.file = path;
  const Output o = Stream(args);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "Hello, world.\nAgain\n");
  EXPECT_EQ(fake->last_config().recognition().audio_format().encoding(), v1::AUDIO_ENCODING_FLAC);
  EXPECT_EQ(fake->audio_bytes(), static_cast<int64_t>(flac.size()));
}

TEST_F(ClientCommandsTest, StreamFailuresNameTheStatusCode) {
  {  // nothing listens
    const Output o = Stream(FastStream(ClosedAddress()));
    EXPECT_EQ(o.code, 1);
    EXPECT_NE(o.err.find("waav: stream " + wav_ + ": UNAVAILABLE: "), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "one line: " << o.err;
  }
  auto fake = FakeRecognizer::Start(Script());
  {  // the server refuses the request
    StreamArgs args = FastStream(fake->address());
    args.request_id = "fail:INVALID_ARGUMENT";
    const Output o = Stream(args);
    EXPECT_EQ(o.code, 1);
    EXPECT_NE(o.err.find("INVALID_ARGUMENT: failing as asked"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("request id fail:INVALID_ARGUMENT"), std::string::npos) << o.err;
  }
  {  // failing mid-stream, after results were printed
    FakeRecognizerOptions options = Script();
    options.fail_code = grpc::StatusCode::UNAVAILABLE;
    options.fail_after_ms = 1600;
    auto failing = FakeRecognizer::Start(options);
    const Output o = Stream(FastStream(failing->address()));
    EXPECT_EQ(o.code, 1);
    EXPECT_EQ(o.out, "Hello, world.\n");
    EXPECT_NE(o.err.find("UNAVAILABLE: failing after"), std::string::npos) << o.err;
  }
}

TEST_F(ClientCommandsTest, StreamBeyondTheAdmissionLimitIsResourceExhausted) {
  FakeRecognizerOptions options = Script();
  options.max_streams = 1;
  auto fake = FakeRecognizer::Start(options);
  // Hold the only slot open with a stream of our own.
  auto stub = v1::Recognizer::NewStub(MakeChannel(fake->address()));
  grpc::ClientContext context;
  auto held = stub->StreamingRecognize(&context);
  v1::StreamingRecognizeRequest config;
  config.mutable_config()->mutable_recognition()->mutable_audio_format()->set_encoding(
      v1::AUDIO_ENCODING_LINEAR16);
  config.mutable_config()->mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(16000);
  ASSERT_TRUE(held->Write(config));
  v1::StreamingRecognizeResponse started;
  ASSERT_TRUE(held->Read(&started));  // admitted

  const Output o = Stream(FastStream(fake->address()));
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("RESOURCE_EXHAUSTED: the server's limit of 1"), std::string::npos) << o.err;
  EXPECT_EQ(fake->streams_refused(), 1);
  held->WritesDone();
  EXPECT_TRUE(held->Finish().ok());
}

TEST_F(ClientCommandsTest, StreamRejectsBadArgumentsBeforeConnecting) {
  const struct {
    std::function<void(StreamArgs&)> edit;
    std::string expect;
  } cases[] = {
      {[](StreamArgs& a) { a.server = "nohost"; }, "has no port"},
      {[](StreamArgs& a) { a.fast = false, a.speed = 0; }, "--speed 0"},
      {[](StreamArgs& a) { a.silence_ms = 50; }, "--silence-ms 50"},
      {[](StreamArgs& a) { a.encoding = "mp3"; }, "unknown encoding"},
      {[](StreamArgs& a) { a.chunk_ms = 1; }, "chunk length 1 ms"},
      {[](StreamArgs& a) { a.encoding = "flac"; }, "not re-encoded"},
      {[](StreamArgs& a) { a.file = "/nonexistent/x.wav"; }, "/nonexistent/x.wav does not exist"},
  };
  for (const auto& c : cases) {
    StreamArgs args = FastStream("127.0.0.1:1");
    c.edit(args);
    const Output o = Stream(args);
    EXPECT_EQ(o.code, 2) << c.expect;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "");
  }
}

TEST_F(ClientCommandsTest, RecognizePrintsOneLinePerUtteranceOrJson) {
  auto fake = FakeRecognizer::Start(Script());
  RecognizeArgs args;
  args.file = wav_;
  args.server = fake->address();
  args.verbose = true;
  Output o = Recognize(args);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "Hello, world.\nAgain\n");
  EXPECT_NE(o.err.find("3.00 s of audio; server 0.01"), std::string::npos) << o.err;

  args.verbose = false;
  args.json = true;
  args.words = true;
  o = Recognize(args);
  ASSERT_EQ(o.code, 0) << o.err;
  v1::RecognizeResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(o.out, &response).ok()) << o.out;
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).alternatives(0).words_size(), 2);
  EXPECT_EQ(response.audio_duration_ms(), 3000u);
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1);
}

TEST_F(ClientCommandsTest, RecognizeFailuresNameTheStatusCode) {
  RecognizeArgs args;
  args.file = wav_;
  args.server = ClosedAddress();
  Output o = Recognize(args);
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("UNAVAILABLE"), std::string::npos) << o.err;

  auto fake = FakeRecognizer::Start(Script());
  args.server = fake->address();
  args.file = (dir_ / "missing.wav").string();
  o = Recognize(args);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("missing.wav does not exist"), std::string::npos) << o.err;

  args.file = wav_;
  args.encoding = "ogg_opus";
  o = Recognize(args);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("not re-encoded"), std::string::npos) << o.err;
}

TEST_F(ClientCommandsTest, HealthExitCodeFollowsTheServingStatus) {
  auto fake = FakeRecognizer::Start(Script());
  HealthArgs args;
  args.server = fake->address();
  Output o = Health(args);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "SERVING\n");

  args.service = "waav.v1.Recognizer";
  fake->SetServing(false);
  o = Health(args);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "NOT_SERVING\n");

  args.service = "no.such.Service";
  o = Health(args);
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("NOT_FOUND"), std::string::npos) << o.err;

  args.service = "";
  args.server = ClosedAddress();
  o = Health(args);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find("waav: health " + args.server + ": UNAVAILABLE"), std::string::npos)
      << o.err;

  args.server = "x:99999";
  o = Health(args);
  EXPECT_EQ(o.code, 2);
  args.server = fake->address();
  args.timeout_s = 0;
  o = Health(args);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--timeout 0"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace waav::cli

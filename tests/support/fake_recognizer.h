// A scripted waav.v1.Recognizer on a loopback port, with gRPC's default grpc.health.v1 service,
// for testing clients (the CLI, waav-load) without a model or the real daemon.
//
// Every stream "hears" the same script: utterances with words at fixed stream times. The fake
// decodes the audio it receives (engine/audio's StreamDecoder, every API encoding) only to count
// stream time, and answers as proto/README.md says waavd does, as that time passes:
// SPEECH_STARTED(k) once min_speech_ms of utterance k is in, an interim result every
// interim_every_ms of stream time holding the words that have ended (all but the last stable),
// SPEECH_ENDED(k) and the final result (SILENCE) once silence_ms after its end is in; at
// half-close, an utterance in progress ends with END_OF_AUDIO. Responses therefore depend on the
// bytes received only, never on wall time, so tests are deterministic at any pace.
//
// Errors, as waavd gives them: beyond max_streams concurrent streams, RESOURCE_EXHAUSTED at
// once; a first message that is not a config, a second config, an unspecified encoding or a raw
// encoding without a rate, undecodable audio, Recognize without audio: INVALID_ARGUMENT. A
// request id "fail:CODE" (e.g. "fail:UNAVAILABLE") ends the stream with that code right after
// StreamStarted; fail_code with fail_after_ms fails every stream once that much audio is in.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/server.h"
#include "grpcpp/support/status.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::testing {

struct FakeWord {
  std::string text;
  uint32_t start_ms = 0;
  uint32_t end_ms = 0;
};

struct FakeUtterance {
  std::vector<FakeWord> words;  // in order; the utterance spans the first start to the last end
  uint32_t start_ms() const { return words.empty() ? 0 : words.front().start_ms; }
  uint32_t end_ms() const { return words.empty() ? 0 : words.back().end_ms; }
};

struct FakeRecognizerOptions {
  std::vector<FakeUtterance> script;
  int max_streams = 0;              // concurrent streams admitted; 0: no limit
  bool send_words = true;           // honour enable_word_time_offsets (false: never send words)
  uint32_t interim_every_ms = 300;  // stream time between interim results
  uint32_t min_speech_ms = 250;
  uint32_t silence_ms = 500;                          // default endpoint; the config's value wins
  grpc::StatusCode fail_code = grpc::StatusCode::OK;  // OK: never
  uint32_t fail_after_ms = 0;  // with fail_code: fail once this much audio is in
  std::string model = "fake-tiny.en";
  std::string listen = "127.0.0.1:0";  // where to serve; port 0: a free one
};

// A script of `utterances` utterances of `words` words each (word k: "w<k>", 300 ms long, one
// every 400 ms), with `gap_ms` of silence between utterances, starting at 500 ms.
std::vector<FakeUtterance> RegularScript(int utterances, int words, uint32_t gap_ms);

class FakeRecognizer final : public v1::Recognizer::Service {
 public:
  // Starts serving on 127.0.0.1 at a free port, health SERVING. Null if the port cannot be bound.
  static std::unique_ptr<FakeRecognizer> Start(const FakeRecognizerOptions& options);
  ~FakeRecognizer() override;

  std::string address() const { return address_; }
  // Sets the health status of "" and "waav.v1.Recognizer".
  void SetServing(bool serving);

  int streams_opened() const { return streams_opened_.load(); }
  int streams_refused() const { return streams_refused_.load(); }
  // The config of the last stream that sent one.
  v1::StreamingRecognitionConfig last_config() const;
  // Audio bytes received by all streams.
  int64_t audio_bytes() const { return audio_bytes_.load(); }

  grpc::Status StreamingRecognize(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::StreamingRecognizeResponse, v1::StreamingRecognizeRequest>*
          stream) override;
  grpc::Status Recognize(grpc::ServerContext* context, const v1::RecognizeRequest* request,
                         v1::RecognizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

 private:
  explicit FakeRecognizer(const FakeRecognizerOptions& options) : options_(options) {}

  FakeRecognizerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::atomic<int> active_{0};
  std::atomic<int> streams_opened_{0};
  std::atomic<int> streams_refused_{0};
  std::atomic<int> next_id_{0};
  std::atomic<int64_t> audio_bytes_{0};
  mutable std::mutex mu_;
  v1::StreamingRecognitionConfig last_config_;
};

}  // namespace waav::testing

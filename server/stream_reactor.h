// One StreamingRecognize call: a gRPC callback reactor that admits the stream, checks its
// config, decodes its audio and feeds the engine, and turns the engine's session output into
// the response stream proto/README.md specifies.
//
// Threads. Reactions (OnReadDone, OnWriteDone, OnCancel, OnDone) run on gRPC's threads; engine
// output arrives on an engine thread through EngineSink; the watchdog ticks from its own
// thread. All state is guarded by one mutex, and no reaction blocks: audio goes to the engine's
// ingest ring, responses into a queue with one write in flight. Decoding a message's audio runs
// outside the mutex (only the read path touches the decoder, and one read is in flight), so a
// large FLAC message never stalls the engine thread delivering results.
//
// Lifetime. gRPC owns the reactor until OnDone, which unregisters it from the watchdog,
// detaches the sink (after which the engine can no longer reach it) and deletes it. The sink is
// shared with the engine and holds the admission slot until the engine's OnDone (or, for a
// stream the engine never saw, until the reactor's OnDone), so the engine never holds more
// sessions than the server admitted.
//
// Lock order: watchdog -> reactor, sink -> reactor. The reactor never calls the sink or the
// watchdog while holding its own mutex. gRPC never runs a reaction inline from StartRead,
// StartWrite or Finish for a reactor like this one (not InternalInlineable), so those are
// called with the mutex held.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/audio/stream_decoder.h"
#include "grpcpp/grpcpp.h"
#include "server/service_runtime.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::server {

class EngineSink;

class StreamReactor final
    : public grpc::ServerBidiReactor<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>,
      public StreamWatchdog::Client {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the call: refuses it at once (UNAVAILABLE while loading or draining,
  // RESOURCE_EXHAUSTED at the admission limit) or starts reading its config. `serial` numbers
  // the stream in the logs.
  StreamReactor(const ServiceRuntime& runtime, grpc::CallbackServerContext* context,
                uint64_t serial);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Watchdog: idle timeout, wall-clock duration limit, retrying audio the ring refused.
  void OnTick(Clock::time_point now) override;
  // Drain: the grace period is over; ends the stream with `status` (UNAVAILABLE).
  void Abort(const absl::Status& status) override;

  // Engine output, through EngineSink (one engine thread at a time, in order).
  void OnEngineSpeechStarted(int utterance_index, int64_t offset_ms, int64_t detected_at_ms);
  void OnEngineResult(const streaming::RecognitionResult& result);
  void OnEngineSpeechEnded(int utterance_index, int64_t offset_ms, int64_t detected_at_ms);
  void OnEngineDone(const absl::Status& status, int64_t processed_audio_ms);

 private:
  // In order: a stream only moves forward. `state_ >= kClosing` means the status is decided.
  enum class State {
    kAwaitingConfig,  // admitted; the first message must be the config
    kStreaming,       // config accepted: audio goes to the engine, responses come back
    kFinishing,       // no more audio goes in (half-close, duration limit, single utterance
                      // over); the engine finalises and reports done
    kClosing,         // the status is decided; queued responses go out, then Finish
    kFinished,        // Finish called; OnDone follows
    kRefused,         // refused at admission (never admitted); Finish called, OnDone follows
  };

  struct Outgoing {
    v1::StreamingRecognizeResponse response;
    int64_t created_ns = 0;  // when the engine output arrived (results: processing time)
    bool is_result = false;
  };

  void HandleConfigLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleHalfCloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds decoded audio, cut at the duration limit, and pushes what the ring takes.
  void AddAudioLocked(std::vector<float> samples) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes pending audio, then the end-of-stream marker if wanted. False while the ring is full
  // (the watchdog retries) or after an error closed the stream.
  bool FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopAudioLocked(bool stream_limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(Outgoing out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueEventLocked(v1::SpeechEvent::Type type, int utterance_index, int64_t offset_ms,
                          int64_t detected_at_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the stream's status (the first decision wins) and cancels the engine session if it
  // is still running.
  void CloseLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogEndAndCount() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceRuntime& runtime_;
  grpc::CallbackServerContext* const context_;
  const uint64_t serial_;
  const std::string peer_;
  const Clock::time_point created_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kAwaitingConfig;
  std::shared_ptr<EngineSink> sink_;       // set in the constructor, read-only afterwards
  v1::StreamingRecognizeRequest request_;  // the read in flight (read path only)
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point read_started_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_message_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_response_ ABSL_GUARDED_BY(mu_);  // latest response queued
  Clock::time_point streaming_since_ ABSL_GUARDED_BY(mu_);

  // Config.
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::string language_ ABSL_GUARDED_BY(mu_);
  bool single_utterance_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<audio::StreamDecoder> decoder_;  // read path only, once created

  // Engine session.
  std::optional<uint64_t> engine_id_ ABSL_GUARDED_BY(mu_);
  bool engine_done_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<float> pending_ ABSL_GUARDED_BY(mu_);  // decoded, not yet taken by the ring
  size_t pending_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool engine_finish_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool engine_finish_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_limit_reached_ ABSL_GUARDED_BY(mu_) = false;
  int64_t max_samples_16k_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_16k_ ABSL_GUARDED_BY(mu_) = 0;  // audio accepted for the engine
  double compute_ms_ ABSL_GUARDED_BY(mu_) = 0;    // encoder + decoder time of its results
  int64_t processed_ms_ ABSL_GUARDED_BY(mu_) = 0;

  // The utterance in progress: its final is held until SPEECH_ENDED has been sent (the API
  // orders SPEECH_ENDED(k) before final(k); the engine reports them the other way round).
  std::optional<Outgoing> held_final_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::StreamingRecognitionResult> last_interim_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WordInfo> stable_words_ ABSL_GUARDED_BY(mu_);  // of the utterance in progress

  // Responses.
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  Outgoing writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point write_started_ ABSL_GUARDED_BY(mu_);
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

// Creates the reactor for a new StreamingRecognize call (the service's entry point).
grpc::ServerBidiReactor<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>*
NewStreamReactor(const ServiceRuntime& runtime, grpc::CallbackServerContext* context,
                 uint64_t serial);

}  // namespace waav::server

// One waav-load stream: a gRPC callback-API bidi reactor that sends a file's chunks when a pacer
// says they are due, and records every response with its arrival time (stream_record.h).
//
// Threads. gRPC's callback threads run the reactions (reads, write completions, the end); the
// pacer thread calls Start() and OnDue(). A mutex guards the write side; at most one write is
// in flight, and a chunk that became due while one was in flight is written when it completes.
// The reactor holds the call open (AddHold) until its writer is finished, so OnDone never races
// a write being started. The object must outlive OnDone: its owner (the runner) deletes it only
// after the done callback has run and the pacer is stopped.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "load-tests/stream_record.h"
#include "tools/waav/client_audio.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::load {

using Clock = std::chrono::steady_clock;

// What every stream of a run asks for.
struct StreamSettings {
  double speed = 1;  // multiple of real time; 0: no pacing
  bool interim_results = true;
  bool word_time_offsets = true;  // needed for word-end latencies
  std::string model;              // empty: the server's default
  std::string language;
  uint32_t silence_ms = 0;  // 0: the server's default
  double deadline_s = 0;    // per-stream gRPC deadline; 0: none
};

class LoadStream final : public grpc::ClientBidiReactor<v1::StreamingRecognizeRequest,
                                                        v1::StreamingRecognizeResponse> {
 public:
  LoadStream(std::shared_ptr<const cli::ClientAudio> audio, const StreamSettings& settings,
             std::string request_id, int slot, Clock::time_point step_start,
             std::function<void(LoadStream*)> on_done);

  // Starts the call now (t0) and writes the config. Returns when the first chunk is due, or
  // nullopt when every chunk already is (no pacing). Called once.
  std::optional<Clock::time_point> Start(v1::Recognizer::Stub* stub);

  // The next chunk is due: write it (or queue it behind the write in flight). Returns when the
  // chunk after it is due, or nullopt when none is left or the stream is over.
  std::optional<Clock::time_point> OnDue();

  // What was observed; complete once the done callback has run.
  const StreamRecord& record() const { return record_; }

  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  enum class Action { kNone, kWrite, kWritesDone, kReleaseHold };
  Action DecideLocked();  // requires mu_
  void Perform(Action action);
  double Since(Clock::time_point t) const;

  const std::shared_ptr<const cli::ClientAudio> audio_;
  const StreamSettings settings_;
  const std::function<void(LoadStream*)> on_done_;
  grpc::ClientContext context_;
  Clock::time_point t0_;
  Clock::time_point step_start_;

  std::mutex mu_;
  size_t due_ = 0;              // chunks that are due (guarded by mu_)
  size_t sent_ = 0;             // chunks whose write has started (guarded by mu_)
  int64_t sent_audio_us_ = 0;   // stream time written so far (guarded by mu_)
  bool in_flight_ = false;      // a write or writes-done is in flight (guarded by mu_)
  bool writes_done_ = false;    // writes-done started (guarded by mu_)
  bool writer_closed_ = false;  // the hold is released; nothing more is written (guarded by mu_)
  bool read_done_ = false;      // the server ended the stream (guarded by mu_)
  v1::StreamingRecognizeRequest request_;    // the write in flight
  v1::StreamingRecognizeResponse response_;  // the read in flight
  StreamRecord record_;  // results and events: written by the read reaction only
};

}  // namespace waav::load

// Whole-file recognition (Recognize) on a pool of workers, apart from gRPC's threads and from
// the streaming engine. Each worker owns a backend and a Transcriber with its own copy of the
// model, because a backend is driven by one thread at a time.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend.h"
#include "server/config.h"
#include "waav/v1/recognizer.pb.h"

namespace waav::server {

struct OfflineSetup;

class OfflineRecognizer {
 public:
  // A job runs on a worker with its Transcriber, or with nullptr when the pool shut down before
  // running it (the job must still answer its request).
  using Job = std::function<void(const whisper::Transcriber* transcriber)>;

  // Loads config.offline_workers copies of the model on config.backend.
  static absl::StatusOr<std::unique_ptr<OfflineRecognizer>> Create(const ServerConfig& config);
  ~OfflineRecognizer();  // Shutdown()

  OfflineRecognizer(const OfflineRecognizer&) = delete;
  OfflineRecognizer& operator=(const OfflineRecognizer&) = delete;

  // False when config.max_queued_recognize jobs already wait, or after Shutdown().
  bool Submit(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs waiting or running.
  int outstanding() const ABSL_LOCKS_EXCLUDED(mu_);
  // The workers' backends (alive as long as this object), for their statistics only: they
  // belong to the workers' threads (Backend::stats() is the one call safe from another thread).
  std::vector<const Backend*> backends() const;
  // Refuses new jobs, runs the waiting ones with nullptr, and joins the workers once their
  // current job is done. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<whisper::Transcriber> transcriber;
    std::thread thread;
  };
  explicit OfflineRecognizer(int max_queued) : max_queued_(max_queued) {}
  void Loop(const whisper::Transcriber* transcriber);

  const int max_queued_;
  std::vector<Worker> workers_;
  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// Decodes `request.audio` as `setup.format` says, transcribes it and fills `response` (one
// result per Whisper segment; see docs/server.md). Word offsets, when asked for, are aligned
// from cross-attention (the Transcriber's word timestamps) when the model lists alignment heads,
// else estimated by spreading each segment over its words' characters. INVALID_ARGUMENT for audio
// that does not decode, holds no samples, or is longer than `max_duration_s`.
absl::Status RunRecognize(const whisper::Transcriber& transcriber,
                          const v1::RecognizeRequest& request, const OfflineSetup& setup,
                          double max_duration_s, v1::RecognizeResponse* response);

}  // namespace waav::server

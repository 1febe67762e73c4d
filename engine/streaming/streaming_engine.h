// StreamingEngine: many concurrent recognition sessions over one Whisper model and one VAD.
//
// Data path (CPU build):
//   PushAudio (any thread) ─▶ IngestRing ─▶ frontend worker thread: VAD per 32 ms frame for all
//   streams in one batch, endpointing, utterance audio ─▶ per-stream job queue ─▶ scheduler
//   thread: up to max_batch streams with a decode job at a time (partials coalesced), log-mel +
//   Whisper encoder per window, greedy decoding of all windows in lockstep ─▶ StreamSink.
// PushAudio never blocks on inference; when the ring is full it fails with ResourceExhausted
// and the caller applies back-pressure. Each stream's sink sees its events in order from one
// thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/streaming/stream_types.h"
#include "engine/streaming/voice_activity.h"

namespace waav::metrics {
class BatchMetrics;
class StageMetrics;
}  // namespace waav::metrics

namespace waav::streaming {

struct EngineOptions {
  // Concurrent sessions; one more is refused with ResourceExhausted at once. Default: 16.
  int max_streams = 16;
  // Ingest ring slots of 100 ms each (shared by all streams). Default: 4096 (~7 min of audio).
  int ingest_ring_slots = 4096;
  // Most utterance windows (each of a different stream) the scheduler decodes together in one
  // batch: it takes up to this many streams with work ready, encodes their windows and runs
  // their decoder steps as one batched step. 1 decodes one window at a time. Memory: one
  // decoder slot per window (tiny.en: about 24 MB). Default: 8; 1..256.
  int max_batch = 8;
  // Most windows of a batch encoded in one encoder pass. 0 (auto): min(max_batch, 16) where the
  // model batches its encoder (WhisperModel::batches_encoder: not on the CPU), else 1. A batch of
  // n windows is encoded in passes of descending powers of two (13 = 8 + 4 + 1), each into its
  // windows' decoder slots, so no pass computes padding rows. Memory: encoder buffers for the
  // largest pass (tiny.en: about 30 MB per window). Default: 0; 0..256.
  int encoder_batch = 0;
  // Partials encode a window of about their audio's length instead of 30 s, where the model
  // takes short windows (WhisperModel::takes_short_windows: the CPU): the utterance's audio plus
  // 2 s of silence, rounded up to a multiple of this, at most 30 s. Finals keep whole windows.
  // bench/audio_ctx_study measured partials' words on such windows (5 s, +2 s: as accurate
  // against the reference as 30 s windows, 4.2x less encoder time on the CPU; without the 2 s
  // of silence Whisper often repeats itself; docs/benchmarks.md). 0: whole windows. Default:
  // 5000; 0 or 1000..30000.
  int partial_window_ms = 5000;
  // A partial's decoding stops once its words start over from the utterance's first word with
  // a run of this many words (streaming::RestartWatch; from its second or third word, at least
  // 4 words: streaming::RestartStart): the partial would cut that restart
  // anyway (Whisper does it on short windows, above all), and a batch's steps last as long as
  // its longest row. 0: never (rows run to <|endoftext|>, the repeat cut or the length limit).
  // Default: 4 (speakers do repeat an utterance's first three words: "The invention of ... may
  // be considered as the invention of the art of printing"); 0 or 2..16.
  int restart_stop_words = 4;
  // Threads (the scheduler's included) that prepare a batch's windows (log-mel of each stream's
  // utterance, ~0.9 ms per 30 s of audio on one core) before the encoder runs: with dozens of
  // windows per batch on a GPU, one thread would spend longer on them than the encoder. 0
  // (auto): min(max_batch, hardware threads, 8). Default: 0; 0..64.
  int prepare_threads = 0;
  // Stage timings go here when set (not owned). Default: none.
  metrics::StageMetrics* stage_metrics = nullptr;
  // Called on the scheduler thread after each batch is decoded, with the number of windows in
  // it (1..max_batch); for the batch-size metric. Must not block. Default: none.
  std::function<void(int batch_size)> batch_observer;
  // Batch sizes go here when set (not owned): the VAD's per frontend round ("vad"), and the
  // encoder and decoder steps of each decode. Default: none.
  metrics::BatchMetrics* batch_metrics = nullptr;

  [[nodiscard]] absl::Status Validate() const;
};

class StreamingEngine {
 public:
  // `transcriber` and `vad` must outlive the engine. The VAD runs on the frontend worker thread
  // and Whisper on the scheduler thread, so they must be on different backends (backend.h).
  static absl::StatusOr<std::unique_ptr<StreamingEngine>> Create(
      const EngineOptions& options, const whisper::Transcriber& transcriber,
      VoiceActivityModel& vad);
  ~StreamingEngine();  // cancels open streams (their sinks get OnDone(Cancelled)) and joins

  StreamingEngine(const StreamingEngine&) = delete;
  StreamingEngine& operator=(const StreamingEngine&) = delete;

  // Admits a session. ResourceExhausted beyond max_streams, Unavailable after StopAccepting(),
  // InvalidArgument for bad options.
  absl::StatusOr<uint64_t> OpenStream(const StreamOptions& options,
                                      std::shared_ptr<StreamSink> sink);
  // 16 kHz mono samples for an open stream. NotFound for an unknown or closed stream,
  // FailedPrecondition after FinishStream, ResourceExhausted when the ring is full.
  absl::Status PushAudio(uint64_t stream_id, absl::Span<const float> samples_16k);
  // No more audio: open utterances are finalised, then the sink gets OnDone(OK).
  absl::Status FinishStream(uint64_t stream_id);
  // The client is gone: drop the stream's work; the sink gets OnDone(Cancelled).
  void CancelStream(uint64_t stream_id);

  // Refuse new sessions from now on (graceful shutdown); open ones continue.
  void StopAccepting();
  int active_streams() const;
  size_t ingest_depth() const;
  size_t ingest_capacity() const;
  // Streams with work waiting in the scheduler's ready queue (not yet picked up). Lock-free,
  // for the queue-depth gauge.
  size_t scheduler_depth() const;

 private:
  class Impl;
  explicit StreamingEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waav::streaming

// Stamping stage boundaries. A StageTimer follows one unit of work (an audio chunk, a TTS
// request) through consecutive stages: Stamp(stage) closes `stage` at the current time, and the
// next stage starts there. A ScopedStage times one inner step that overlaps the stages.
// Both read the monotonic clock only; nothing allocates or locks.
#pragma once

#include <chrono>
#include <cstdint>

#include "engine/metrics/stage.h"
#include "engine/metrics/stage_metrics.h"

namespace waav::metrics {

// Nanoseconds on std::chrono::steady_clock (monotonic; the epoch is arbitrary, so only
// differences mean anything).
struct StageClock {
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class StageTimer {
 public:
  // Starts now. `metrics` (may be null: then it only measures) must outlive the timer.
  explicit StageTimer(StageMetrics* metrics) : StageTimer(metrics, StageClock::NowNs()) {}
  // Starts at `start_ns` (a StageClock time taken earlier, e.g. when the chunk arrived).
  StageTimer(StageMetrics* metrics, int64_t start_ns)
      : metrics_(metrics), start_ns_(start_ns), last_ns_(start_ns) {}

  // Closes `stage` now: observes the time since the previous stamp (or the start), makes now
  // the start of the next stage, and returns the stage's duration in seconds.
  double Stamp(Stage stage) { return StampAt(stage, StageClock::NowNs()); }
  // The same at a given time. A time before the previous stamp counts as 0 s.
  double StampAt(Stage stage, int64_t now_ns);

  // Observes the time since the start as end-to-end latency; returns it in seconds.
  double Finish() { return FinishAt(StageClock::NowNs()); }
  double FinishAt(int64_t now_ns);

  // Begins the next unit of work.
  void Reset() { ResetAt(StageClock::NowNs()); }
  void ResetAt(int64_t start_ns) { start_ns_ = last_ns_ = start_ns; }

  int64_t start_ns() const { return start_ns_; }
  int64_t last_ns() const { return last_ns_; }

 private:
  StageMetrics* metrics_;
  int64_t start_ns_;
  int64_t last_ns_;
};

// Observes the time between construction and destruction (or Stop) into `stage`.
class ScopedStage {
 public:
  ScopedStage(StageMetrics* metrics, Stage stage)
      : metrics_(metrics), stage_(stage), start_ns_(StageClock::NowNs()) {}
  ~ScopedStage() { Stop(); }
  ScopedStage(const ScopedStage&) = delete;
  ScopedStage& operator=(const ScopedStage&) = delete;

  // Observes now (the first call only); returns the duration in seconds (0 after the first).
  double Stop();

 private:
  StageMetrics* metrics_;
  Stage stage_;
  int64_t start_ns_;
  bool stopped_ = false;
};

}  // namespace waav::metrics

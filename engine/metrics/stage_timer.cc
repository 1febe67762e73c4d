#include "engine/metrics/stage_timer.h"

namespace waav::metrics {
namespace {

double SecondsBetween(int64_t from_ns, int64_t to_ns) {
  return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : 0.0;
}

}  // namespace

double StageTimer::StampAt(Stage stage, int64_t now_ns) {
  const double seconds = SecondsBetween(last_ns_, now_ns);
  if (now_ns > last_ns_) last_ns_ = now_ns;
  if (metrics_ != nullptr) metrics_->Observe(stage, seconds);
  return seconds;
}

double StageTimer::FinishAt(int64_t now_ns) {
  const double seconds = SecondsBetween(start_ns_, now_ns);
  if (metrics_ != nullptr) metrics_->ObserveEndToEnd(seconds);
  return seconds;
}

double ScopedStage::Stop() {
  if (stopped_) return 0;
  stopped_ = true;
  const double seconds = SecondsBetween(start_ns_, StageClock::NowNs());
  if (metrics_ != nullptr) metrics_->Observe(stage_, seconds);
  return seconds;
}

}  // namespace waav::metrics

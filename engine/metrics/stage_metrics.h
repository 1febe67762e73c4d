// Per-stage latency against budget, on top of a Registry: registers
//   waav_stage_latency_seconds{stage}        histogram
//   waav_stage_budget_seconds{stage}         gauge, one child per stage that has a budget
//   waav_stage_budget_overruns_total{stage}  counter, one child per stage that has a budget
//   waav_end_to_end_latency_seconds          histogram
//   waav_end_to_end_budget_seconds           gauge
//   waav_end_to_end_budget_overruns_total    counter
// and creates every child up front, so Observe never locks or allocates.
#pragma once

#include <array>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/metrics/registry.h"
#include "engine/metrics/stage.h"

namespace waav::metrics {

class StageMetrics {
 public:
  // Validates `budgets` first. The registry must outlive the result. Creating a second
  // StageMetrics on the same registry reuses the families and overwrites the budget gauges
  // with the new budgets; budgets do not change otherwise (make a new one to reconfigure).
  static absl::StatusOr<std::unique_ptr<StageMetrics>> Create(Registry* registry,
                                                              const LatencyBudgets& budgets);

  // Records one unit of work that spent `seconds` in `stage`; counts an overrun when the stage
  // has a budget and `seconds` exceeds it (strictly). NaN is dropped (see Histogram).
  void Observe(Stage stage, double seconds) {
    const size_t i = StageIndex(stage);
    latency_[i]->Observe(seconds);
    if (overruns_[i] != nullptr && seconds > budget_seconds_[i]) overruns_[i]->Inc();
  }

  void ObserveEndToEnd(double seconds) {
    end_to_end_->Observe(seconds);
    if (seconds > end_to_end_budget_seconds_) end_to_end_overruns_->Inc();
  }

  const LatencyBudgets& budgets() const { return budgets_; }

 private:
  StageMetrics() = default;

  LatencyBudgets budgets_;
  std::array<Histogram*, kStageCount> latency_{};
  std::array<Counter*, kStageCount> overruns_{};      // null: the stage has no budget
  std::array<double, kStageCount> budget_seconds_{};  // 0: no budget
  Histogram* end_to_end_ = nullptr;
  Counter* end_to_end_overruns_ = nullptr;
  double end_to_end_budget_seconds_ = 0;
};

}  // namespace waav::metrics

#include "engine/metrics/stage_metrics.h"

#include <string>

#include "engine/metrics/metric_names.h"
#include "engine/runtime/status.h"

namespace waav::metrics {

absl::StatusOr<std::unique_ptr<StageMetrics>> StageMetrics::Create(Registry* registry,
                                                                   const LatencyBudgets& budgets) {
  RETURN_IF_ERROR(budgets.Validate());
  ASSIGN_OR_RETURN(HistogramFamily * latency, RegisterHistogram(registry, kStageLatencySeconds));
  ASSIGN_OR_RETURN(GaugeFamily * budget, RegisterGauge(registry, kStageBudgetSeconds));
  ASSIGN_OR_RETURN(CounterFamily * overruns, RegisterCounter(registry, kStageBudgetOverrunsTotal));
  ASSIGN_OR_RETURN(HistogramFamily * e2e, RegisterHistogram(registry, kEndToEndLatencySeconds));
  ASSIGN_OR_RETURN(GaugeFamily * e2e_budget, RegisterGauge(registry, kEndToEndBudgetSeconds));
  ASSIGN_OR_RETURN(CounterFamily * e2e_overruns,
                   RegisterCounter(registry, kEndToEndBudgetOverrunsTotal));

  std::unique_ptr<StageMetrics> metrics(new StageMetrics());
  metrics->budgets_ = budgets;
  for (const Stage stage : kAllStages) {
    const size_t i = StageIndex(stage);
    const absl::string_view name = StageName(stage);
    ASSIGN_OR_RETURN(metrics->latency_[i], latency->WithLabelValues({name}));
    const double budget_ms = budgets.BudgetMs(stage);
    if (budget_ms <= 0) continue;
    metrics->budget_seconds_[i] = budget_ms / 1000.0;
    ASSIGN_OR_RETURN(Gauge * gauge, budget->WithLabelValues({name}));
    gauge->Set(metrics->budget_seconds_[i]);
    ASSIGN_OR_RETURN(metrics->overruns_[i], overruns->WithLabelValues({name}));
  }
  ASSIGN_OR_RETURN(metrics->end_to_end_, e2e->WithLabelValues({}));
  ASSIGN_OR_RETURN(metrics->end_to_end_overruns_, e2e_overruns->WithLabelValues({}));
  metrics->end_to_end_budget_seconds_ = budgets.end_to_end_ms / 1000.0;
  ASSIGN_OR_RETURN(Gauge * e2e_gauge, e2e_budget->WithLabelValues({}));
  e2e_gauge->Set(metrics->end_to_end_budget_seconds_);
  return metrics;
}

}  // namespace waav::metrics

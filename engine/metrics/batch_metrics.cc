#include "engine/metrics/batch_metrics.h"

#include "engine/runtime/status.h"

namespace waav::metrics {

static_assert(static_cast<size_t>(BatchModel::kVad) + 1 == kBatchModels.size(),
              "BatchModel and kBatchModels must list the same models in the same order");

absl::StatusOr<std::unique_ptr<BatchMetrics>> BatchMetrics::Create(Registry* registry) {
  ASSIGN_OR_RETURN(HistogramFamily * family, RegisterHistogram(registry, kBatchSize));
  std::unique_ptr<BatchMetrics> metrics(new BatchMetrics());
  for (size_t i = 0; i < kBatchModels.size(); ++i) {
    ASSIGN_OR_RETURN(metrics->batch_size_[i], family->WithLabelValues({kBatchModels[i]}));
  }
  return metrics;
}

}  // namespace waav::metrics

// Batch sizes of the engine's model steps, on top of a Registry: registers
//   waav_batch_size{model}   histogram, one child per model of kBatchModels
// and creates every child up front, so Observe never locks or allocates.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/registry.h"

namespace waav::metrics {

// The models whose steps are batched, in the order of kBatchModels (their label values).
enum class BatchModel : uint8_t { kWhisperEncoder, kWhisperDecoder, kVits, kVad };

class BatchMetrics {
 public:
  // The registry must outlive the result. A second BatchMetrics on the same registry shares
  // the series.
  static absl::StatusOr<std::unique_ptr<BatchMetrics>> Create(Registry* registry);

  // Records `steps` model steps of `model` that each served `streams` streams (a decode of one
  // utterance runs one encoder step and several decoder steps, all of the same batch).
  void Observe(BatchModel model, int streams, int steps = 1) {
    Histogram* h = batch_size_[static_cast<size_t>(model)];
    for (int i = 0; i < steps; ++i) h->Observe(streams);
  }

 private:
  BatchMetrics() = default;
  std::array<Histogram*, kBatchModels.size()> batch_size_{};
};

}  // namespace waav::metrics

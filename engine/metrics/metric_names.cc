#include "engine/metrics/metric_names.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace waav::metrics {
namespace {

absl::Status CheckType(const MetricDef& def, MetricType want) {
  if (def.type == want) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("metric '", std::string(def.name), "' is a ",
                                                    MetricTypeName(def.type), ", not a ",
                                                    MetricTypeName(want)));
}

}  // namespace

size_t MetricDef::label_count() const {
  size_t n = 0;
  while (n < labels.size() && !labels[n].empty()) ++n;
  return n;
}

MetricSpec MetricDef::ToSpec() const {
  MetricSpec spec;
  spec.name = std::string(name);
  spec.help = std::string(help);
  for (size_t i = 0; i < label_count(); ++i) spec.label_names.emplace_back(labels[i]);
  return spec;
}

absl::StatusOr<CounterFamily*> RegisterCounter(Registry* registry, const MetricDef& def) {
  if (absl::Status s = CheckType(def, MetricType::kCounter); !s.ok()) return s;
  return registry->AddCounter(def.ToSpec());
}

absl::StatusOr<GaugeFamily*> RegisterGauge(Registry* registry, const MetricDef& def) {
  if (absl::Status s = CheckType(def, MetricType::kGauge); !s.ok()) return s;
  return registry->AddGauge(def.ToSpec());
}

absl::StatusOr<HistogramFamily*> RegisterHistogram(Registry* registry, const MetricDef& def) {
  if (absl::Status s = CheckType(def, MetricType::kHistogram); !s.ok()) return s;
  return registry->AddHistogram(def.ToSpec(),
                                std::vector<double>(def.buckets.begin(), def.buckets.end()));
}

}  // namespace waav::metrics

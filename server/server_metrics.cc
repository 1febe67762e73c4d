#include "server/server_metrics.h"

#include "engine/runtime/status.h"

namespace waav::server {
namespace {

constexpr absl::string_view kKind = "stt";

template <size_t N>
size_t IndexOf(const std::array<absl::string_view, N>& values, absl::string_view value) {
  for (size_t i = 0; i < N; ++i) {
    if (values[i] == value) return i;
  }
  return N - 1;  // the last value of each list is the catch-all ("error", "draining")
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(metrics::Registry* registry) {
  std::unique_ptr<ServerMetrics> m(new ServerMetrics());
  m->registry_ = registry;
  ASSIGN_OR_RETURN(auto* active, metrics::RegisterGauge(registry, metrics::kStreamsActive));
  ASSIGN_OR_RETURN(m->streams_active_, active->WithLabelValues({kKind}));
  ASSIGN_OR_RETURN(auto* started,
                   metrics::RegisterCounter(registry, metrics::kStreamsStartedTotal));
  ASSIGN_OR_RETURN(m->streams_started_, started->WithLabelValues({kKind}));
  ASSIGN_OR_RETURN(auto* finished,
                   metrics::RegisterCounter(registry, metrics::kStreamsFinishedTotal));
  for (size_t i = 0; i < metrics::kStreamOutcomes.size(); ++i) {
    ASSIGN_OR_RETURN(m->finished_[i],
                     finished->WithLabelValues({kKind, metrics::kStreamOutcomes[i]}));
  }
  ASSIGN_OR_RETURN(auto* rejected,
                   metrics::RegisterCounter(registry, metrics::kAdmissionRejectionsTotal));
  for (size_t i = 0; i < metrics::kRejectionReasons.size(); ++i) {
    ASSIGN_OR_RETURN(m->rejections_[i],
                     rejected->WithLabelValues({kKind, metrics::kRejectionReasons[i]}));
  }
  ASSIGN_OR_RETURN(auto* audio,
                   metrics::RegisterCounter(registry, metrics::kAudioProcessedSecondsTotal));
  ASSIGN_OR_RETURN(m->audio_seconds_, audio->WithLabelValues({kKind}));
  ASSIGN_OR_RETURN(auto* compute,
                   metrics::RegisterCounter(registry, metrics::kComputeSecondsTotal));
  ASSIGN_OR_RETURN(m->compute_seconds_, compute->WithLabelValues({kKind}));
  ASSIGN_OR_RETURN(auto* rtf, metrics::RegisterHistogram(registry, metrics::kStreamRealTimeFactor));
  ASSIGN_OR_RETURN(m->real_time_factor_, rtf->WithLabelValues({kKind}));
  ASSIGN_OR_RETURN(auto* depth, metrics::RegisterGauge(registry, metrics::kQueueDepth));
  ASSIGN_OR_RETURN(m->ingest_queue_depth_, depth->WithLabelValues({"ingest"}));
  return m;
}

metrics::Counter& ServerMetrics::streams_finished(absl::string_view outcome) {
  return *finished_[IndexOf(metrics::kStreamOutcomes, outcome)];
}

metrics::Counter& ServerMetrics::rejections(absl::string_view reason) {
  return *rejections_[IndexOf(metrics::kRejectionReasons, reason)];
}

absl::Status ServerMetrics::SetBuildInfo(absl::string_view version, absl::string_view revision,
                                         absl::string_view backends) {
  ASSIGN_OR_RETURN(auto* info, metrics::RegisterGauge(registry_, metrics::kBuildInfo));
  ASSIGN_OR_RETURN(metrics::Gauge * gauge, info->WithLabelValues({version, revision, backends}));
  gauge->Set(1);
  return absl::OkStatus();
}

absl::Status ServerMetrics::SetModelLoadSeconds(absl::string_view model, absl::string_view backend,
                                                double seconds) {
  ASSIGN_OR_RETURN(auto* load,
                   metrics::RegisterGauge(registry_, metrics::kModelLoadDurationSeconds));
  ASSIGN_OR_RETURN(metrics::Gauge * gauge, load->WithLabelValues({model, backend}));
  gauge->Set(seconds);
  return absl::OkStatus();
}

}  // namespace waav::server

#include "server/server_metrics.h"

#include <algorithm>

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
  ASSIGN_OR_RETURN(m->scheduler_queue_depth_, depth->WithLabelValues({"scheduler"}));
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

absl::Status ServerMetrics::AddBackend(const Backend* backend) {
  const std::string name(backend->name());
  absl::MutexLock lock(&mu_);
  size_t series = 0;
  while (series < devices_.size() && devices_[series].backend != name) ++series;
  if (series == devices_.size()) {
    // One device per backend name for now (the daemon runs on device 0).
    constexpr absl::string_view kDevice = "0";
    DeviceSeries d{.backend = name};
    ASSIGN_OR_RETURN(auto* launches,
                     metrics::RegisterCounter(registry_, metrics::kKernelLaunchesTotal));
    ASSIGN_OR_RETURN(d.launches, launches->WithLabelValues({name}));
    ASSIGN_OR_RETURN(auto* replays,
                     metrics::RegisterCounter(registry_, metrics::kGraphReplaysTotal));
    ASSIGN_OR_RETURN(d.replays, replays->WithLabelValues({name}));
    ASSIGN_OR_RETURN(auto* used,
                     metrics::RegisterGauge(registry_, metrics::kDeviceMemoryUsedBytes));
    ASSIGN_OR_RETURN(d.memory_used, used->WithLabelValues({name, kDevice}));
    ASSIGN_OR_RETURN(auto* capacity,
                     metrics::RegisterGauge(registry_, metrics::kDeviceMemoryCapacityBytes));
    ASSIGN_OR_RETURN(d.memory_capacity, capacity->WithLabelValues({name, kDevice}));
    devices_.push_back(d);
  }
  backends_.push_back(SampledBackend{.backend = backend, .series = series});
  return absl::OkStatus();
}

void ServerMetrics::SampleBackends() {
  absl::MutexLock lock(&mu_);
  std::vector<double> used(devices_.size(), 0.0);
  std::vector<double> capacity(devices_.size(), 0.0);
  for (SampledBackend& b : backends_) {
    const BackendStats stats = b.backend->stats();
    DeviceSeries& d = devices_[b.series];
    // Counters only ever grow; a backend's totals do too, so the difference is what is new.
    if (stats.kernel_launches > b.launches) d.launches->IncBy(stats.kernel_launches - b.launches);
    if (stats.graph_replays > b.replays) d.replays->IncBy(stats.graph_replays - b.replays);
    b.launches = std::max(b.launches, stats.kernel_launches);
    b.replays = std::max(b.replays, stats.graph_replays);
    used[b.series] += static_cast<double>(stats.memory_held_bytes);
    capacity[b.series] =
        std::max(capacity[b.series], static_cast<double>(stats.memory_capacity_bytes));
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    devices_[i].memory_used->Set(used[i]);
    devices_[i].memory_capacity->Set(capacity[i]);
  }
}

}  // namespace waav::server

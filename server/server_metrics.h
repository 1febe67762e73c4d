// The series waavd updates itself (streams, admission, audio, queue depth, model load, build),
// registered once at start-up through the catalog in engine/metrics/metric_names.h, with every
// label child created up front so that each series exists at 0 from the first scrape.
// The engine owns the registry and the stage latency metrics; the server only updates these
// and serialises the registry on /metrics.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/registry.h"

namespace waav::server {

class ServerMetrics {
 public:
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(metrics::Registry* registry);

  metrics::Gauge& streams_active() { return *streams_active_; }
  metrics::Counter& streams_started() { return *streams_started_; }
  // `outcome` from OutcomeLabel(): ok, cancelled, deadline_exceeded, error.
  metrics::Counter& streams_finished(absl::string_view outcome);
  // `reason`: capacity, overload, rate_limited, draining.
  metrics::Counter& rejections(absl::string_view reason);
  metrics::Counter& audio_seconds() { return *audio_seconds_; }
  metrics::Counter& compute_seconds() { return *compute_seconds_; }
  metrics::Histogram& real_time_factor() { return *real_time_factor_; }
  metrics::Gauge& ingest_queue_depth() { return *ingest_queue_depth_; }

  // Once per process: waav_build_info{version, revision, backends} = 1.
  absl::Status SetBuildInfo(absl::string_view version, absl::string_view revision,
                            absl::string_view backends);
  absl::Status SetModelLoadSeconds(absl::string_view model, absl::string_view backend,
                                   double seconds);

 private:
  ServerMetrics() = default;

  metrics::Registry* registry_ = nullptr;
  metrics::Gauge* streams_active_ = nullptr;
  metrics::Counter* streams_started_ = nullptr;
  std::array<metrics::Counter*, metrics::kStreamOutcomes.size()> finished_{};
  std::array<metrics::Counter*, metrics::kRejectionReasons.size()> rejections_{};
  metrics::Counter* audio_seconds_ = nullptr;
  metrics::Counter* compute_seconds_ = nullptr;
  metrics::Histogram* real_time_factor_ = nullptr;
  metrics::Gauge* ingest_queue_depth_ = nullptr;
};

}  // namespace waav::server

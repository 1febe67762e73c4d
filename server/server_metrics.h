// The series waavd updates itself (streams, admission, audio, queue depths, model load, build,
// and the device series it samples from its backends), registered once at start-up through the
// catalog in engine/metrics/metric_names.h, with every label child created up front so that each
// series exists at 0 from the first scrape. The engine owns the registry and the stage latency
// metrics; the server only updates these and serialises the registry on /metrics.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/registry.h"
#include "engine/runtime/backend.h"

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
  metrics::Gauge& scheduler_queue_depth() { return *scheduler_queue_depth_; }

  // Once per process: waav_build_info{version, revision, backends} = 1.
  absl::Status SetBuildInfo(absl::string_view version, absl::string_view revision,
                            absl::string_view backends);
  absl::Status SetModelLoadSeconds(absl::string_view model, absl::string_view backend,
                                   double seconds);

  // Samples `backend` (not owned; it must outlive the last SampleBackends()) from now on, and
  // creates its series at 0: waav_kernel_launches_total{backend}, waav_graph_replays_total
  // {backend} and waav_device_memory_{used,capacity}_bytes{backend, device="0"}.
  absl::Status AddBackend(const Backend* backend) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads every added backend's stats() into those series. Backends of one name (the daemon
  // has several CPU ones: Whisper's, the VAD's, each offline worker's) add up: their launches,
  // replays and memory held (in use plus pool cache) are summed; capacity is the device's.
  void SampleBackends() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ServerMetrics() = default;

  // One backend name's series.
  struct DeviceSeries {
    std::string backend;
    metrics::Counter* launches = nullptr;
    metrics::Counter* replays = nullptr;
    metrics::Gauge* memory_used = nullptr;
    metrics::Gauge* memory_capacity = nullptr;
  };
  struct SampledBackend {
    const Backend* backend = nullptr;
    size_t series = 0;  // index into devices_
    // The totals already added to the counters.
    uint64_t launches = 0;
    uint64_t replays = 0;
  };

  metrics::Registry* registry_ = nullptr;
  metrics::Gauge* streams_active_ = nullptr;
  metrics::Counter* streams_started_ = nullptr;
  std::array<metrics::Counter*, metrics::kStreamOutcomes.size()> finished_{};
  std::array<metrics::Counter*, metrics::kRejectionReasons.size()> rejections_{};
  metrics::Counter* audio_seconds_ = nullptr;
  metrics::Counter* compute_seconds_ = nullptr;
  metrics::Histogram* real_time_factor_ = nullptr;
  metrics::Gauge* ingest_queue_depth_ = nullptr;
  metrics::Gauge* scheduler_queue_depth_ = nullptr;
  absl::Mutex mu_;
  std::vector<DeviceSeries> devices_ ABSL_GUARDED_BY(mu_);
  std::vector<SampledBackend> backends_ ABSL_GUARDED_BY(mu_);
};

}  // namespace waav::server

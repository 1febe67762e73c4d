// The canonical list of waav's metrics: one place that the daemon, the tests, the Prometheus
// rules and the Grafana dashboard agree on (tests/deploy/check_dashboard.py parses this file:
// keep one `.name = "..."` and one `.type = MetricType::k...` per definition).
//
// Conventions (Prometheus naming): prefix waav_, base units in the name (seconds, bytes),
// counters end in _total, ratios and counts carry no unit. docs/metrics.md explains each one.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/metrics/registry.h"

namespace waav::metrics {

inline constexpr size_t kMaxDefLabels = 4;

struct MetricDef {
  absl::string_view name;
  MetricType type;
  std::array<absl::string_view, kMaxDefLabels> labels;  // unused slots stay empty
  absl::string_view unit;                               // "seconds", "bytes"; "" for counts
  absl::string_view help;
  std::span<const double> buckets = {};  // histograms only

  size_t label_count() const;
  MetricSpec ToSpec() const;
};

// ---- Bucket bounds ----------------------------------------------------------------------------
// Every default stage budget (5, 10, 50, 100 ms) and the 200 ms end-to-end budget is a bucket
// bound, so "fraction over budget" is exact and histogram_quantile's p99 only crosses the budget
// when observations really do.
inline constexpr std::array<double, 21> kStageLatencyBucketsSeconds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02,
    0.03,    0.05,   0.075,   0.1,    0.15,  0.2,    0.3,   0.5,    1,    2.5};
inline constexpr std::array<double, 17> kEndToEndLatencyBucketsSeconds = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5};
inline constexpr std::array<double, 12> kRealTimeFactorBuckets = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3,
                                                                  0.5,  0.75, 1,    1.5, 2,   5};
inline constexpr std::array<double, 11> kBatchSizeBuckets = {1,  2,   4,   8,   16,  32,
                                                             64, 128, 256, 512, 1024};

// ---- Latency against budget -------------------------------------------------------------------
inline constexpr MetricDef kStageLatencySeconds = {
    .name = "waav_stage_latency_seconds",
    .type = MetricType::kHistogram,
    .labels = {"stage"},
    .unit = "seconds",
    .help = "Time one unit of work spent in a pipeline stage or inner step.",
    .buckets = kStageLatencyBucketsSeconds,
};
inline constexpr MetricDef kStageBudgetSeconds = {
    .name = "waav_stage_budget_seconds",
    .type = MetricType::kGauge,
    .labels = {"stage"},
    .unit = "seconds",
    .help = "Configured latency budget of a stage (only stages that have one).",
};
inline constexpr MetricDef kStageBudgetOverrunsTotal = {
    .name = "waav_stage_budget_overruns_total",
    .type = MetricType::kCounter,
    .labels = {"stage"},
    .unit = "",
    .help = "Observations of a stage that took longer than its budget.",
};
inline constexpr MetricDef kEndToEndLatencySeconds = {
    .name = "waav_end_to_end_latency_seconds",
    .type = MetricType::kHistogram,
    .labels = {},
    .unit = "seconds",
    .help = "Time from capture of the input to the output leaving the daemon.",
    .buckets = kEndToEndLatencyBucketsSeconds,
};
inline constexpr MetricDef kEndToEndBudgetSeconds = {
    .name = "waav_end_to_end_budget_seconds",
    .type = MetricType::kGauge,
    .labels = {},
    .unit = "seconds",
    .help = "Configured end-to-end latency budget.",
};
inline constexpr MetricDef kEndToEndBudgetOverrunsTotal = {
    .name = "waav_end_to_end_budget_overruns_total",
    .type = MetricType::kCounter,
    .labels = {},
    .unit = "",
    .help = "End-to-end observations that took longer than the end-to-end budget.",
};

// ---- Streams ----------------------------------------------------------------------------------
inline constexpr MetricDef kStreamsActive = {
    .name = "waav_streams_active",
    .type = MetricType::kGauge,
    .labels = {"kind"},
    .unit = "",
    .help = "Streams open now.",
};
inline constexpr MetricDef kStreamsStartedTotal = {
    .name = "waav_streams_started_total",
    .type = MetricType::kCounter,
    .labels = {"kind"},
    .unit = "",
    .help = "Streams admitted (rejected ones are counted in waav_admission_rejections_total).",
};
inline constexpr MetricDef kStreamsFinishedTotal = {
    .name = "waav_streams_finished_total",
    .type = MetricType::kCounter,
    .labels = {"kind", "outcome"},
    .unit = "",
    .help = "Streams that ended, by outcome.",
};
inline constexpr MetricDef kAudioProcessedSecondsTotal = {
    .name = "waav_audio_processed_seconds_total",
    .type = MetricType::kCounter,
    .labels = {"kind"},
    .unit = "seconds",
    .help = "Audio processed: seconds of speech transcribed (stt) or synthesised (tts).",
};
inline constexpr MetricDef kComputeSecondsTotal = {
    .name = "waav_compute_seconds_total",
    .type = MetricType::kCounter,
    .labels = {"kind"},
    .unit = "seconds",
    .help = "Wall time the engine spent computing for streams (a batched step counts once).",
};
inline constexpr MetricDef kStreamRealTimeFactor = {
    .name = "waav_stream_real_time_factor",
    .type = MetricType::kHistogram,
    .labels = {"kind"},
    .unit = "",
    .help = "Per finished stream: compute time divided by audio duration (below 1 keeps up).",
    .buckets = kRealTimeFactorBuckets,
};
inline constexpr MetricDef kAdmissionRejectionsTotal = {
    .name = "waav_admission_rejections_total",
    .type = MetricType::kCounter,
    .labels = {"kind", "reason"},
    .unit = "",
    .help = "Streams refused at admission, by reason.",
};

// ---- Scheduler and batches --------------------------------------------------------------------
inline constexpr MetricDef kQueueDepth = {
    .name = "waav_queue_depth",
    .type = MetricType::kGauge,
    .labels = {"queue"},
    .unit = "",
    .help = "Items waiting in an internal queue now.",
};
inline constexpr MetricDef kBatchSize = {
    .name = "waav_batch_size",
    .type = MetricType::kHistogram,
    .labels = {"model"},
    .unit = "",
    .help = "Streams served by one batched model step.",
    .buckets = kBatchSizeBuckets,
};

// ---- Devices ----------------------------------------------------------------------------------
inline constexpr MetricDef kKernelLaunchesTotal = {
    .name = "waav_kernel_launches_total",
    .type = MetricType::kCounter,
    .labels = {"backend"},
    .unit = "",
    .help = "Kernel calls dispatched one by one (outside graph replays).",
};
inline constexpr MetricDef kGraphReplaysTotal = {
    .name = "waav_graph_replays_total",
    .type = MetricType::kCounter,
    .labels = {"backend"},
    .unit = "",
    .help = "Captured graphs (or recorded command buffers) replayed.",
};
inline constexpr MetricDef kDeviceMemoryUsedBytes = {
    .name = "waav_device_memory_used_bytes",
    .type = MetricType::kGauge,
    .labels = {"backend", "device"},
    .unit = "bytes",
    .help = "Device memory held by waav now: tensors in use and its pools' caches.",
};
inline constexpr MetricDef kDeviceMemoryCapacityBytes = {
    .name = "waav_device_memory_capacity_bytes",
    .type = MetricType::kGauge,
    .labels = {"backend", "device"},
    .unit = "bytes",
    .help = "Total memory of the device.",
};
inline constexpr MetricDef kModelLoadDurationSeconds = {
    .name = "waav_model_load_duration_seconds",
    .type = MetricType::kGauge,
    .labels = {"model", "backend"},
    .unit = "seconds",
    .help = "How long the last load of a model took.",
};
inline constexpr MetricDef kBuildInfo = {
    .name = "waav_build_info",
    .type = MetricType::kGauge,
    .labels = {"version", "revision", "backends"},
    .unit = "",
    .help = "Always 1; the labels say which build of waavd is running.",
};

inline constexpr std::array<MetricDef, 21> kAllMetrics = {
    kStageLatencySeconds,
    kStageBudgetSeconds,
    kStageBudgetOverrunsTotal,
    kEndToEndLatencySeconds,
    kEndToEndBudgetSeconds,
    kEndToEndBudgetOverrunsTotal,
    kStreamsActive,
    kStreamsStartedTotal,
    kStreamsFinishedTotal,
    kAudioProcessedSecondsTotal,
    kComputeSecondsTotal,
    kStreamRealTimeFactor,
    kAdmissionRejectionsTotal,
    kQueueDepth,
    kBatchSize,
    kKernelLaunchesTotal,
    kGraphReplaysTotal,
    kDeviceMemoryUsedBytes,
    kDeviceMemoryCapacityBytes,
    kModelLoadDurationSeconds,
    kBuildInfo,
};

// ---- Label values -----------------------------------------------------------------------------
// The values the daemon uses; dashboards and alerts select on them.
inline constexpr std::array<absl::string_view, 2> kStreamKinds = {"stt", "tts"};
inline constexpr std::array<absl::string_view, 4> kStreamOutcomes = {"ok", "cancelled",
                                                                     "deadline_exceeded", "error"};
inline constexpr std::array<absl::string_view, 4> kRejectionReasons = {"capacity", "overload",
                                                                       "rate_limited", "draining"};
inline constexpr std::array<absl::string_view, 4> kQueues = {"ingest", "scheduler", "tts_text",
                                                             "results"};
// "vad": the voice-activity model, batched over the streams of one frontend round.
inline constexpr std::array<absl::string_view, 4> kBatchModels = {"whisper_encoder",
                                                                  "whisper_decoder", "vits", "vad"};
inline constexpr std::array<absl::string_view, 4> kBackends = {"cpu", "cuda", "hip", "vulkan"};

// Registers `def` in `registry` (or returns the family already there). FailedPrecondition when
// `def` is of another type; otherwise Registry's errors.
absl::StatusOr<CounterFamily*> RegisterCounter(Registry* registry, const MetricDef& def);
absl::StatusOr<GaugeFamily*> RegisterGauge(Registry* registry, const MetricDef& def);
absl::StatusOr<HistogramFamily*> RegisterHistogram(Registry* registry, const MetricDef& def);

}  // namespace waav::metrics

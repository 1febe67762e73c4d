// Prints a realistic exposition of every metric in metric_names.h, with a few label values
// each, for `promtool check metrics` (ctest: metrics_exposition_promtool) and for people who
// want to see what waavd will serve on /metrics.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/registry.h"
#include "engine/metrics/stage_metrics.h"
#include "engine/metrics/stage_timer.h"
#include "engine/runtime/status.h"

namespace waav::metrics {
namespace {

absl::Status Fill(Registry* registry) {
  ASSIGN_OR_RETURN(std::unique_ptr<StageMetrics> stages,
                   StageMetrics::Create(registry, LatencyBudgets()));
  // A few units of work through the plan's stages, stamped on a synthetic clock.
  for (int chunk = 0; chunk < 20; ++chunk) {
    StageTimer timer(stages.get(), /*start_ns=*/0);
    int64_t t_ns = 0;
    for (size_t i = 0; i < kPipelineStageCount; ++i) {
      t_ns += static_cast<int64_t>((i + 1) * 1'500'000 + chunk * 700'000);
      timer.StampAt(kAllStages[i], t_ns);
    }
    timer.FinishAt(t_ns);
    stages->Observe(Stage::kEncoder, 0.0019 + chunk * 1e-4);
    stages->Observe(Stage::kDecoderStep, 0.00004 + chunk * 1e-6);
    stages->Observe(Stage::kIngestWait, 0.000005);
  }

  ASSIGN_OR_RETURN(GaugeFamily * active, RegisterGauge(registry, kStreamsActive));
  ASSIGN_OR_RETURN(CounterFamily * started, RegisterCounter(registry, kStreamsStartedTotal));
  ASSIGN_OR_RETURN(CounterFamily * finished, RegisterCounter(registry, kStreamsFinishedTotal));
  ASSIGN_OR_RETURN(CounterFamily * audio, RegisterCounter(registry, kAudioProcessedSecondsTotal));
  ASSIGN_OR_RETURN(CounterFamily * compute, RegisterCounter(registry, kComputeSecondsTotal));
  ASSIGN_OR_RETURN(HistogramFamily * rtf, RegisterHistogram(registry, kStreamRealTimeFactor));
  ASSIGN_OR_RETURN(CounterFamily * rejected, RegisterCounter(registry, kAdmissionRejectionsTotal));
  for (const absl::string_view kind : kStreamKinds) {
    ASSIGN_OR_RETURN(Gauge * a, active->WithLabelValues({kind}));
    a->Set(kind == "stt" ? 12 : 3);
    ASSIGN_OR_RETURN(Counter * s, started->WithLabelValues({kind}));
    s->IncBy(kind == "stt" ? 140 : 35);
    for (const absl::string_view outcome : kStreamOutcomes) {
      ASSIGN_OR_RETURN(Counter * f, finished->WithLabels({{"kind", kind}, {"outcome", outcome}}));
      f->IncBy(outcome == "ok" ? 120 : 2);
    }
    ASSIGN_OR_RETURN(Counter * au, audio->WithLabelValues({kind}));
    au->Add(kind == "stt" ? 5321.25 : 812.5);
    ASSIGN_OR_RETURN(Counter * c, compute->WithLabelValues({kind}));
    c->Add(kind == "stt" ? 402.125 : 166.75);
    ASSIGN_OR_RETURN(Histogram * r, rtf->WithLabelValues({kind}));
    for (int i = 1; i <= 10; ++i) r->Observe(0.03 * i);
  }
  for (const absl::string_view reason : {"capacity", "draining"}) {
    ASSIGN_OR_RETURN(Counter * r, rejected->WithLabels({{"kind", "stt"}, {"reason", reason}}));
    r->IncBy(reason == "capacity" ? 4 : 1);
  }

  ASSIGN_OR_RETURN(GaugeFamily * depth, RegisterGauge(registry, kQueueDepth));
  int queue_items = 0;
  for (const absl::string_view queue : kQueues) {
    ASSIGN_OR_RETURN(Gauge * g, depth->WithLabelValues({queue}));
    g->Set(queue_items += 3);
  }
  ASSIGN_OR_RETURN(HistogramFamily * batch, RegisterHistogram(registry, kBatchSize));
  for (const absl::string_view model : kBatchModels) {
    ASSIGN_OR_RETURN(Histogram * h, batch->WithLabelValues({model}));
    for (int size = 1; size <= 48; size += 7) h->Observe(size);
  }

  ASSIGN_OR_RETURN(CounterFamily * launches, RegisterCounter(registry, kKernelLaunchesTotal));
  ASSIGN_OR_RETURN(CounterFamily * replays, RegisterCounter(registry, kGraphReplaysTotal));
  ASSIGN_OR_RETURN(GaugeFamily * used, RegisterGauge(registry, kDeviceMemoryUsedBytes));
  ASSIGN_OR_RETURN(GaugeFamily * capacity, RegisterGauge(registry, kDeviceMemoryCapacityBytes));
  ASSIGN_OR_RETURN(GaugeFamily * load, RegisterGauge(registry, kModelLoadDurationSeconds));
  for (const absl::string_view backend : {"cpu", "cuda"}) {
    ASSIGN_OR_RETURN(Counter * l, launches->WithLabelValues({backend}));
    l->IncBy(backend == "cpu" ? 0 : 1'204'311);
    ASSIGN_OR_RETURN(Counter * r, replays->WithLabelValues({backend}));
    r->IncBy(backend == "cpu" ? 88'120 : 412'007);
    ASSIGN_OR_RETURN(Gauge * u, used->WithLabels({{"backend", backend}, {"device", "0"}}));
    u->Set(backend == "cpu" ? 3.1e8 : 2.147483648e9);
    ASSIGN_OR_RETURN(Gauge * cap, capacity->WithLabels({{"backend", backend}, {"device", "0"}}));
    cap->Set(backend == "cpu" ? 2.5769803776e10 : 8.5899345920e10);
    ASSIGN_OR_RETURN(Gauge * t,
                     load->WithLabels({{"model", "whisper-tiny.en"}, {"backend", backend}}));
    t->Set(backend == "cpu" ? 0.412 : 1.27);
  }

  ASSIGN_OR_RETURN(GaugeFamily * build, RegisterGauge(registry, kBuildInfo));
  ASSIGN_OR_RETURN(
      Gauge * info,
      build->WithLabels({{"version", "0.1.0"}, {"revision", "0123abc"}, {"backends", "cpu,cuda"}}));
  info->Set(1);
  return absl::OkStatus();
}

}  // namespace
}  // namespace waav::metrics

int main() {
  waav::metrics::Registry registry;
  if (absl::Status s = waav::metrics::Fill(&registry); !s.ok()) {
    std::fprintf(stderr, "metrics_exposition_sample: %s\n", s.ToString().c_str());
    return 1;
  }
  const std::string text = registry.Serialize();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// Hot-path cost of the metrics: what one Counter::Inc, Histogram::Observe or StageTimer stamp
// adds to a pipeline stage. Single-threaded, and contended: two threads updating the same
// series (the worst case: one cache line bouncing between cores). And what a backend's
// dispatch counters (Backend::stats()) add to a kernel call: one relaxed atomic add, measured
// alone and next to the cheapest kernel call and graph replay of the CPU backend.
// docs/metrics.md has numbers.
//
//   build/ci/bench/metrics_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>

#include "benchmark/benchmark.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/registry.h"
#include "engine/metrics/stage_metrics.h"
#include "engine/metrics/stage_timer.h"
#include "engine/runtime/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace waav::metrics {
namespace {

// One registry shared by all benchmarks and threads, with the children created up front as the
// daemon will create them.
struct Fixture {
  Registry registry;
  Counter* counter = nullptr;
  std::array<Counter*, 2> per_thread_counters{};
  Histogram* histogram = nullptr;
  std::unique_ptr<StageMetrics> stages;
  // Latency-like values spread over the stage buckets (10 µs .. 300 ms, log-uniform), so the
  // bucket search does not always take the same path.
  std::array<double, 1024> values{};

  Fixture() {
    CounterFamily* counters = *RegisterCounter(&registry, kStreamsStartedTotal);
    counter = *counters->WithLabelValues({"stt"});
    per_thread_counters = {*counters->WithLabelValues({"a"}), *counters->WithLabelValues({"b"})};
    histogram = *(*RegisterHistogram(&registry, kStageLatencySeconds))->WithLabelValues({"stt"});
    stages = *StageMetrics::Create(&registry, LatencyBudgets());
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> log10_seconds(-5, -0.5);
    for (double& v : values) v = std::pow(10.0, log10_seconds(rng));
  }
};

Fixture& Shared() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

void BM_CounterInc(benchmark::State& state) {
  Counter* counter = Shared().counter;
  for (auto _ : state) counter->Inc();
}
BENCHMARK(BM_CounterInc)->Threads(1)->Threads(2);

// Two threads, each on its own series: what contention costs, without it.
void BM_CounterIncPerThreadSeries(benchmark::State& state) {
  Counter* counter = Shared().per_thread_counters[state.thread_index() % 2];
  for (auto _ : state) counter->Inc();
}
BENCHMARK(BM_CounterIncPerThreadSeries)->Threads(2);

void BM_CounterAddDouble(benchmark::State& state) {
  Counter* counter = Shared().counter;
  for (auto _ : state) counter->Add(0.02);
}
BENCHMARK(BM_CounterAddDouble)->Threads(1)->Threads(2);

void BM_HistogramObserve(benchmark::State& state) {
  Fixture& f = Shared();
  size_t i = static_cast<size_t>(state.thread_index()) * 512;
  for (auto _ : state) f.histogram->Observe(f.values[i++ & (f.values.size() - 1)]);
}
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2);

void BM_StageClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(StageClock::NowNs());
}
BENCHMARK(BM_StageClockNow);

// One stamp: read the clock, observe the stage's duration, check its budget. Each thread has
// its own timer (one per unit of work) but they share the stage's histogram and counter.
void BM_StageTimerStamp(benchmark::State& state) {
  StageTimer timer(Shared().stages.get());
  for (auto _ : state) benchmark::DoNotOptimize(timer.Stamp(Stage::kStt));
}
BENCHMARK(BM_StageTimerStamp)->Threads(1)->Threads(2);

// Scrape cost, for scale: the whole registry as text (allocates; not on the hot path).
void BM_Serialize(benchmark::State& state) {
  Fixture& f = Shared();
  for (auto _ : state) benchmark::DoNotOptimize(f.registry.Serialize());
}
BENCHMARK(BM_Serialize);

// ---- Backend dispatch counters ------------------------------------------------------------------

// What Submit() and Graph::Replay() add per call: one relaxed add on a counter that the
// sampling thread reads (the sampler reads every 200 ms, so the line stays in this core's cache).
void BM_DispatchCounterAdd(benchmark::State& state) {
  static std::atomic<uint64_t> launches{0};
  for (auto _ : state) launches.fetch_add(1, std::memory_order_relaxed);
  benchmark::DoNotOptimize(launches.load(std::memory_order_relaxed));
}
BENCHMARK(BM_DispatchCounterAdd);

// The cheapest whole kernel call of the CPU backend (Add of 16 floats, on one thread): checks,
// a closure, the one-thread-at-a-time guard, the counter and the kernel.
struct TinyKernel {
  std::unique_ptr<Backend> backend;
  Tensor a, b, y;
  explicit TinyKernel(int64_t elements) {
    BackendOptions options;
    options.num_threads = 1;
    backend = CreateCpuBackend(options);
    std::vector<float> values(static_cast<size_t>(elements), 1.0f);
    a = *Upload(*backend, Shape{elements}, DType::kF32, values.data());
    b = *Upload(*backend, Shape{elements}, DType::kF32, values.data());
    y = *backend->Allocate(Shape{elements}, DType::kF32);
  }
};

void BM_CpuKernelCall(benchmark::State& state) {
  TinyKernel k(state.range(0));
  for (auto _ : state) {
    if (!k.backend->Add(k.a, k.b, k.y).ok()) state.SkipWithError("Add failed");
  }
  state.counters["launches"] = static_cast<double>(k.backend->stats().kernel_launches);
}
BENCHMARK(BM_CpuKernelCall)->Arg(16)->Arg(4096);

// A captured graph of one such call, replayed: the counter is one add per replay.
void BM_CpuGraphReplay(benchmark::State& state) {
  TinyKernel k(16);
  if (!k.backend->BeginCapture().ok() || !k.backend->Add(k.a, k.b, k.y).ok()) {
    state.SkipWithError("capture failed");
    return;
  }
  std::unique_ptr<Graph> graph = *k.backend->EndCapture();
  for (auto _ : state) {
    if (!graph->Replay().ok()) state.SkipWithError("Replay failed");
  }
}
BENCHMARK(BM_CpuGraphReplay);

// The sampler's read (every 200 ms in waavd): two atomic loads and the pool's lock.
void BM_BackendStats(benchmark::State& state) {
  TinyKernel k(16);
  for (auto _ : state) benchmark::DoNotOptimize(k.backend->stats());
}
BENCHMARK(BM_BackendStats);

}  // namespace
}  // namespace waav::metrics

BENCHMARK_MAIN();

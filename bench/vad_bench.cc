// Silero VAD on the CPU backend: time per 512-sample frame (32 ms of audio) per stream.
//   vad_bench [--threads=N] [--model=FILE.onnx] [Google Benchmark flags]
// The model defaults to silero_vad_16k_op15.onnx under the models folder configured at build time
// (scripts/fetch_vad). Input: white noise at -20 dBFS (the cost does not depend on the signal).
// The counter per_stream_frame is the wall time of one call divided by the stream frames in it
// (seconds; "35u" is 35 µs).
// bench/vad_onnxruntime.py measures onnxruntime on the same file for comparison.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/models/vad/silero_vad.h"
#include "kernels/cpu/cpu_backend.h"

#ifndef WAAV_DEFAULT_MODELS_DIR
#define WAAV_DEFAULT_MODELS_DIR "models"
#endif

namespace waav::vad {
namespace {

int g_threads = 0;
std::string g_model = std::string(WAAV_DEFAULT_MODELS_DIR) + "/silero-vad/silero_vad_16k_op15.onnx";

Backend& TheBackend() {
  static std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = g_threads});
  return *backend;
}

const SileroVad* TheModel() {
  static const std::unique_ptr<SileroVad> model = [] {
    auto loaded = SileroVad::Load(g_model, TheBackend());
    if (!loaded.ok()) {
      std::cerr << loaded.status() << "\n";
      return std::unique_ptr<SileroVad>();
    }
    return std::move(*loaded);
  }();
  return model.get();
}

std::vector<float> Noise(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One frame of each of `batch` streams per call (the streaming path).
void BM_Process(benchmark::State& state) {
  const SileroVad* vad = TheModel();
  if (vad == nullptr) return state.SkipWithError("model not loaded (run scripts/fetch_vad)");
  const int64_t batch = state.range(0);
  const std::vector<float> frames = Noise(static_cast<size_t>(batch * kVadFrameSamples));
  std::vector<VadState> states(static_cast<size_t>(batch));
  std::vector<VadState*> ptrs;
  for (VadState& s : states) ptrs.push_back(&s);
  for (auto _ : state) {
    auto p = vad->Process(frames, ptrs);
    if (!p.ok()) return state.SkipWithError(std::string(p.status().message()).c_str());
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["per_stream_frame"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}
BENCHMARK(BM_Process)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Arg(128)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// 256 consecutive frames of one stream per call (files: the front end batched over time).
void BM_ProcessSequence(benchmark::State& state) {
  const SileroVad* vad = TheModel();
  if (vad == nullptr) return state.SkipWithError("model not loaded (run scripts/fetch_vad)");
  const int64_t frames = state.range(0);
  const std::vector<float> samples = Noise(static_cast<size_t>(frames * kVadFrameSamples));
  VadState vad_state;
  for (auto _ : state) {
    auto p = vad->ProcessSequence(samples, vad_state);
    if (!p.ok()) return state.SkipWithError(std::string(p.status().message()).c_str());
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["per_stream_frame"] = benchmark::Counter(
      static_cast<double>(frames),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ProcessSequence)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace waav::vad

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      waav::vad::g_threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--model=", 8) == 0) {
      waav::vad::g_model = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  std::cout << waav::vad::TheBackend().Describe() << "\nmodel: " << waav::vad::g_model << "\n";
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Micro benchmarks of the CPU backend's kernels at Whisper-tiny shapes.
//   cpu_kernels_bench [--threads=N] [Google Benchmark flags]
// On a shared machine: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true and read
// the "_min" rows.
// Numbers are for notes, not tests. OpenBLAS picks its kernels at load time: on AVX-512 CPUs
// it may need OPENBLAS_CORETYPE=SkylakeX in the environment (the backend logs a warning).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace waav {
namespace {

int g_threads = 0;

Backend& TheBackend() {
  static std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = g_threads});
  return *backend;
}

Tensor RandomTensor(const Shape& shape, DType dtype) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t n = static_cast<size_t>(shape.numel());
  Tensor t = TheBackend().Allocate(shape, dtype).value();
  if (dtype == DType::kF16) {
    std::vector<uint16_t> h(n);
    for (auto& v : h) v = FloatToHalf(dist(rng) * 0.1f);
    (void)TheBackend().CopyFromHost(h.data(), t.size_bytes(), t);
  } else {
    std::vector<float> f(n);
    for (auto& v : f) v = dist(rng);
    (void)TheBackend().CopyFromHost(f.data(), t.size_bytes(), t);
  }
  return t;
}

// With --benchmark_repetitions, the fastest run: the least disturbed by other processes on a
// shared machine.
double Fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void Check(benchmark::State& state, const absl::Status& status) {
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
}

// Linear: args M, K, N, weight dtype (0 f32, 1 f16), gelu.
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType w_dtype = state.range(3) ? DType::kF16 : DType::kF32;
  const Activation act = state.range(4) ? Activation::kGelu : Activation::kNone;
  Tensor x = RandomTensor({m, k}, DType::kF32), w = RandomTensor({n, k}, w_dtype);
  Tensor b = RandomTensor({n}, DType::kF32), y = RandomTensor({m, n}, DType::kF32);
  for (auto _ : state) Check(state, TheBackend().Linear(x, w, &b, act, y));
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(w.size_bytes()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Linear)
    ->ArgNames({"M", "K", "N", "f16", "gelu"})
    ->Args({1500, 384, 1536, 0, 1})  // encoder fc1
    ->Args({1500, 1536, 384, 0, 0})  // encoder fc2
    ->Args({1500, 384, 384, 0, 0})   // encoder projections
    ->Args({1500, 384, 1536, 1, 1})  // encoder fc1, f16 weights
    ->Args({1, 384, 51864, 1, 0})    // logits, one decoder step
    ->Args({1, 384, 51864, 0, 0})
    ->Args({5, 384, 51864, 1, 0})  // logits, 5 beams
    ->Args({1, 384, 1536, 1, 1})   // decoder fc1 step
    ->Args({1, 384, 384, 1, 0})
    ->Args({8, 384, 1536, 1, 1})  // batched decoder steps
    ->Args({16, 384, 1536, 1, 1})
    ->Args({32, 384, 1536, 1, 1})
    ->Args({16, 384, 1536, 0, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

void BM_Conv1d(benchmark::State& state) {
  const int64_t t = state.range(0), cin = state.range(1), cout = 384;
  const int stride = static_cast<int>(state.range(2));
  const int64_t t_out = (t + 2 - 3) / stride + 1;
  Tensor x = RandomTensor({1, t, cin}, DType::kF32), w = RandomTensor({cout, cin, 3}, DType::kF16);
  Tensor b = RandomTensor({cout}, DType::kF32), y = RandomTensor({1, t_out, cout}, DType::kF32);
  for (auto _ : state) Check(state, TheBackend().Conv1d(x, w, b, stride, 1, Activation::kGelu, y));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * t_out * cout * cin * 3,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Conv1d)
    ->ArgNames({"T", "Cin", "stride"})
    ->Args({3000, 80, 1})
    ->Args({3000, 384, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

// Attention: args B, Tq, Tk, causal.
void BM_Attention(benchmark::State& state) {
  const int64_t batch = state.range(0), tq = state.range(1), tk = state.range(2);
  const bool causal = state.range(3) != 0;
  const int64_t heads = 6, width = 384;
  Tensor q = RandomTensor({batch, tq, width}, DType::kF32);
  Tensor k = RandomTensor({batch, tk, width}, DType::kF32),
         v = RandomTensor({batch, tk, width}, DType::kF32);
  Tensor out = RandomTensor({batch, tq, width}, DType::kF32);
  for (auto _ : state) {
    Check(state, TheBackend().Attention(q, k, v, nullptr, heads, 0.125f, causal, out));
  }
  const double visible = causal ? (tk - tq) + (tq + 1) / 2.0 : static_cast<double>(tk);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * batch * tq * visible * width,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"B", "Tq", "Tk", "causal"})
    ->Args({1, 1500, 1500, 0})  // encoder self-attention
    ->Args({1, 1, 1500, 0})     // decoder cross-attention step
    ->Args({1, 1, 448, 1})      // decoder self-attention step, full cache
    ->Args({5, 1, 1500, 0})     // 5 beams cross-attention
    ->Args({1, 64, 64, 1})      // prompt prefill
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = state.range(0);
  Tensor x = RandomTensor({rows, 384}, DType::kF32), g = RandomTensor({384}, DType::kF32);
  Tensor y = RandomTensor({rows, 384}, DType::kF32);
  for (auto _ : state) Check(state, TheBackend().LayerNorm(x, g, g, 1e-5f, y));
}
BENCHMARK(BM_LayerNorm)
    ->Arg(1)
    ->Arg(1500)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

void BM_Gelu(benchmark::State& state) {
  Tensor x = RandomTensor({1500, 1536}, DType::kF32), y = RandomTensor({1500, 1536}, DType::kF32);
  for (auto _ : state) Check(state, TheBackend().Gelu(x, y));
  state.SetItemsProcessed(state.iterations() * x.numel());
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", Fastest);

void BM_LogSoftmax(benchmark::State& state) {
  Tensor x = RandomTensor({state.range(0), 51864}, DType::kF32);
  for (auto _ : state) Check(state, TheBackend().LogSoftmax(x, x));
}
BENCHMARK(BM_LogSoftmax)
    ->Arg(1)
    ->Arg(5)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

// One Whisper-tiny encoder layer on a 30 s window (1500 frames), f16 weights as in the
// CTranslate2 model: LN, QKV, attention, output projection, residual, LN, fc1+GELU, fc2,
// residual. Four of these plus the two convolutions make the encoder.
void BM_EncoderLayer(benchmark::State& state) {
  const int64_t t = 1500, d = 384, ff = 1536;
  Backend& be = TheBackend();
  Tensor x = RandomTensor({1, t, d}, DType::kF32), h = RandomTensor({1, t, d}, DType::kF32);
  Tensor g = RandomTensor({d}, DType::kF32), b = RandomTensor({d}, DType::kF32);
  Tensor wqkv = RandomTensor({3 * d, d}, DType::kF16), bqkv = RandomTensor({3 * d}, DType::kF32);
  Tensor wo = RandomTensor({d, d}, DType::kF16), w1 = RandomTensor({ff, d}, DType::kF16);
  Tensor b1 = RandomTensor({ff}, DType::kF32), w2 = RandomTensor({d, ff}, DType::kF16);
  Tensor q = RandomTensor({1, t, d}, DType::kF32), k = RandomTensor({1, t, d}, DType::kF32);
  Tensor v = RandomTensor({1, t, d}, DType::kF32), a = RandomTensor({1, t, d}, DType::kF32);
  Tensor f = RandomTensor({1, t, ff}, DType::kF32);
  const Tensor wq = wqkv.Slice(0, d).value(), wk = wqkv.Slice(d, 2 * d).value(),
               wv = wqkv.Slice(2 * d, 3 * d).value();
  const Tensor bq = bqkv.Slice(0, d).value(), bv = bqkv.Slice(2 * d, 3 * d).value();
  for (auto _ : state) {
    Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
    Check(state, be.Linear(h, wq, &bq, Activation::kNone, q));
    Check(state, be.Linear(h, wk, nullptr, Activation::kNone, k));
    Check(state, be.Linear(h, wv, &bv, Activation::kNone, v));
    Check(state, be.Attention(q, k, v, nullptr, 6, 0.125f, false, a));
    Check(state, be.Linear(a, wo, &b, Activation::kNone, h));
    Check(state, be.Add(x, h, x));
    Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
    Check(state, be.Linear(h, w1, &b1, Activation::kGelu, f));
    Check(state, be.Linear(f, w2, &b, Activation::kNone, h));
    Check(state, be.Add(x, h, x));
  }
}
BENCHMARK(BM_EncoderLayer)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

// One Whisper-tiny decoder step for one sequence: per layer self-attention over a KV cache of
// `cache` rows and cross-attention over 1500 encoder frames, then the f16 logits projection
// and log-softmax. f16 weights; what a greedy decoder runs per token.
void BM_DecoderStep(benchmark::State& state) {
  const int64_t d = 384, ff = 1536, frames = 1500, cache = state.range(0), vocab = 51864;
  Backend& be = TheBackend();
  Tensor x = RandomTensor({1, 1, d}, DType::kF32), h = RandomTensor({1, 1, d}, DType::kF32);
  Tensor g = RandomTensor({d}, DType::kF32), b = RandomTensor({d}, DType::kF32);
  Tensor wqkv = RandomTensor({3 * d, d}, DType::kF16), bqkv = RandomTensor({3 * d}, DType::kF32);
  Tensor qkv = RandomTensor({1, 1, 3 * d}, DType::kF32);
  Tensor w = RandomTensor({d, d}, DType::kF16), w1 = RandomTensor({ff, d}, DType::kF16);
  Tensor b1 = RandomTensor({ff}, DType::kF32), w2 = RandomTensor({d, ff}, DType::kF16);
  Tensor self_k = RandomTensor({1, cache, d}, DType::kF32),
         self_v = RandomTensor({1, cache, d}, DType::kF32);
  Tensor cross_k = RandomTensor({1, frames, d}, DType::kF32);
  Tensor cross_v = RandomTensor({1, frames, d}, DType::kF32);
  Tensor q = RandomTensor({1, 1, d}, DType::kF32), a = RandomTensor({1, 1, d}, DType::kF32);
  Tensor f = RandomTensor({1, 1, ff}, DType::kF32);
  Tensor emb = RandomTensor({vocab, d}, DType::kF16),
         logits = RandomTensor({1, 1, vocab}, DType::kF32);
  std::vector<int32_t> len = {static_cast<int32_t>(cache)};
  Tensor lengths = TheBackend().Allocate({1}, DType::kI32).value();
  (void)TheBackend().CopyFromHost(len.data(), 4, lengths);
  for (auto _ : state) {
    for (int layer = 0; layer < 4; ++layer) {
      Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
      Check(state, be.Linear(h, wqkv, &bqkv, Activation::kNone, qkv));
      Check(state, be.Attention(q, self_k, self_v, &lengths, 6, 0.125f, true, a));
      Check(state, be.Linear(a, w, &b, Activation::kNone, h));
      Check(state, be.Add(x, h, x));
      Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
      Check(state, be.Linear(h, w, &b, Activation::kNone, q));
      Check(state, be.Attention(q, cross_k, cross_v, nullptr, 6, 0.125f, false, a));
      Check(state, be.Linear(a, w, &b, Activation::kNone, h));
      Check(state, be.Add(x, h, x));
      Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
      Check(state, be.Linear(h, w1, &b1, Activation::kGelu, f));
      Check(state, be.Linear(f, w2, &b, Activation::kNone, h));
      Check(state, be.Add(x, h, x));
    }
    Check(state, be.LayerNorm(x, g, b, 1e-5f, h));
    Check(state, be.Linear(h, emb, nullptr, Activation::kNone, logits));
    Check(state, be.LogSoftmax(logits, logits));
  }
}
BENCHMARK(BM_DecoderStep)
    ->Arg(32)
    ->Arg(448)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("min", Fastest);

}  // namespace
}  // namespace waav

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      waav::g_threads = std::atoi(argv[i] + 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  std::cout << waav::TheBackend().Describe() << "\n";
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

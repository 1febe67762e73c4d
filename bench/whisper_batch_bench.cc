// Whisper tiny.en on the CPU backend at batch 1..N, for the streaming scheduler's batching
// choices (docs/streaming.md, "Batching"):
//   BM_Encoder/B       one encoder pass over B windows; counter per_window = time / B
//   BM_DecodeStep/B    one decoder step of B rows (positions ~100, the cache half full);
//                      counter per_row = time / B
//   BM_AlignScores/P   the word-alignment pass of a final (WhisperModel::CrossAttentionScores:
//                      30 tokens, tiny.en's 8 alignment heads) over P encoder positions (20 ms
//                      each: 150 = a 3 s utterance)
//   whisper_batch_bench [--threads=N] [--model=DIR] [Google Benchmark flags]
// The model defaults to whisper-tiny.en under the models folder configured at build time. The
// input is noise (the cost does not depend on it).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/models/whisper/word_alignment.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/openblas_setup.h"

#ifndef WAAV_DEFAULT_MODELS_DIR
#define WAAV_DEFAULT_MODELS_DIR "models"
#endif

namespace waav::whisper {
namespace {

int g_threads = 0;
std::string g_model = std::string(WAAV_DEFAULT_MODELS_DIR) + "/whisper-tiny.en";

Backend& TheBackend() {
  static std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = g_threads});
  return *backend;
}

const WhisperModel* TheModel() {
  static const std::unique_ptr<WhisperModel> model = [] {
    auto loaded = WhisperModel::Load(g_model, TheBackend());
    if (!loaded.ok()) {
      std::cerr << loaded.status() << "\n";
      return std::unique_ptr<WhisperModel>();
    }
    return std::move(*loaded);
  }();
  return model.get();
}

std::vector<float> Noise(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Host cost of putting one log-mel window into the encoder's input (arg 0: the front end's
// [n_mels, n_frames], transposed on the host; arg 1: time-major, what the streaming scheduler
// prepares, copied as it is). On the CPU backend the copy is a memcpy; a GPU adds the transfer.
void BM_WriteMel(benchmark::State& state) {
  const WhisperModel* model = TheModel();
  if (model == nullptr) return state.SkipWithError("model not loaded (run scripts/setup)");
  auto buffers = model->NewEncoderBuffers(1);
  if (!buffers.ok()) return state.SkipWithError("allocation failed");
  const WhisperDims& d = model->dims();
  const std::vector<float> mel = Noise(static_cast<size_t>(d.n_mels) * d.n_frames());
  const auto layout = state.range(0) == 0 ? WhisperModel::MelLayout::kMelMajor
                                          : WhisperModel::MelLayout::kTimeMajor;
  for (auto _ : state) {
    if (!model->WriteMel(mel, 0, **buffers, layout).ok()) {
      return state.SkipWithError("WriteMel failed");
    }
  }
}

void BM_Encoder(benchmark::State& state) {
  const WhisperModel* model = TheModel();
  if (model == nullptr) return state.SkipWithError("model not loaded (run scripts/setup)");
  const int batch = static_cast<int>(state.range(0));
  auto buffers = model->NewEncoderBuffers(batch);
  auto decoder = model->NewDecoderState(batch);
  if (!buffers.ok() || !decoder.ok()) return state.SkipWithError("allocation failed");
  const WhisperDims& d = model->dims();
  const std::vector<float> mel = Noise(static_cast<size_t>(d.n_mels) * d.n_frames());
  for (int b = 0; b < batch; ++b) {
    if (!model->WriteMel(mel, b, **buffers).ok()) return state.SkipWithError("WriteMel failed");
  }
  for (auto _ : state) {
    if (!model->EncodeOnDevice(**buffers, decoder->get()).ok() ||
        !TheBackend().Synchronize().ok()) {
      return state.SkipWithError("encoder failed");
    }
  }
  state.counters["per_window"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}

void BM_DecodeStep(benchmark::State& state) {
  const WhisperModel* model = TheModel();
  if (model == nullptr) return state.SkipWithError("model not loaded (run scripts/setup)");
  const int batch = static_cast<int>(state.range(0));
  auto pool = DecoderStatePool::Create(*model, batch);  // zeroed caches: finite attention
  if (!pool.ok()) return state.SkipWithError("allocation failed");
  DecoderState& decoder = (*pool)->ForRows(batch);
  std::vector<int32_t> tokens(static_cast<size_t>(batch), 440);
  std::vector<int32_t> positions(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) positions[static_cast<size_t>(b)] = 90 + 7 * b;
  for (auto _ : state) {
    auto logits = model->Decode(tokens, 1, positions, decoder);
    if (!logits.ok()) return state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(logits->data());
  }
  state.counters["per_row"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}

void BM_AlignScores(benchmark::State& state) {
  const WhisperModel* model = TheModel();
  if (model == nullptr) return state.SkipWithError("model not loaded (run scripts/setup)");
  const WhisperDims& d = model->dims();
  auto decoder = model->NewDecoderState(1);
  if (!decoder.ok()) return state.SkipWithError("allocation failed");
  const std::vector<float> mel = Noise(static_cast<size_t>(d.n_mels) * d.n_frames());
  if (!model->Encode(mel, **decoder).ok()) return state.SkipWithError("encoder failed");
  std::vector<int32_t> tokens(30);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(300 + 37 * i);
  const std::vector<AttentionHead> heads = {{1, 0}, {2, 0}, {2, 5}, {3, 0},
                                            {3, 1}, {3, 2}, {3, 3}, {3, 4}};
  const int positions = static_cast<int>(state.range(0));
  for (auto _ : state) {
    auto scores = model->CrossAttentionScores(tokens, heads, positions, **decoder);
    if (!scores.ok()) return state.SkipWithError("CrossAttentionScores failed");
    benchmark::DoNotOptimize(scores->data());
  }
}

// The host half of a final's word alignment (TokenStartsFromScores): 8 heads, 34 token rows (a
// 30-token text), range(0) encoder positions (550: the 11 s of jfk.wav).
void BM_AlignHostPostprocess(benchmark::State& state) {
  const int n_tokens = 34, n_positions = static_cast<int>(state.range(0)), heads = 8;
  const std::vector<float> scores = Noise(static_cast<size_t>(heads) * n_tokens * n_positions);
  for (auto _ : state) {
    benchmark::DoNotOptimize(TokenStartsFromScores(scores, heads, n_tokens, n_positions, 3, 31));
  }
}

BENCHMARK(BM_AlignHostPostprocess)->Arg(150)->Arg(550)->Arg(1500)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WriteMel)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Encoder)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AlignScores)->Arg(150)->Arg(500)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DecodeStep)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace waav::whisper

int main(int argc, char** argv) {
  waav::cpu::EnsureOpenBlasCoreType(argv);  // as waavd does: SkylakeX GEMMs on AVX-512 CPUs
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      waav::whisper::g_threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--model=", 8) == 0) {
      waav::whisper::g_model = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

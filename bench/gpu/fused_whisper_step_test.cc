// The fused decoder step (fused_whisper_step.h) against WhisperModel::DecodeStep on the same
// random tiny.en-shaped model and the same decoder state, on the CUDA backend (accurate math),
// eagerly and replayed from a graph with new positions. Tolerance 1e-5 relative L2 on the
// logits: both paths are exact f32 (the fused kernel is the skinny GEMM with LayerNorm and
// residual folded in; only the order of additions differs). Skips without a GPU.
#include "bench/gpu/fused_whisper_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "tests/support/random_whisper.h"
#include "tests/support/test_env.h"

namespace waav::bench {
namespace {

double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(FusedWhisperStepTest, MatchesDecodeStepEagerAndReplayed) {
  CudaBackendOptions options;
  options.math = CudaMath::kAccurate;
  auto backend = CreateCudaBackend(options);
  if (!backend.ok())
    GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << backend.status().message();
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const auto dir = waav::testing::MakeTempDir("waav-fused-step");
  ASSERT_TRUE(waav::testing::WriteRandomWhisperModel(dir.string(), seed));
  whisper::WhisperModelOptions model_options;
  model_options.weight_dtype = DType::kF16;
  model_options.fused_decoder_step = whisper::GraphUse::kNever;  // the op-by-op step as reference
  auto model = whisper::WhisperModel::Load(dir.string(), **backend, model_options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto fused = FusedWhisperDecoder::Load(dir.string(), **backend);
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::filesystem::remove_all(dir);

  for (int batch : {1, 3, 20}) {  // 20 rows: the composed (not fused) path
    SCOPED_TRACE(absl::StrCat("batch ", batch, ", seed ", seed));
    const whisper::WhisperDims& d = (*model)->dims();
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    std::vector<float> mel(static_cast<size_t>(batch) * d.n_mels * d.n_frames());
    for (float& v : mel) v = dist(rng);
    // Two states encoded alike: one for DecodeStep, one for the fused step.
    auto reference = (*model)->NewDecoderState(batch);
    auto state = (*model)->NewDecoderState(batch);
    ASSERT_TRUE(reference.ok() && state.ok());
    ASSERT_TRUE((*model)->Encode(mel, **reference).ok());
    ASSERT_TRUE((*model)->Encode(mel, **state).ok());
    ASSERT_TRUE((*fused)->Prepare(**state).ok());

    Backend& b = **backend;
    auto set_inputs = [&](const whisper::DecoderState& s, const std::vector<int32_t>& tokens,
                          int32_t position) {
      const std::vector<int32_t> positions(static_cast<size_t>(batch), position);
      const std::vector<int32_t> lengths(static_cast<size_t>(batch), position + 1);
      ASSERT_TRUE(b.CopyFromHost(tokens.data(), tokens.size() * 4, s.step_tokens()).ok());
      ASSERT_TRUE(b.CopyFromHost(positions.data(), positions.size() * 4, s.positions()).ok());
      ASSERT_TRUE(b.CopyFromHost(lengths.data(), lengths.size() * 4, s.lengths()).ok());
    };
    std::unique_ptr<Graph> graph;
    for (int32_t position = 0; position < 6; ++position) {
      std::vector<int32_t> tokens(static_cast<size_t>(batch));
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50000);
      set_inputs(**reference, tokens, position);
      set_inputs(**state, tokens, position);
      ASSERT_TRUE((*model)->DecodeStep(**reference).ok());
      if (position < 3) {
        ASSERT_TRUE((*fused)->Step(**state).ok());
      } else {
        if (!graph) {
          ASSERT_TRUE(b.BeginCapture().ok());
          ASSERT_TRUE((*fused)->Step(**state).ok());
          auto captured = b.EndCapture();
          ASSERT_TRUE(captured.ok()) << captured.status();
          graph = std::move(*captured);
          std::cout << "fused decoder step graph, batch " << batch << ": " << graph->num_nodes()
                    << " kernel calls\n";
          // Capture does not run the step: replay it for this position.
        }
        ASSERT_TRUE(graph->Replay().ok());
      }
      auto want = Download<float>(b, (*reference)->step_logits());
      auto got = Download<float>(b, (*state)->step_logits());
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      const double error = RelativeError(*got, *want);
      std::cout << "parity: fused step batch " << batch << " position " << position
                << ": relative L2 error " << error << " (tolerance 1e-05)\n";
      EXPECT_LE(error, 1e-5);
    }
  }
}

}  // namespace
}  // namespace waav::bench

// The absorbed cross-attention (WhisperModelOptions::absorbed_cross_attention, absorbed_cross.cc)
// against the K/V-cache form on random weights of tiny.en's shapes: windows encoded into a pool,
// prompts prefilled (K/V form in both), then greedy steps op by op (the fused step off) at
// buckets 8, 4 and 1; the same tokens, logits to rounding (over an i8 encoder output: to its
// quantization). Also when the model takes it (kAuto
// only with f16 caches, kAlways refused for a d_model the op does not take). Built twice: beside
// the engine with the CPU backend (label unit) and beside the CUDA backend as
// whisper_absorbed_cross_cuda_test.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/random_whisper.h"
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

class AbsorbedCrossTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(GetParam(), {});
    if (!backend.ok()) {
      GTEST_SKIP() << "backend " << GetParam()
                   << " not available (no usable GPU?), skipped: " << backend.status().message();
    }
    backend_ = std::move(*backend);
  }
  std::unique_ptr<Backend> backend_;
};

// The absorbed form (its encoder output i8 where `quantized`) against the K/V caches: logits
// within `tolerance` (relative L2), and the same greedy tokens wherever the K/V form's best
// logit leads its second by more than `token_margin` (0: always).
void CompareGreedySteps(Backend& backend, bool quantized, double tolerance, double token_margin) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string dir = testing::TempModelDir("absorbed_cross_test", seed);
  ASSERT_TRUE(testing::WriteRandomWhisperModel(dir, seed));
  auto kv = WhisperModel::Load(
      dir, backend,
      {.fused_decoder_step = GraphUse::kNever, .absorbed_cross_attention = GraphUse::kNever});
  auto absorbed = WhisperModel::Load(
      dir, backend,
      {.fused_decoder_step = GraphUse::kNever,
       .absorbed_cross_attention = GraphUse::kAlways,
       .quantized_cross_source = quantized ? GraphUse::kAlways : GraphUse::kNever});
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE(absorbed.ok()) << absorbed.status();
  const WhisperDims& d = (*kv)->dims();
  const size_t vocab = static_cast<size_t>(d.n_vocab);

  constexpr int kRows = 5;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> token(0, d.n_vocab - 1);
  std::vector<std::vector<float>> windows;
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < kRows; ++b) {
    std::vector<float> w(static_cast<size_t>(d.n_mels) * d.n_frames());
    for (float& v : w) v = normal(rng);
    windows.push_back(std::move(w));
    std::vector<int32_t> p(static_cast<size_t>(2 + b));
    for (int32_t& t : p) t = token(rng);
    prompts.push_back(p);
  }
  const WhisperModel* models[2] = {kv->get(), absorbed->get()};
  std::unique_ptr<DecoderStatePool> pools[2];
  std::vector<int32_t> input(kRows), position(kRows);
  for (int m = 0; m < 2; ++m) {
    auto pool = DecoderStatePool::Create(*models[m], 8);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pools[m] = std::move(*pool);
    EXPECT_EQ(pools[m]->ForRows(kRows).cross_source().defined(), m == 1);
    EXPECT_EQ(pools[m]->ForRows(kRows).cross_source_scales().defined(), m == 1 && quantized);
    auto encoder = models[m]->NewEncoderBuffers(1);
    ASSERT_TRUE(encoder.ok()) << encoder.status();
    for (int b = 0; b < kRows; ++b) {
      ASSERT_TRUE(models[m]->WriteMel(windows[static_cast<size_t>(b)], 0, **encoder).ok());
      ASSERT_TRUE(models[m]->RunEncoder(**encoder, &pools[m]->Row(b)).ok());
      const std::vector<int32_t>& p = prompts[static_cast<size_t>(b)];
      auto l = models[m]->Decode(p, static_cast<int>(p.size()), {0}, pools[m]->Row(b));
      ASSERT_TRUE(l.ok()) << l.status();
      input[static_cast<size_t>(b)] =
          static_cast<int32_t>(std::max_element(l->begin(), l->end()) - l->begin());
      position[static_cast<size_t>(b)] = static_cast<int32_t>(p.size());
    }
  }
  double worst = 0;
  int decided = 0, close_calls = 0;
  for (int step = 0; step < 9; ++step) {
    const int rows = step < 3 ? kRows : (step < 6 ? 3 : 1);
    std::vector<float> logits[2];
    int batch = 0;
    for (int m = 0; m < 2; ++m) {
      DecoderState& state = pools[m]->ForRows(rows);
      batch = state.batch_size();
      std::vector<int32_t> in(input.begin(), input.begin() + std::min(batch, kRows));
      std::vector<int32_t> pos(position.begin(), position.begin() + std::min(batch, kRows));
      in.resize(static_cast<size_t>(batch), 0);  // bucket 8: rows past the 5 decode token 0
      pos.resize(static_cast<size_t>(batch), 0);
      auto l = models[m]->Decode(in, 1, pos, state);
      ASSERT_TRUE(l.ok()) << l.status();
      logits[m] = std::move(*l);
    }
    for (int b = 0; b < std::min(batch, rows); ++b) {
      const float* want = logits[0].data() + static_cast<size_t>(b) * vocab;
      const float* got = logits[1].data() + static_cast<size_t>(b) * vocab;
      for (size_t i = 0; i < vocab; ++i) ASSERT_TRUE(std::isfinite(got[i])) << "logit " << i;
      const double error = testing::RelativeL2Error(got, want, vocab);
      worst = std::max(worst, error);
      EXPECT_LE(error, tolerance) << "step " << step << " (batch " << batch << ") row " << b;
      const int32_t want_token = static_cast<int32_t>(std::max_element(want, want + vocab) - want);
      const int32_t got_token = static_cast<int32_t>(std::max_element(got, got + vocab) - got);
      float second = -INFINITY;
      for (size_t i = 0; i < vocab; ++i) {
        if (static_cast<int32_t>(i) != want_token) second = std::max(second, want[i]);
      }
      if (want[want_token] - second > token_margin || token_margin == 0) {
        ++decided;
        ASSERT_EQ(got_token, want_token) << "step " << step << " row " << b << ": logits "
                                         << got[got_token] << " vs " << want[want_token];
      } else {
        ++close_calls;
      }
      input[static_cast<size_t>(b)] = want_token;
      ++position[static_cast<size_t>(b)];
    }
  }
  EXPECT_GT(decided, close_calls) << "too few tokens compared";
  std::cout << backend.name() << ": absorbed cross-attention" << (quantized ? " over i8 E" : "")
            << ", logits relative L2 error at most " << worst
            << " against the K/V caches (tolerance " << tolerance << "); " << decided
            << " tokens compared, " << close_calls << " left (best and second within "
            << token_margin << ")\n";
}

TEST_P(AbsorbedCrossTest, GreedyStepsEqualTheKvCacheForm) {
  if (!backend_->supports(Op::kSharedKvAttention)) {
    GTEST_SKIP() << backend_->name() << " has no SharedKvAttention";
  }
  // The CPU computes both forms in f32 (the folded weights rounded once to f32); the GPU's
  // caches are f16 in both forms, rounded at different points (the encoder output against its
  // K and V projections), and the folded weights are f16 like the model's.
  const double tolerance = backend_->device() == DeviceKind::kCpu ? 1e-5 : 2e-3;
  CompareGreedySteps(*backend_, /*quantized=*/false, tolerance, /*token_margin=*/0);
}

// The same over the i8 encoder output (quantized_cross_source): each value off by up to half its
// channel's step; the logits moved by at most 2.1e-4 (relative L2) on the CPU in three runs, so
// 2e-3 (the GPU's f16 tolerance, its folded weights f16) plus that; tokens whose two best logits
// are within 0.1 may differ.
TEST_P(AbsorbedCrossTest, GreedyStepsOverQuantizedSourceStayCloseToTheKvCacheForm) {
  if (!backend_->supports(Op::kQuantizeChannels)) {
    GTEST_SKIP() << backend_->name() << " has no QuantizeChannels";
  }
  const double tolerance = backend_->device() == DeviceKind::kCpu ? 2e-3 : 4e-3;
  CompareGreedySteps(*backend_, /*quantized=*/true, tolerance, /*token_margin=*/0.1);
}

// kAuto takes the absorbed form where the caches are f16 and the op takes d_model (the CUDA
// backend at width 128, not the CPU's f32 caches), its kept encoder output i8 there when asked
// (quantized_cross_source kAuto); kAlways refuses a d_model the op does not take, naming it.
TEST_P(AbsorbedCrossTest, TakenWhereItPaysAndRefusedWhereTheOpCannot) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // A small random model of width d_model, loaded with `absorbed`.
  auto load = [&](int d_model, GraphUse absorbed, GraphUse quantized = GraphUse::kNever) {
    const std::string dir = testing::TempModelDir("absorbed_cross_small", seed);
    EXPECT_TRUE(testing::WriteRandomWhisperModel(dir, seed,
                                                 {.n_mels = 80,
                                                  .n_audio_ctx = 100,
                                                  .n_text_ctx = 64,
                                                  .d_model = d_model,
                                                  .n_heads = 2,
                                                  .n_layers = 2,
                                                  .n_vocab = 500}));
    auto model = WhisperModel::Load(
        dir, *backend_,
        {.absorbed_cross_attention = absorbed, .quantized_cross_source = quantized});
    std::filesystem::remove_all(dir);
    return model;
  };
  auto keeps_source = [](const WhisperModel& model) {
    auto state = model.NewDecoderState(2);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() && (*state)->cross_source().defined();
  };
  auto off_grid = load(96, GraphUse::kAuto);
  ASSERT_TRUE(off_grid.ok()) << off_grid.status();
  EXPECT_FALSE(keeps_source(**off_grid)) << "d_model 96";
  auto required = load(96, GraphUse::kAlways);
  ASSERT_FALSE(required.ok());
  EXPECT_TRUE(absl::IsUnimplemented(required.status())) << required.status();
  const std::string says =
      backend_->supports(Op::kSharedKvAttention) ? "d_model 96" : "no SharedKvAttention";
  EXPECT_NE(required.status().message().find(says), std::string::npos) << required.status();
  auto automatic = load(128, GraphUse::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(keeps_source(**automatic),
            backend_->supports(Op::kSharedKvAttention) && backend_->supports(Op::kHalfActivations))
      << "kAuto at d_model 128";
  auto never = load(128, GraphUse::kNever);
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_FALSE(keeps_source(**never));
  // quantized_cross_source: off by default; kAuto keeps that source in i8 where it would be f16
  // and the backend has QuantizeChannels.
  auto keeps_i8 = [](const WhisperModel& model) {
    auto state = model.NewDecoderState(2);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() && (*state)->cross_source().defined() &&
           (*state)->cross_source().dtype() == DType::kI8 &&
           (*state)->cross_source_scales().defined();
  };
  EXPECT_FALSE(keeps_i8(**automatic)) << "quantized_cross_source by default";
  auto quantized = load(128, GraphUse::kAuto, GraphUse::kAuto);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  EXPECT_EQ(keeps_i8(**quantized),
            keeps_source(**quantized) && backend_->supports(Op::kQuantizeChannels))
      << "quantized_cross_source kAuto at d_model 128";
}

// The real tiny.en on real speech: the transcripts over the i8 encoder output (absorbed and
// quantized everywhere) equal the default model's. Skips without the model or the speech.
TEST_P(AbsorbedCrossTest, RealSpeechTranscriptsStayTheSameOverQuantizedSource) {
  if (!backend_->supports(Op::kQuantizeChannels)) {
    GTEST_SKIP() << backend_->name() << " has no QuantizeChannels";
  }
  const auto model_dir = waav::testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  auto loaded = waav::testing::LoadSpeechClips(
      {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0008.wav", "ljspeech/LJ001-0015.wav",
       "ljspeech/LJ001-0026.wav"});
  if (absl::IsNotFound(loaded.status())) GTEST_SKIP() << loaded.status().message();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<std::vector<float>>& clips = *loaded;
  auto plain = Transcriber::Load(*model_dir, *backend_);
  auto quantized = Transcriber::Load(
      *model_dir, *backend_,
      {.absorbed_cross_attention = GraphUse::kAlways, .quantized_cross_source = GraphUse::kAlways});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  for (size_t i = 0; i < clips.size(); ++i) {
    auto want = (*plain)->Transcribe(clips[i]);
    auto got = (*quantized)->Transcribe(clips[i]);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(want->Text().empty()) << "clip " << i;
    EXPECT_EQ(got->Text(), want->Text()) << "clip " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AbsorbedCrossTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace waav::whisper

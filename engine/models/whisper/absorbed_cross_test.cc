// The absorbed cross-attention (WhisperModelOptions::absorbed_cross_attention, absorbed_cross.cc)
// against the K/V-cache form on random weights of tiny.en's shapes: windows encoded into a pool,
// prompts prefilled (K/V form in both), then greedy steps op by op (the fused step off) at
// buckets 8, 4 and 1; the same tokens, logits to rounding. Also when the model takes it (kAuto
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
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/random_whisper.h"

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

TEST_P(AbsorbedCrossTest, GreedyStepsEqualTheKvCacheForm) {
  if (!backend_->supports(Op::kSharedKvAttention)) {
    GTEST_SKIP() << backend_->name() << " has no SharedKvAttention";
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string dir = testing::TempModelDir("absorbed_cross_test", seed);
  ASSERT_TRUE(testing::WriteRandomWhisperModel(dir, seed));
  auto kv = WhisperModel::Load(
      dir, *backend_,
      {.fused_decoder_step = GraphUse::kNever, .absorbed_cross_attention = GraphUse::kNever});
  auto absorbed = WhisperModel::Load(
      dir, *backend_,
      {.fused_decoder_step = GraphUse::kNever, .absorbed_cross_attention = GraphUse::kAlways});
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
  // The CPU computes both forms in f32 (the folded weights rounded once to f32); the GPU's
  // caches are f16 in both forms, rounded at different points (the encoder output against its
  // K and V projections), and the folded weights are f16 like the model's.
  const double tolerance = backend_->device() == DeviceKind::kCpu ? 1e-5 : 2e-3;
  double worst = 0;
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
      ASSERT_EQ(got_token, want_token) << "step " << step << " row " << b << ": logits "
                                       << got[got_token] << " vs " << want[want_token];
      input[static_cast<size_t>(b)] = want_token;
      ++position[static_cast<size_t>(b)];
    }
  }
  std::cout << backend_->name() << ": absorbed cross-attention, logits relative L2 error at most "
            << worst << " against the K/V caches (tolerance " << tolerance << ")\n";
}

// kAuto takes the absorbed form where the caches are f16 and the op takes d_model (the CUDA
// backend at width 128, not the CPU's f32 caches); kAlways refuses a d_model the op does not
// take, naming it.
TEST_P(AbsorbedCrossTest, TakenWhereItPaysAndRefusedWhereTheOpCannot) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // A small random model of width d_model, loaded with `absorbed`.
  auto load = [&](int d_model, GraphUse absorbed) {
    const std::string dir = testing::TempModelDir("absorbed_cross_small", seed);
    EXPECT_TRUE(testing::WriteRandomWhisperModel(dir, seed,
                                                 {.n_mels = 80,
                                                  .n_audio_ctx = 100,
                                                  .n_text_ctx = 64,
                                                  .d_model = d_model,
                                                  .n_heads = 2,
                                                  .n_layers = 2,
                                                  .n_vocab = 500}));
    auto model = WhisperModel::Load(dir, *backend_, {.absorbed_cross_attention = absorbed});
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
}

INSTANTIATE_TEST_SUITE_P(Backends, AbsorbedCrossTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace waav::whisper

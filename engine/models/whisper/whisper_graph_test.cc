// Graph capture in the engine (WhisperModel::RunDecodeStep / RunEncoder, GraphUse): greedy
// decoding through replayed graphs gives the same tokens and logits as eager calls, on every
// backend this binary links that captures. Built twice: beside the engine with the CPU backend
// (label unit; GraphUse::kAlways forces the CPU's recorded graphs) and beside the CUDA backend
// (labels gpu;cuda), where a machine without a GPU skips with the reason.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/models/whisper/word_alignment.h"
#include "engine/runtime/backend_registry.h"
#include "engine/runtime/status.h"
#include "engine/runtime/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/support/random_whisper.h"
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

class WhisperGraphTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(GetParam(), {});
    if (!backend.ok()) {
      if (GetParam() == "cuda") {
        GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << backend.status().message();
      }
      GTEST_SKIP() << "backend " << GetParam() << " not available: " << backend.status().message();
    }
    backend_ = std::move(*backend);
    if (!backend_->supports(Op::kGraphCapture)) {
      GTEST_SKIP() << GetParam() << " cannot capture graphs: nothing to compare";
    }
  }
  bool on_cpu() const { return backend_->device() == DeviceKind::kCpu; }

  // Random weights (tiny.en's shapes on a GPU, smaller ones on the CPU to keep CI fast) loaded
  // twice: eager (models[0]) and with graphs (models[1]), op by op in both (the fused step's sums
  // run in a varying order, so two runs of it differ in the last bits; whisper_fused_step_test
  // compares it, graphs and eager, with this path).
  void LoadEagerAndGraphs(unsigned seed, std::unique_ptr<WhisperModel> (&models)[2]) {
    testing::RandomWhisperDims dims;
    if (on_cpu())
      dims = {.n_mels = 80,
              .n_audio_ctx = 100,
              .n_text_ctx = 64,
              .d_model = 64,
              .n_heads = 2,
              .n_layers = 2,
              .n_vocab = 500};
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("waav_graph_test_" + std::to_string(seed)))
            .string();
    ASSERT_TRUE(testing::WriteRandomWhisperModel(dir, seed, dims));
    auto eager = WhisperModel::Load(
        dir, *backend_, {.graphs = GraphUse::kNever, .fused_decoder_step = GraphUse::kNever});
    auto graphs = WhisperModel::Load(
        dir, *backend_, {.graphs = GraphUse::kAlways, .fused_decoder_step = GraphUse::kNever});
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(eager.ok()) << eager.status();
    ASSERT_TRUE(graphs.ok()) << graphs.status();
    ASSERT_FALSE((*eager)->uses_graphs());
    ASSERT_TRUE((*graphs)->uses_graphs());
    models[0] = std::move(*eager);
    models[1] = std::move(*graphs);
  }

  std::unique_ptr<Backend> backend_;
};

// Random weights (tiny.en's shapes on a GPU, smaller ones on the CPU to keep CI fast): four
// windows encoded into a pool of 4 slots, prompts of different lengths prefilled, then argmax
// decoding in lockstep with the batch shrinking 4 -> 2 -> 1 (three bucket graphs), a second
// window encoded into row 0 half way (the encoder graphs replayed on new values). Eager and
// graph models must pick the same tokens with the same logits.
TEST_P(WhisperGraphTest, RandomWeightsGreedyStepsEqualEager) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::unique_ptr<WhisperModel> models[2];
  ASSERT_NO_FATAL_FAILURE(LoadEagerAndGraphs(seed, models));
  const WhisperDims& d = models[0]->dims();

  constexpr int kRows = 4;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_window = [&] {
    std::vector<float> w(static_cast<size_t>(d.n_mels) * d.n_frames());
    for (float& v : w) v = normal(rng);
    return w;
  };
  std::vector<std::vector<float>> windows;
  for (int b = 0; b <= kRows; ++b) windows.push_back(random_window());
  std::uniform_int_distribution<int> token(0, d.n_vocab - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < kRows; ++b) {
    std::vector<int32_t> p(static_cast<size_t>(1 + b % 3 * 2));  // 1, 3, 5, 1 tokens
    for (int32_t& t : p) t = token(rng);
    prompts.push_back(p);
  }

  struct Run {
    const WhisperModel* model;
    std::unique_ptr<DecoderStatePool> pool;
    std::unique_ptr<EncoderBuffers> encoder;
    std::vector<std::vector<float>> logits;  // per step, [bucket x n_vocab]
    std::vector<std::vector<int32_t>> tokens;
  };
  Run runs[2];
  runs[0].model = models[0].get();
  runs[1].model = models[1].get();
  const int kSteps = 12;
  for (Run& r : runs) {
    auto pool = DecoderStatePool::Create(*r.model, kRows);
    ASSERT_TRUE(pool.ok()) << pool.status();
    r.pool = std::move(*pool);
    auto encoder = r.model->NewEncoderBuffers(1);
    ASSERT_TRUE(encoder.ok()) << encoder.status();
    r.encoder = std::move(*encoder);
    std::vector<int32_t> input(kRows), position(kRows);
    for (int b = 0; b < kRows; ++b) {
      ASSERT_TRUE(r.model->WriteMel(windows[static_cast<size_t>(b)], 0, *r.encoder).ok());
      ASSERT_TRUE(r.model->RunEncoder(*r.encoder, &r.pool->Row(b)).ok());
      const std::vector<int32_t>& p = prompts[static_cast<size_t>(b)];
      auto l = r.model->Decode(p, static_cast<int>(p.size()), {0}, r.pool->Row(b));
      ASSERT_TRUE(l.ok()) << l.status();
      input[static_cast<size_t>(b)] =
          static_cast<int32_t>(std::max_element(l->begin(), l->end()) - l->begin());
      position[static_cast<size_t>(b)] = static_cast<int32_t>(p.size());
    }
    for (int step = 0; step < kSteps; ++step) {
      if (step == kSteps / 2) {  // a new window for row 0, its cache restarted at position 0
        ASSERT_TRUE(r.model->WriteMel(windows[kRows], 0, *r.encoder).ok());
        ASSERT_TRUE(r.model->RunEncoder(*r.encoder, &r.pool->Row(0)).ok());
        position[0] = 0;
      }
      const int rows = step < 4 ? 4 : (step < 8 ? 2 : 1);
      DecoderState& state = r.pool->ForRows(rows);
      std::vector<int32_t> in(input.begin(), input.begin() + state.batch_size());
      std::vector<int32_t> pos(position.begin(), position.begin() + state.batch_size());
      auto l = r.model->Decode(in, 1, pos, state);
      ASSERT_TRUE(l.ok()) << l.status();
      for (int b = 0; b < state.batch_size(); ++b) {
        const float* row = l->data() + static_cast<size_t>(b) * static_cast<size_t>(d.n_vocab);
        input[static_cast<size_t>(b)] =
            static_cast<int32_t>(std::max_element(row, row + d.n_vocab) - row);
        ++position[static_cast<size_t>(b)];
      }
      r.tokens.push_back(in);
      r.logits.push_back(std::move(*l));
    }
  }
  ASSERT_EQ(runs[0].tokens, runs[1].tokens);
  double max_abs = 0, max_ref = 0;
  for (size_t s = 0; s < runs[0].logits.size(); ++s) {
    ASSERT_EQ(runs[0].logits[s].size(), runs[1].logits[s].size());
    for (size_t i = 0; i < runs[0].logits[s].size(); ++i) {
      ASSERT_FALSE(std::isnan(runs[1].logits[s][i])) << "step " << s << " logit " << i;
      max_abs = std::max(max_abs, std::fabs(double{runs[0].logits[s][i]} - runs[1].logits[s][i]));
      max_ref = std::max(max_ref, std::fabs(double{runs[0].logits[s][i]}));
    }
  }
  std::cout << GetParam() << ": " << kSteps << " steps, graphs vs eager: max |logit difference| "
            << max_abs << " (max |logit| " << max_ref << ")\n";
  // The same kernels on the same data: the replay reproduces the eager values exactly.
  EXPECT_EQ(max_abs, 0.0);
  const BackendStats stats = backend_->stats();
  EXPECT_GT(stats.graph_replays, 0u);
}

// The batched prefill (WhisperModel::PrefillRows) with graphs, captured once per padded prompt
// length (a multiple of 8 tokens; 4 kept per state), against eager: prompts of lengths that take
// 5 padded lengths, back again to evicted ones; rows of their own lengths and an empty one. The
// logits at each row's reading position, then one step at each row's next position (which reads
// the self-attention caches the prefill wrote), are the same.
TEST_P(WhisperGraphTest, RandomWeightsBatchedPrefillGraphsEqualEager) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::unique_ptr<WhisperModel> models[2];
  ASSERT_NO_FATAL_FAILURE(LoadEagerAndGraphs(seed, models));
  const WhisperDims& d = models[0]->dims();
  constexpr int kRows = 3;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> windows(kRows);
  for (auto& w : windows) {
    w.resize(static_cast<size_t>(d.n_mels) * d.n_frames());
    for (float& v : w) v = normal(rng);
  }
  std::unique_ptr<DecoderStatePool> pools[2];
  for (int m = 0; m < 2; ++m) {
    auto pool = DecoderStatePool::Create(*models[m], kRows);
    auto encoder = models[m]->NewEncoderBuffers(1);
    ASSERT_TRUE(pool.ok() && encoder.ok());
    pools[m] = std::move(*pool);
    for (int b = 0; b < kRows; ++b) {
      ASSERT_TRUE(models[m]->WriteMel(windows[static_cast<size_t>(b)], 0, **encoder).ok());
      ASSERT_TRUE(models[m]->RunEncoder(**encoder, &pools[m]->Row(b)).ok());
    }
  }
  std::uniform_int_distribution<int> token(0, d.n_vocab - 1);
  double worst = 0;
  for (int length : {3, 9, 5, 17, 30, 12, 41, 2, 26}) {
    SCOPED_TRACE("prompt of " + std::to_string(length) + " tokens");
    std::vector<std::vector<int32_t>> prompts = {
        std::vector<int32_t>(length), std::vector<int32_t>((length + 1) / 2), {}};
    for (auto& p : prompts)
      for (int32_t& t : p) t = token(rng);
    const std::vector<int> read_at = {length - 1, (length + 1) / 2 - 1, -1};
    const std::vector<int32_t> next(kRows, static_cast<int32_t>(token(rng)));
    const std::vector<int32_t> positions = {length, (length + 1) / 2, 0};
    std::vector<float> got[2][2];  // [model][prefill, step]
    for (int m = 0; m < 2; ++m) {
      DecoderState& state = pools[m]->ForRows(kRows);
      auto logits = models[m]->PrefillRows(prompts, read_at, state);
      ASSERT_TRUE(logits.ok()) << logits.status();
      got[m][0].resize(static_cast<size_t>(2 * d.n_vocab));
      ASSERT_TRUE(models[m]
                      ->backend()
                      .CopyToHost(logits->Slice(0, 2).value(), got[m][0].data(),
                                  got[m][0].size() * sizeof(float))
                      .ok());
      auto step = models[m]->Decode(next, 1, positions, state);
      ASSERT_TRUE(step.ok()) << step.status();
      got[m][1] = std::move(*step);
    }
    for (int part = 0; part < 2; ++part) {
      double diff = 0, norm = 0;
      for (size_t i = 0; i < got[0][part].size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[1][part][i])) << part << " " << i;
        diff += std::pow(double{got[0][part][i]} - got[1][part][i], 2);
        norm += std::pow(double{got[0][part][i]}, 2);
      }
      worst = std::max(worst, std::sqrt(diff / norm));
    }
  }
  std::cout << GetParam() << ": batched prefill, graphs vs eager: relative L2 difference " << worst
            << "\n";
  // Eager pads as the graphs do: the same kernels on the same shapes, the same values.
  EXPECT_EQ(worst, 0.0);
}

// The speech clips the real-model tests run on: jfk.wav and two LJ Speech clips.
const std::vector<std::string> kSpeechClips = {"jfk.wav", "ljspeech/LJ001-0001.wav",
                                               "ljspeech/LJ001-0008.wav"};

// The log-mel windows (the front end's layout, zero-padded to 3000 frames) of `clips`.
std::vector<std::vector<float>> Windows(const std::vector<std::vector<float>>& clips) {
  std::vector<std::vector<float>> windows;
  frontend::LogMel log_mel;
  for (const std::vector<float>& samples : clips) {
    windows.push_back(waav::testing::MelWindow(log_mel, samples, 3000));
  }
  return windows;
}

// The windows of kSpeechClips; NotFound when the shared speech data is absent.
absl::StatusOr<std::vector<std::vector<float>>> SpeechWindows() {
  ASSIGN_OR_RETURN(const auto clips, waav::testing::LoadSpeechClips(kSpeechClips));
  return Windows(clips);
}

// Prompts without timestamps: text only, and after earlier text.
std::pair<std::vector<int>, std::vector<int>> TextPrompts(const Vocabulary& vocabulary) {
  std::vector<int> text_only = vocabulary.SotSequence();
  text_only.push_back(vocabulary.special().no_timestamps);
  std::vector<int> earlier = {vocabulary.special().sot_prev};
  for (int t : vocabulary.tokenizer().Encode(" And so my fellow Americans, the printing press."))
    earlier.push_back(t);
  earlier.insert(earlier.end(), text_only.begin(), text_only.end());
  return {text_only, earlier};
}

// Encodes windows[b % windows.size()] into slot b of `pool`, for b in [0, rows).
absl::Status EncodeRows(const WhisperModel& model, const std::vector<std::vector<float>>& windows,
                        int rows, DecoderStatePool& pool) {
  ASSIGN_OR_RETURN(auto encoder, model.NewEncoderBuffers(1));
  for (int b = 0; b < rows; ++b) {
    RETURN_IF_ERROR(model.WriteMel(windows[static_cast<size_t>(b) % windows.size()], 0, *encoder));
    RETURN_IF_ERROR(model.RunEncoder(*encoder, &pool.Row(b)));
  }
  return absl::OkStatus();
}

// The real tiny.en on real speech: DecodeGreedyBatch (the scheduler's path) with graphs and
// eager, token for token and log-probability for log-probability.
TEST_P(WhisperGraphTest, RealModelBatchDecodeEqualsEager) {
  const auto model_dir = waav::testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  auto loaded = SpeechWindows();
  if (absl::IsNotFound(loaded.status())) GTEST_SKIP() << loaded.status().message();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<std::vector<float>>& windows = *loaded;
  std::vector<std::vector<GreedyResult>> results;
  for (GraphUse use : {GraphUse::kNever, GraphUse::kAlways}) {
    // Op by op (bit for bit comparisons; see above).
    auto transcriber = Transcriber::Load(*model_dir, *backend_,
                                         {.graphs = use, .fused_decoder_step = GraphUse::kNever});
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    const WhisperModel& model = (*transcriber)->model();
    const Vocabulary& vocabulary = (*transcriber)->vocabulary();
    auto pool = DecoderStatePool::Create(model, 4);
    ASSERT_TRUE(pool.ok()) << pool.status();
    auto encoder = model.NewEncoderBuffers(1);
    ASSERT_TRUE(encoder.ok()) << encoder.status();
    std::vector<std::vector<int>> prompts;
    for (size_t b = 0; b < windows.size(); ++b) {
      ASSERT_TRUE(model.WriteMel(windows[b], 0, **encoder).ok());
      ASSERT_TRUE(model.RunEncoder(**encoder, &(*pool)->Row(static_cast<int>(b))).ok());
      std::vector<int> prompt = vocabulary.SotSequence();
      if (b == 1) prompt.push_back(vocabulary.special().no_timestamps);
      prompts.push_back(prompt);
    }
    auto decoded = DecodeGreedyBatch(model, vocabulary, prompts, GreedyOptions{}, **pool);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    results.push_back(std::move(*decoded));
    std::cout << GetParam() << (use == GraphUse::kNever ? " eager" : " graphs") << ": "
              << vocabulary.tokenizer().Decode(results.back()[0].tokens) << "\n";
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t b = 0; b < results[0].size(); ++b) {
    EXPECT_EQ(results[0][b].tokens, results[1][b].tokens) << "row " << b;
    EXPECT_EQ(results[0][b].token_logprobs, results[1][b].token_logprobs) << "row " << b;
    EXPECT_EQ(results[0][b].no_speech_prob, results[1][b].no_speech_prob) << "row " << b;
  }
}

// The real tiny.en on real speech, text prompts: DecodeGreedyBatch's pipelined steps (the next
// inputs fed on the device, the next step queued before the last one's choices are read)
// against one step at a time, both with the choice on the device and graphs: the same tokens
// and log-probabilities. The cluster step sums in a fixed order, so on a GPU too they are equal
// (the default fused step included).
TEST_P(WhisperGraphTest, RealModelPipelinedStepsEqualOneStepAtATime) {
  const auto model_dir = waav::testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  auto loaded = SpeechWindows();
  if (absl::IsNotFound(loaded.status())) GTEST_SKIP() << loaded.status().message();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<std::vector<float>>& windows = *loaded;
  auto transcriber = Transcriber::Load(*model_dir, *backend_, {.graphs = GraphUse::kAlways});
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& model = (*transcriber)->model();
  const Vocabulary& vocabulary = (*transcriber)->vocabulary();
  const auto [text_only, earlier] = TextPrompts(vocabulary);
  auto pool = DecoderStatePool::Create(model, 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(EncodeRows(model, windows, 6, **pool).ok());
  std::vector<std::vector<int>> prompts;
  for (int b = 0; b < 6; ++b) prompts.push_back(b % 2 == 0 ? text_only : earlier);
  GreedyOptions one_step;
  one_step.reduce_on_device = GraphUse::kAlways;
  one_step.pipeline = GraphUse::kNever;
  GreedyOptions pipelined = one_step;
  pipelined.pipeline = GraphUse::kAlways;
  std::vector<std::vector<GreedyResult>> results;
  std::vector<GreedyBatchTimings> timings(3);
  for (int run = 0; run < 3; ++run) {  // the pipelined path twice (graphs captured, replayed)
    auto decoded = DecodeGreedyBatch(model, vocabulary, prompts, run == 0 ? one_step : pipelined,
                                     **pool, nullptr, &timings[static_cast<size_t>(run)]);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    results.push_back(std::move(*decoded));
  }
  std::cout << GetParam() << ": " << timings[0].steps << " steps one at a time, "
            << timings[1].steps << " pipelined (" << timings[1].pipelined_steps << " ahead, "
            << timings[1].unread_steps
            << " unread): " << vocabulary.tokenizer().Decode(results[1][0].tokens) << "\n";
  EXPECT_GT(timings[1].pipelined_steps, 0);
  for (int run = 1; run < 3; ++run) {
    // Every step read served a step of the one-at-a-time loop; the rows end by <|endoftext|>,
    // so the last step submitted ahead is left unread (and not waited for).
    const GreedyBatchTimings& t = timings[static_cast<size_t>(run)];
    EXPECT_EQ(t.steps - t.unread_steps, timings[0].steps) << "run " << run;
    EXPECT_GE(t.unread_steps, 1) << "run " << run;
    ASSERT_EQ(results[0].size(), results[static_cast<size_t>(run)].size());
    for (size_t b = 0; b < results[0].size(); ++b) {
      const GreedyResult& want = results[0][b];
      const GreedyResult& got = results[static_cast<size_t>(run)][b];
      EXPECT_EQ(got.tokens, want.tokens) << "run " << run << " row " << b;
      EXPECT_EQ(got.token_logprobs, want.token_logprobs) << "run " << run << " row " << b;
      EXPECT_EQ(got.steps, want.steps) << "run " << run << " row " << b;
    }
  }
}

// The real tiny.en on real speech, DecodeGreedyBatch with this backend's defaults (on a GPU: the
// batched prompt prefill and the greedy choice on the device) against the host path (prefill
// one row at a time, logits downloaded every step): the same tokens; values to rounding.
TEST_P(WhisperGraphTest, RealModelDeviceChoiceAndBatchedPrefillMatchHostPath) {
  const auto model_dir = waav::testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  auto loaded = SpeechWindows();
  if (absl::IsNotFound(loaded.status())) GTEST_SKIP() << loaded.status().message();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<std::vector<float>>& windows = *loaded;
  auto transcriber = Transcriber::Load(*model_dir, *backend_, {});
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& model = (*transcriber)->model();
  const Vocabulary& vocabulary = (*transcriber)->vocabulary();
  // Prompts of different lengths: timestamps, text only, earlier text, a forced prefix.
  const auto [text_only, earlier] = TextPrompts(vocabulary);
  std::vector<int> prefix = text_only;
  for (int t : vocabulary.tokenizer().Encode(" And so")) prefix.push_back(t);
  const std::vector<std::vector<int>> kinds = {vocabulary.SotSequence(), text_only, earlier,
                                               prefix};
  auto pool = DecoderStatePool::Create(model, 16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(EncodeRows(model, windows, 12, **pool).ok());
  std::vector<std::vector<int>> prompts;
  for (int b = 0; b < 12; ++b) prompts.push_back(kinds[static_cast<size_t>(b) % kinds.size()]);
  GreedyOptions host;
  host.batch_prefill = GraphUse::kNever;
  host.reduce_on_device = GraphUse::kNever;
  auto reference = DecodeGreedyBatch(model, vocabulary, prompts, host, **pool);
  ASSERT_TRUE(reference.ok()) << reference.status();
  GreedyBatchTimings timings;
  auto fast =
      DecodeGreedyBatch(model, vocabulary, prompts, GreedyOptions{}, **pool, nullptr, &timings);
  ASSERT_TRUE(fast.ok()) << fast.status();
  std::cout << GetParam() << ": defaults took " << timings.device_steps << " of " << timings.steps
            << " steps without logits; prefill " << timings.prefill_ms << " ms\n";
  ASSERT_EQ(reference->size(), fast->size());
  double worst = 0;
  for (size_t b = 0; b < fast->size(); ++b) {
    const GreedyResult& r = (*reference)[b];
    const GreedyResult& f = (*fast)[b];
    EXPECT_EQ(f.tokens, r.tokens) << "row " << b;
    ASSERT_EQ(f.token_logprobs.size(), r.token_logprobs.size()) << "row " << b;
    for (size_t t = 0; t < r.token_logprobs.size(); ++t)
      worst =
          std::max(worst, std::abs(static_cast<double>(f.token_logprobs[t] - r.token_logprobs[t])));
    EXPECT_NEAR(f.no_speech_prob, r.no_speech_prob, 1e-3) << "row " << b;
  }
  std::cout << GetParam() << ": largest log-probability difference " << worst << "\n";
  EXPECT_LT(worst, 1e-2);
}

// Word times of the scheduler's path on this backend (AlignBatch over rows of one state, its
// host work on a pool of threads, the keys downloaded through the model's host buffer) against
// the CPU aligning each clip alone, for the CPU's transcripts: the same words, each boundary
// within 60 ms (3 of the alignment's 20 ms frames; the GPU's f16 cross caches and GEMMs round
// differently), and on the CPU itself the same times.
TEST_P(WhisperGraphTest, RealModelWordTimesMatchTheCpu) {
  const auto model_dir = waav::testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  auto clips_loaded = waav::testing::LoadSpeechClips(kSpeechClips);
  if (absl::IsNotFound(clips_loaded.status())) GTEST_SKIP() << clips_loaded.status().message();
  ASSERT_TRUE(clips_loaded.ok()) << clips_loaded.status();
  const std::vector<std::vector<float>>& clips = *clips_loaded;
  const std::vector<std::vector<float>> windows = Windows(clips);

  // The CPU's transcripts and its word times, one clip at a time.
  auto cpu_backend = CreateBackend("cpu", {});
  ASSERT_TRUE(cpu_backend.ok()) << cpu_backend.status();
  auto cpu = Transcriber::Load(*model_dir, **cpu_backend);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto cpu_aligner = WordAligner::Create((*cpu)->model(), (*cpu)->vocabulary(), *model_dir);
  ASSERT_TRUE(cpu_aligner.ok()) << cpu_aligner.status();
  auto cpu_state = (*cpu)->model().NewDecoderState(1);
  ASSERT_TRUE(cpu_state.ok()) << cpu_state.status();
  std::vector<std::vector<int>> texts;
  std::vector<std::vector<TimedWord>> expected;
  for (size_t c = 0; c < clips.size(); ++c) {
    ASSERT_TRUE((*cpu)->model().Encode(windows[c], **cpu_state).ok());
    std::vector<int> prompt = (*cpu)->vocabulary().SotSequence();
    prompt.push_back((*cpu)->vocabulary().special().no_timestamps);
    auto decoded =
        DecodeGreedy((*cpu)->model(), (*cpu)->vocabulary(), prompt, GreedyOptions{}, **cpu_state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    std::vector<int> text;
    for (int t : decoded->tokens) {
      if (t < (*cpu)->vocabulary().special().eot) text.push_back(t);
    }
    auto words = (*cpu_aligner)->Align(text, clips[c].size(), **cpu_state);
    ASSERT_TRUE(words.ok()) << words.status();
    ASSERT_FALSE(words->empty());
    texts.push_back(std::move(text));
    expected.push_back(std::move(*words));
  }

  auto transcriber = Transcriber::Load(*model_dir, *backend_);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& model = (*transcriber)->model();
  auto aligner = WordAligner::Create(model, (*transcriber)->vocabulary(), *model_dir);
  ASSERT_TRUE(aligner.ok()) << aligner.status();
  auto pool = DecoderStatePool::Create(model, 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto encoder = model.NewEncoderBuffers(1);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  std::vector<WordAligner::AlignRequest> requests;
  for (size_t c = 0; c < clips.size(); ++c) {
    const int row = static_cast<int>(clips.size() - 1 - c);  // rows in another order
    ASSERT_TRUE(model.WriteMel(windows[c], 0, **encoder).ok());
    ASSERT_TRUE(model.RunEncoder(**encoder, &(*pool)->Row(row)).ok());
    requests.push_back({.row = row, .text_tokens = texts[c], .audio_samples = clips[c].size()});
  }
  ThreadPool threads(3);
  const WordAligner::ForEachFn for_each = [&](size_t n, const std::function<void(size_t)>& fn) {
    threads.ParallelFor(static_cast<int64_t>(n), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) fn(static_cast<size_t>(j));
    });
  };
  // Twice: the second pass reuses the model's download buffer.
  for (int round = 0; round < 2; ++round) {
    const auto batch = (*aligner)->AlignBatch(requests, (*pool)->ForRows(4), for_each);
    ASSERT_EQ(batch.size(), clips.size());
    int worst_ms = 0;
    for (size_t c = 0; c < clips.size(); ++c) {
      ASSERT_TRUE(batch[c].ok()) << batch[c].status();
      ASSERT_EQ(batch[c]->size(), expected[c].size()) << "clip " << c;
      for (size_t w = 0; w < expected[c].size(); ++w) {
        const TimedWord& got = (*batch[c])[w];
        const TimedWord& want = expected[c][w];
        EXPECT_EQ(got.text, want.text) << "clip " << c << ", word " << w;
        worst_ms = std::max(
            {worst_ms, std::abs(got.start_ms - want.start_ms), std::abs(got.end_ms - want.end_ms)});
      }
    }
    std::cout << GetParam() << ": round " << round << ", largest word-time difference from the "
              << "cpu " << worst_ms << " ms\n";
    EXPECT_LE(worst_ms, on_cpu() ? 0 : 60);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, WhisperGraphTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace waav::whisper

// Short windows (WhisperModelOptions::short_windows): an encoder pass of fewer positions than the
// model's 1500, whose decoder state then attends to that many. Checked on the real tiny.en and
// real speech against a model loaded with audio_ctx of that count (every window that short),
// in batches that mix short and whole windows over slots that held longer windows before. On
// the CPU the kernels treat rows alike, so batched rows equal rows alone bit for bit; on a GPU
// (short_window_cuda_test, built beside the CUDA backend) the paths differ in their sums (f16
// weights, the prepared step and the absorbed form for whole windows): the same tokens, and
// log-probabilities within kGpuLogprobTolerance.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

constexpr float kGpuLogprobTolerance = 2e-2f;

class ShortWindowTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto model = waav::testing::TinyEnModelDir();
    if (!model) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    model_dir_ = *model;
    auto clips =
        waav::testing::LoadSpeechClips({"jfk.wav", "ljspeech/LJ001-0001.wav",
                                        "ljspeech/LJ001-0008.wav"});  // staged for the GPU too
    if (absl::IsNotFound(clips.status())) GTEST_SKIP() << clips.status().message();
    ASSERT_TRUE(clips.ok()) << clips.status();
    clips_ = std::move(*clips);
    auto backend = CreateBackend(GetParam(), {});
    if (!backend.ok()) {
      GTEST_SKIP() << "backend " << GetParam()
                   << " not available (no usable GPU?), skipped: " << backend.status().message();
    }
    backend_ = std::move(*backend);
    on_cpu_ = backend_->device() == DeviceKind::kCpu;
    WhisperModelOptions options;
    options.short_windows = GraphUse::kAlways;  // kAuto: the CPU only
    auto transcriber = Transcriber::Load(model_dir_, *backend_, options);
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    transcriber_ = std::move(*transcriber);
  }

  const WhisperModel& model() const { return transcriber_->model(); }
  const Vocabulary& vocabulary() const { return transcriber_->vocabulary(); }

  // The first `seconds` of a clip as a window of `positions` ([n_mels, 2 · positions]; the
  // audio's frames, then zeros).
  std::vector<float> Window(const std::vector<float>& clip, double seconds, int positions) const {
    const size_t samples = std::min(clip.size(), static_cast<size_t>(seconds * 16000));
    return waav::testing::MelWindow(log_mel_, absl::MakeConstSpan(clip.data(), samples),
                                    2 * positions);
  }

  std::vector<int> TextPrompt() const {
    std::vector<int> prompt = vocabulary().SotSequence();
    prompt.push_back(vocabulary().special().no_timestamps);
    return prompt;
  }

  // Encodes `window` (of `positions`) into `state` through buffers of that many positions.
  void EncodeInto(const std::vector<float>& window, int positions, DecoderState& state) const {
    auto buffers = model().NewEncoderBuffers(1, positions);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    ASSERT_EQ((*buffers)->positions(), positions);
    ASSERT_TRUE(model().WriteMel(window, 0, **buffers).ok());
    ASSERT_TRUE(model().EncodeOnDevice(**buffers, &state).ok());
  }

  // Log-probabilities of the same tokens by two paths: bit for bit on the CPU where `exact`.
  void ExpectSameLogprobs(const GreedyResult& got, const GreedyResult& want, bool exact,
                          const std::string& what) const {
    ASSERT_EQ(got.tokens, want.tokens) << what;
    if (exact && on_cpu_) {
      EXPECT_EQ(got.token_logprobs, want.token_logprobs) << what;
      return;
    }
    ASSERT_EQ(got.token_logprobs.size(), want.token_logprobs.size()) << what;
    const float tolerance = on_cpu_ ? 1e-4f : kGpuLogprobTolerance;
    for (size_t t = 0; t < want.token_logprobs.size(); ++t) {
      EXPECT_NEAR(got.token_logprobs[t], want.token_logprobs[t], tolerance)
          << what << " token " << t;
    }
  }

  std::string model_dir_;
  bool on_cpu_ = true;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transcriber> transcriber_;
  frontend::LogMel log_mel_;
  std::vector<std::vector<float>> clips_;
};

TEST_P(ShortWindowTest, AShortWindowDecodesAsAModelOfThatLength) {
  ASSERT_TRUE(model().takes_short_windows());
  GreedyOptions options;
  for (const int positions : {250, 400}) {
    WhisperModelOptions short_model_options;
    short_model_options.audio_ctx = positions;
    short_model_options.short_windows = GraphUse::kAlways;
    auto short_model = WhisperModel::Load(model_dir_, *backend_, short_model_options);
    ASSERT_TRUE(short_model.ok()) << short_model.status();
    ASSERT_EQ((*short_model)->dims().n_audio_ctx, positions);
    const std::vector<float> window = Window(clips_[0], 3.0, positions);

    auto expected_state = (*short_model)->NewDecoderState(1);
    ASSERT_TRUE(expected_state.ok());
    ASSERT_TRUE((*short_model)->Encode(window, **expected_state).ok());
    auto expected =
        DecodeGreedy(**short_model, vocabulary(), TextPrompt(), options, **expected_state);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_FALSE(expected->tokens.empty());

    // The state first holds a whole window of other speech: the short one must hide its keys.
    auto state = model().NewDecoderState(1);
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE(model().Encode(Window(clips_[1], 30.0, 1500), **state).ok());
    EncodeInto(window, positions, **state);
    auto decoded = DecodeGreedy(model(), vocabulary(), TextPrompt(), options, **state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ExpectSameLogprobs(
        *decoded, *expected, /*exact=*/false,
        absl::StrCat(positions, " positions: \"", vocabulary().DecodeText(decoded->tokens),
                     "\" against \"", vocabulary().DecodeText(expected->tokens), "\""));
  }
}

TEST_P(ShortWindowTest, EachRowOfABatchReadsItsOwnWindow) {
  // Rows: a 5 s window, a whole one, a 10 s one; the slots held whole windows before.
  struct RowSpec {
    size_t clip;
    double seconds;
    int positions;
  };
  const std::vector<RowSpec> specs = {{0, 3.0, 250}, {1, 30.0, 1500}, {2, 6.0, 500}};
  auto pool = DecoderStatePool::Create(model(), 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (int row = 0; row < 4; ++row) {
    ASSERT_TRUE(model().Encode(Window(clips_[1], 30.0, 1500), (*pool)->Row(row)).ok());
  }
  GreedyOptions options;
  std::vector<GreedyResult> alone;
  std::vector<std::vector<int>> prompts;
  for (size_t i = 0; i < specs.size(); ++i) {
    const RowSpec& spec = specs[i];
    const std::vector<float> window = Window(clips_[spec.clip], spec.seconds, spec.positions);
    auto state = model().NewDecoderState(1);
    ASSERT_TRUE(state.ok());
    EncodeInto(window, spec.positions, **state);
    auto decoded = DecodeGreedy(model(), vocabulary(), TextPrompt(), options, **state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    alone.push_back(*decoded);
    EncodeInto(window, spec.positions, (*pool)->Row(static_cast<int>(i)));
    prompts.push_back(TextPrompt());
  }
  auto batched = DecodeGreedyBatch(model(), vocabulary(), prompts, options, **pool);
  ASSERT_TRUE(batched.ok()) << batched.status();
  for (size_t i = 0; i < specs.size(); ++i) {
    ExpectSameLogprobs((*batched)[i], alone[i], /*exact=*/true, absl::StrCat("row ", i));
  }
}

// Where the model has a path that reads every key (here the absorbed cross-attention, which the
// CPU runs when asked: on a GPU also the prepared step), a state whose rows hold a short window
// steps over the K/V caches with each row's key count (the one-token prefill on a slot alone
// too), and one of whole windows keeps the fast path.
TEST_P(ShortWindowTest, ABatchWithAShortWindowLeavesThePathsThatReadEveryKey) {
  WhisperModelOptions absorbed_options;
  absorbed_options.absorbed_cross_attention = GraphUse::kAlways;
  absorbed_options.short_windows = GraphUse::kAlways;
  auto absorbed = WhisperModel::Load(model_dir_, *backend_, absorbed_options);
  ASSERT_TRUE(absorbed.ok()) << absorbed.status();
  ASSERT_TRUE((*absorbed)->takes_short_windows());
  auto pool = DecoderStatePool::Create(**absorbed, 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  GreedyOptions options;
  const std::vector<std::vector<int>> prompts(3, TextPrompt());

  // Three rows: a short window among whole ones. Each row as model() (no absorbed form)
  // decodes it alone: the batch ran over the K/V caches.
  const std::vector<std::pair<size_t, int>> rows = {{1, 1500}, {0, 250}, {2, 1500}};
  std::vector<GreedyResult> alone;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto [clip, positions] = rows[i];
    const std::vector<float> window =
        Window(clips_[clip], positions == 1500 ? 30.0 : 3.0, positions);
    auto state = model().NewDecoderState(1);
    ASSERT_TRUE(state.ok());
    EncodeInto(window, positions, **state);
    auto decoded = DecodeGreedy(model(), vocabulary(), TextPrompt(), options, **state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    alone.push_back(*decoded);
    auto buffers = (*absorbed)->NewEncoderBuffers(1, positions);
    ASSERT_TRUE(buffers.ok());
    ASSERT_TRUE((*absorbed)->WriteMel(window, 0, **buffers).ok());
    ASSERT_TRUE((*absorbed)->EncodeOnDevice(**buffers, &(*pool)->Row(static_cast<int>(i))).ok());
  }
  EXPECT_TRUE((*pool)->ForRows(3).holds_short_window());
  EXPECT_TRUE((*pool)->Row(1).holds_short_window());
  EXPECT_FALSE((*pool)->Row(0).holds_short_window());
  auto batched = DecodeGreedyBatch(**absorbed, vocabulary(), prompts, options, **pool);
  ASSERT_TRUE(batched.ok()) << batched.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    // Every token of the short row over the K/V caches, as alone; a whole row's one-token
    // prefill on its slot alone took the absorbed form: rounding.
    ExpectSameLogprobs((*batched)[i], alone[i], /*exact=*/rows[i].second < 1500,
                       absl::StrCat("row ", i));
  }

  // Slot 1 whole again: the batch takes the absorbed form (the same tokens, other rounding).
  auto buffers = (*absorbed)->NewEncoderBuffers(1, 0);
  ASSERT_TRUE(buffers.ok());
  ASSERT_TRUE((*absorbed)->WriteMel(Window(clips_[0], 30.0, 1500), 0, **buffers).ok());
  ASSERT_TRUE((*absorbed)->EncodeOnDevice(**buffers, &(*pool)->Row(1)).ok());
  EXPECT_FALSE((*pool)->ForRows(3).holds_short_window());
  auto whole = DecodeGreedyBatch(**absorbed, vocabulary(), prompts, options, **pool);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ((*whole)[0].tokens, alone[0].tokens);
  EXPECT_EQ((*whole)[2].tokens, alone[2].tokens);
}

// Through RunEncoder, which replays graphs on a GPU: a state encoded short, then whole, then short
// again (a replay of the first pass's graphs) knows each time which window it holds, and decodes
// the short one as a model of that length does.
TEST_P(ShortWindowTest, ReplayedEncoderPassesKeepTheStatesWindow) {
  WhisperModelOptions short_model_options;
  short_model_options.audio_ctx = 250;
  short_model_options.short_windows = GraphUse::kAlways;
  auto short_model = WhisperModel::Load(model_dir_, *backend_, short_model_options);
  ASSERT_TRUE(short_model.ok()) << short_model.status();
  const std::vector<float> window = Window(clips_[0], 3.0, 250);
  auto expected_state = (*short_model)->NewDecoderState(1);
  ASSERT_TRUE(expected_state.ok());
  ASSERT_TRUE((*short_model)->Encode(window, **expected_state).ok());
  GreedyOptions options;
  auto expected =
      DecodeGreedy(**short_model, vocabulary(), TextPrompt(), options, **expected_state);
  ASSERT_TRUE(expected.ok()) << expected.status();

  auto short_buffers = model().NewEncoderBuffers(1, 250);
  auto whole_buffers = model().NewEncoderBuffers(1, 0);
  ASSERT_TRUE(short_buffers.ok() && whole_buffers.ok());
  ASSERT_TRUE(model().WriteMel(window, 0, **short_buffers).ok());
  ASSERT_TRUE(model().WriteMel(Window(clips_[1], 30.0, 1500), 0, **whole_buffers).ok());
  auto state = model().NewDecoderState(1);
  ASSERT_TRUE(state.ok());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(model().RunEncoder(**short_buffers, state->get()).ok());
    EXPECT_TRUE((*state)->holds_short_window()) << "round " << round;
    auto decoded = DecodeGreedy(model(), vocabulary(), TextPrompt(), options, **state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ExpectSameLogprobs(*decoded, *expected, /*exact=*/false, absl::StrCat("round ", round));
    ASSERT_TRUE(model().RunEncoder(**whole_buffers, state->get()).ok());
    EXPECT_FALSE((*state)->holds_short_window()) << "round " << round;
  }
}

TEST_P(ShortWindowTest, BadWindowsAreRefused) {
  EXPECT_FALSE(model().NewEncoderBuffers(1, -1).ok());
  EXPECT_FALSE(model().NewEncoderBuffers(1, 1501).ok());
  ASSERT_TRUE(model().NewEncoderBuffers(1, 1).ok());
  ASSERT_TRUE(model().NewEncoderBuffers(2, 0).ok());

  // A window staged with more frames than short buffers hold.
  auto buffers = model().NewEncoderBuffers(1, 100);
  ASSERT_TRUE(buffers.ok());
  auto staging = backend_->AllocateHost(static_cast<size_t>(model().dims().n_frames()) *
                                        model().dims().n_mels * sizeof(float));
  ASSERT_TRUE(staging.ok());
  const std::vector<int> too_many = {201};
  EXPECT_FALSE(model().UploadStagedMel(*staging, too_many, **buffers).ok());
  const std::vector<int> fits = {200};
  EXPECT_TRUE(model().UploadStagedMel(*staging, fits, **buffers).ok());

  WhisperModelOptions off;
  off.short_windows = GraphUse::kNever;
  auto whole_only = WhisperModel::Load(model_dir_, *backend_, off);
  ASSERT_TRUE(whole_only.ok());
  EXPECT_FALSE((*whole_only)->takes_short_windows());
  EXPECT_FALSE((*whole_only)->NewEncoderBuffers(1, 250).ok());
  EXPECT_TRUE((*whole_only)->NewEncoderBuffers(1, 0).ok());

  auto whole_state = (*whole_only)->NewDecoderState(2);
  ASSERT_TRUE(whole_state.ok());
  EXPECT_FALSE((*whole_state)->holds_short_window());

  for (const int audio_ctx : {-1, 1501}) {
    WhisperModelOptions bad;
    bad.audio_ctx = audio_ctx;
    auto model = WhisperModel::Load(model_dir_, *backend_, bad);
    EXPECT_FALSE(model.ok()) << audio_ctx;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ShortWindowTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace waav::whisper

// Short windows (WhisperModelOptions::short_windows): an encoder pass of fewer positions than the
// model's 1500, whose decoder state then attends to that many. Checked on the real tiny.en and
// real speech against a model loaded with audio_ctx of that count (every window that short),
// in batches that mix short and whole windows over slots that held longer windows before.
#include <algorithm>
#include <memory>
#include <vector>

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

class ShortWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto model = waav::testing::TinyEnModelDir();
    if (!model) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    model_dir_ = *model;
    auto clips = waav::testing::LoadSpeechClips(
        {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav"});
    if (absl::IsNotFound(clips.status())) GTEST_SKIP() << clips.status().message();
    ASSERT_TRUE(clips.ok()) << clips.status();
    clips_ = std::move(*clips);
    auto backend = CreateBackend("cpu", {});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    auto transcriber = Transcriber::Load(model_dir_, *backend_);
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    transcriber_ = std::move(*transcriber);
  }

  const WhisperModel& model() const { return transcriber_->model(); }
  const Vocabulary& vocabulary() const { return transcriber_->vocabulary(); }

  // The first `seconds` of a clip as a window of `positions` ([n_mels, 2 · positions]; the
  // audio's frames, then zeros).
  std::vector<float> Window(const std::vector<float>& clip, double seconds, int positions) const {
    const size_t samples = std::min(clip.size(), static_cast<size_t>(seconds * 16000));
    const frontend::LogMel::Features f =
        log_mel_.Compute(absl::MakeConstSpan(clip.data(), samples));
    const int n_frames = 2 * positions;
    const int frames = std::min(n_frames, f.n_frames - 1);
    std::vector<float> window(static_cast<size_t>(f.n_mels) * n_frames, 0.0f);
    for (int m = 0; m < f.n_mels; ++m) {
      std::copy(f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames,
                f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames + frames,
                window.begin() + static_cast<std::ptrdiff_t>(m) * n_frames);
    }
    return window;
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

  std::string model_dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transcriber> transcriber_;
  frontend::LogMel log_mel_;
  std::vector<std::vector<float>> clips_;
};

TEST_F(ShortWindowTest, AShortWindowDecodesAsAModelOfThatLength) {
  ASSERT_TRUE(model().takes_short_windows()) << "short windows are on by default on the CPU";
  GreedyOptions options;
  for (const int positions : {250, 400}) {
    WhisperModelOptions short_model_options;
    short_model_options.audio_ctx = positions;
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
    EXPECT_EQ(decoded->tokens, expected->tokens)
        << positions << " positions: \"" << vocabulary().DecodeText(decoded->tokens)
        << "\" against \"" << vocabulary().DecodeText(expected->tokens) << "\"";
    ASSERT_EQ(decoded->token_logprobs.size(), expected->token_logprobs.size());
    for (size_t i = 0; i < decoded->token_logprobs.size(); ++i) {
      EXPECT_NEAR(decoded->token_logprobs[i], expected->token_logprobs[i], 1e-4) << i;
    }
  }
}

TEST_F(ShortWindowTest, EachRowOfABatchReadsItsOwnWindow) {
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
    EXPECT_EQ((*batched)[i].tokens, alone[i].tokens) << "row " << i;
    EXPECT_EQ((*batched)[i].token_logprobs, alone[i].token_logprobs) << "row " << i;
  }
}

TEST_F(ShortWindowTest, BadWindowsAreRefused) {
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

  // The absorbed cross-attention reads every key: short windows cannot be had with it.
  WhisperModelOptions both;
  both.absorbed_cross_attention = GraphUse::kAlways;
  both.short_windows = GraphUse::kAlways;
  auto refused = WhisperModel::Load(model_dir_, *backend_, both);
  EXPECT_FALSE(refused.ok());
  both.short_windows = GraphUse::kAuto;
  auto absorbed = WhisperModel::Load(model_dir_, *backend_, both);
  ASSERT_TRUE(absorbed.ok()) << absorbed.status();
  EXPECT_FALSE((*absorbed)->takes_short_windows());

  for (const int audio_ctx : {-1, 1501}) {
    WhisperModelOptions bad;
    bad.audio_ctx = audio_ctx;
    auto model = WhisperModel::Load(model_dir_, *backend_, bad);
    EXPECT_FALSE(model.ok()) << audio_ctx;
  }
}

}  // namespace
}  // namespace waav::whisper

// Parity of the Whisper model and decoding rules with CTranslate2 (the engine behind
// faster-whisper), float32 on the CPU, on the first window of real speech (jfk.wav).
//
// The reference script feeds CTranslate2 the same 16 kHz samples and writes its log-mel window,
// encoder output and every step's logits after the decoding rules. Feeding our encoder the
// reference's log-mel window isolates the model from the front end (tested separately).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "engine/audio/resampler.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

using waav::testing::ReadRaw;

std::map<std::string, std::string> ReadMeta(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::map<std::string, std::string> meta;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return meta;
}

class WhisperParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = waav::testing::TinyEnModelDir();
    speech_ = waav::testing::SpeechFile("jfk.wav");
    python_ = waav::testing::ReferencePython();
    if (!model_dir_) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    if (!speech_) GTEST_SKIP() << "shared speech data absent (../shared/data/speech/jfk.wav)";
    if (!python_) GTEST_SKIP() << "reference Python (faster-whisper) absent: scripts/setup --test";

    auto audio = audio::LoadAudio16k(*speech_);
    ASSERT_TRUE(audio.ok()) << audio.status();
    dir_ = waav::testing::MakeTempDir("waav-whisper-parity");
    waav::testing::WriteRaw(dir_ / "samples.f32", audio->samples);
    const std::string command = *python_ + " " + waav::testing::SourceDir() +
                                "/tests/reference/whisper_step_reference.py " + *model_dir_ +
                                " " + (dir_ / "samples.f32").string() + " " +
                                (dir_ / "ref").string();
    ASSERT_EQ(waav::testing::RunCommand(command), 0) << command;

    auto backend = CreateBackend("cpu", {});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    auto transcriber = Transcriber::Load(*model_dir_, *backend_);
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    transcriber_ = std::move(*transcriber);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::optional<std::string> model_dir_, speech_, python_;
  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transcriber> transcriber_;
};

TEST_F(WhisperParityTest, EncoderAndEveryDecoderStepMatchCTranslate2) {
  const auto meta = ReadMeta(dir_ / "ref/meta.txt");
  const std::vector<float> mel = ReadRaw<float>(dir_ / "ref/mel.f32");
  const std::vector<float> ref_encoder = ReadRaw<float>(dir_ / "ref/encoder.f32");
  const std::vector<int32_t> ref_tokens = ReadRaw<int32_t>(dir_ / "ref/tokens.i32");
  const std::vector<float> ref_logits = ReadRaw<float>(dir_ / "ref/step_logits.f32");
  const WhisperModel& model = transcriber_->model();
  const int n_vocab = model.dims().n_vocab;
  ASSERT_EQ(std::stoi(meta.at("n_vocab")), n_vocab);

  // Encoder: relative L2 error and max abs error against CTranslate2's float32 output.
  auto encoder = model.EncoderOutput(mel, 1);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  ASSERT_EQ(encoder->size(), ref_encoder.size());
  double err2 = 0, ref2 = 0, max_abs = 0;
  for (size_t i = 0; i < ref_encoder.size(); ++i) {
    const double diff = (*encoder)[i] - ref_encoder[i];
    err2 += diff * diff;
    ref2 += static_cast<double>(ref_encoder[i]) * ref_encoder[i];
    max_abs = std::max(max_abs, std::fabs(diff));
  }
  const double encoder_rel = std::sqrt(err2 / ref2);
  std::cout << "encoder: relative L2 error " << encoder_rel << ", max abs error " << max_abs
            << "\n";
  EXPECT_LT(encoder_rel, 1e-4);  // float32 with another summation order

  // Decoder: the same tokens, the same disabled entries, and close logits at every step.
  auto state = model.NewDecoderState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(model.Encode(mel, **state).ok());
  std::vector<std::vector<float>> our_logits;
  GreedyOptions options;
  options.on_step = [&](int, absl::Span<const float> row) {
    our_logits.emplace_back(row.begin(), row.end());
  };
  auto result = DecodeGreedy(model, transcriber_->vocabulary(),
                             transcriber_->vocabulary().SotSequence(), options, **state);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, std::vector<int>(ref_tokens.begin(), ref_tokens.end()));
  ASSERT_EQ(our_logits.size() * static_cast<size_t>(n_vocab), ref_logits.size());
  // CTranslate2 marks disabled entries with the lowest float, we with −inf.
  auto disabled = [](float x) { return x < -1e30f; };
  double worst_logit = 0;
  for (size_t step = 0; step < our_logits.size(); ++step) {
    int pattern_mismatches = 0;
    for (int v = 0; v < n_vocab; ++v) {
      const float ours = our_logits[step][static_cast<size_t>(v)];
      const float ref = ref_logits[step * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)];
      if (disabled(ours) || disabled(ref)) {
        pattern_mismatches += (disabled(ours) != disabled(ref));
      } else {
        worst_logit = std::max(worst_logit, static_cast<double>(std::fabs(ours - ref)));
      }
    }
    EXPECT_EQ(pattern_mismatches, 0) << "step " << step << ": the rules disable other tokens";
  }
  std::cout << "decoder: " << our_logits.size() << " steps, max abs logit error " << worst_logit
            << "\n";
  EXPECT_LT(worst_logit, 2e-3);  // logits are O(10); float32 with another summation order
  EXPECT_NEAR(result->no_speech_prob, std::stod(meta.at("no_speech_prob")), 1e-4);
  // CTranslate2's score is the summed log-probability over the token count.
  EXPECT_NEAR(result->sum_logprob / static_cast<double>(result->tokens.size()),
              std::stod(meta.at("score")), 1e-4);
}

TEST_F(WhisperParityTest, SuppressedTokensMatchFasterWhisper) {
  const std::string out = (dir_ / "suppress.txt").string();
  const std::string command =
      *python_ + " -c \"import tokenizers; from faster_whisper.tokenizer import Tokenizer; "
                 "from faster_whisper.transcribe import get_suppressed_tokens; "
                 "t = Tokenizer(tokenizers.Tokenizer.from_file('" + *model_dir_ +
      "/tokenizer.json'), False, task=None, language='en'); "
      "print(' '.join(map(str, get_suppressed_tokens(t, [-1]))))\" > " + out;
  ASSERT_EQ(waav::testing::RunCommand(command), 0);
  std::ifstream in(out);
  std::vector<int> expected;
  for (int id; in >> id;) expected.push_back(id);
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(transcriber_->vocabulary().SuppressedTokens(), expected);
}

}  // namespace
}  // namespace waav::whisper

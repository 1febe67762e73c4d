// Word timestamps of waav's WordAligner (CPU backend, tiny.en) against faster-whisper 1.2.1's
// (word_timestamps=True, CTranslate2's align) on jfk.wav and LJ Speech clips, one window each,
// decoded with <|startoftranscript|> <|notimestamps|> as a waav final result is
// (tests/reference/word_timestamps_reference.py runs faster-whisper the same way).
//
// Checked: the decoded text tokens are the same; each token's start on the DTW path (before any
// post-processing) is within kMaxTokenStartDiff positions; the words are the same strings and
// their start/end within kMaxWordDiffMs. The measured differences are printed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/audio/resampler.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/models/whisper/word_alignment.h"
#include "engine/text/json_file.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

namespace fs = std::filesystem;

// Token starts in 20 ms positions: both sides compute the attention in float32 with different
// summation orders, which can move a DTW step by a position where two paths cost nearly the
// same.
constexpr int kMaxTokenStartDiff = 3;
constexpr int kMaxWordDiffMs = 60;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(WordAlignmentParityTest, MatchesFasterWhisperWordTimestamps) {
  const auto model_dir = testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  const auto python = testing::ReferencePython();
  if (!python) GTEST_SKIP() << "WAAV_PYTHON absent or lacks faster_whisper: no reference";
  const fs::path script =
      fs::path(testing::SourceDir()) / "tests" / "reference" / "word_timestamps_reference.py";
  ASSERT_TRUE(fs::exists(script)) << script;

  std::vector<std::string> paths;
  for (const std::string name :
       {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav", "ljspeech/LJ001-0003.wav",
        "ljspeech/LJ001-0004.wav", "ljspeech/LJ001-0005.wav"}) {
    if (auto path = testing::SpeechFile(name)) {
      paths.push_back(*path);
    } else {
      std::printf("skipping %s: not in WAAV_SHARED_DATA\n", name.c_str());
    }
  }
  if (paths.empty()) GTEST_SKIP() << "no speech clips in WAAV_SHARED_DATA/speech";

  const fs::path tmp = testing::MakeTempDir("waav-words-parity");
  const fs::path out = tmp / "reference.jsonl", log = tmp / "log.txt";
  std::string command = "'" + *python + "' '" + script.string() + "' --model '" + *model_dir + "'";
  for (const std::string& p : paths) command += " '" + p + "'";
  command += " > '" + out.string() + "' 2> '" + log.string() + "'";
  ASSERT_EQ(testing::RunCommand(command), 0) << command << "\n" << ReadText(log);
  std::vector<nlohmann::json> references;
  {
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      auto parsed = text::ParseJson(line, out.string());
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      references.push_back(std::move(*parsed));
    }
  }
  ASSERT_EQ(references.size(), paths.size()) << ReadText(log);
  fs::remove_all(tmp);

  std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
  auto transcriber = Transcriber::Load(*model_dir, *backend);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& model = (*transcriber)->model();
  const Vocabulary& vocabulary = (*transcriber)->vocabulary();
  auto aligner = WordAligner::Create(model, vocabulary, *model_dir);
  ASSERT_TRUE(aligner.ok()) << aligner.status();
  auto state = model.NewDecoderState(1);
  ASSERT_TRUE(state.ok()) << state.status();
  const frontend::LogMel log_mel;

  std::vector<int> word_diffs_ms, token_diffs;
  for (size_t c = 0; c < paths.size(); ++c) {
    SCOPED_TRACE(paths[c]);
    const nlohmann::json& ref = references[c];
    auto audio = audio::LoadAudio16k(paths[c]);
    ASSERT_TRUE(audio.ok()) << audio.status();
    const std::vector<float>& samples = audio->samples;

    // The window as UtteranceDecoder::Prepare builds it: log-mel zero-padded to 3000 frames.
    const frontend::LogMel::Features f = log_mel.Compute(samples);
    const int n_frames = model.dims().n_frames();
    const int frames = std::min(n_frames, f.n_frames - 1);
    std::vector<float> mel(static_cast<size_t>(f.n_mels) * n_frames, 0.0f);
    for (int m = 0; m < f.n_mels; ++m) {
      std::copy(f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames,
                f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames + frames,
                mel.begin() + static_cast<std::ptrdiff_t>(m) * n_frames);
    }
    ASSERT_TRUE(model.Encode(mel, **state).ok());
    std::vector<int> prompt = vocabulary.SotSequence();
    prompt.push_back(vocabulary.special().no_timestamps);
    auto decoded = DecodeGreedy(model, vocabulary, prompt, GreedyOptions{}, **state);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(decoded->tokens, ref["tokens"].get<std::vector<int>>());

    auto starts = (*aligner)->TokenStarts(decoded->tokens, samples.size(), **state);
    ASSERT_TRUE(starts.ok()) << starts.status();
    const std::vector<int> ref_starts = ref["token_starts"].get<std::vector<int>>();
    ASSERT_EQ(starts->size(), ref_starts.size());
    for (size_t i = 0; i < ref_starts.size(); ++i) {
      const int diff = std::abs((*starts)[i] - ref_starts[i]);
      token_diffs.push_back(diff);
      EXPECT_LE(diff, kMaxTokenStartDiff) << "token " << i;
    }

    const auto align_start = std::chrono::steady_clock::now();
    auto words = (*aligner)->Align(decoded->tokens, samples.size(), **state);
    ASSERT_TRUE(words.ok()) << words.status();
    // For information only (a shared machine): what a final's alignment costs.
    std::printf(
        "%s: %zu tokens, %zu samples: alignment %.1f ms\n", paths[c].c_str(),
        decoded->tokens.size(), samples.size(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - align_start)
            .count());
    const nlohmann::json& ref_words = ref["words"];
    ASSERT_EQ(words->size(), ref_words.size());
    for (size_t i = 0; i < words->size(); ++i) {
      const TimedWord& w = (*words)[i];
      const nlohmann::json& r = ref_words[i];
      EXPECT_EQ(w.text, r["word"].get<std::string>()) << "word " << i;
      const int ref_start = static_cast<int>(std::lround(r["start"].get<double>() * 1000));
      const int ref_end = static_cast<int>(std::lround(r["end"].get<double>() * 1000));
      word_diffs_ms.push_back(std::abs(w.start_ms - ref_start));
      word_diffs_ms.push_back(std::abs(w.end_ms - ref_end));
      EXPECT_LE(std::abs(w.start_ms - ref_start), kMaxWordDiffMs)
          << w.text << " starts at " << w.start_ms << " ms, faster-whisper " << ref_start;
      EXPECT_LE(std::abs(w.end_ms - ref_end), kMaxWordDiffMs)
          << w.text << " ends at " << w.end_ms << " ms, faster-whisper " << ref_end;
    }
  }
  ASSERT_FALSE(word_diffs_ms.empty());
  std::sort(word_diffs_ms.begin(), word_diffs_ms.end());
  std::sort(token_diffs.begin(), token_diffs.end());
  const size_t exact =
      static_cast<size_t>(std::count(word_diffs_ms.begin(), word_diffs_ms.end(), 0));
  std::printf(
      "%zu clips: word start/end |waav - faster-whisper| over %zu times: max %d ms, median %d "
      "ms, %zu exact; token starts over %zu tokens: max %d positions (20 ms)\n",
      paths.size(), word_diffs_ms.size(), word_diffs_ms.back(),
      word_diffs_ms[word_diffs_ms.size() / 2], exact, token_diffs.size(), token_diffs.back());
}

}  // namespace
}  // namespace waav::whisper

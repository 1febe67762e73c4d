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
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

namespace fs = std::filesystem;

// Token starts in 20 ms positions: both sides compute the attention in float32 with different
// summation orders, which can move a DTW step by a position where two paths cost nearly the
// same.
constexpr int kMaxTokenStartDiff = 3;
constexpr int kMaxWordDiffMs = 60;
// Word probabilities of the alignment pass: float32 logits summed in different orders (measured
// max 5.7e-5).
constexpr double kMaxProbabilityDiff = 1e-3;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the faster-whisper reference `script` over `paths` (files in `tmp`, which it removes)
// and reads its JSON lines, one per path.
void RunReference(const std::string& python, const fs::path& script, const std::string& model_dir,
                  const std::string& extra_args, const std::vector<std::string>& paths,
                  const fs::path& tmp, std::vector<nlohmann::json>* references) {
  const fs::path out = tmp / "reference.jsonl", log = tmp / "log.txt";
  std::string command =
      "'" + python + "' '" + script.string() + "' --model '" + model_dir + "'" + extra_args;
  for (const std::string& p : paths) command += " '" + p + "'";
  command += " > '" + out.string() + "' 2> '" + log.string() + "'";
  ASSERT_EQ(testing::RunCommand(command), 0) << command << "\n" << ReadText(log);
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto parsed = text::ParseJson(line, out.string());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    references->push_back(std::move(*parsed));
  }
  ASSERT_EQ(references->size(), paths.size()) << ReadText(log);
  fs::remove_all(tmp);
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
  std::vector<nlohmann::json> references;
  ASSERT_NO_FATAL_FAILURE(RunReference(*python, script, *model_dir, "", paths, tmp, &references));

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
    const std::vector<float> mel =
        waav::testing::MelWindow(log_mel, samples, model.dims().n_frames());
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

// A 16 kHz mono IEEE-float WAV file (audio16k.py passes 16 kHz through untouched).
void WriteWavF32(const fs::path& path, const std::vector<float>& samples) {
  std::ofstream out(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); };
  const uint32_t data_bytes = static_cast<uint32_t>(samples.size() * 4);
  out.write("RIFF", 4);
  u32(36 + data_bytes);
  out.write("WAVEfmt ", 8);
  u32(16);
  u16(3);  // IEEE float
  u16(1);
  u32(16000);
  u32(16000 * 4);
  u16(4);
  u16(32);
  out.write("data", 4);
  u32(data_bytes);
  out.write(reinterpret_cast<const char*>(samples.data()), data_bytes);
}

// `waav transcribe --word-timestamps` (Transcriber with word_timestamps) against faster-whisper's
// transcribe(word_timestamps=True): segments (whose bounds move to their words), words and word
// probabilities, including the seek to the last word's end; on jfk.wav, an LJ Speech clip and
// a 32 s concatenation (two windows).
TEST(WordAlignmentParityTest, TranscribeMatchesFasterWhisperWordTimestamps) {
  const auto model_dir = testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  const auto python = testing::ReferencePython();
  if (!python) GTEST_SKIP() << "WAAV_PYTHON absent or lacks faster_whisper: no reference";
  const fs::path script =
      fs::path(testing::SourceDir()) / "tests" / "reference" / "word_timestamps_reference.py";
  std::vector<std::vector<float>> clips;
  for (const std::string name : {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav",
                                 "ljspeech/LJ001-0003.wav"}) {
    auto path = testing::SpeechFile(name);
    if (!path)
      GTEST_SKIP() << "shared speech data absent ($WAAV_SHARED_DATA/speech/" << name << ")";
    auto audio = audio::LoadAudio16k(*path);
    ASSERT_TRUE(audio.ok()) << audio.status();
    clips.push_back(std::move(audio->samples));
  }
  std::vector<float> joined;
  for (const std::vector<float>& clip : clips) {
    joined.insert(joined.end(), clip.begin(), clip.end());
    joined.insert(joined.end(), 8000, 0.0f);
  }
  const fs::path tmp = testing::MakeTempDir("waav-words-transcribe");
  const std::vector<std::vector<float>> inputs = {clips[0], clips[1], joined};
  std::vector<std::string> paths;
  for (size_t i = 0; i < inputs.size(); ++i) {
    paths.push_back((tmp / ("in" + std::to_string(i) + ".wav")).string());
    WriteWavF32(paths.back(), inputs[i]);
  }
  std::vector<nlohmann::json> references;
  ASSERT_NO_FATAL_FAILURE(
      RunReference(*python, script, *model_dir, " --transcribe", paths, tmp, &references));

  std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
  auto transcriber = Transcriber::Load(*model_dir, *backend);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  TranscribeOptions options;
  options.word_timestamps = true;
  std::vector<double> time_diffs_ms, probability_diffs;
  for (size_t c = 0; c < inputs.size(); ++c) {
    SCOPED_TRACE("input " + std::to_string(c));
    auto transcript = (*transcriber)->Transcribe(inputs[c], options);
    ASSERT_TRUE(transcript.ok()) << transcript.status();
    const nlohmann::json& ref_segments = references[c]["segments"];
    ASSERT_EQ(transcript->segments.size(), ref_segments.size());
    for (size_t i = 0; i < ref_segments.size(); ++i) {
      const Segment& s = transcript->segments[i];
      const nlohmann::json& r = ref_segments[i];
      EXPECT_EQ(s.text, r["text"].get<std::string>());
      time_diffs_ms.push_back(std::abs(s.start_s - r["start"].get<double>()) * 1000);
      time_diffs_ms.push_back(std::abs(s.end_s - r["end"].get<double>()) * 1000);
      EXPECT_LE(time_diffs_ms.back(), kMaxWordDiffMs) << "segment " << i << " end";
      const nlohmann::json& ref_words = r["words"];
      ASSERT_EQ(s.words.size(), ref_words.size()) << "segment " << i;
      for (size_t w = 0; w < s.words.size(); ++w) {
        const Word& word = s.words[w];
        const nlohmann::json& rw = ref_words[w];
        EXPECT_EQ(word.word, rw["word"].get<std::string>());
        const double start_diff = std::abs(word.start_s - rw["start"].get<double>()) * 1000;
        const double end_diff = std::abs(word.end_s - rw["end"].get<double>()) * 1000;
        time_diffs_ms.push_back(start_diff);
        time_diffs_ms.push_back(end_diff);
        EXPECT_LE(start_diff, kMaxWordDiffMs) << word.word;
        EXPECT_LE(end_diff, kMaxWordDiffMs) << word.word;
        probability_diffs.push_back(std::abs(word.probability - rw["probability"].get<double>()));
        EXPECT_LE(probability_diffs.back(), kMaxProbabilityDiff) << word.word;
      }
    }
  }
  ASSERT_FALSE(time_diffs_ms.empty());
  std::sort(time_diffs_ms.begin(), time_diffs_ms.end());
  std::sort(probability_diffs.begin(), probability_diffs.end());
  std::printf(
      "transcribe: segment and word start/end over %zu times: max %.1f ms, median %.1f ms; word "
      "probability: max |diff| %.3g, median %.3g\n",
      time_diffs_ms.size(), time_diffs_ms.back(), time_diffs_ms[time_diffs_ms.size() / 2],
      probability_diffs.empty() ? 0.0 : probability_diffs.back(),
      probability_diffs.empty() ? 0.0 : probability_diffs[probability_diffs.size() / 2]);
}

}  // namespace
}  // namespace waav::whisper

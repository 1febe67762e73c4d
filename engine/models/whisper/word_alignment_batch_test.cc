// WordAligner::AlignBatch against Align row by row (CPU backend, real tiny.en, real speech): the
// windows of jfk.wav and LJ Speech clips encoded into rows of one decoder pool (not in order, a
// row left out), each decoded greedily, then aligned one row at a time and all at once. Also
// what fails alone (a token that is not text, audio under 20 ms) and what fails the call.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "engine/audio/resampler.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/models/whisper/word_alignment.h"
#include "engine/runtime/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

// The window as UtteranceDecoder::Prepare builds it: log-mel zero-padded to n_frames.
std::vector<float> Window(const frontend::LogMel& log_mel, const std::vector<float>& samples,
                          int n_frames) {
  return waav::testing::MelWindow(log_mel, samples, n_frames);
}

TEST(WordAlignmentBatchTest, BatchEqualsRowByRow) {
  const auto model_dir = testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  std::vector<std::string> paths;
  for (const std::string name : {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav"}) {
    if (auto path = testing::SpeechFile(name)) paths.push_back(*path);
  }
  if (paths.empty()) GTEST_SKIP() << "no speech clips in WAAV_SHARED_DATA/speech";

  std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
  auto transcriber = Transcriber::Load(*model_dir, *backend);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& model = (*transcriber)->model();
  const Vocabulary& vocabulary = (*transcriber)->vocabulary();
  auto aligner = WordAligner::Create(model, vocabulary, *model_dir);
  ASSERT_TRUE(aligner.ok()) << aligner.status();
  // Clip c in row rows[c], out of order; row 1 stays empty (zeroed), so the pass also runs a
  // row nobody asked for.
  constexpr int n_rows = 4;
  const std::vector<int> rows = {3, 0, 2};
  auto pool = DecoderStatePool::Create(model, n_rows);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const frontend::LogMel log_mel;
  std::vector<std::vector<int>> texts;
  std::vector<size_t> samples;
  std::vector<WordAligner::AlignRequest> requests;
  std::vector<std::vector<TimedWord>> one_by_one;
  for (size_t c = 0; c < paths.size(); ++c) {
    SCOPED_TRACE(paths[c]);
    auto audio = audio::LoadAudio16k(paths[c]);
    ASSERT_TRUE(audio.ok()) << audio.status();
    DecoderState& row = (*pool)->Row(rows[c]);
    ASSERT_TRUE(model.Encode(Window(log_mel, audio->samples, model.dims().n_frames()), row).ok());
    std::vector<int> prompt = vocabulary.SotSequence();
    prompt.push_back(vocabulary.special().no_timestamps);
    auto decoded = DecodeGreedy(model, vocabulary, prompt, GreedyOptions{}, row);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_FALSE(decoded->tokens.empty());
    texts.push_back(decoded->tokens);
    samples.push_back(audio->samples.size());
    auto words = (*aligner)->Align(decoded->tokens, audio->samples.size(), row);
    ASSERT_TRUE(words.ok()) << words.status();
    one_by_one.push_back(std::move(*words));
  }
  for (size_t c = 0; c < paths.size(); ++c) {
    requests.push_back({.row = rows[c], .text_tokens = texts[c], .audio_samples = samples[c]});
  }
  // Serial, through a for_each that runs the host work in reverse order (once: the scores are
  // computed by the backend, Backend::HeadScores), and on a pool of threads.
  int calls = 0;
  const WordAligner::ForEachFn reverse = [&](size_t n, const std::function<void(size_t)>& fn) {
    ++calls;
    for (size_t j = n; j-- > 0;) fn(j);
  };
  ThreadPool pool_of_three(3);
  const WordAligner::ForEachFn threads = [&](size_t n, const std::function<void(size_t)>& fn) {
    pool_of_three.ParallelFor(static_cast<int64_t>(n), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) fn(static_cast<size_t>(j));
    });
  };
  for (const WordAligner::ForEachFn& for_each : {WordAligner::ForEachFn(), reverse, threads}) {
    const auto batch = (*aligner)->AlignBatch(requests, (*pool)->ForRows(n_rows), for_each);
    ASSERT_EQ(batch.size(), paths.size());
    for (size_t c = 0; c < paths.size(); ++c) {
      SCOPED_TRACE(paths[c]);
      ASSERT_TRUE(batch[c].ok()) << batch[c].status();
      ASSERT_EQ(batch[c]->size(), one_by_one[c].size());
      for (size_t w = 0; w < one_by_one[c].size(); ++w) {
        EXPECT_EQ((*batch[c])[w].text, one_by_one[c][w].text);
        EXPECT_EQ((*batch[c])[w].start_ms, one_by_one[c][w].start_ms) << one_by_one[c][w].text;
        EXPECT_EQ((*batch[c])[w].end_ms, one_by_one[c][w].end_ms) << one_by_one[c][w].text;
      }
    }
  }
  EXPECT_EQ(calls, 1);

  // A request that cannot be aligned fails alone; an empty text gets no words.
  const std::vector<int> not_text = {vocabulary.special().eot};
  const std::vector<int> none;
  std::vector<WordAligner::AlignRequest> mixed = requests;
  mixed.push_back({.row = 1, .text_tokens = not_text, .audio_samples = 16000});
  mixed[1].audio_samples = 100;  // under 20 ms of audio
  std::vector<WordAligner::AlignRequest> with_empty = {
      {.row = 1, .text_tokens = none, .audio_samples = 16000}};
  const auto partial = (*aligner)->AlignBatch(mixed, (*pool)->ForRows(n_rows));
  ASSERT_EQ(partial.size(), mixed.size());
  EXPECT_TRUE(partial[0].ok()) << partial[0].status();
  EXPECT_EQ(partial[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(partial[3].status().code(), absl::StatusCode::kInvalidArgument);
  if (partial[0].ok()) {
    EXPECT_EQ(partial[0]->size(), one_by_one[0].size());
  }
  const auto empty = (*aligner)->AlignBatch(with_empty, (*pool)->ForRows(n_rows));
  ASSERT_EQ(empty.size(), 1u);
  ASSERT_TRUE(empty[0].ok());
  EXPECT_TRUE(empty[0]->empty());
  // Rows outside the state, or twice, fail every request of the call.
  std::vector<WordAligner::AlignRequest> twice = {requests[0], requests[0]};
  for (const auto& result : (*aligner)->AlignBatch(twice, (*pool)->ForRows(n_rows))) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  }
  std::vector<WordAligner::AlignRequest> outside = {requests[0]};
  outside[0].row = n_rows;
  const auto out_of_range = (*aligner)->AlignBatch(outside, (*pool)->ForRows(n_rows));
  EXPECT_EQ(out_of_range[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(out_of_range[0].status().message()).find("row"), std::string::npos);
}

// The alignment pass through its graphs (WhisperModelOptions::graphs kAlways: padded to a
// power-of-two rows and a multiple of 8 tokens, captured once per shape, replayed) against the
// eager pass (kNever) on the CPU backend: the same scores up to the GEMMs' rounding at another
// row count, the same words; replays and a second shape included.
TEST(WordAlignmentBatchTest, GraphsEqualEager) {
  const auto model_dir = testing::TinyEnModelDir();
  if (!model_dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
  std::vector<std::string> paths;
  for (const std::string name : {"jfk.wav", "ljspeech/LJ001-0001.wav"}) {
    if (auto path = testing::SpeechFile(name)) paths.push_back(*path);
  }
  if (paths.empty()) GTEST_SKIP() << "no speech clips in WAAV_SHARED_DATA/speech";
  std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
  const frontend::LogMel log_mel;
  const std::vector<int> rows = {2, 0};  // of a 4-row pool: 3 rows run eagerly, 4 as a graph
  struct Run {
    std::unique_ptr<Transcriber> transcriber;
    std::unique_ptr<WordAligner> aligner;
    std::unique_ptr<DecoderStatePool> pool;
  };
  Run runs[2];
  std::vector<std::vector<int>> texts;
  std::vector<size_t> samples;
  for (int g = 0; g < 2; ++g) {
    auto transcriber = Transcriber::Load(*model_dir, *backend,
                                         {.graphs = g == 0 ? GraphUse::kNever : GraphUse::kAlways});
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    runs[g].transcriber = std::move(*transcriber);
    const WhisperModel& model = runs[g].transcriber->model();
    ASSERT_EQ(model.uses_graphs(), g == 1);
    auto aligner = WordAligner::Create(model, runs[g].transcriber->vocabulary(), *model_dir);
    ASSERT_TRUE(aligner.ok()) << aligner.status();
    runs[g].aligner = std::move(*aligner);
    auto pool = DecoderStatePool::Create(model, 4);
    ASSERT_TRUE(pool.ok()) << pool.status();
    runs[g].pool = std::move(*pool);
    for (size_t c = 0; c < paths.size(); ++c) {
      auto audio = audio::LoadAudio16k(paths[c]);
      ASSERT_TRUE(audio.ok()) << audio.status();
      DecoderState& row = runs[g].pool->Row(rows[c]);
      ASSERT_TRUE(model.Encode(Window(log_mel, audio->samples, model.dims().n_frames()), row).ok());
      if (g == 1) continue;
      const Vocabulary& vocabulary = runs[g].transcriber->vocabulary();
      std::vector<int> prompt = vocabulary.SotSequence();
      prompt.push_back(vocabulary.special().no_timestamps);
      auto decoded = DecodeGreedy(model, vocabulary, prompt, GreedyOptions{}, row);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      texts.push_back(decoded->tokens);
      samples.push_back(audio->samples.size());
    }
  }
  std::vector<WordAligner::AlignRequest> requests;
  for (size_t c = 0; c < paths.size(); ++c) {
    requests.push_back({.row = rows[c], .text_tokens = texts[c], .audio_samples = samples[c]});
  }
  // Both requests (4 rows as a graph), twice (a replay), then the one at row 0 alone (1 row).
  for (const size_t n : {requests.size(), requests.size(), size_t{1}}) {
    const absl::Span<const WordAligner::AlignRequest> asked(requests.data() + requests.size() - n,
                                                            n);
    SCOPED_TRACE(n);
    std::vector<absl::StatusOr<std::vector<TimedWord>>> words[2];
    for (int g = 0; g < 2; ++g) {
      words[g] = runs[g].aligner->AlignBatch(asked, runs[g].pool->ForRows(4));
      ASSERT_EQ(words[g].size(), n);
    }
    for (size_t c = 0; c < n; ++c) {
      ASSERT_TRUE(words[0][c].ok() && words[1][c].ok());
      ASSERT_EQ(words[0][c]->size(), words[1][c]->size());
      for (size_t w = 0; w < words[0][c]->size(); ++w) {
        EXPECT_EQ((*words[1][c])[w].text, (*words[0][c])[w].text);
        EXPECT_EQ((*words[1][c])[w].start_ms, (*words[0][c])[w].start_ms);
        EXPECT_EQ((*words[1][c])[w].end_ms, (*words[0][c])[w].end_ms);
      }
    }
  }
  // The scores themselves (the same queries up to the GEMMs' rounding, the same HeadScores).
  const std::vector<AttentionHead>& heads = runs[0].aligner->heads();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<ScoresRequest> pass;
  for (size_t c = 0; c < paths.size(); ++c) {
    tokens.emplace_back(texts[c].begin(), texts[c].end());
  }
  for (size_t c = 0; c < paths.size(); ++c) {
    pass.push_back({.row = rows[c], .tokens = tokens[c], .n_positions = 500});
  }
  absl::StatusOr<std::vector<std::vector<float>>> scores[2];
  for (int g = 0; g < 2; ++g) {
    scores[g] = runs[g].transcriber->model().CrossAttentionScoresBatch(pass, heads,
                                                                       runs[g].pool->ForRows(4));
    ASSERT_TRUE(scores[g].ok()) << scores[g].status();
  }
  for (size_t c = 0; c < paths.size(); ++c) {
    ASSERT_EQ((*scores[0])[c].size(), (*scores[1])[c].size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < (*scores[0])[c].size(); ++i) {
      const double a = (*scores[0])[c][i], b = (*scores[1])[c][i];
      diff += (a - b) * (a - b);
      norm += a * a;
    }
    std::cout << "alignment scores, graph against eager: relative L2 error "
              << std::sqrt(diff / norm) << " (" << paths[c] << ")\n";
    EXPECT_LE(std::sqrt(diff / norm), 1e-5) << paths[c];
  }
}

}  // namespace
}  // namespace waav::whisper

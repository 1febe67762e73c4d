// How Whisper's transcripts change when a window holds only the audio's length (whisper.cpp's
// audio_ctx; WhisperModelOptions::audio_ctx) instead of 30 s of zero-padded mel frames.
//
// A streaming partial decodes the utterance heard so far; its encoder pass costs the same for
// 1 s of speech as for 30 s. Encoding only the frames that hold audio (rounded up to a bucket)
// would cut that work several-fold, but Whisper was trained on 30 s windows only. This program
// measures what that does to the text, the way the streaming engine decodes a partial (text
// only: <|startoftranscript|> <|en|>... <|notimestamps|>, greedy, repeats cut at 4, the text
// as UtteranceDecoder makes a stream's first partial of it: trailing punctuation words and a
// restart of the words cut): every
// clip's prefixes (every `--step-ms` of its audio, and the whole clip) are decoded with the
// full window and with each bucket rule, and the words compared (lower case, punctuation
// dropped): word edits against the full window's text on the same prefix, and on whole clips
// the word error rate against the reference transcripts. It also times each encoder pass.
//
// It also counts each decode's steps and what stopping at a restart of the words would save
// (streaming::RestartWatch, as the engine stops a partial's row): greedy decoding is the same
// whatever comes after a token, so a decode stopped before token i is the first i tokens of the
// whole decode; the table gives the steps with the stop at runs of 2, 3 and 4 words and how many
// partials' texts it changes (the text a first partial shows, with the engine's cuts).
//
//   audio_ctx_study --model models/whisper-tiny.en --data ../shared/data [--step-ms 500]
//                   [--rules 0,5]
//
// Figures it printed are in docs/benchmarks.md ("Short windows for partials (session 32)").
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/types/span.h"
#include "engine/audio/resampler.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/backend_registry.h"
#include "engine/streaming/spoken_words.h"
#include "engine/streaming/utterance_decoder.h"

namespace {

using waav::whisper::WhisperModel;

struct Clip {
  std::string name;
  std::vector<float> samples;
  std::string reference;  // empty: none
};

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '\'') {
      word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '-') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

// The last column of the word-level edit distance table: entry i is the edits from
// reference[:i] to `b`. Its last entry is the edit distance; its smallest, the edits from the
// reference's best-matching prefix (a partial's words against what had been said by then).
std::vector<int> EditColumn(const std::vector<std::string>& reference,
                            const std::vector<std::string>& b) {
  std::vector<int> column(reference.size() + 1);
  for (size_t i = 0; i <= reference.size(); ++i) column[i] = static_cast<int>(i);
  for (size_t j = 1; j <= b.size(); ++j) {
    int diagonal = column[0];
    column[0] = static_cast<int>(j);
    for (size_t i = 1; i <= reference.size(); ++i) {
      const int left = column[i];
      column[i] = std::min(
          {column[i] + 1, column[i - 1] + 1, diagonal + (reference[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = left;
    }
  }
  return column;
}

int EditDistance(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return EditColumn(a, b).back();
}

int EditsFromBestPrefix(const std::vector<std::string>& reference,
                        const std::vector<std::string>& b) {
  const std::vector<int> column = EditColumn(reference, b);
  return *std::min_element(column.begin(), column.end());
}

// A rule mapping the frames with audio to the window's encoder positions (0: the full window).
struct Rule {
  std::string name;
  int bucket_positions;  // round up to a multiple of this
  int pad_positions;     // after adding this much silence
};

int PositionsFor(const Rule& rule, int content_frames, int full_positions) {
  if (rule.bucket_positions == 0) return full_positions;
  const int needed = (content_frames + 1) / 2 + rule.pad_positions;
  const int rounded =
      (needed + rule.bucket_positions - 1) / rule.bucket_positions * rule.bucket_positions;
  return std::min(rounded, full_positions);
}

// Restart stops tried: runs of this many words.
constexpr int kStopRuns[] = {2, 3, 4};
constexpr size_t kNumStopRuns = std::size(kStopRuns);

struct Tally {
  int prefixes = 0, edits = 0, full_words = 0, longer_by_3 = 0, differing = 0;
  int clip_edits = 0, reference_words = 0;
  int prefix_reference_edits = 0, prefix_words = 0;  // against the reference's best prefix
  double encoder_ms = 0;
  int encodes = 0;
  long positions = 0;
  long steps = 0;
  int max_steps = 0, long_decodes = 0;  // long: over 20 steps
  long stop_steps[kNumStopRuns] = {};
  int stop_max_steps[kNumStopRuns] = {};
  int stopped[kNumStopRuns] = {}, stop_changed[kNumStopRuns] = {};
};

// The first partial's text of `decoded` (the engine's cuts: trailing punctuation words, a
// restart of the words).
std::string PartialText(const waav::whisper::Vocabulary& vocabulary,
                        const waav::whisper::GreedyResult& decoded, size_t samples) {
  waav::streaming::UtteranceDecoder utterance(vocabulary, waav::streaming::StreamOptions{});
  return utterance
      .Finish(decoded, 0, samples, /*is_final=*/false, waav::streaming::EndReason::kSilence,
              nullptr)
      .transcript;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Whisper transcripts on windows of the audio's length against 30 s windows"};
  std::string model_dir = "models/whisper-tiny.en";
  std::string data_dir = "../shared/data";
  int step_ms = 500;
  int max_clips = 0;
  std::vector<int> rule_indices;
  app.add_option("--model", model_dir, "CTranslate2 Whisper folder");
  app.add_option("--data", data_dir, "shared data folder (speech/jfk.wav, speech/ljspeech)");
  app.add_option("--step-ms", step_ms, "prefix step")->check(CLI::Range(100, 10000));
  app.add_option("--max-clips", max_clips, "LJ Speech clips to take (0: all)");
  app.add_option("--rules", rule_indices,
                 "rules to run, by index (0: full 30 s, always run; 1-5: the short ones)")
      ->delimiter(',')
      ->check(CLI::Range(0, 5));
  CLI11_PARSE(app, argc, argv);

  auto backend = waav::CreateBackend("cpu", {});
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  auto transcriber = waav::whisper::Transcriber::Load(model_dir, **backend);
  if (!transcriber.ok()) {
    std::fprintf(stderr, "%s\n", transcriber.status().ToString().c_str());
    return 1;
  }
  const waav::whisper::Vocabulary& vocabulary = (*transcriber)->vocabulary();
  const int full_positions = (*transcriber)->model().dims().n_audio_ctx;

  std::vector<Clip> clips;
  if (auto jfk = waav::audio::LoadAudio16k(data_dir + "/speech/jfk.wav"); jfk.ok()) {
    clips.push_back({"jfk.wav", jfk->samples,
                     "And so my fellow Americans, ask not what your country can do for you, ask "
                     "what you can do for your country."});
  }
  std::ifstream transcripts(data_dir + "/speech/ljspeech/transcripts.txt");
  for (std::string line; std::getline(transcripts, line);) {
    const size_t bar = line.find('|');
    if (bar == std::string::npos) continue;
    if (max_clips > 0 && static_cast<int>(clips.size()) > max_clips) break;
    const std::string name = line.substr(0, bar);
    auto audio = waav::audio::LoadAudio16k(data_dir + "/speech/ljspeech/" + name);
    if (!audio.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), audio.status().ToString().c_str());
      return 1;
    }
    clips.push_back({name, audio->samples, line.substr(bar + 1)});
  }
  if (clips.empty()) {
    std::fprintf(stderr, "no clips under %s/speech\n", data_dir.c_str());
    return 1;
  }

  const std::vector<Rule> all_rules = {
      {"full 30 s", 0, 0},          {"1 s buckets", 50, 0},         {"1 s buckets +0.5 s", 50, 25},
      {"1 s buckets +1 s", 50, 50}, {"2 s buckets +2 s", 100, 100}, {"5 s buckets +2 s", 250, 100}};
  std::vector<Rule> rules = {all_rules[0]};
  for (size_t r = 1; r < all_rules.size(); ++r) {
    if (rule_indices.empty() || std::count(rule_indices.begin(), rule_indices.end(), r) > 0) {
      rules.push_back(all_rules[r]);
    }
  }
  std::map<int, std::unique_ptr<WhisperModel>> models;  // by encoder positions
  auto model_for = [&](int positions) -> const WhisperModel* {
    auto& slot = models[positions];
    if (!slot) {
      waav::whisper::WhisperModelOptions options;
      options.audio_ctx = positions;
      auto model = WhisperModel::Load(model_dir, **backend, options);
      if (!model.ok()) {
        std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
        std::exit(1);
      }
      slot = std::move(*model);
    }
    return slot.get();
  };

  waav::frontend::LogMel log_mel;
  std::vector<int> prompt = vocabulary.SotSequence();
  prompt.push_back(vocabulary.special().no_timestamps);
  waav::whisper::GreedyOptions greedy;
  greedy.max_repeats = 4;
  std::vector<Tally> tallies(rules.size());
  std::printf("clips: %zu, prefixes every %d ms and each whole clip; model %s; CPU backend\n",
              clips.size(), step_ms, model_dir.c_str());

  for (const Clip& clip : clips) {
    const size_t step = static_cast<size_t>(step_ms) * 16;
    std::vector<size_t> ends;
    for (size_t end = step * 2; end < clip.samples.size(); end += step) ends.push_back(end);
    ends.push_back(clip.samples.size());
    for (const size_t end : ends) {
      const bool whole = end == clip.samples.size();
      const auto features = log_mel.Compute(absl::MakeConstSpan(clip.samples.data(), end));
      const int content = std::min(features.n_frames - 1, 2 * full_positions);
      std::vector<std::string> full_words;
      std::string full_text;
      for (size_t r = 0; r < rules.size(); ++r) {
        const int positions = PositionsFor(rules[r], content, full_positions);
        const WhisperModel* model = model_for(positions);
        const int window = 2 * positions;
        std::vector<float> mel(static_cast<size_t>(features.n_mels) * window, 0.0f);
        for (int m = 0; m < features.n_mels; ++m) {
          const float* src = features.data.data() + static_cast<size_t>(m) * features.n_frames;
          std::copy(src, src + std::min(content, window),
                    mel.begin() + static_cast<size_t>(m) * window);
        }
        auto state = model->NewDecoderState(1);
        if (!state.ok()) return 1;
        const auto start = std::chrono::steady_clock::now();
        if (auto s = model->Encode(mel, **state); !s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        auto decoded = waav::whisper::DecodeGreedy(*model, vocabulary, prompt, greedy, **state);
        if (!decoded.ok()) {
          std::fprintf(stderr, "%s\n", decoded.status().ToString().c_str());
          return 1;
        }
        // The text a stream's first partial of this audio would show.
        const std::string text = PartialText(vocabulary, *decoded, end);
        const std::vector<std::string> words = Words(text);
        Tally& t = tallies[r];
        t.steps += decoded->steps;
        t.max_steps = std::max(t.max_steps, decoded->steps);
        t.long_decodes += decoded->steps > 20 ? 1 : 0;
        for (size_t k = 0; k < kNumStopRuns; ++k) {
          waav::streaming::RestartWatch watch(vocabulary, {}, kStopRuns[k]);
          size_t kept = 0;
          while (kept < decoded->tokens.size() && !watch.StopsBefore(decoded->tokens[kept])) ++kept;
          // Stopped before token `kept`: its step was the last.
          const int steps =
              kept < decoded->tokens.size() ? static_cast<int>(kept) + 1 : decoded->steps;
          t.stop_steps[k] += steps;
          t.stop_max_steps[k] = std::max(t.stop_max_steps[k], steps);
          if (kept == decoded->tokens.size()) continue;
          ++t.stopped[k];
          waav::whisper::GreedyResult stopped = *decoded;
          stopped.tokens.resize(kept);
          stopped.token_logprobs.resize(kept);
          if (PartialText(vocabulary, stopped, end) != text) {
            ++t.stop_changed[k];
            std::printf(
                "  %s @%.1f s [%s]: stopped at a restart of %d words changes\n    %s\n"
                "    to %s\n",
                clip.name.c_str(), static_cast<double>(end) / 16000, rules[r].name.c_str(),
                kStopRuns[k], text.c_str(), PartialText(vocabulary, stopped, end).c_str());
          }
        }
        t.encoder_ms += ms;
        ++t.encodes;
        t.positions += positions;
        if (r == 0) {
          full_words = words;
          full_text = text;
        }
        ++t.prefixes;
        const int edits = EditDistance(full_words, words);
        t.edits += edits;
        t.full_words += static_cast<int>(full_words.size());
        t.differing += edits > 0 ? 1 : 0;
        t.longer_by_3 += words.size() >= full_words.size() + 3 ? 1 : 0;
        const std::vector<std::string> reference = Words(clip.reference);
        if (!reference.empty()) {
          t.prefix_reference_edits += EditsFromBestPrefix(reference, words);
          t.prefix_words += static_cast<int>(words.size());
        }
        if (whole && !reference.empty()) {
          t.clip_edits += EditDistance(reference, words);
          t.reference_words += static_cast<int>(reference.size());
        }
        if (r > 0 && edits > 0) {
          std::printf("  %s @%.1f s [%s, %d positions]: %d edits\n    full: %s\n    this: %s\n",
                      clip.name.c_str(), static_cast<double>(end) / 16000, rules[r].name.c_str(),
                      positions, edits, full_text.c_str(), text.c_str());
        }
      }
    }
  }

  std::printf("\n%-20s %9s %13s %12s %10s %16s %10s %10s %11s\n", "rule", "prefixes", "edits/words",
              "prefixes !=", "3+ longer", "vs reference", "clip WER", "mean pos.", "encoder ms");
  for (size_t r = 0; r < rules.size(); ++r) {
    const Tally& t = tallies[r];
    std::printf("%-20s %9d %6d/%-6d %12d %10d %8d/%-6d %9.2f%% %10.0f %11.1f\n",
                rules[r].name.c_str(), t.prefixes, t.edits, t.full_words, t.differing,
                t.longer_by_3, t.prefix_reference_edits, t.prefix_words,
                t.reference_words > 0 ? 100.0 * t.clip_edits / t.reference_words : 0.0,
                static_cast<double>(t.positions) / t.encodes, t.encoder_ms / t.encodes);
  }
  std::printf("\n%-20s %9s %11s %10s %10s", "rule", "decodes", "steps", "max steps", ">20 steps");
  for (const int run : kStopRuns) std::printf("  stop at %d: steps / max / stopped / changed", run);
  std::printf("\n");
  for (size_t r = 0; r < rules.size(); ++r) {
    const Tally& t = tallies[r];
    std::printf("%-20s %9d %11ld %10d %10d", rules[r].name.c_str(), t.encodes, t.steps, t.max_steps,
                t.long_decodes);
    for (size_t k = 0; k < kNumStopRuns; ++k) {
      std::printf("  %32ld / %d / %d / %d", t.stop_steps[k], t.stop_max_steps[k], t.stopped[k],
                  t.stop_changed[k]);
    }
    std::printf("\n");
  }
  return 0;
}

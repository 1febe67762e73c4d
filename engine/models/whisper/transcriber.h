// Whole-file transcription: Whisper's 30 s sliding window with seek, as faster-whisper 1.2.1
// runs it with beam 1 and temperature 0 (no sampling fallback), conditioned on previous text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/vocabulary.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/models/whisper/word_alignment.h"

namespace waav::whisper {

// A word with its time in the audio, as faster-whisper's Word.
struct Word {
  std::string word;  // as the tokenizer decodes it, usually with a leading space
  double start_s = 0;
  double end_s = 0;
  // Mean probability of the word's tokens in the alignment pass (no earlier-text prompt;
  // softmax over the text tokens), as faster-whisper's.
  float probability = 0;
};

struct Segment {
  double start_s = 0;
  double end_s = 0;
  std::string text;          // as the tokenizer decodes it, usually with a leading space
  std::vector<int> tokens;   // including timestamp tokens
  double avg_logprob = 0;
  float no_speech_prob = 0;
  std::vector<Word> words;   // with TranscribeOptions::word_timestamps
};

struct Transcript {
  double duration_s = 0;
  std::vector<Segment> segments;
  std::string Text() const;  // segment texts joined, outer whitespace stripped
};

struct TranscribeOptions {
  GreedyOptions greedy;
  // Prompt each window with the text decoded so far. Default: true.
  bool condition_on_previous_text = true;
  // A window whose no-speech probability exceeds this (and whose average log-probability is
  // not above log_prob_threshold) is skipped as silence. Default: 0.6.
  float no_speech_threshold = 0.6f;
  // Default: −1.0.
  float log_prob_threshold = -1.0f;
  // Word timestamps from cross-attention, as faster-whisper's word_timestamps=True (which also
  // changes where the next window starts: after the last word). Needs the model's alignment
  // heads. Default: false.
  bool word_timestamps = false;
};

class Transcriber {
 public:
  // Loads model.bin and tokenizer.json from `model_dir` onto `backend`, and the alignment heads
  // for word timestamps from config.json when it has them (a malformed one is an error).
  static absl::StatusOr<std::unique_ptr<Transcriber>> Load(const std::string& model_dir,
                                                           Backend& backend,
                                                           WhisperModelOptions model_options = {});

  // Transcribes 16 kHz mono samples.
  absl::StatusOr<Transcript> Transcribe(absl::Span<const float> samples_16k,
                                        const TranscribeOptions& options = {}) const;

  const WhisperModel& model() const { return *model_; }
  const Vocabulary& vocabulary() const { return vocabulary_; }
  // Word timestamps from cross-attention; null when the model folder lists no alignment heads.
  const WordAligner* word_aligner() const { return word_aligner_.get(); }

 private:
  Transcriber(std::unique_ptr<WhisperModel> model, Vocabulary vocabulary)
      : model_(std::move(model)), vocabulary_(std::move(vocabulary)) {}

  std::unique_ptr<WhisperModel> model_;
  Vocabulary vocabulary_;
  std::unique_ptr<WordAligner> word_aligner_;  // refers to model_ and vocabulary_
  frontend::LogMel log_mel_;
};

}  // namespace waav::whisper

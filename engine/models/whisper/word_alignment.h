// Word-level timestamps from cross-attention, the way Whisper computes them (openai-whisper's
// timing.find_alignment; faster-whisper's word_timestamps=True through CTranslate2's align):
//
//   1. One teacher-forced decoder pass over <|sot|> [task] <|notimestamps|> text... <|eot|> against
//      the encoded window; the pre-softmax cross-attention scores of the model's alignment heads
//      (config.json "alignment_heads") over the encoder positions that hold audio (20 ms each).
//   2. Per head: softmax over those positions, z-score of every position's column over all the
//      pass's tokens, a width-7 median filter along time; then the mean over heads.
//   3. The rows from <|notimestamps|> (which predicts the first text token) to the last text
//      token (which predicts <|eot|>): dynamic time warping on the negated matrix gives a
//      monotonic path; a row's first column on the path is when its token starts.
//   4. Tokens are grouped into words as faster-whisper does (split_tokens_on_spaces), each word
//      spanning from its first token's start to the next word's start; then faster-whisper's
//      clean-ups: long words at sentence ends truncated, punctuation merged into its neighbour,
//      an over-long first word after a pause shortened.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/models/whisper/vocabulary.h"
#include "engine/models/whisper/whisper_model.h"

namespace waav::whisper {

// Milliseconds per encoder position (two mel frames of 10 ms).
inline constexpr int kMsPerAudioPosition = 20;

// Median of every window of `width` values (odd, ≥ 1) along each row of the row-major
// [rows, cols] `matrix`, the row mirrored at its ends without repeating the edge (x2 x1 | x0 x1
// x2 ...). Rows of at most width / 2 values are returned unchanged (nothing to mirror).
std::vector<float> MedianFilterRows(absl::Span<const float> matrix, int rows, int cols, int width);

// Subtracts each column's mean over the rows and divides by its standard deviation (population,
// no epsilon), in place. A column with zero deviation becomes zeros.
void StandardizeColumns(absl::Span<float> matrix, int rows, int cols);

// The minimum-cost monotonic path through the row-major [rows, cols] `cost` from (0, 0) to
// (rows − 1, cols − 1), moving down, right or diagonally; ties go right, then down. Returned as
// (row, col) pairs from the start. Empty when rows or cols is 0.
struct PathPoint {
  int row = 0;
  int col = 0;
};
std::vector<PathPoint> DtwPath(absl::Span<const float> cost, int rows, int cols);

// The host half of the alignment (steps 2 and 3 of WordAligner below) on the scores of
// WhisperModel::CrossAttentionScores ([heads, n_tokens, n_positions]): each head's softmax per
// token row, columns standardised, rows median-filtered; the heads' mean over token rows
// [first_row, first_row + rows), negated, as DTW cost; the first position of each of those rows
// on the path.
std::vector<int> TokenStartsFromScores(absl::Span<const float> scores, int heads, int n_tokens,
                                       int n_positions, int first_row, int rows);

// A word and where it is in the audio, relative to the window's start.
struct TimedWord {
  std::string text;     // as the tokenizer decodes it, usually with a leading space
  int token_begin = 0;  // its tokens: text_tokens[token_begin, token_end)
  int token_end = 0;
  int start_ms = 0;
  int end_ms = 0;
};

// Splits text tokens into words as faster-whisper's Tokenizer.split_to_word_tokens does for
// languages with spaces: tokens are grouped until they decode to whole UTF-8 characters, and a
// group starts a new word when it begins with a space, is punctuation, or is a special token.
// Times are left 0.
std::vector<TimedWord> SplitWords(const Vocabulary& vocabulary, absl::Span<const int> text_tokens);

// The median word duration (nonzero durations only, capped at 700 ms) and twice it, as
// faster-whisper computes them for its clean-ups.
struct WordDurations {
  double median_ms = 0;
  double max_ms = 0;
};

// The window-level part of faster-whisper's clean-ups (see PostProcessWords): long words at
// sentence ends truncated, punctuation merged. Merged-away words stay, with empty text and no
// tokens, so that words can be dealt to segments by token counts as faster-whisper does.
WordDurations TruncateAndMergeWords(std::vector<TimedWord>& words);

// faster-whisper's clean-ups after alignment (add_word_timestamps with its default punctuation),
// with the audio's start as the last speech before the words: words at sentence boundaries
// longer than twice the median word duration (≤ 0.7 s) are shortened; leading punctuation
// ("¿([{-…) is merged into the word after it and trailing punctuation (.,!?:…) into the word
// before it, which keep their times; empty words are dropped; a first word that ends long after
// the start and is too long is shortened.
void PostProcessWords(std::vector<TimedWord>& words);

// Reads "alignment_heads" ([[layer, head], ...]) from a CTranslate2 model's config.json and
// checks them against `dims`.
absl::StatusOr<std::vector<AttentionHead>> ReadAlignmentHeads(const std::string& config_path,
                                                              const WhisperDims& dims);

class WordAligner {
 public:
  // Alignment heads from `model_dir`/config.json. The model and vocabulary must outlive it.
  static absl::StatusOr<std::unique_ptr<WordAligner>> Create(const WhisperModel& model,
                                                             const Vocabulary& vocabulary,
                                                             const std::string& model_dir);
  WordAligner(const WhisperModel& model, const Vocabulary& vocabulary,
              std::vector<AttentionHead> heads)
      : model_(model), vocabulary_(vocabulary), heads_(std::move(heads)) {}

  // The start of each of `text_tokens` and of the <|endoftext|> after them (text_tokens.size() + 1
  // values), in encoder positions from the window's start: steps 1 to 3 above. `audio_samples`
  // (16 kHz) is how much of the window `encoded` (batch 1) holds audio. With `token_probs`, also
  // each text token's probability in the alignment pass (softmax over the text vocabulary), as
  // faster-whisper's word probabilities take them; that runs the whole decoder and its logits.
  absl::StatusOr<std::vector<int>> TokenStarts(absl::Span<const int> text_tokens,
                                               size_t audio_samples, const DecoderState& encoded,
                                               std::vector<float>* token_probs = nullptr) const;

  // Timed words of `text_tokens` (all below <|endoftext|>), post-processed; empty for no tokens.
  absl::StatusOr<std::vector<TimedWord>> Align(absl::Span<const int> text_tokens,
                                               size_t audio_samples,
                                               const DecoderState& encoded) const;

  // Align for several finished rows of one batch state at once: one decoder pass for all of
  // them (WhisperModel::CrossAttentionScoresBatch, its scores computed where the pass runs), then
  // each row's host half, through `for_each(n, fn)` (fn(0) .. fn(n − 1), in any order or in
  // parallel; null: in turn). Element
  // k is request k's words, or its own error (a token that is not text, audio under 20 ms);
  // an error of the shared pass is every request's. The same words as Align row by row, up to
  // the rounding of the backend's batched GEMMs.
  struct AlignRequest {
    int row = 0;  // of `batch`
    absl::Span<const int> text_tokens;
    size_t audio_samples = 0;
  };
  using ForEachFn = whisper::ForEachFn;
  // Where an AlignBatch call's time went on the calling thread (for profiles): the shared pass
  // (issued, then waiting for its scores) and the requests' host halves.
  struct AlignTimings {
    ScoresTimings pass;
    double host_ms = 0;
  };
  std::vector<absl::StatusOr<std::vector<TimedWord>>> AlignBatch(
      absl::Span<const AlignRequest> requests, const DecoderState& batch,
      const ForEachFn& for_each = nullptr, AlignTimings* timings = nullptr) const;

  const std::vector<AttentionHead>& heads() const { return heads_; }

 private:
  // The teacher-forced sequence of a text: <|startoftranscript|> ... <|notimestamps|> text
  // <|endoftext|>, the row that predicts the first text token, and the encoder positions that
  // hold `audio_samples` of audio.
  struct Sequence {
    std::vector<int32_t> tokens;
    int first_row = 0;
    int n_positions = 0;
  };
  absl::StatusOr<Sequence> SequenceFor(absl::Span<const int> text_tokens,
                                       size_t audio_samples) const;
  std::vector<int> StartsOf(const Sequence& seq, absl::Span<const float> scores,
                            size_t text_tokens) const;
  std::vector<TimedWord> WordsOf(absl::Span<const int> text_tokens,
                                 const std::vector<int>& starts) const;

  const WhisperModel& model_;
  const Vocabulary& vocabulary_;
  std::vector<AttentionHead> heads_;
};

}  // namespace waav::whisper

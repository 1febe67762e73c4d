// Greedy decoding of one 30 s window with Whisper's logit rules, as CTranslate2 applies them for
// faster-whisper (beam 1, temperature 0): the no-speech probability from the first step's raw
// logits, suppressed tokens, blank suppression at the first step, and the timestamp rules
// (timestamps in pairs, non-decreasing, a timestamp first and at most max_initial_timestamp).
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/models/whisper/vocabulary.h"
#include "engine/models/whisper/whisper_model.h"

namespace waav::whisper {

struct GreedyOptions {
  // Most tokens in prompt + output; the output gets at most half. Default: the model's 448.
  int max_length = 448;
  // Tokens never emitted. Default (empty): Vocabulary::SuppressedTokens().
  std::vector<int> suppress_tokens;
  // Suppress " " and <|endoftext|> as the first sampled token. Default: true.
  bool suppress_blank = true;
  // Latest first timestamp, in 0.02 s steps. Default: 50 (1.0 s).
  int max_initial_timestamp_index = 50;
  // Called after the rules at every step with the step's logits (disabled entries −inf), before
  // the token is chosen; for parity tests and diagnostics. Default: none.
  std::function<void(int step, absl::Span<const float> logits)> on_step;
};

struct GreedyResult {
  std::vector<int> tokens;       // sampled tokens without the final <|endoftext|>
  std::vector<float> token_logprobs;  // log-probability of each of `tokens`
  double sum_logprob = 0;        // log-probabilities of every sampled token, <|endoftext|> too
  double avg_logprob = 0;        // sum_logprob / (tokens + 1), as faster-whisper reports it
  float no_speech_prob = 0;      // P(<|nospeech|>) at the <|startoftranscript|> position
};

// The logit rules on one row of logits (in place: disallowed entries become −inf).
// `sampled` are the tokens sampled so far in this window; `step` == sampled.size(). Without
// `timestamps` (prompts ending in <|notimestamps|>) every timestamp token is disabled instead of
// the timestamp rules.
class LogitRules {
 public:
  LogitRules(const Vocabulary& vocabulary, const GreedyOptions& options, bool timestamps = true);
  void Apply(absl::Span<const int> sampled, absl::Span<float> logits) const;

 private:
  const SpecialTokens special_;
  const bool timestamps_;
  const int n_vocab_;
  const int max_initial_timestamp_id_;
  std::vector<int> suppress_;
  std::vector<int> suppress_begin_;
};

// Runs the decoder from `prompt` over the window already encoded into `state` (batch size 1).
// The prompt is [<|startofprev|> context...] <|startoftranscript|> [task tokens]
// [<|notimestamps|> [forced prefix...]]; a forced prefix is fed, never sampled, and is not part of
// the result's tokens.
absl::StatusOr<GreedyResult> DecodeGreedy(const WhisperModel& model, const Vocabulary& vocabulary,
                                          const std::vector<int>& prompt,
                                          const GreedyOptions& options, DecoderState& state);

}  // namespace waav::whisper

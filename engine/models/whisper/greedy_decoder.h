// Greedy decoding of one 30 s window with Whisper's logit rules, as CTranslate2 applies them for
// faster-whisper (beam 1, temperature 0): the no-speech probability from the first step's raw
// logits, suppressed tokens, blank suppression at the first step, and the timestamp rules
// (timestamps in pairs, non-decreasing, a timestamp first and at most max_initial_timestamp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/models/whisper/decoder_pool.h"
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
  // the token is chosen; for parity tests and diagnostics. DecodeGreedyBatch calls it for every
  // row still decoding, in row order. Default: none.
  std::function<void(int step, absl::Span<const float> logits)> on_step;
  // When > 0: a row stops as soon as its sampled tokens end with this many copies in a row of
  // the same n-gram (n <= 16), keeping one copy (none when it holds no letter or digit):
  // Whisper at temperature 0 can loop (". . . ." to the length limit) where the reference would
  // fall back to sampling, which a streaming decoder has no time for. 0 (the reference's
  // behaviour, for offline parity): never.
  int max_repeats = 0;
  // When set: called with each row's sampled token before the row keeps it (<|endoftext|>
  // aside), on the thread that sampled that row (DecodeGreedyBatch may sample rows on several
  // threads; DecodeGreedy's row is row 0). True ends the row there as <|endoftext|> would: the
  // token is not kept (its log-probability counts in sum_logprob as <|endoftext|>'s would) and
  // GreedyResult::stopped is set. For policies that know when more tokens are of no use, e.g.
  // a streaming partial whose words start over (streaming::RestartWatch). Default: none.
  std::function<bool(int row, int token)> stop_before;
  // DecodeGreedyBatch: prefill the rows' prompts in one batched pass (WhisperModel::PrefillRows)
  // instead of one row at a time. kAuto: on backends whose device is not the CPU (on the CPU a
  // pass over more rows may take another GEMM path and differ in the last bits). Default: kAuto.
  GraphUse batch_prefill = GraphUse::kAuto;
  // DecodeGreedyBatch: make the greedy choice where the logits are (Backend::ArgmaxLogSumExp with
  // the rules' fixed masks, LogitRules::FixedMask) at the steps whose rules allow it, downloading
  // five numbers per row instead of the logits; other steps and rows (the timestamp rules that
  // need the distribution, the no-speech probability at the first step) sample on the host.
  // kAuto: on backends whose device is not the CPU that implement the op; kAlways: wherever
  // implemented; kNever: host only. Never while on_step is set (it needs the logits).
  // Default: kAuto.
  GraphUse reduce_on_device = GraphUse::kAuto;
  // DecodeGreedyBatch, when every row takes the device's choice at every step (reduce_on_device,
  // and prompts whose rules are fixed after the first token: text only, <|notimestamps|>):
  // submit each step before reading the last one's choices. The device writes the next step's
  // inputs from the choices (Backend::FeedChoices) and the host reads each step's choices
  // (Backend::CopyToHostAsync) while the next step runs, so the GPU does not idle while the host
  // takes its turn. A step submitted ahead for rows that then finish is computed and left
  // unread (GreedyBatchTimings::unread_steps; at least one at the end of a call). The same tokens
  // as without. kAuto: on backends that implement FeedChoices whose device is not the CPU;
  // kAlways: wherever implemented; kNever: one step at a time. Default: kAuto.
  GraphUse pipeline = GraphUse::kAuto;
};

struct GreedyResult {
  std::vector<int> tokens;            // sampled tokens without the final <|endoftext|>
  std::vector<float> token_logprobs;  // log-probability of each of `tokens`
  double sum_logprob = 0;             // log-probabilities of every sampled token, <|endoftext|> too
  double avg_logprob = 0;             // sum_logprob / (tokens + 1), as faster-whisper reports it
  float no_speech_prob = 0;           // P(<|nospeech|>) at the <|startoftranscript|> position
  int steps = 0;                      // single-token decoder steps (the prefill not counted)
  bool cut_repetition = false;        // stopped by GreedyOptions::max_repeats
  bool stopped = false;               // stopped by GreedyOptions::stop_before
};

// The logit rules on one row of logits (in place: disallowed entries become −inf).
// `sampled` are the tokens sampled so far in this window; `step` == sampled.size(). Without
// `timestamps` (prompts ending in <|notimestamps|>) every timestamp token is disabled instead of
// the timestamp rules.
class LogitRules {
 public:
  LogitRules(const Vocabulary& vocabulary, const GreedyOptions& options, bool timestamps = true);
  void Apply(absl::Span<const int> sampled, absl::Span<float> logits) const;

  // Masks that Apply amounts to at some steps, whatever the logits (Backend::ArgmaxLogSumExp's
  // layout), rows:
  enum FixedMaskRow : int {
    kTextFirst = 0,       // no timestamps, first step
    kText = 1,            // no timestamps, later steps; with timestamps, right after a pair
    kTimestampFirst = 2,  // timestamps, first step
    kAllowAll = 3,        // nothing disabled (the no-speech probability's log-sum-exp)
    kOnlyNoSpeech = 4,    // everything but <|nospeech|> disabled (reads its logit)
    kNumFixedMasks = 5,
  };
  // The row of FixedMaskBits() that Apply(sampled, ·) equals, or −1 when the step's rules depend
  // on the logits (the timestamp rules after text or an open timestamp).
  int FixedMask(absl::Span<const int> sampled) const;
  // The mask of the step after `sampled_count` tokens whatever they were, or −1 where it depends
  // on them (the timestamp rules after the first step).
  int FixedMaskAfter(size_t sampled_count) const;
  // i32 [kNumFixedMasks, ceil(n_vocab / 32)], bit t % 32 of word t / 32 set when the mask
  // disables token t; made by Apply itself on finite logits, so it cannot drift from the rules.
  std::vector<int32_t> FixedMaskBits() const;

 private:
  void ApplyRules(bool timestamps, absl::Span<const int> sampled, absl::Span<float> logits) const;

  const SpecialTokens special_;
  const bool timestamps_;
  const int n_vocab_;
  const int max_initial_timestamp_id_;
  std::vector<int> suppress_;
  std::vector<int> suppress_begin_;
};

// Checks `prompt` as DecodeGreedy does before decoding (a <|startoftranscript|> token, room to
// decode within min(options.max_length, n_text_ctx), a forced prefix only after
// <|notimestamps|>), so that a batch can leave out a row that would fail.
absl::Status CheckPrompt(const Vocabulary& vocabulary, const std::vector<int>& prompt,
                         const GreedyOptions& options, int n_text_ctx);

// Runs the decoder from `prompt` over the window already encoded into `state` (batch size 1).
// The prompt is [<|startofprev|> context...] <|startoftranscript|> [task tokens]
// [<|notimestamps|> [forced prefix...]]; a forced prefix is fed, never sampled, and is not part of
// the result's tokens.
absl::StatusOr<GreedyResult> DecodeGreedy(const WhisperModel& model, const Vocabulary& vocabulary,
                                          const std::vector<int>& prompt,
                                          const GreedyOptions& options, DecoderState& state);

// Where DecodeGreedyBatch spent its time (host wall clock, ms), for profiles and logs.
struct GreedyBatchTimings {
  double prefill_ms = 0;  // the prompts' prefills (one row at a time, or one batched pass)
  // The batched pass: the longest prompt fed (tokens a row; 0 without one) and the time until
  // WhisperModel::PrefillRows returned (its uploads and kernels issued); the rest of prefill_ms
  // is the rows' setup and reading the no-speech probabilities, which waits for the pass.
  int prefill_tokens = 0;
  double prefill_pass_ms = 0;
  double step_ms = 0;       // decoder steps: inputs up, the step (graph replay), logits or the
                            // device's choices (ArgmaxLogSumExp) down
  double sample_ms = 0;     // the logit rules and the choice of each row's token, on the host
  int device_steps = 0;     // steps whose rows all took the device's choice (no logits down)
  int steps = 0;            // batched decoder steps
  int pipelined_steps = 0;  // of them, submitted before the last one's choices were read
  int unread_steps = 0;     // of those, steps whose rows had all finished when they were read
  int64_t row_steps = 0;    // rows decoding, summed over the steps
};

// Greedy decoding of prompts.size() windows in lockstep, window b in slot b of `pool`: its
// cross-attention K/V must already be there (WhisperModel::EncodeOnDevice on pool.Row(b)).
// Each row's prompt is prefilled on its own slot exactly as DecodeGreedy prefills it, or all rows
// in one batched pass (GreedyOptions::batch_prefill; the same values up to rounding); then one
// DecoderStep serves every row at its own position with its own rules, until each row samples
// <|endoftext|> or reaches its length limit. A finished row stays in the batch, masked (fed a
// dummy token at position 0, its logits ignored), until every row above it has finished too;
// the batch then shrinks to the smallest bucket that still holds the highest row decoding
// (DecoderStatePool::ForRows), so no cache is ever copied. Put the rows expected to run longest
// first. The kernels treat rows independently, so on the CPU backend (batch ≤ 32, the
// small-GEMM path) each row's tokens equal DecodeGreedy's on that window alone; the test
// greedy_batch_test checks it. An invalid prompt (CheckPrompt) fails the whole call.
// `on_row_done`, when given, gets each row's result as soon as that row is done (between
// steps, on the calling thread), so that a caller can send it before the batch's longest row
// ends; the returned vector holds the same results. Each step downloads the logits of the rows up
// to the highest one decoding only, and, with 8 or more rows decoding and no on_step callback,
// samples the rows on several threads (each row's computation is the same as alone, so the
// results do not change). `timings`, when given, gets where the time went.
absl::StatusOr<std::vector<GreedyResult>> DecodeGreedyBatch(
    const WhisperModel& model, const Vocabulary& vocabulary,
    absl::Span<const std::vector<int>> prompts, const GreedyOptions& options,
    DecoderStatePool& pool,
    const std::function<void(int row, const GreedyResult&)>& on_row_done = nullptr,
    GreedyBatchTimings* timings = nullptr);

}  // namespace waav::whisper

#include "engine/models/whisper/greedy_decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::whisper {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void Disable(absl::Span<float> logits, int begin, int end) {
  begin = std::max(begin, 0);
  end = std::min(end, static_cast<int>(logits.size()));
  for (int i = begin; i < end; ++i) logits[static_cast<size_t>(i)] = kNegInf;
}

// log(sum(exp(x))) over a range, stable; −inf when every entry is −inf.
double LogSumExp(const float* x, int n) {
  float max_value = kNegInf;
  for (int i = 0; i < n; ++i) max_value = std::max(max_value, x[i]);
  if (max_value == kNegInf) return kNegInf;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - max_value));
  return max_value + std::log(sum);
}

}  // namespace

LogitRules::LogitRules(const Vocabulary& vocabulary, const GreedyOptions& options,
                       bool timestamps)
    : special_(vocabulary.special()),
      timestamps_(timestamps),
      n_vocab_(vocabulary.n_vocab()),
      max_initial_timestamp_id_(special_.timestamp_begin + options.max_initial_timestamp_index),
      suppress_(options.suppress_tokens.empty() ? vocabulary.SuppressedTokens()
                                                : options.suppress_tokens) {
  if (options.suppress_blank) {
    const std::vector<int> space = vocabulary.tokenizer().Encode(" ");
    if (!space.empty()) suppress_begin_.push_back(space[0]);
    suppress_begin_.push_back(special_.eot);
  }
}

void LogitRules::Apply(absl::Span<const int> sampled, absl::Span<float> logits) const {
  const int step = static_cast<int>(sampled.size());
  const int ts_begin = special_.timestamp_begin;
  for (int id : suppress_) Disable(logits, id, id + 1);
  if (step == 0) {
    for (int id : suppress_begin_) Disable(logits, id, id + 1);
  }
  Disable(logits, special_.no_timestamps, special_.no_timestamps + 1);
  if (!timestamps_) {
    Disable(logits, ts_begin, n_vocab_);  // the prompt asked for text only
    return;
  }

  if (step == 0) {
    // The window starts with a timestamp no later than max_initial_timestamp.
    Disable(logits, 0, ts_begin);
    Disable(logits, max_initial_timestamp_id_ + 1, n_vocab_);
    return;
  }
  bool check_timestamp_probability = true;
  const int last = sampled[static_cast<size_t>(step - 1)];
  if (last >= ts_begin) {
    const int penultimate = step >= 2 ? sampled[static_cast<size_t>(step - 2)] : last;
    if (penultimate >= ts_begin) {
      Disable(logits, ts_begin, n_vocab_);  // a pair just closed: text must follow
      check_timestamp_probability = false;
    } else {
      // An open timestamp: it closes with a timestamp no earlier than itself, or the window ends.
      Disable(logits, 0, special_.eot);
      Disable(logits, ts_begin, last);
    }
  } else {
    // After text, the next timestamp is strictly later than the last one, so every segment has
    // a non-zero length.
    for (int t = step - 1; t >= 0; --t) {
      const int token = sampled[static_cast<size_t>(t)];
      if (token >= ts_begin) {
        Disable(logits, ts_begin, token + 1);
        break;
      }
    }
  }
  if (check_timestamp_probability) {
    // If the timestamps together are likelier than any single text token, emit a timestamp.
    const double log_total = LogSumExp(logits.data(), n_vocab_);
    const double timestamp_logprob =
        LogSumExp(logits.data() + ts_begin, n_vocab_ - ts_begin) - log_total;
    float max_text = kNegInf;
    for (int i = 0; i < ts_begin; ++i) max_text = std::max(max_text, logits[static_cast<size_t>(i)]);
    const double max_text_logprob = static_cast<double>(max_text) - log_total;
    if (timestamp_logprob > max_text_logprob) Disable(logits, 0, ts_begin);
  }
}

absl::StatusOr<GreedyResult> DecodeGreedy(const WhisperModel& model, const Vocabulary& vocabulary,
                                          const std::vector<int>& prompt,
                                          const GreedyOptions& options, DecoderState& state) {
  const SpecialTokens& special = vocabulary.special();
  auto sot = std::find(prompt.begin(), prompt.end(), special.sot);
  if (sot == prompt.end()) {
    return absl::InvalidArgumentError("decoder prompt has no <|startoftranscript|> token");
  }
  // The prompt is fed up to its last control token; sampling starts after it (CTranslate2
  // feeds everything before that token as a batch, then steps from it).
  size_t prompt_length = static_cast<size_t>(sot - prompt.begin());
  while (prompt_length < prompt.size() && prompt[prompt_length] >= special.sot &&
         prompt[prompt_length] <= special.no_timestamps) {
    ++prompt_length;
  }
  const bool timestamps = prompt[prompt_length - 1] != special.no_timestamps;
  if (prompt_length != prompt.size() && timestamps) {
    return absl::UnimplementedError(
        "a forced prefix is supported only after <|notimestamps|>");
  }
  // Everything but the last prompt token is fed as one batch; sampling starts from the last.
  const int start_step = static_cast<int>(prompt.size()) - 1;
  const int max_length = std::min(options.max_length, model.dims().n_text_ctx);
  if (start_step >= max_length) {
    return absl::InvalidArgumentError(absl::StrCat("decoder prompt of ", prompt.size(),
                                                   " tokens leaves no room to decode"));
  }
  const int max_steps = std::min(max_length / 2, max_length - start_step);

  // <|nospeech|> is read at the <|startoftranscript|> position. When the prompt goes on past it
  // (<|notimestamps|>, a forced prefix), the prefill stops there once to read it.
  const int sot_index = static_cast<int>(sot - prompt.begin());
  GreedyResult result;
  int fed = 0;
  if (sot_index < start_step) {
    std::vector<int32_t> head(prompt.begin(), prompt.begin() + sot_index + 1);
    std::vector<int32_t> position = {0};
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     model.Decode(head, static_cast<int>(head.size()), position, state));
    const double log_total = LogSumExp(logits.data(), model.dims().n_vocab);
    result.no_speech_prob = static_cast<float>(
        std::exp(logits[static_cast<size_t>(special.no_speech)] - log_total));
    fed = sot_index + 1;
  }
  if (fed < start_step) {
    std::vector<int32_t> rest(prompt.begin() + fed, prompt.begin() + start_step);
    std::vector<int32_t> position = {fed};
    RETURN_IF_ERROR(
        model.Decode(rest, static_cast<int>(rest.size()), position, state).status());
  }

  LogitRules rules(vocabulary, options, timestamps);
  std::vector<int> sampled;
  int32_t input = prompt[static_cast<size_t>(start_step)];
  const int n_vocab = model.dims().n_vocab;
  for (int step = 0; step < max_steps; ++step) {
    std::vector<int32_t> position = {start_step + step};
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     model.Decode(absl::MakeConstSpan(&input, 1), 1, position, state));
    absl::Span<float> row(logits.data(), static_cast<size_t>(n_vocab));
    if (step == 0 && sot_index == start_step) {
      const double log_total = LogSumExp(row.data(), n_vocab);
      result.no_speech_prob =
          static_cast<float>(std::exp(row[static_cast<size_t>(special.no_speech)] - log_total));
    }
    rules.Apply(sampled, row);
    if (options.on_step) options.on_step(step, row);
    const auto best = std::max_element(row.begin(), row.end());
    const int token = static_cast<int>(best - row.begin());
    const double logprob = static_cast<double>(*best) - LogSumExp(row.data(), n_vocab);
    result.sum_logprob += logprob;
    if (token == special.eot) break;
    result.token_logprobs.push_back(static_cast<float>(logprob));
    sampled.push_back(token);
    input = token;
  }
  result.tokens = std::move(sampled);
  result.avg_logprob = result.sum_logprob / static_cast<double>(result.tokens.size() + 1);
  return result;
}

}  // namespace waav::whisper

#include "engine/models/whisper/greedy_decoder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

LogitRules::LogitRules(const Vocabulary& vocabulary, const GreedyOptions& options, bool timestamps)
    : special_(vocabulary.special()),
      timestamps_(timestamps),
      n_vocab_(vocabulary.n_vocab()),
      max_initial_timestamp_id_(special_.timestamp_begin + options.max_initial_timestamp_index),
      suppress_(options.suppress_tokens.empty() ? vocabulary.SuppressedTokens()
                                                : options.suppress_tokens) {
  if (options.suppress_blank) {
    if (vocabulary.blank_token() >= 0) suppress_begin_.push_back(vocabulary.blank_token());
    suppress_begin_.push_back(special_.eot);
  }
}

void LogitRules::Apply(absl::Span<const int> sampled, absl::Span<float> logits) const {
  ApplyRules(timestamps_, sampled, logits);
}

int LogitRules::FixedMask(absl::Span<const int> sampled) const {
  const size_t step = sampled.size();
  if (!timestamps_) return step == 0 ? kTextFirst : kText;
  if (step == 0) return kTimestampFirst;
  const int ts_begin = special_.timestamp_begin;
  const int last = sampled[step - 1];
  const int penultimate = step >= 2 ? sampled[step - 2] : last;
  if (last >= ts_begin && penultimate >= ts_begin) return kText;  // a pair just closed
  return -1;
}

int LogitRules::FixedMaskAfter(size_t sampled_count) const {
  if (!timestamps_) return sampled_count == 0 ? kTextFirst : kText;
  return sampled_count == 0 ? kTimestampFirst : -1;
}

std::vector<int32_t> LogitRules::FixedMaskBits() const {
  const size_t words = (static_cast<size_t>(n_vocab_) + 31) / 32;
  std::vector<int32_t> bits(kNumFixedMasks * words, 0);
  std::vector<float> logits(static_cast<size_t>(n_vocab_));
  auto store = [&](int row) {
    for (size_t t = 0; t < logits.size(); ++t) {
      if (logits[t] == kNegInf) {
        bits[static_cast<size_t>(row) * words + t / 32] |= static_cast<int32_t>(1u << (t % 32));
      }
    }
  };
  const int text = 0;  // any text token: without timestamps only the step count matters
  struct Case {
    int row;
    bool timestamps;
    absl::Span<const int> sampled;
  };
  // kText is also what the timestamp rules give right after a pair (FixedMask relies on it;
  // greedy_decoder_test checks every fixed mask against Apply on random histories).
  for (const Case& c :
       {Case{kTextFirst, false, {}}, Case{kText, false, absl::MakeConstSpan(&text, 1)},
        Case{kTimestampFirst, true, {}}}) {
    std::fill(logits.begin(), logits.end(), 1.0f);
    ApplyRules(c.timestamps, c.sampled, absl::MakeSpan(logits));
    store(c.row);
  }
  for (size_t w = 0; w < words; ++w) bits[kOnlyNoSpeech * words + w] = -1;
  const size_t ns = static_cast<size_t>(special_.no_speech);
  bits[kOnlyNoSpeech * words + ns / 32] &= ~static_cast<int32_t>(1u << (ns % 32));
  // Bits past n_vocab stay as set (no column reads them).
  return bits;
}

void LogitRules::ApplyRules(bool timestamps, absl::Span<const int> sampled,
                            absl::Span<float> logits) const {
  const int step = static_cast<int>(sampled.size());
  const int ts_begin = special_.timestamp_begin;
  for (int id : suppress_) Disable(logits, id, id + 1);
  if (step == 0) {
    for (int id : suppress_begin_) Disable(logits, id, id + 1);
  }
  Disable(logits, special_.no_timestamps, special_.no_timestamps + 1);
  if (!timestamps) {
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
    for (int i = 0; i < ts_begin; ++i)
      max_text = std::max(max_text, logits[static_cast<size_t>(i)]);
    const double max_text_logprob = static_cast<double>(max_text) - log_total;
    if (timestamp_logprob > max_text_logprob) Disable(logits, 0, ts_begin);
  }
}

namespace {

// Where a prompt's parts are and how far it may decode (DecodeGreedy's header has the layout).
struct PromptPlan {
  int sot_index = 0;   // <|startoftranscript|>
  int start_step = 0;  // the last prompt token: fed at the first step, sampling follows it
  bool timestamps = true;
  int max_steps = 0;
};

absl::StatusOr<PromptPlan> PlanPrompt(const SpecialTokens& special, const std::vector<int>& prompt,
                                      const GreedyOptions& options, int n_text_ctx) {
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
  PromptPlan plan;
  plan.timestamps = prompt[prompt_length - 1] != special.no_timestamps;
  if (prompt_length != prompt.size() && plan.timestamps) {
    return absl::UnimplementedError("a forced prefix is supported only after <|notimestamps|>");
  }
  // Everything but the last prompt token is fed as one batch; sampling starts from the last.
  plan.start_step = static_cast<int>(prompt.size()) - 1;
  const int max_length = std::min(options.max_length, n_text_ctx);
  if (plan.start_step >= max_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder prompt of ", prompt.size(), " tokens leaves no room to decode"));
  }
  plan.max_steps = std::min(max_length / 2, max_length - plan.start_step);
  plan.sot_index = static_cast<int>(sot - prompt.begin());
  return plan;
}

// Feeds the prompt but its last token to `row` (batch 1: a state of its own or one row of a
// pool), reading <|nospeech|> on the way when the prompt goes on past <|startoftranscript|>.
absl::Status Prefill(const WhisperModel& model, const SpecialTokens& special,
                     const std::vector<int>& prompt, const PromptPlan& plan, DecoderState& row,
                     GreedyResult* result) {
  int fed = 0;
  if (plan.sot_index < plan.start_step) {
    // <|nospeech|> is read at the <|startoftranscript|> position, so the prefill stops there
    // once to read it.
    std::vector<int32_t> head(prompt.begin(), prompt.begin() + plan.sot_index + 1);
    std::vector<int32_t> position = {0};
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     model.Decode(head, static_cast<int>(head.size()), position, row));
    const double log_total = LogSumExp(logits.data(), model.dims().n_vocab);
    result->no_speech_prob =
        static_cast<float>(std::exp(logits[static_cast<size_t>(special.no_speech)] - log_total));
    fed = plan.sot_index + 1;
  }
  if (fed < plan.start_step) {
    std::vector<int32_t> rest(prompt.begin() + fed, prompt.begin() + plan.start_step);
    std::vector<int32_t> position = {fed};
    RETURN_IF_ERROR(model.Decode(rest, static_cast<int>(rest.size()), position, row).status());
  }
  return absl::OkStatus();
}

// One row's sampling after the prefill: the token and position to feed, and, given the
// step's logits, the rules, the choice and the bookkeeping. The same code serves DecodeGreedy
// and every row of DecodeGreedyBatch.
class RowSampler {
 public:
  RowSampler(const Vocabulary& vocabulary, const GreedyOptions& options,
             const std::vector<int>& prompt, const PromptPlan& plan, int row)
      : row_(row),
        vocabulary_(vocabulary),
        special_(vocabulary.special()),
        options_(options),
        plan_(plan),
        rules_(vocabulary, options, plan.timestamps),
        input_(prompt[static_cast<size_t>(plan.start_step)]),
        done_(plan.max_steps <= 0) {}

  GreedyResult& result() { return result_; }
  bool done() const { return done_; }
  int32_t input() const { return input_; }
  int32_t position() const { return plan_.start_step + step_; }

  // Consumes this step's logits (changed in place by the rules).
  void Sample(absl::Span<float> logits) {
    const int n_vocab = static_cast<int>(logits.size());
    if (step_ == 0 && plan_.sot_index == plan_.start_step) {
      const double log_total = LogSumExp(logits.data(), n_vocab);
      result_.no_speech_prob =
          static_cast<float>(std::exp(logits[static_cast<size_t>(special_.no_speech)] - log_total));
    }
    rules_.Apply(sampled_, logits);
    if (options_.on_step) options_.on_step(step_, logits);
    const auto best = std::max_element(logits.begin(), logits.end());
    const int token = static_cast<int>(best - logits.begin());
    Take(token, static_cast<double>(*best) - LogSumExp(logits.data(), n_vocab));
  }

  // The row of LogitRules::FixedMaskBits() this step's rules amount to, or −1 when the step
  // needs the logits on the host (the timestamp rules, the no-speech probability, on_step).
  int FixedMask() const {
    if (options_.on_step) return -1;
    if (step_ == 0 && plan_.sot_index == plan_.start_step) return -1;
    return rules_.FixedMask(sampled_);
  }

  // The mask of the next step if this step's token continues the row, or −1 where it would
  // depend on the token (or the step needs the logits on the host).
  int FixedMaskAhead() const {
    if (options_.on_step) return -1;
    return rules_.FixedMaskAfter(sampled_.size() + 1);
  }
  // Whether this step is the row's last whatever its token (the length limit).
  bool LastStep() const { return step_ + 1 >= plan_.max_steps; }

  // Consumes the choice Backend::ArgmaxLogSumExp made under FixedMask(): the token, its logit
  // (the masked maximum) and Σ exp(x − max); the same arithmetic as Sample's from there on.
  void Choose(int token, float best, double sum) {
    const double log_total = best == kNegInf ? static_cast<double>(kNegInf) : best + std::log(sum);
    Take(token, static_cast<double>(best) - log_total);
  }

 private:
  void Take(int token, double logprob) {
    result_.sum_logprob += logprob;
    ++step_;
    if (token == special_.eot) {
      done_ = true;
      return;
    }
    if (options_.stop_before && options_.stop_before(row_, token)) {
      result_.stopped = true;
      done_ = true;
      return;
    }
    result_.token_logprobs.push_back(static_cast<float>(logprob));
    sampled_.push_back(token);
    input_ = token;
    done_ = step_ >= plan_.max_steps;
    if (const int n = RepeatedNgram(); n > 0) {
      // One copy stays, unless it holds no letter or digit (". . . .": punctuation only).
      const auto ngram = absl::MakeConstSpan(sampled_).last(static_cast<size_t>(n));
      const std::string text = vocabulary_.tokenizer().Decode(ngram);
      const bool wordless = std::none_of(text.begin(), text.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c));
      });
      const int copies = wordless ? options_.max_repeats : options_.max_repeats - 1;
      const size_t keep = sampled_.size() - static_cast<size_t>(n * copies);
      sampled_.resize(keep);
      result_.token_logprobs.resize(keep);
      result_.cut_repetition = true;
      done_ = true;
    }
  }

  // The n of an n-gram that ends `sampled_` options_.max_repeats times in a row, 0 if none.
  int RepeatedNgram() const {
    const int copies = options_.max_repeats;
    if (copies < 2) return 0;
    const int size = static_cast<int>(sampled_.size());
    for (int n = 1; n <= 16 && n * copies <= size; ++n) {
      bool repeated = true;
      for (int i = size - n * (copies - 1); i < size && repeated; ++i) {
        repeated = sampled_[static_cast<size_t>(i)] == sampled_[static_cast<size_t>(i - n)];
      }
      if (repeated) return n;
    }
    return 0;
  }

 public:
  GreedyResult Finish() {
    result_.tokens = std::move(sampled_);
    result_.steps = step_;
    result_.avg_logprob = result_.sum_logprob / static_cast<double>(result_.tokens.size() + 1);
    return std::move(result_);
  }

 private:
  const int row_;
  const Vocabulary& vocabulary_;
  const SpecialTokens& special_;
  const GreedyOptions& options_;
  const PromptPlan plan_;
  const LogitRules rules_;
  GreedyResult result_;
  std::vector<int> sampled_;
  int32_t input_;
  int step_ = 0;
  bool done_;
};

// Runs sample(b) for every b of `live`: in order on this thread, or, when `parallel` and the rows
// are many, on up to 8 threads (each row's work is ~0.1-0.4 ms: a pass over 51864 logits).
void SampleRows(const std::vector<int>& live, bool parallel,
                const std::function<void(int)>& sample) {
  constexpr size_t kMinRowsPerThread = 4;
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min({live.size() / kMinRowsPerThread, hardware / 2, size_t{8}});
  if (!parallel || live.size() < 8 || threads < 2) {
    for (int b : live) sample(b);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < live.size(); i = next.fetch_add(1)) sample(live[i]);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

// Device buffers of the on-device greedy choice for one DecodeGreedyBatch call (the pool's).
struct DeviceChoice {
  Tensor masks;       // i32 [kNumFixedMasks, words]
  Tensor mask_index;  // i32 [max_batch]
  Tensor out;         // f32 [max_batch, 5]
  Tensor out_b;       // the same, the pipelined steps' second
  std::vector<int32_t> index;
  std::vector<float> chosen;

  // Runs the op on rows [0, rows) of `logits` with index[0, rows) and downloads its output.
  absl::Status Run(Backend& backend, const Tensor& logits, int rows) {
    ASSIGN_OR_RETURN(const Tensor idx, mask_index.Slice(0, rows));
    ASSIGN_OR_RETURN(const Tensor o, out.Slice(0, rows));
    ASSIGN_OR_RETURN(const Tensor x, logits.Slice(0, rows));
    RETURN_IF_ERROR(backend.CopyFromHost(index.data(), static_cast<size_t>(rows) * 4, idx));
    RETURN_IF_ERROR(backend.ArgmaxLogSumExp(x, masks, idx, o));
    chosen.resize(static_cast<size_t>(rows) * 5);
    return backend.CopyToHost(o, chosen.data(), o.size_bytes());
  }
  const float* row(int b) const { return chosen.data() + static_cast<size_t>(b) * 5; }
};

// A step on `state` (its inputs already written) and the device's choice of rows [0, rows) into
// `out` with mask indices `index` (both over the state's bucket; −1 past `rows`), then, with
// `feed`, FeedChoices. In the prepared step's own launches where it makes the choice
// (WhisperModel::ChoosesInStep: it always feeds, which a loop that uploads every step's inputs
// may ignore); otherwise the step's graph, then the two ops on rows [0, rows).
absl::Status StepAndChoose(const WhisperModel& model, DecoderState& state, const Tensor& masks,
                           const Tensor& index, const Tensor& out, int rows, bool feed) {
  if (model.ChoosesInStep(state)) return model.RunDecodeStepAndChoose(state, {masks, index, out});
  RETURN_IF_ERROR(model.RunDecodeStep(state));
  Backend& backend = model.backend();
  ASSIGN_OR_RETURN(const Tensor row_index, index.Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor row_out, out.Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor logits, state.step_logits().Slice(0, rows));
  RETURN_IF_ERROR(backend.ArgmaxLogSumExp(logits, masks, row_index, row_out));
  if (!feed) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Tensor tokens, state.step_tokens().Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor positions, state.positions().Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor lengths, state.lengths().Slice(0, rows));
  return backend.FeedChoices(row_out, row_index, model.dims().n_text_ctx - 1, tokens, positions,
                             lengths);
}

// DecodeGreedyBatch's steps with GreedyOptions::pipeline: each step is submitted before the last
// one's choices are read. A step serves the rows still decoding as far as the host knows; when
// submitted ahead, not those whose step in flight is their last (the length limit). The step
// comes with ArgmaxLogSumExp and FeedChoices (the served rows' next token and position, on the
// device; WhisperModel::RunDecodeStepAndChoose, in the step's own launches where the backend's
// prepared step chooses), then the choices' download into one half of the pool's host scratch,
// while the host reads the other half. A served row's next input is its choice unless the row
// finishes, and a finished row's results are never read, so the inputs fed on the device are
// the ones the host would have uploaded. The device's mask indices are uploaded only when they
// change. When every row has ended, a step still in flight is not waited for: the pool waits for
// its download before its buffers are written again (DecoderStatePool::LeaveCopy).
class PipelinedSteps {
 public:
  PipelinedSteps(const WhisperModel& model, const SpecialTokens& special, DecoderStatePool& pool,
                 DeviceChoice& choice, std::vector<RowSampler>& rows, GreedyBatchTimings& t,
                 const std::function<void()>& finish_done_rows)
      : model_(model),
        backend_(model.backend()),
        special_(special),
        pool_(pool),
        choice_(choice),
        rows_(rows),
        t_(t),
        finish_done_rows_(finish_done_rows),
        fed_(rows.size(), false),
        device_masks_(static_cast<size_t>(pool.max_batch()), kUnknownMask) {}

  absl::Status Run() {
    const absl::Status status = Loop();
    if (!flight_.empty()) {
      // Submitted ahead of rows that have all ended since (or left by an error): never read.
      // The pool waits for the last download before its buffers are written again.
      if (status.ok()) t_.unread_steps += static_cast<int>(flight_.size());
      pool_.LeaveCopy(flight_.back().ticket);
    }
    return status;
  }

 private:
  absl::Status Loop() {
    const size_t half = static_cast<size_t>(pool_.max_batch()) * 5 * sizeof(float);
    ASSIGN_OR_RETURN(host_, pool_.HostScratch(2 * half));
    outs_[0] = choice_.out;
    outs_[1] = choice_.out_b;
    RETURN_IF_ERROR(Launch(/*ahead=*/false).status());
    while (!flight_.empty()) {
      if (flight_.size() == 1) RETURN_IF_ERROR(Launch(/*ahead=*/true).status());
      RETURN_IF_ERROR(Consume());
      if (std::all_of(rows_.begin(), rows_.end(), [](const RowSampler& r) { return r.done(); })) {
        break;
      }
      // Nothing went ahead (every row left was at its last step, or a row's input was not on
      // the device): one step from the host's.
      if (flight_.empty()) RETURN_IF_ERROR(Launch(/*ahead=*/false).status());
    }
    return absl::OkStatus();
  }

  static constexpr int32_t kUnknownMask = -2;
  struct Step {
    int half = 0;
    uint64_t ticket = 0;
    std::vector<int> served;
  };

  // Submits a step over the rows to serve; false when there are none (or, ahead, when a row's
  // input is not on the device).
  absl::StatusOr<bool> Launch(bool ahead) {
    const auto start = std::chrono::steady_clock::now();
    Step step;
    int highest = -1;
    bool upload = false;
    for (int b = 0; b < static_cast<int>(rows_.size()); ++b) {
      const RowSampler& row = rows_[static_cast<size_t>(b)];
      if (row.done() || (ahead && row.LastStep())) continue;
      step.served.push_back(b);
      highest = b;
      upload = upload || !fed_[static_cast<size_t>(b)];
    }
    if (highest < 0 || (ahead && upload)) return false;
    DecoderState& state = pool_.ForRows(highest + 1);
    const int rows = highest + 1;
    // Over the whole bucket, as the step's graph is captured (rows past `rows` left out).
    const int batch = state.batch_size();
    std::vector<int32_t> masks(static_cast<size_t>(batch), -1);
    for (int b : step.served) {
      const RowSampler& row = rows_[static_cast<size_t>(b)];
      masks[static_cast<size_t>(b)] = ahead ? row.FixedMaskAhead() : row.FixedMask();
    }
    if (upload) {
      // The host's inputs (only when nothing is in flight, so they are current): unused rows
      // and rows done get <|endoftext|> at position 0, as the one-step loop feeds them.
      std::vector<int32_t> tokens(static_cast<size_t>(batch), special_.eot);
      std::vector<int32_t> positions(static_cast<size_t>(batch), 0);
      for (int b : step.served) {
        tokens[static_cast<size_t>(b)] = rows_[static_cast<size_t>(b)].input();
        positions[static_cast<size_t>(b)] = rows_[static_cast<size_t>(b)].position();
      }
      RETURN_IF_ERROR(model_.WriteStepInputs(tokens, positions, state));
    }
    ASSIGN_OR_RETURN(const Tensor index, choice_.mask_index.Slice(0, batch));
    if (!std::equal(masks.begin(), masks.end(), device_masks_.begin())) {
      RETURN_IF_ERROR(backend_.CopyFromHost(masks.data(), masks.size() * 4, index));
      std::copy(masks.begin(), masks.end(), device_masks_.begin());
    }
    step.half = next_half_;
    next_half_ ^= 1;
    ASSIGN_OR_RETURN(const Tensor out, outs_[step.half].Slice(0, batch));
    RETURN_IF_ERROR(StepAndChoose(model_, state, choice_.masks, index, out, rows, /*feed=*/true));
    const size_t offset =
        static_cast<size_t>(step.half) * static_cast<size_t>(pool_.max_batch()) * 5 * sizeof(float);
    ASSIGN_OR_RETURN(const Tensor chosen, out.Slice(0, rows));
    ASSIGN_OR_RETURN(step.ticket, backend_.CopyToHostAsync(chosen, *host_, offset));
    std::fill(fed_.begin(), fed_.end(), false);
    for (int b : step.served) fed_[static_cast<size_t>(b)] = true;
    flight_.push_back(std::move(step));
    ++t_.steps;
    ++t_.device_steps;
    if (ahead) ++t_.pipelined_steps;
    t_.step_ms += MillisSince(start);
    return true;
  }

  // Waits for the oldest step's choices and gives them to the rows still decoding.
  absl::Status Consume() {
    auto start = std::chrono::steady_clock::now();
    const Step step = std::move(flight_.front());
    flight_.pop_front();
    RETURN_IF_ERROR(backend_.WaitForCopy(step.ticket));
    t_.step_ms += MillisSince(start);
    start = std::chrono::steady_clock::now();
    const float* chosen =
        host_->data_as<float>() + static_cast<size_t>(step.half) * pool_.max_batch() * 5;
    int used = 0;
    for (int b : step.served) {
      RowSampler& row = rows_[static_cast<size_t>(b)];
      if (row.done()) continue;  // finished at an earlier step: this one ran ahead of it
      const float* c = chosen + static_cast<size_t>(b) * 5;
      row.Choose(static_cast<int>(c[0]), c[1], JoinF64(c + 2));
      ++used;
    }
    t_.row_steps += used;
    if (used == 0) ++t_.unread_steps;
    finish_done_rows_();
    t_.sample_ms += MillisSince(start);
    return absl::OkStatus();
  }

  static double MillisSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

  const WhisperModel& model_;
  Backend& backend_;
  const SpecialTokens& special_;
  DecoderStatePool& pool_;
  DeviceChoice& choice_;
  std::vector<RowSampler>& rows_;
  GreedyBatchTimings& t_;
  const std::function<void()>& finish_done_rows_;
  std::vector<bool> fed_;  // the row's next input is on the device (fed by the last step)
  std::vector<int32_t> device_masks_;  // what choice_.mask_index holds (kUnknownMask: unknown)
  HostBuffer* host_ = nullptr;
  Tensor outs_[2];
  int next_half_ = 0;
  std::deque<Step> flight_;
};

}  // namespace

absl::Status CheckPrompt(const Vocabulary& vocabulary, const std::vector<int>& prompt,
                         const GreedyOptions& options, int n_text_ctx) {
  return PlanPrompt(vocabulary.special(), prompt, options, n_text_ctx).status();
}

absl::StatusOr<GreedyResult> DecodeGreedy(const WhisperModel& model, const Vocabulary& vocabulary,
                                          const std::vector<int>& prompt,
                                          const GreedyOptions& options, DecoderState& state) {
  ASSIGN_OR_RETURN(const PromptPlan plan,
                   PlanPrompt(vocabulary.special(), prompt, options, model.dims().n_text_ctx));
  RowSampler row(vocabulary, options, prompt, plan, /*row=*/0);
  RETURN_IF_ERROR(Prefill(model, vocabulary.special(), prompt, plan, state, &row.result()));
  const size_t n_vocab = static_cast<size_t>(model.dims().n_vocab);
  while (!row.done()) {
    const int32_t input = row.input();
    const std::vector<int32_t> position = {row.position()};
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     model.Decode(absl::MakeConstSpan(&input, 1), 1, position, state));
    row.Sample(absl::Span<float>(logits.data(), n_vocab));
  }
  return row.Finish();
}

namespace {

bool Resolve(GraphUse use, const Backend& backend) {
  switch (use) {
    case GraphUse::kAuto:
      return backend.device() != DeviceKind::kCpu;
    case GraphUse::kAlways:
      return true;
    case GraphUse::kNever:
      return false;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<GreedyResult>> DecodeGreedyBatch(
    const WhisperModel& model, const Vocabulary& vocabulary,
    absl::Span<const std::vector<int>> prompts, const GreedyOptions& options,
    DecoderStatePool& pool, const std::function<void(int row, const GreedyResult&)>& on_row_done,
    GreedyBatchTimings* timings) {
  GreedyBatchTimings local;
  GreedyBatchTimings& t = timings != nullptr ? *timings : local;
  t = GreedyBatchTimings{};
  auto since_ms = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  const auto prefill_start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(prompts.size());
  if (n > pool.max_batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " prompts for a decoder pool of ", pool.max_batch(), " slots"));
  }
  Backend& backend = model.backend();
  RETURN_IF_ERROR(pool.WaitForLeftCopy());  // the last batch's unread step, if any
  const SpecialTokens& special = vocabulary.special();
  const bool on_device = options.on_step == nullptr && backend.supports(Op::kArgmaxLogSumExp) &&
                         Resolve(options.reduce_on_device, backend);
  const bool batch_prefill = n > 0 && Resolve(options.batch_prefill, backend);
  DeviceChoice choice;
  if (on_device) {
    // The masks depend on the vocabulary and on the options LogitRules reads for them: built
    // and uploaded once while those stay the same (0.1-0.2 ms of host time a batch).
    const std::string key = absl::StrCat(
        reinterpret_cast<uintptr_t>(&vocabulary), "/", options.suppress_blank, "/",
        options.max_initial_timestamp_index, "/", absl::StrJoin(options.suppress_tokens, ","));
    ASSIGN_OR_RETURN(choice.masks, pool.Constant(key, [&]() -> absl::StatusOr<Tensor> {
      const std::vector<int32_t> bits = LogitRules(vocabulary, options).FixedMaskBits();
      const int64_t words = static_cast<int64_t>(bits.size()) / LogitRules::kNumFixedMasks;
      return Upload(backend, {LogitRules::kNumFixedMasks, words}, DType::kI32, bits.data());
    }));
    ASSIGN_OR_RETURN(const DecoderStatePool::ChoiceBuffers* buffers, pool.Choice());
    choice.mask_index = buffers->mask_index;
    choice.out = buffers->out[0];
    choice.out_b = buffers->out[1];
  }
  std::vector<RowSampler> rows;
  std::vector<PromptPlan> plans;
  rows.reserve(prompts.size());
  for (int b = 0; b < n; ++b) {
    const std::vector<int>& prompt = prompts[static_cast<size_t>(b)];
    auto plan = PlanPrompt(special, prompt, options, model.dims().n_text_ctx);
    if (!plan.ok()) {
      return absl::Status(plan.status().code(),
                          absl::StrCat("batch row ", b, ": ", plan.status().message()));
    }
    plans.push_back(*plan);
    rows.emplace_back(vocabulary, options, prompt, *plan, b);
    if (!batch_prefill) {
      RETURN_IF_ERROR(Prefill(model, special, prompt, *plan, pool.Row(b), &rows.back().result()));
    }
  }
  if (batch_prefill) {
    // One pass over every row's prompt but its last token; the no-speech probability is read at
    // <|startoftranscript|> of the rows whose prompt goes on past it (as Prefill does).
    DecoderState& state = pool.ForRows(n);
    const int batch = state.batch_size();
    std::vector<std::vector<int32_t>> feed(static_cast<size_t>(batch));
    std::vector<int> read_at(static_cast<size_t>(batch), -1);
    bool any_feed = false;
    for (int b = 0; b < n; ++b) {
      const PromptPlan& plan = plans[static_cast<size_t>(b)];
      const std::vector<int>& prompt = prompts[static_cast<size_t>(b)];
      feed[static_cast<size_t>(b)].assign(prompt.begin(), prompt.begin() + plan.start_step);
      any_feed = any_feed || plan.start_step > 0;
      if (plan.sot_index < plan.start_step) read_at[static_cast<size_t>(b)] = plan.sot_index;
    }
    if (any_feed) {
      for (const std::vector<int32_t>& row : feed) {
        t.prefill_tokens = std::max(t.prefill_tokens, static_cast<int>(row.size()));
      }
      const auto pass_start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(const Tensor logits, model.PrefillRows(feed, read_at, state));
      t.prefill_pass_ms = since_ms(pass_start);
      if (logits.defined() && on_device) {
        // log-sum-exp of the raw logits, then the <|nospeech|> logit alone, per reading row.
        choice.index.assign(static_cast<size_t>(batch), -1);
        for (int b = 0; b < n; ++b) {
          if (read_at[static_cast<size_t>(b)] >= 0) {
            choice.index[static_cast<size_t>(b)] = LogitRules::kAllowAll;
          }
        }
        RETURN_IF_ERROR(choice.Run(backend, logits, n));
        std::vector<float> all = choice.chosen;
        for (int32_t& i : choice.index) i = i >= 0 ? LogitRules::kOnlyNoSpeech : -1;
        RETURN_IF_ERROR(choice.Run(backend, logits, n));
        for (int b = 0; b < n; ++b) {
          if (read_at[static_cast<size_t>(b)] < 0) continue;
          const float* a = all.data() + static_cast<size_t>(b) * 5;
          const double log_total =
              a[1] == kNegInf ? static_cast<double>(kNegInf) : a[1] + std::log(JoinF64(a + 2));
          rows[static_cast<size_t>(b)].result().no_speech_prob =
              static_cast<float>(std::exp(choice.row(b)[1] - log_total));
        }
      } else if (logits.defined()) {
        ASSIGN_OR_RETURN(const Tensor head, logits.Slice(0, n));
        std::vector<float> host(static_cast<size_t>(head.numel()));
        RETURN_IF_ERROR(backend.CopyToHost(head, host.data(), head.size_bytes()));
        const size_t n_vocab = static_cast<size_t>(model.dims().n_vocab);
        for (int b = 0; b < n; ++b) {
          if (read_at[static_cast<size_t>(b)] < 0) continue;
          const float* x = host.data() + static_cast<size_t>(b) * n_vocab;
          const double log_total = LogSumExp(x, static_cast<int>(n_vocab));
          rows[static_cast<size_t>(b)].result().no_speech_prob =
              static_cast<float>(std::exp(x[static_cast<size_t>(special.no_speech)] - log_total));
        }
      }
    }
  }

  t.prefill_ms = since_ms(prefill_start);
  std::vector<GreedyResult> results(rows.size());
  std::vector<bool> finished(rows.size(), false);
  auto finish_done_rows = [&] {
    for (size_t b = 0; b < rows.size(); ++b) {
      if (finished[b] || !rows[b].done()) continue;
      finished[b] = true;
      results[b] = rows[b].Finish();
      if (on_row_done) on_row_done(static_cast<int>(b), results[b]);
    }
  };
  finish_done_rows();
  bool pipeline =
      on_device && Resolve(options.pipeline, backend) && backend.supports(Op::kFeedChoices);
  for (const RowSampler& row : rows) {
    pipeline = pipeline && (row.done() || (row.FixedMask() >= 0 && row.FixedMaskAhead() >= 0));
  }
  if (pipeline) {
    const std::function<void()> finish = finish_done_rows;
    PipelinedSteps steps(model, special, pool, choice, rows, t, finish);
    RETURN_IF_ERROR(steps.Run());
    return results;
  }
  const size_t n_vocab = static_cast<size_t>(model.dims().n_vocab);
  std::vector<int32_t> tokens, positions;
  std::vector<float> logits;
  std::vector<int> live, on_host;
  for (;;) {
    int highest = -1;  // the highest row still decoding
    live.clear();
    for (int b = 0; b < n; ++b) {
      if (!rows[static_cast<size_t>(b)].done()) {
        highest = b;
        live.push_back(b);
      }
    }
    if (highest < 0) break;
    DecoderState& state = pool.ForRows(highest + 1);
    const int batch = state.batch_size();
    // Finished rows and the bucket's unused rows are fed <|endoftext|> at position 0: a step
    // computes them but nothing reads what it writes there.
    tokens.assign(static_cast<size_t>(batch), special.eot);
    positions.assign(static_cast<size_t>(batch), 0);
    on_host.clear();
    if (on_device) choice.index.assign(static_cast<size_t>(batch), -1);
    for (int b : live) {
      const RowSampler& row = rows[static_cast<size_t>(b)];
      tokens[static_cast<size_t>(b)] = row.input();
      positions[static_cast<size_t>(b)] = row.position();
      const int mask = on_device ? row.FixedMask() : -1;
      if (mask < 0) {
        on_host.push_back(b);
      } else {
        choice.index[static_cast<size_t>(b)] = mask;
      }
    }
    auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(model.WriteStepInputs(tokens, positions, state));
    if (on_host.size() < live.size()) {
      const int rows = highest + 1;
      ASSIGN_OR_RETURN(const Tensor index, choice.mask_index.Slice(0, batch));
      ASSIGN_OR_RETURN(const Tensor out, choice.out.Slice(0, batch));
      RETURN_IF_ERROR(
          backend.CopyFromHost(choice.index.data(), static_cast<size_t>(batch) * 4, index));
      RETURN_IF_ERROR(StepAndChoose(model, state, choice.masks, index, out, rows, /*feed=*/false));
      ASSIGN_OR_RETURN(const Tensor head, out.Slice(0, rows));
      choice.chosen.resize(static_cast<size_t>(rows) * 5);
      RETURN_IF_ERROR(backend.CopyToHost(head, choice.chosen.data(), head.size_bytes()));
    } else {
      RETURN_IF_ERROR(model.RunDecodeStep(state));
    }
    if (!on_host.empty()) {
      ASSIGN_OR_RETURN(const Tensor out, state.step_logits().Slice(0, highest + 1));
      logits.resize(static_cast<size_t>(out.numel()));
      RETURN_IF_ERROR(backend.CopyToHost(out, logits.data(), out.size_bytes()));
    } else {
      ++t.device_steps;
    }
    t.step_ms += since_ms(start);
    ++t.steps;
    t.row_steps += static_cast<int64_t>(live.size());
    start = std::chrono::steady_clock::now();
    if (on_host.size() < live.size()) {
      for (int b : live) {
        if (choice.index[static_cast<size_t>(b)] < 0) continue;
        const float* c = choice.row(b);
        rows[static_cast<size_t>(b)].Choose(static_cast<int>(c[0]), c[1], JoinF64(c + 2));
      }
    }
    auto sample = [&](int b) {
      rows[static_cast<size_t>(b)].Sample(
          absl::Span<float>(logits.data() + static_cast<size_t>(b) * n_vocab, n_vocab));
    };
    SampleRows(on_host, options.on_step == nullptr, sample);
    t.sample_ms += since_ms(start);
    finish_done_rows();
  }
  return results;
}

}  // namespace waav::whisper

#include "engine/streaming/utterance_decoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "engine/streaming/spoken_words.h"

namespace waav::streaming {
namespace {

constexpr int kSampleRateHz = 16000;

}  // namespace

UtteranceDecoder::UtteranceDecoder(const whisper::Vocabulary& vocabulary,
                                   const StreamOptions& options)
    : vocabulary_(vocabulary),
      options_(options),
      agreement_([this](int token) { return StartsWord(token); }) {
  if (!options.initial_prompt.empty()) {
    context_ = vocabulary.tokenizer().Encode(
        absl::StrCat(" ", absl::StripAsciiWhitespace(options.initial_prompt)));
  }
}

bool UtteranceDecoder::StartsWord(int token) const {
  return streaming::StartsWord(vocabulary_, token);
}

std::string UtteranceDecoder::TextOf(const std::vector<int>& tokens) const {
  return std::string(absl::StripLeadingAsciiWhitespace(vocabulary_.DecodeText(tokens)));
}

absl::StatusOr<UtteranceInput> UtteranceDecoder::Prepare(const frontend::LogMel& log_mel,
                                                         int n_frames,
                                                         absl::Span<const float> audio,
                                                         int64_t start_ms) const {
  const whisper::SpecialTokens& special = vocabulary_.special();
  UtteranceInput input;
  // Log-mel of the utterance, the frames the offline path puts before its zero padding, in the
  // encoder's time-major layout (the scheduler stages it as it is and pads it there). The
  // utterance and its start name the audio, which grows from one partial to the next.
  const int64_t total = log_mel.NumFrames(static_cast<int64_t>(audio.size()));
  const int64_t frames = std::max<int64_t>(0, std::min<int64_t>(n_frames, total - 1));
  const uint64_t key = static_cast<uint64_t>(utterance_index_) * 0x9E3779B97F4A7C15ull ^
                       static_cast<uint64_t>(start_ms);
  RETURN_IF_ERROR(mel_.TimeMajor(log_mel, key, audio, frames, &input.mel));

  // Prompt: earlier text, then the task, text only, then what is already committed.
  std::vector<int>& prompt = input.prompt;
  if (options_.condition_on_previous_text && !context_.empty()) {
    prompt.push_back(special.sot_prev);
    const size_t take = std::min<size_t>(context_.size(), 223);
    prompt.insert(prompt.end(), context_.end() - static_cast<std::ptrdiff_t>(take), context_.end());
  }
  const std::vector<int> sot_sequence = vocabulary_.SotSequence();
  prompt.insert(prompt.end(), sot_sequence.begin(), sot_sequence.end());
  prompt.push_back(special.no_timestamps);
  const std::vector<int>& committed = agreement_.committed();
  prompt.insert(prompt.end(), committed.begin(), committed.end());
  input.committed_tokens = committed.size();
  return input;
}

namespace {

// Whisper's own silence test (as faster-whisper applies it): likely no speech and an unconfident
// decode means the VAD let noise through.
bool NoSpeech(const whisper::GreedyResult& decoded) {
  return decoded.no_speech_prob > 0.6f &&
         decoded.sum_logprob / static_cast<double>(decoded.tokens.size() + 1) < -1.0;
}

}  // namespace

size_t UtteranceDecoder::SpokenTokens(const std::vector<int>& decoded) const {
  const int eot = vocabulary_.special().eot;
  size_t end = decoded.size();
  while (end > 0) {
    // The last word of the text tokens before `end`: from its word-starting token on (specials
    // in it are skipped). A tail that starts no word belongs to the word before: kept.
    size_t begin = end;
    bool starts = false;
    while (begin > 0 && !starts) {
      --begin;
      starts = decoded[begin] < eot && StartsWord(decoded[begin]);
    }
    if (!starts) break;
    std::vector<int> text;
    for (size_t i = begin; i < end; ++i) {
      if (decoded[i] < eot) text.push_back(decoded[i]);
    }
    const std::string word = vocabulary_.DecodeText(text);
    if (std::any_of(word.begin(), word.end(),
                    [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); })) {
      break;
    }
    end = begin;
  }
  return end;
}

size_t UtteranceDecoder::BeforeRestart(const std::vector<int>& decoded) const {
  const std::vector<int>& committed = agreement_.committed();
  std::vector<int> tokens = committed;
  tokens.insert(tokens.end(), decoded.begin(), decoded.end());
  // Words (lower case, letters and digits only; words of punctuation alone left out) and the
  // index of each one's first token.
  std::vector<std::string> words;
  std::vector<size_t> word_starts;
  for (size_t begin = 0; begin < tokens.size();) {
    size_t end = begin + 1;
    while (end < tokens.size() &&
           !(tokens[end] < vocabulary_.special().eot && StartsWord(tokens[end])))
      ++end;
    std::string word =
        ComparedWord(vocabulary_, absl::MakeConstSpan(tokens).subspan(begin, end - begin));
    if (!word.empty()) {
      words.push_back(std::move(word));
      word_starts.push_back(begin);
    }
    begin = end;
  }
  constexpr size_t kRepeatedWords = 2;
  const size_t p = RestartStart(words, kRepeatedWords);
  if (p == words.size()) return decoded.size();
  return word_starts[p] > committed.size() ? word_starts[p] - committed.size() : 0;
}

size_t UtteranceDecoder::FinalTokens(const whisper::GreedyResult& decoded) const {
  size_t end = SpokenTokens(decoded.tokens);
  if (agreement_.committed().empty() || decoded.token_logprobs.size() < end) return end;
  // Trailing words, one at a time: a word's tokens average a log-probability below Whisper's
  // own log_prob_threshold (-1.0; a decode below it the reference would retry at a higher
  // temperature).
  while (end > 0) {
    size_t begin = end;
    bool starts = false;
    while (begin > 0 && !starts) {
      --begin;
      starts =
          decoded.tokens[begin] < vocabulary_.special().eot && StartsWord(decoded.tokens[begin]);
    }
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += decoded.token_logprobs[i];
    if (sum / static_cast<double>(end - begin) >= -1.0) break;
    end = begin;
  }
  return end;
}

std::vector<int> UtteranceDecoder::FinalTextTokens(const whisper::GreedyResult& decoded) const {
  std::vector<int> tokens = agreement_.committed();
  if (!NoSpeech(decoded)) {
    tokens.insert(tokens.end(), decoded.tokens.begin(),
                  decoded.tokens.begin() + static_cast<std::ptrdiff_t>(FinalTokens(decoded)));
  }
  std::erase_if(tokens, [&](int t) { return t >= vocabulary_.special().eot; });
  return tokens;
}

RecognitionResult UtteranceDecoder::Finish(const whisper::GreedyResult& decoded, int64_t start_ms,
                                           size_t audio_samples, bool is_final,
                                           EndReason end_reason, const AlignWordsFn& align_words) {
  const whisper::SpecialTokens& special = vocabulary_.special();
  RecognitionResult result;
  result.utterance_index = utterance_index_;
  result.is_final = is_final;
  result.end_reason = end_reason;
  result.start_ms = start_ms;
  result.end_ms = start_ms + static_cast<int64_t>(audio_samples) * 1000 / kSampleRateHz;
  result.latency.decoder_steps = static_cast<int>(decoded.tokens.size()) + 1;
  const std::vector<int>& committed = agreement_.committed();

  const bool no_speech = NoSpeech(decoded);
  // The decoded tokens without trailing punctuation words (SpokenTokens) and, in a partial,
  // without a restart of the utterance's words (BeforeRestart), log-probabilities beside them.
  const auto spoken = static_cast<std::ptrdiff_t>(
      is_final ? FinalTokens(decoded)
               : std::min(SpokenTokens(decoded.tokens), BeforeRestart(decoded.tokens)));
  const std::vector<int> decoded_tokens(decoded.tokens.begin(), decoded.tokens.begin() + spoken);
  const std::vector<float> decoded_logprobs(
      decoded.token_logprobs.begin(),
      decoded.token_logprobs.begin() +
          std::min<std::ptrdiff_t>(spoken,
                                   static_cast<std::ptrdiff_t>(decoded.token_logprobs.size())));

  std::vector<int> tokens = committed;
  std::vector<float> logprobs = committed_logprobs_;
  size_t stable = committed.size();
  if (is_final) {
    if (!no_speech) {
      tokens.insert(tokens.end(), decoded_tokens.begin(), decoded_tokens.end());
      logprobs.insert(logprobs.end(), decoded_logprobs.begin(), decoded_logprobs.end());
    }
    stable = tokens.size();
  } else if (!no_speech) {
    const bool may_commit = static_cast<int64_t>(audio_samples) * 1000 >=
                            static_cast<int64_t>(options_.commit_min_audio_ms) * kSampleRateHz;
    const size_t newly = agreement_.Update(decoded_tokens, may_commit);
    committed_logprobs_.insert(committed_logprobs_.end(), decoded_logprobs.begin(),
                               decoded_logprobs.begin() + static_cast<std::ptrdiff_t>(newly));
    tokens = agreement_.committed();
    logprobs = committed_logprobs_;
    stable = tokens.size();
    tokens.insert(tokens.end(), decoded_tokens.begin() + static_cast<std::ptrdiff_t>(newly),
                  decoded_tokens.end());
    logprobs.insert(logprobs.end(), decoded_logprobs.begin() + static_cast<std::ptrdiff_t>(newly),
                    decoded_logprobs.end());
  }

  result.transcript = TextOf(tokens);
  result.stable_transcript = TextOf(
      std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(stable)));
  double sum = 0;
  for (float lp : logprobs) sum += lp;
  result.confidence = logprobs.empty() ? 0.0f : static_cast<float>(std::exp(sum / logprobs.size()));
  const bool aligned =
      is_final && options_.word_time_offsets && align_words != nullptr &&
      FillAlignedWords(tokens, logprobs, result.start_ms, result.end_ms, align_words, &result);
  if (!aligned) FillWords(tokens, logprobs, stable, result.start_ms, result.end_ms, &result);
  if (!options_.word_time_offsets) {
    const size_t total = result.words.size();
    size_t stable_words = 0;
    for (const WordResult& w : result.words) stable_words += w.stable ? 1 : 0;
    result.stability = total == 0 ? 0.0f : static_cast<float>(stable_words) / total;
    result.words.clear();
  }

  if (is_final) {
    std::vector<int> text;
    for (int t : tokens)
      if (t < special.eot) text.push_back(t);
    context_.insert(context_.end(), text.begin(), text.end());
    agreement_.Reset();
    committed_logprobs_.clear();
    ++utterance_index_;
    mel_.Release();  // the utterance's frames (up to ~1 MB): a stream may stay silent for long
  }
  return result;
}

// Words are runs of tokens from one word-starting token to the next. Times are spread over the
// utterance in proportion to each word's characters: an estimate (no forced alignment yet).
void UtteranceDecoder::FillWords(const std::vector<int>& tokens, const std::vector<float>& logprobs,
                                 size_t stable_tokens, int64_t start_ms, int64_t end_ms,
                                 RecognitionResult* result) const {
  struct Span {
    size_t begin, end;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocabulary_.special().eot) continue;
    if (spans.empty() || StartsWord(tokens[i]))
      spans.push_back({i, i + 1});
    else
      spans.back().end = i + 1;
  }
  std::vector<std::string> words;
  size_t total_chars = 0;
  for (const Span& s : spans) {
    words.emplace_back(absl::StripAsciiWhitespace(vocabulary_.DecodeText(
        std::vector<int>(tokens.begin() + s.begin, tokens.begin() + s.end))));
    total_chars += std::max<size_t>(1, words.back().size());
  }
  size_t chars_before = 0;
  const double duration = static_cast<double>(end_ms - start_ms);
  size_t stable_words = 0;
  for (size_t w = 0; w < spans.size(); ++w) {
    if (words[w].empty()) continue;
    WordResult word;
    word.word = words[w];
    const size_t chars = std::max<size_t>(1, words[w].size());
    word.start_ms =
        start_ms + static_cast<int64_t>(duration * chars_before / std::max<size_t>(1, total_chars));
    chars_before += chars;
    word.end_ms =
        start_ms + static_cast<int64_t>(duration * chars_before / std::max<size_t>(1, total_chars));
    double sum = 0;
    for (size_t i = spans[w].begin; i < spans[w].end; ++i) sum += logprobs[i];
    word.confidence = static_cast<float>(std::exp(sum / (spans[w].end - spans[w].begin)));
    word.stable = spans[w].end <= stable_tokens;
    stable_words += word.stable ? 1 : 0;
    result->words.push_back(std::move(word));
  }
  result->stability =
      result->words.empty() ? 0.0f : static_cast<float>(stable_words) / result->words.size();
}

// Words as FillWords splits them (so that a word stable in a partial keeps its text in the
// final), timed by the cross-attention alignment (whisper::WordAligner): a word spans the
// aligned words (faster-whisper's split, cleaned up) that share its tokens, from the first's
// start to the last's end. Confidence as in FillWords. All words of a final are stable.
bool UtteranceDecoder::FillAlignedWords(const std::vector<int>& tokens,
                                        const std::vector<float>& logprobs, int64_t start_ms,
                                        int64_t end_ms, const AlignWordsFn& align_words,
                                        RecognitionResult* result) const {
  std::vector<int> text;
  std::vector<float> text_logprobs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocabulary_.special().eot) continue;
    text.push_back(tokens[i]);
    text_logprobs.push_back(i < logprobs.size() ? logprobs[i] : 0.0f);
  }
  if (text.empty()) return false;
  const absl::StatusOr<std::vector<whisper::TimedWord>> aligned = align_words(text);
  if (!aligned.ok()) return false;
  // The aligned word that holds each token (merged-away punctuation belongs to its neighbour).
  std::vector<int> owner(text.size(), -1);
  for (size_t a = 0; a < aligned->size(); ++a) {
    const whisper::TimedWord& w = (*aligned)[a];
    if (w.token_begin < 0 || w.token_end > static_cast<int>(text.size())) return false;
    for (int i = w.token_begin; i < w.token_end; ++i)
      owner[static_cast<size_t>(i)] = static_cast<int>(a);
  }
  std::vector<WordResult> out;
  int64_t previous_start = start_ms;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = begin + 1;
    while (end < text.size() && !StartsWord(text[end])) ++end;
    WordResult word;
    word.word = std::string(absl::StripAsciiWhitespace(
        vocabulary_.DecodeText(std::vector<int>(text.begin() + static_cast<std::ptrdiff_t>(begin),
                                                text.begin() + static_cast<std::ptrdiff_t>(end)))));
    int64_t first_ms = -1, last_ms = -1;
    double sum = 0;
    for (size_t i = begin; i < end; ++i) {
      sum += text_logprobs[i];
      if (owner[i] < 0) continue;
      const whisper::TimedWord& w = (*aligned)[static_cast<size_t>(owner[i])];
      if (first_ms < 0) first_ms = w.start_ms;
      last_ms = std::max<int64_t>(last_ms, w.end_ms);
    }
    if (first_ms < 0) return false;  // tokens the alignment left out: use the estimate
    word.start_ms = std::clamp<int64_t>(start_ms + first_ms, previous_start, end_ms);
    word.end_ms = std::clamp<int64_t>(start_ms + last_ms, word.start_ms, end_ms);
    word.confidence = static_cast<float>(std::exp(sum / static_cast<double>(end - begin)));
    word.stable = true;
    begin = end;
    if (word.word.empty()) continue;
    previous_start = std::max(previous_start, word.start_ms);
    out.push_back(std::move(word));
  }
  result->words = std::move(out);
  result->stability = result->words.empty() ? 0.0f : 1.0f;
  return true;
}

}  // namespace waav::streaming

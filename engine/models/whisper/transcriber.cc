#include "engine/models/whisper/transcriber.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::whisper {
namespace {

constexpr int kSampleRateHz = 16000;
constexpr int kHopLength = 160;
constexpr double kSecondsPerFrame = static_cast<double>(kHopLength) / kSampleRateHz;
constexpr double kTimePrecision = 0.02;  // seconds per timestamp token
constexpr int kFramesPerTimestamp = 2;   // mel frames per timestamp token (input stride)

bool IsBlank(const std::string& text) {
  return absl::StripAsciiWhitespace(text).empty();
}

// Python's round(x, 2), as faster-whisper rounds word times.
double Round2(double x) { return std::nearbyint(x * 100.0) / 100.0; }

// faster-whisper's add_word_timestamps for the segments of one window (encoded in `state`,
// `segment_frames` mel frames of it audio): one alignment of all their text tokens, the
// window-level clean-ups, the words dealt to the segments by token counts, then per segment the
// clean-ups that use the last speech before it and the segment's own timestamps (which also
// move the segment's start and end to its words'). Word probabilities are the mean of their
// tokens' probabilities in the alignment pass, as faster-whisper's.
absl::Status AddWordTimestamps(const WordAligner& aligner, const Vocabulary& vocabulary,
                               double time_offset, int segment_frames, const DecoderState& state,
                               double last_speech_s, std::vector<Segment>& segments) {
  const int eot = vocabulary.special().eot;
  std::vector<int> text;
  std::vector<size_t> per_segment;
  for (const Segment& s : segments) {
    size_t n = 0;
    for (int t : s.tokens) {
      if (t >= eot) continue;
      text.push_back(t);
      ++n;
    }
    per_segment.push_back(n);
  }
  std::vector<TimedWord> words;
  std::vector<float> probabilities;  // per word as split, before punctuation is merged
  WordDurations stats;
  if (!text.empty()) {
    std::vector<float> token_probs;
    ASSIGN_OR_RETURN(const std::vector<int> starts,
                     aligner.TokenStarts(text, static_cast<size_t>(segment_frames) * kHopLength,
                                         state, &token_probs));
    words = SplitWords(vocabulary, text);
    for (TimedWord& w : words) {
      w.start_ms = starts[static_cast<size_t>(w.token_begin)] * kMsPerAudioPosition;
      w.end_ms = starts[static_cast<size_t>(w.token_end)] * kMsPerAudioPosition;
      double sum = 0;
      for (int i = w.token_begin; i < w.token_end; ++i) sum += token_probs[static_cast<size_t>(i)];
      probabilities.push_back(static_cast<float>(sum / (w.token_end - w.token_begin)));
    }
    stats = TruncateAndMergeWords(words);
  }
  const double median = stats.median_ms / 1000, max = stats.max_ms / 1000;
  size_t index = 0;
  for (size_t si = 0; si < segments.size(); ++si) {
    Segment& segment = segments[si];
    std::vector<Word> out;
    for (size_t saved = 0; index < words.size() && saved < per_segment[si]; ++index) {
      const TimedWord& w = words[index];
      if (!w.text.empty()) {
        out.push_back({w.text, Round2(time_offset + w.start_ms / 1000.0),
                       Round2(time_offset + w.end_ms / 1000.0), probabilities[index]});
      }
      saved += static_cast<size_t>(w.token_end - w.token_begin);
    }
    if (!out.empty()) {
      // The first word after a pause, if too long, most likely took the pause's time.
      Word& first = out[0];
      if (first.end_s - last_speech_s > median * 4 &&
          (first.end_s - first.start_s > max ||
           (out.size() > 1 && out[1].end_s - first.start_s > max * 2))) {
        if (out.size() > 1 && out[1].end_s - out[1].start_s > max) {
          const double boundary = std::max(out[1].end_s / 2, out[1].end_s - max);
          first.end_s = out[1].start_s = boundary;
        }
        first.start_s = std::max(0.0, first.end_s - max);
      }
      // The segment's own timestamps win over a first or last word that is too long.
      if (segment.start_s < first.end_s && segment.start_s - 0.5 > first.start_s) {
        first.start_s = std::max(0.0, std::min(first.end_s - median, segment.start_s));
      } else {
        segment.start_s = first.start_s;
      }
      Word& last = out.back();
      if (segment.end_s > last.start_s && segment.end_s + 0.5 < last.end_s) {
        last.end_s = std::max(last.start_s + median, segment.end_s);
      } else {
        segment.end_s = last.end_s;
      }
      last_speech_s = segment.end_s;
    }
    segment.words = std::move(out);
  }
  return absl::OkStatus();
}

// faster-whisper's get_end: the end of the last word, or of the last segment if none has words.
std::optional<double> EndOf(const std::vector<Segment>& segments) {
  for (auto s = segments.rbegin(); s != segments.rend(); ++s) {
    if (!s->words.empty()) return s->words.back().end_s;
  }
  if (segments.empty()) return std::nullopt;
  return segments.back().end_s;
}

}  // namespace

std::string Transcript::Text() const {
  std::string text;
  for (const Segment& s : segments) text += s.text;
  return std::string(absl::StripAsciiWhitespace(text));
}

absl::StatusOr<std::unique_ptr<Transcriber>> Transcriber::Load(const std::string& model_dir,
                                                               Backend& backend,
                                                               WhisperModelOptions model_options) {
  ASSIGN_OR_RETURN(auto model, WhisperModel::Load(model_dir, backend, model_options));
  ASSIGN_OR_RETURN(text::BpeTokenizer tokenizer,
                   text::BpeTokenizer::FromTokenizerJson(model_dir + "/tokenizer.json"));
  if (tokenizer.vocab_size() > model->dims().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_dir, "/tokenizer.json has ", tokenizer.vocab_size(), " tokens but model.bin only ",
        model->dims().n_vocab, ": they do not belong together"));
  }
  ASSIGN_OR_RETURN(Vocabulary vocabulary,
                   Vocabulary::Create(std::move(tokenizer), model->dims().n_vocab));
  auto transcriber =
      std::unique_ptr<Transcriber>(new Transcriber(std::move(model), std::move(vocabulary)));
  // Word timestamps need the model's alignment heads (config.json); a model folder without
  // them still transcribes, and word times are then estimated by the callers.
  absl::StatusOr<std::unique_ptr<WordAligner>> aligner =
      WordAligner::Create(*transcriber->model_, transcriber->vocabulary_, model_dir);
  if (aligner.ok()) {
    transcriber->word_aligner_ = std::move(*aligner);
  } else if (!absl::IsNotFound(aligner.status())) {
    return aligner.status();
  }
  return transcriber;
}

absl::StatusOr<Transcript> Transcriber::Transcribe(absl::Span<const float> samples,
                                                   const TranscribeOptions& options) const {
  const WhisperDims& dims = model_->dims();
  const int window_frames = dims.n_frames();
  const SpecialTokens& special = vocabulary_.special();

  const frontend::LogMel::Features features = log_mel_.Compute(samples);
  if (features.n_mels != dims.n_mels) {
    return absl::InvalidArgumentError(absl::StrCat("front end makes ", features.n_mels,
                                                   " mel bins; the model wants ", dims.n_mels));
  }
  // The front end appends one frame of padding; it is not content.
  const int content_frames = features.n_frames - 1;
  if (options.word_timestamps && word_aligner_ == nullptr) {
    return absl::FailedPreconditionError(
        "word timestamps need the model's alignment heads (\"alignment_heads\" in config.json)");
  }
  double last_speech_s = 0;
  Transcript transcript;
  transcript.duration_s = static_cast<double>(samples.size()) / kSampleRateHz;

  ASSIGN_OR_RETURN(auto state, model_->NewDecoderState(1));
  std::vector<float> window(static_cast<size_t>(dims.n_mels) * window_frames);
  std::vector<int> all_tokens;
  size_t prompt_reset_since = 0;
  const int max_prompt_tokens = options.greedy.max_length / 2 - 1;

  int seek = 0;
  while (seek < content_frames) {
    const int previous_seek = seek;
    const double time_offset = seek * kSecondsPerFrame;
    const int segment_size = std::min(window_frames, content_frames - seek);
    const double segment_duration = segment_size * kSecondsPerFrame;
    // Features [seek, seek + segment_size), zero-padded to a full window (as faster-whisper's
    // pad_or_trim does on the normalised log-mel).
    std::fill(window.begin(), window.end(), 0.0f);
    for (int m = 0; m < dims.n_mels; ++m) {
      const float* src = features.data.data() + static_cast<size_t>(m) * features.n_frames + seek;
      std::copy(src, src + segment_size, window.begin() + static_cast<size_t>(m) * window_frames);
    }
    RETURN_IF_ERROR(model_->Encode(window, *state));

    std::vector<int> prompt;
    if (options.condition_on_previous_text && all_tokens.size() > prompt_reset_since) {
      prompt.push_back(special.sot_prev);
      const size_t available = all_tokens.size() - prompt_reset_since;
      const size_t take = std::min(available, static_cast<size_t>(max_prompt_tokens));
      prompt.insert(prompt.end(), all_tokens.end() - static_cast<std::ptrdiff_t>(take),
                    all_tokens.end());
    }
    const std::vector<int> sot_sequence = vocabulary_.SotSequence();
    prompt.insert(prompt.end(), sot_sequence.begin(), sot_sequence.end());

    ASSIGN_OR_RETURN(GreedyResult result,
                     DecodeGreedy(*model_, vocabulary_, prompt, options.greedy, *state));

    // Silence: skip the window unless the text is confident anyway.
    if (result.no_speech_prob > options.no_speech_threshold &&
        !(result.avg_logprob > options.log_prob_threshold)) {
      seek += segment_size;
      continue;
    }

    const std::vector<int>& tokens = result.tokens;
    const int ts_begin = special.timestamp_begin;
    auto is_ts = [&](int token) { return token >= ts_begin; };
    const bool single_timestamp_ending =
        tokens.size() >= 2 && !is_ts(tokens[tokens.size() - 2]) && is_ts(tokens.back());
    std::vector<size_t> slices;  // ends of segments: after each pair of consecutive timestamps
    for (size_t i = 1; i < tokens.size(); ++i) {
      if (is_ts(tokens[i]) && is_ts(tokens[i - 1])) slices.push_back(i);
    }
    std::vector<Segment> current;
    if (!slices.empty()) {
      if (single_timestamp_ending) slices.push_back(tokens.size());
      size_t last_slice = 0;
      for (size_t slice : slices) {
        Segment s;
        s.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(last_slice),
                        tokens.begin() + static_cast<std::ptrdiff_t>(slice));
        s.start_s = time_offset + (s.tokens.front() - ts_begin) * kTimePrecision;
        s.end_s = time_offset + (s.tokens.back() - ts_begin) * kTimePrecision;
        current.push_back(std::move(s));
        last_slice = slice;
      }
      if (single_timestamp_ending) {
        seek += segment_size;  // nothing is said after the last timestamp
      } else {
        // The last segment is unfinished: resume from its opening timestamp.
        seek += (tokens[last_slice - 1] - ts_begin) * kFramesPerTimestamp;
      }
    } else {
      double duration = segment_duration;
      int last_timestamp = -1;
      for (int token : tokens)
        if (is_ts(token)) last_timestamp = token;
      if (last_timestamp >= 0 && last_timestamp != ts_begin) {
        duration = (last_timestamp - ts_begin) * kTimePrecision;
      }
      Segment s;
      s.tokens = tokens;
      s.start_s = time_offset;
      s.end_s = time_offset + duration;
      current.push_back(std::move(s));
      seek += segment_size;
    }

    if (options.word_timestamps) {
      RETURN_IF_ERROR(AddWordTimestamps(*word_aligner_, vocabulary_, time_offset, segment_size,
                                        *state, last_speech_s, current));
      // faster-whisper resumes after the last word unless the window ended on one timestamp.
      if (!single_timestamp_ending) {
        const std::optional<double> last_word_end = EndOf(current);
        if (last_word_end && *last_word_end > time_offset) {
          seek = static_cast<int>(std::nearbyint(*last_word_end * (kSampleRateHz / kHopLength)));
        }
      }
      if (const std::optional<double> end = EndOf(current)) last_speech_s = *end;
    }
    if (seek <= previous_seek) {
      // A window whose only segment opens at <|0.00|> would otherwise be decoded forever;
      // move on by the whole window (faster-whisper has no guard here).
      seek = previous_seek + segment_size;
    }
    for (Segment& s : current) {
      s.text = vocabulary_.DecodeText(s.tokens);
      if (s.start_s == s.end_s || IsBlank(s.text)) continue;
      s.avg_logprob = result.avg_logprob;
      s.no_speech_prob = result.no_speech_prob;
      all_tokens.insert(all_tokens.end(), s.tokens.begin(), s.tokens.end());
      transcript.segments.push_back(std::move(s));
    }
    if (!options.condition_on_previous_text) prompt_reset_since = all_tokens.size();
  }
  return transcript;
}

}  // namespace waav::whisper

#include "engine/models/whisper/word_alignment.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "engine/text/json_file.h"

namespace waav::whisper {
namespace {

constexpr int kMedianFilterWidth = 7;  // faster-whisper's and openai-whisper's default
constexpr int kSamplesPerMelFrame = 160;
constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD
// Python's string.punctuation, and faster-whisper's default punctuation sets.
constexpr char kPunctuation[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
constexpr char kPrependPunctuation[] = "\"'\xE2\x80\x9C\xC2\xBF([{-";  // "'“¿([{-
constexpr char kAppendPunctuation[] =
    "\"'.\xE3\x80\x82,\xEF\xBC\x8C!\xEF\xBC\x81?\xEF\xBC\x9F:\xEF\xBC\x9A\xE2\x80\x9D)]}"
    "\xE3\x80\x81";  // "'.。,，!！?？:：”)]}、
constexpr char kSentenceEndMarks[] = ".\xE3\x80\x82!\xEF\xBC\x81?\xEF\xBC\x9F";  // .。!！?？

// Python's `a in b` for strings: `a` is a substring of `b` (the empty string always is). The
// reference's punctuation tests are written this way, so "" and runs like "./" count too.
bool IsSubstring(const std::string& a, const char* b) {
  return std::string(b).find(a) != std::string::npos;
}

// e^x for x <= 0 in a form the compiler vectorises (std::exp is a library call per value, most
// of the host half's softmax): x = n·ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in two so that
// n·ln 2's high part is exact), e^r by its Taylor series to the 7th power (the rest below 6e-9
// of it), 2^n written into the exponent. Within 1.2 ulp of e^x (relative 1e-7) over [−87, 0],
// measured; 0 below −87, where e^x is under the smallest normal float.
inline float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // 355 / 512: n·kLn2High is exact for |n| < 2^15
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const bool under = x < -87.0f;
  const float clamped = under ? -87.0f : x;
  const float n = (clamped * kLog2e + kRound) - kRound;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return under ? 0.0f : p * scale;
}

// The maximum and the f64 sum as four of each taken in turn, so that the loops vectorise (one
// chain of dependent operations would bound them).
void SoftmaxRow(float* row, int n) {
  constexpr int kLanes = 4;
  float maxes[kLanes];
  std::fill(maxes, maxes + kLanes, -std::numeric_limits<float>::infinity());
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) maxes[k] = std::max(maxes[k], row[i + k]);
  }
  for (; i < n; ++i) maxes[0] = std::max(maxes[0], row[i]);
  const float max = std::max(std::max(maxes[0], maxes[1]), std::max(maxes[2], maxes[3]));
  for (int j = 0; j < n; ++j) row[j] = ExpNonPositive(row[j] - max);
  double sums[kLanes] = {0, 0, 0, 0};
  for (i = 0; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) sums[k] += row[i + k];
  }
  for (; i < n; ++i) sums[0] += row[i];
  // Times the reciprocal, in f64 (a division per value would take most of the loop's time;
  // rounded to f32, the two differ only where the f64 results straddle a rounding boundary).
  const double inverse = 1.0 / ((sums[0] + sums[1]) + (sums[2] + sums[3]));
  for (int j = 0; j < n; ++j) row[j] = static_cast<float>(row[j] * inverse);
}

// The median of an even count is the mean of the middle two, as numpy's.
double Median(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Puts the smaller of a, b in a and the larger in b, without branches (min/max instructions).
inline void Exchange(float& a, float& b) {
  const float lo = std::min(a, b);
  b = std::max(a, b);
  a = lo;
}

// Width 7 (Whisper's filter): each output is the median of seven values, taken by a comparator
// network (a 16-comparator sorting network for 7 values, pruned to the 14 comparators that
// position 3 depends on; checked against every input of 0s, 1s and 2s) over a copy of the row
// mirrored at both ends, so that the loop over columns has no branches and vectorises. The
// median of finite values is the same as nth_element's.
void MedianFilterRow7(const float* in, int cols, float* padded, float* dst) {
  constexpr int kHalf = 3;
  for (int c = -kHalf; c < cols + kHalf; ++c) {
    int at = std::abs(c);                      // mirrored at the start
    if (at >= cols) at = 2 * (cols - 1) - at;  // and at the end
    padded[c + kHalf] = in[at];
  }
  for (int c = 0; c < cols; ++c) {
    const float* w = padded + c;
    float v0 = w[0], v1 = w[1], v2 = w[2], v3 = w[3], v4 = w[4], v5 = w[5], v6 = w[6];
    Exchange(v0, v6);
    Exchange(v2, v3);
    Exchange(v4, v5);
    Exchange(v0, v2);
    Exchange(v1, v4);
    Exchange(v3, v6);
    Exchange(v0, v1);
    Exchange(v2, v5);
    Exchange(v3, v4);
    Exchange(v1, v2);
    Exchange(v4, v6);
    Exchange(v2, v3);
    Exchange(v4, v5);
    Exchange(v3, v4);
    dst[c] = v3;
  }
}

}  // namespace

std::vector<float> MedianFilterRows(absl::Span<const float> matrix, int rows, int cols, int width) {
  std::vector<float> out(matrix.begin(), matrix.end());
  const int half = width / 2;
  if (width <= 1 || cols <= half) return out;
  if (width == 7) {
    std::vector<float> padded(static_cast<size_t>(cols) + 6);
    for (int r = 0; r < rows; ++r) {
      MedianFilterRow7(matrix.data() + static_cast<size_t>(r) * cols, cols, padded.data(),
                       out.data() + static_cast<size_t>(r) * cols);
    }
    return out;
  }
  std::vector<float> window(static_cast<size_t>(width));
  for (int r = 0; r < rows; ++r) {
    const float* in = matrix.data() + static_cast<size_t>(r) * cols;
    float* dst = out.data() + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      for (int k = -half; k <= half; ++k) {
        int at = std::abs(c + k);                  // mirrored at the start
        if (at >= cols) at = 2 * (cols - 1) - at;  // and at the end
        window[static_cast<size_t>(k + half)] = in[at];
      }
      std::nth_element(window.begin(), window.begin() + half, window.end());
      dst[c] = window[static_cast<size_t>(half)];
    }
  }
  return out;
}

void StandardizeColumns(absl::Span<float> matrix, int rows, int cols) {
  if (rows <= 0) return;
  // Row by row over contiguous columns (the loops vectorise); each column's sums still add its
  // rows in order, so the results are those of a loop per column.
  const size_t n = static_cast<size_t>(cols);
  std::vector<double> mean(n, 0.0), spread(n, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* row = matrix.data() + static_cast<size_t>(r) * n;
    for (size_t c = 0; c < n; ++c) mean[c] += row[c];
  }
  for (double& m : mean) m /= rows;
  for (int r = 0; r < rows; ++r) {
    const float* row = matrix.data() + static_cast<size_t>(r) * n;
    for (size_t c = 0; c < n; ++c) {
      const double d = row[c] - mean[c];
      spread[c] += d * d;
    }
  }
  // The reciprocal of each standard deviation (0 for a constant column, whose values become
  // 0), multiplied in f64 as the softmax does.
  for (double& s : spread) s = s > 0 ? 1.0 / std::sqrt(s / rows) : 0.0;
  for (int r = 0; r < rows; ++r) {
    float* row = matrix.data() + static_cast<size_t>(r) * n;
    for (size_t c = 0; c < n; ++c) row[c] = static_cast<float>((row[c] - mean[c]) * spread[c]);
  }
}

std::vector<PathPoint> DtwPath(absl::Span<const float> cost, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return {};
  const size_t stride = static_cast<size_t>(cols) + 1;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // total[i][j]: the cheapest path to cell (i − 1, j − 1); row and column 0 are the border.
  std::vector<float> total((static_cast<size_t>(rows) + 1) * stride, kInf);
  enum Move : uint8_t { kDiagonal, kDown, kRight };
  std::vector<uint8_t> move((static_cast<size_t>(rows) + 1) * stride, kRight);
  total[0] = 0;
  for (int j = 1; j <= cols; ++j) {
    for (int i = 1; i <= rows; ++i) {
      const size_t at = static_cast<size_t>(i) * stride + j;
      const float diagonal = total[at - stride - 1], down = total[at - stride],
                  right = total[at - 1];
      // The reference's order of comparisons: a tie never picks the diagonal.
      float best;
      if (diagonal < down && diagonal < right) {
        best = diagonal;
        move[at] = kDiagonal;
      } else if (down < diagonal && down < right) {
        best = down;
        move[at] = kDown;
      } else {
        best = right;
        move[at] = kRight;
      }
      total[at] = cost[static_cast<size_t>(i - 1) * cols + (j - 1)] + best;
    }
  }
  std::vector<PathPoint> path;
  int i = rows, j = cols;
  while (i > 0 && j > 0) {
    path.push_back({i - 1, j - 1});
    switch (move[static_cast<size_t>(i) * stride + j]) {
      case kDiagonal:
        --i;
        --j;
        break;
      case kDown:
        --i;
        break;
      default:
        --j;
        break;
    }
  }
  // The border is infinite, so the path always ends at (0, 0); a cell on row 0 or column 0
  // cannot have come from the border other than from the corner.
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<TimedWord> SplitWords(const Vocabulary& vocabulary, absl::Span<const int> text_tokens) {
  const text::BpeTokenizer& tokenizer = vocabulary.tokenizer();
  const int eot = vocabulary.special().eot;
  std::vector<TimedWord> words;
  int begin = 0;
  const int n = static_cast<int>(text_tokens.size());
  for (int end = 1; end <= n; ++end) {
    const absl::Span<const int> group = text_tokens.subspan(begin, end - begin);
    const bool special = group[0] >= eot;
    const std::string piece = special ? std::string() : tokenizer.Decode(group);
    // A token that ends inside a UTF-8 character waits for the rest of it.
    if (!special && end < n && piece.find(kReplacementChar) != std::string::npos) continue;
    const std::string stripped(absl::StripAsciiWhitespace(piece));
    const bool with_space = !piece.empty() && piece[0] == ' ';
    if (special || with_space || IsSubstring(stripped, kPunctuation) || words.empty()) {
      words.push_back({piece, begin, end, 0, 0});
    } else {
      words.back().text += piece;
      words.back().token_end = end;
    }
    begin = end;
  }
  return words;
}

WordDurations TruncateAndMergeWords(std::vector<TimedWord>& words) {
  std::vector<int> durations;
  for (const TimedWord& w : words) {
    if (w.end_ms != w.start_ms) durations.push_back(w.end_ms - w.start_ms);
  }
  WordDurations stats;
  stats.median_ms = durations.empty() ? 0.0 : std::min(700.0, Median(durations));
  stats.max_ms = 2 * stats.median_ms;
  const double max_ms = stats.max_ms;
  // Sentence ends: a long word there is most likely stretched over a pause.
  if (!durations.empty()) {
    for (size_t i = 1; i < words.size(); ++i) {
      TimedWord& w = words[i];
      if (w.end_ms - w.start_ms <= max_ms) continue;
      if (IsSubstring(w.text, kSentenceEndMarks)) {
        w.end_ms = static_cast<int>(std::lround(w.start_ms + max_ms));
      } else if (IsSubstring(words[i - 1].text, kSentenceEndMarks)) {
        w.start_ms = static_cast<int>(std::lround(w.end_ms - max_ms));
      }
    }
  }
  // Leading punctuation joins the word after it, from the end backwards.
  if (words.size() >= 2) {
    size_t following = words.size() - 1;
    for (size_t i = words.size() - 1; i-- > 0;) {
      TimedWord& previous = words[i];
      const std::string stripped(absl::StripAsciiWhitespace(previous.text));
      if (!previous.text.empty() && previous.text[0] == ' ' &&
          IsSubstring(stripped, kPrependPunctuation)) {
        TimedWord& next = words[following];
        next.text = previous.text + next.text;
        next.token_begin = previous.token_begin;
        previous.text.clear();
        previous.token_end = previous.token_begin;
      } else {
        following = i;
      }
    }
  }
  // Trailing punctuation joins the word before it.
  for (size_t i = 0, j = 1; j < words.size(); ++j) {
    TimedWord& previous = words[i];
    TimedWord& next = words[j];
    if ((previous.text.empty() || previous.text.back() != ' ') &&
        IsSubstring(next.text, kAppendPunctuation)) {
      previous.text += next.text;
      if (previous.token_end == previous.token_begin) previous.token_begin = next.token_begin;
      if (next.token_end > next.token_begin) previous.token_end = next.token_end;
      next.text.clear();
      next.token_begin = next.token_end;
    } else {
      i = j;
    }
  }
  return stats;
}

void PostProcessWords(std::vector<TimedWord>& words) {
  const WordDurations stats = TruncateAndMergeWords(words);
  const double median_ms = stats.median_ms, max_ms = stats.max_ms;
  std::erase_if(words, [](const TimedWord& w) { return w.text.empty(); });
  // The first word after a pause (here: the start of the audio) that is too long most likely
  // took the pause's time.
  if (!words.empty()) {
    TimedWord& first = words[0];
    const bool long_first = first.end_ms - first.start_ms > max_ms;
    const bool long_pair = words.size() > 1 && words[1].end_ms - first.start_ms > 2 * max_ms;
    if (first.end_ms > 4 * median_ms && (long_first || long_pair)) {
      if (words.size() > 1 && words[1].end_ms - words[1].start_ms > max_ms) {
        const double boundary = std::max(words[1].end_ms / 2.0, words[1].end_ms - max_ms);
        first.end_ms = words[1].start_ms = static_cast<int>(std::lround(boundary));
      }
      first.start_ms = std::max(0, static_cast<int>(std::lround(first.end_ms - max_ms)));
    }
  }
}

absl::StatusOr<std::vector<AttentionHead>> ReadAlignmentHeads(const std::string& config_path,
                                                              const WhisperDims& dims) {
  ASSIGN_OR_RETURN(const nlohmann::json config, text::ReadJsonFile(config_path));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": expected an object, found ", text::JsonTypeName(config)));
  }
  const auto it = config.find("alignment_heads");
  if (it == config.end()) {
    return absl::NotFoundError(absl::StrCat(config_path, ": no \"alignment_heads\""));
  }
  if (!it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": \"alignment_heads\" must be a non-empty array of [layer, head] pairs"));
  }
  std::vector<AttentionHead> heads;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& pair = (*it)[i];
    const std::string what = absl::StrCat("alignment_heads[", i, "]");
    if (!pair.is_array() || pair.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": ", what, " must be a [layer, head] pair"));
    }
    ASSIGN_OR_RETURN(const int64_t layer, text::JsonInt(pair[0], 0, dims.n_decoder_layers - 1,
                                                        config_path, what + " layer"));
    ASSIGN_OR_RETURN(const int64_t head,
                     text::JsonInt(pair[1], 0, dims.n_heads - 1, config_path, what + " head"));
    heads.push_back({static_cast<int>(layer), static_cast<int>(head)});
  }
  return heads;
}

absl::StatusOr<std::unique_ptr<WordAligner>> WordAligner::Create(const WhisperModel& model,
                                                                 const Vocabulary& vocabulary,
                                                                 const std::string& model_dir) {
  ASSIGN_OR_RETURN(std::vector<AttentionHead> heads,
                   ReadAlignmentHeads(model_dir + "/config.json", model.dims()));
  return std::make_unique<WordAligner>(model, vocabulary, std::move(heads));
}

std::vector<int> TokenStartsFromScores(absl::Span<const float> scores, int heads, int n_tokens,
                                       int n_positions, int first_row, int rows) {
  const size_t plane = static_cast<size_t>(n_tokens) * n_positions;
  std::vector<float> mean(plane, 0.0f);
  std::vector<float> weights(plane);
  for (int h = 0; h < heads; ++h) {
    std::copy(scores.begin() + h * plane, scores.begin() + (h + 1) * plane, weights.begin());
    for (int r = 0; r < n_tokens; ++r) SoftmaxRow(weights.data() + r * n_positions, n_positions);
    StandardizeColumns(absl::MakeSpan(weights), n_tokens, n_positions);
    const std::vector<float> filtered =
        MedianFilterRows(weights, n_tokens, n_positions, kMedianFilterWidth);
    for (size_t i = 0; i < plane; ++i) mean[i] += filtered[i];
  }
  // Rows from first_row on, negated: DTW follows high attention.
  std::vector<float> cost(static_cast<size_t>(rows) * n_positions);
  const float inv_heads = 1.0f / static_cast<float>(heads);
  for (size_t i = 0; i < cost.size(); ++i) {
    cost[i] = -mean[static_cast<size_t>(first_row) * n_positions + i] * inv_heads;
  }
  std::vector<int> starts(static_cast<size_t>(rows), -1);
  for (const PathPoint& p : DtwPath(cost, rows, n_positions)) {
    if (starts[static_cast<size_t>(p.row)] < 0) starts[static_cast<size_t>(p.row)] = p.col;
  }
  return starts;
}

absl::StatusOr<WordAligner::Sequence> WordAligner::SequenceFor(absl::Span<const int> text_tokens,
                                                               size_t audio_samples) const {
  const SpecialTokens& special = vocabulary_.special();
  const WhisperDims& dims = model_.dims();
  Sequence seq;
  // The positions that hold audio: the second convolution halves the mel frames.
  const size_t mel_frames =
      std::min<size_t>(static_cast<size_t>(dims.n_frames()), audio_samples / kSamplesPerMelFrame);
  seq.n_positions = static_cast<int>(mel_frames / 2);
  if (seq.n_positions <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("word alignment: ", audio_samples, " samples are shorter than 20 ms"));
  }
  for (int t : vocabulary_.SotSequence()) seq.tokens.push_back(t);
  seq.tokens.push_back(special.no_timestamps);
  seq.first_row = static_cast<int>(seq.tokens.size()) - 1;  // predicts the first text token
  for (int t : text_tokens) {
    if (t < 0 || t >= special.eot) {
      return absl::InvalidArgumentError(
          absl::StrCat("word alignment: token ", t, " is not a text token"));
    }
    seq.tokens.push_back(t);
  }
  seq.tokens.push_back(special.eot);
  return seq;
}

std::vector<int> WordAligner::StartsOf(const Sequence& seq, absl::Span<const float> scores,
                                       size_t text_tokens) const {
  return TokenStartsFromScores(scores, static_cast<int>(heads_.size()),
                               static_cast<int>(seq.tokens.size()), seq.n_positions, seq.first_row,
                               static_cast<int>(text_tokens) + 1);
}

std::vector<TimedWord> WordAligner::WordsOf(absl::Span<const int> text_tokens,
                                            const std::vector<int>& starts) const {
  std::vector<TimedWord> words = SplitWords(vocabulary_, text_tokens);
  for (TimedWord& w : words) {
    w.start_ms = starts[static_cast<size_t>(w.token_begin)] * kMsPerAudioPosition;
    w.end_ms = starts[static_cast<size_t>(w.token_end)] * kMsPerAudioPosition;
  }
  PostProcessWords(words);
  return words;
}

absl::StatusOr<std::vector<int>> WordAligner::TokenStarts(absl::Span<const int> text_tokens,
                                                          size_t audio_samples,
                                                          const DecoderState& encoded,
                                                          std::vector<float>* token_probs) const {
  ASSIGN_OR_RETURN(const Sequence seq, SequenceFor(text_tokens, audio_samples));
  std::vector<float> next_probs;
  ASSIGN_OR_RETURN(const std::vector<float> scores,
                   model_.CrossAttentionScores(seq.tokens, heads_, seq.n_positions, encoded,
                                               token_probs != nullptr ? &next_probs : nullptr,
                                               vocabulary_.special().eot));
  if (token_probs != nullptr) {
    // Position first_row + k predicts text token k.
    const auto first = next_probs.begin() + seq.first_row;
    token_probs->assign(first, first + static_cast<std::ptrdiff_t>(text_tokens.size()));
  }
  return StartsOf(seq, scores, text_tokens.size());
}

absl::StatusOr<std::vector<TimedWord>> WordAligner::Align(absl::Span<const int> text_tokens,
                                                          size_t audio_samples,
                                                          const DecoderState& encoded) const {
  if (text_tokens.empty()) return std::vector<TimedWord>{};
  ASSIGN_OR_RETURN(const std::vector<int> starts, TokenStarts(text_tokens, audio_samples, encoded));
  return WordsOf(text_tokens, starts);
}

std::vector<absl::StatusOr<std::vector<TimedWord>>> WordAligner::AlignBatch(
    absl::Span<const AlignRequest> requests, const DecoderState& batch, const ForEachFn& for_each,
    AlignTimings* timings) const {
  std::vector<absl::StatusOr<std::vector<TimedWord>>> out(requests.size(),
                                                          std::vector<TimedWord>{});
  // Requests that cannot be aligned fail alone; the others share one decoder pass.
  std::vector<Sequence> seqs(requests.size());
  std::vector<size_t> index;  // of the requests in the pass
  std::vector<ScoresRequest> pass;
  for (size_t k = 0; k < requests.size(); ++k) {
    const AlignRequest& r = requests[k];
    if (r.text_tokens.empty()) continue;  // nothing to time
    absl::StatusOr<Sequence> seq = SequenceFor(r.text_tokens, r.audio_samples);
    if (!seq.ok()) {
      out[k] = seq.status();
      continue;
    }
    seqs[k] = std::move(*seq);
    index.push_back(k);
    pass.push_back({.row = r.row, .tokens = seqs[k].tokens, .n_positions = seqs[k].n_positions});
  }
  if (pass.empty()) return out;
  absl::StatusOr<std::vector<std::vector<float>>> scores = model_.CrossAttentionScoresBatch(
      pass, heads_, batch, timings != nullptr ? &timings->pass : nullptr);
  if (!scores.ok()) {
    for (size_t k : index) out[k] = scores.status();
    return out;
  }
  // The host half (softmax, filters, DTW) of each request is independent of the others.
  auto finish = [&](size_t j) {
    const size_t k = index[j];
    const std::vector<int> starts = StartsOf(seqs[k], (*scores)[j], requests[k].text_tokens.size());
    out[k] = WordsOf(requests[k].text_tokens, starts);
  };
  const auto host_start = std::chrono::steady_clock::now();
  if (for_each != nullptr) {
    for_each(index.size(), finish);
  } else {
    for (size_t j = 0; j < index.size(); ++j) finish(j);
  }
  if (timings != nullptr) {
    timings->host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start)
            .count();
  }
  return out;
}

}  // namespace waav::whisper

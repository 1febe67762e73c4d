#include "load-tests/stream_record.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/ascii.h"
#include "load-tests/reference_words.h"

namespace waav::load {
namespace {

constexpr int64_t kReferenceSlackMs = 2000;

// Seconds since t0 at which stream time `ms` was "spoken" at `speed`.
double SpokenAt(uint32_t ms, double speed) { return ms / 1000.0 / speed; }

double LatencyMs(double received_s, uint32_t ms, double speed) {
  return (received_s - SpokenAt(ms, speed)) * 1000.0;
}

// Whether `result` shows the final's word `word`, the `rank`-th word of that text in the final
// (0: its first): a word of the same text that is either the same occurrence (the rank-th of
// that text in `result` too) or ends within `slack_ms` of it. The occurrence matches even when
// the times disagree: interim word times are estimates, and a long utterance's final (aligned)
// times can be seconds away from them.
bool HasWord(const ObservedResult& result, const ObservedWord& word, int rank, uint32_t slack_ms,
             bool stable_only = false) {
  int seen = 0;
  for (const ObservedWord& w : result.words) {
    if (w.text != word.text) continue;
    const int64_t gap = static_cast<int64_t>(w.end_ms) - static_cast<int64_t>(word.end_ms);
    const bool same = seen++ == rank || std::llabs(gap) <= slack_ms;
    if (same && (w.stable || !stable_only)) return true;
  }
  return false;
}

}  // namespace

std::string NormalizeWord(const std::string& word) {
  std::string out;
  for (char c : word) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u)) {
      out.push_back(absl::ascii_tolower(u));
    } else if (c == '\'' && !out.empty()) {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == '\'') out.pop_back();
  return out.empty() ? absl::AsciiStrToLower(word) : out;
}

ObservedResult ObserveResult(const v1::StreamingRecognitionResult& result, double received_s) {
  ObservedResult observed;
  observed.received_s = received_s;
  observed.utterance = result.utterance_index();
  observed.is_final = result.is_final();
  observed.end_ms = result.end_ms();
  if (result.alternatives_size() > 0) {
    const v1::SpeechRecognitionAlternative& top = result.alternatives(0);
    observed.has_text = !top.transcript().empty();
    observed.words.reserve(static_cast<size_t>(top.words_size()));
    for (const v1::WordInfo& w : top.words()) {
      observed.words.push_back({NormalizeWord(w.word()), w.end_ms(), w.stable()});
    }
  }
  observed.latency = result.latency();
  return observed;
}

StreamLatencies AnalyzeStream(const StreamRecord& record, uint32_t match_slack_ms,
                              const std::vector<ReferenceWord>* reference) {
  StreamLatencies out;
  for (const ObservedResult& r : record.results) {
    if (!r.is_final) continue;
    ++out.finals;
    out.words += r.words.size();
    if (!r.words.empty()) out.reference = Reference::kWordEnds;
  }
  if (!(record.speed > 0)) return out;
  const double speed = record.speed;
  // A final word's reference word: the first of the same text after the last one taken (the
  // words come in spoken order) that ends within kReferenceSlackMs of the server's end time
  // (two alignments of a word can disagree by over a second where it runs into a pause).
  ptrdiff_t last_taken = -1;
  auto reference_of = [&](const ObservedWord& word) -> std::optional<size_t> {
    const int64_t earliest_ms = static_cast<int64_t>(word.end_ms) - kReferenceSlackMs;
    const auto from = std::lower_bound(
        reference->begin(), reference->end(), earliest_ms,
        [](const ReferenceWord& w, int64_t ms) { return static_cast<int64_t>(w.end_ms) < ms; });
    for (size_t r = std::max(static_cast<size_t>(from - reference->begin()),
                             static_cast<size_t>(last_taken + 1));
         r < reference->size(); ++r) {
      const ReferenceWord& candidate = (*reference)[r];
      if (static_cast<int64_t>(candidate.end_ms) - word.end_ms > kReferenceSlackMs) break;
      if (candidate.text != word.text) continue;
      last_taken = static_cast<ptrdiff_t>(r);
      return r;
    }
    return std::nullopt;
  };

  for (const ObservedResult& final : record.results) {
    if (!final.is_final) continue;
    out.utterance_final_ms.push_back(LatencyMs(final.received_s, final.end_ms, speed));
    // The results of this utterance that arrived up to its final (the final included).
    auto earliest = [&](auto&& matches) {
      double first = final.received_s;
      for (const ObservedResult& r : record.results) {
        if (r.utterance == final.utterance && r.received_s <= final.received_s && matches(r)) {
          first = std::min(first, r.received_s);
        }
      }
      return first;
    };
    if (out.reference == Reference::kWordEnds) {
      for (size_t i = 0; i < final.words.size(); ++i) {
        const ObservedWord& word = final.words[i];
        const int rank = static_cast<int>(
            std::count_if(final.words.begin(), final.words.begin() + static_cast<ptrdiff_t>(i),
                          [&](const ObservedWord& w) { return w.text == word.text; }));
        uint32_t end_ms = word.end_ms;
        if (reference != nullptr) {
          const std::optional<size_t> index = reference_of(word);
          ++(index ? out.reference_matched : out.reference_unmatched);
          if (!index) continue;
          end_ms = (*reference)[*index].end_ms;
          out.reference_index.push_back(*index);
        }
        const double first = earliest(
            [&](const ObservedResult& r) { return HasWord(r, word, rank, match_slack_ms); });
        out.first_partial_ms.push_back(LatencyMs(first, end_ms, speed));
        out.first_shown_by_final.push_back(first >= final.received_s);
        const double stable = earliest([&](const ObservedResult& r) {
          return r.is_final || HasWord(r, word, rank, match_slack_ms, /*stable_only=*/true);
        });
        out.first_stable_ms.push_back(LatencyMs(stable, end_ms, speed));
        out.final_ms.push_back(LatencyMs(final.received_s, end_ms, speed));
      }
      continue;
    }
    uint32_t end_ms = final.end_ms;
    for (const ObservedEvent& e : record.events) {
      if (e.type == v1::SpeechEvent::SPEECH_ENDED && e.utterance == final.utterance) {
        end_ms = e.offset_ms;
      }
    }
    const double first =
        earliest([&](const ObservedResult& r) { return r.has_text && r.end_ms >= end_ms; });
    out.first_partial_ms.push_back(LatencyMs(std::min(first, final.received_s), end_ms, speed));
    out.final_ms.push_back(LatencyMs(final.received_s, end_ms, speed));
  }
  return out;
}

double StreamRtf(const StreamRecord& record) {
  if (record.audio_us <= 0) return 0;
  return record.done_s / (static_cast<double>(record.audio_us) / 1e6);
}

}  // namespace waav::load

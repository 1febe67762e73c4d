#include "engine/streaming/spoken_words.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace waav::streaming {

bool StartsWord(const whisper::Vocabulary& vocabulary, int token) {
  return token >= vocabulary.special().eot || vocabulary.BeginsWithSpace(token);
}

std::string ComparedWord(const whisper::Vocabulary& vocabulary, absl::Span<const int> tokens) {
  std::vector<int> text;
  for (const int token : tokens) {
    if (token < vocabulary.special().eot) text.push_back(token);
  }
  std::string word;
  for (const char c : vocabulary.DecodeText(text)) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      word.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  return word;
}

RestartWatch::RestartWatch(const whisper::Vocabulary& vocabulary, absl::Span<const int> committed,
                           int run_words)
    : vocabulary_(&vocabulary), run_words_(std::max(2, run_words)) {
  for (const int token : committed) StopsBefore(token);
  // The committed words end with a whole word (LocalAgreement commits whole words only).
  CompletePendingWord();
}

bool RestartWatch::StopsBefore(int token) {
  const bool starts = token < vocabulary_->special().eot && StartsWord(*vocabulary_, token);
  if (starts && CompletePendingWord()) return true;
  pending_.push_back(token);
  return false;
}

bool RestartWatch::CompletePendingWord() {
  if (pending_.empty()) return false;
  const bool restarted = AddWord(ComparedWord(*vocabulary_, pending_));
  pending_.clear();
  return restarted;
}

size_t RestartStart(const std::vector<std::string>& words, size_t min_words) {
  for (size_t p = 2; p < words.size(); ++p) {
    const size_t length = words.size() - p;
    for (size_t from = 0; from <= kRestartMaxSkippedWords && from + 2 <= p; ++from) {
      const size_t needed = from == 0 ? min_words : std::max(min_words, kSkippingRestartMinWords);
      const auto begin = words.begin() + static_cast<std::ptrdiff_t>(from);
      if (length >= needed &&
          std::equal(words.begin() + static_cast<std::ptrdiff_t>(p), words.end(), begin)) {
        return p;
      }
    }
  }
  return words.size();
}

bool RestartWatch::AddWord(std::string word) {
  if (word.empty()) return false;  // punctuation alone
  const size_t n = words_.size();  // the new word's index
  // A run goes on when the new word repeats the word as far after the run's `from`.
  std::erase_if(runs_, [&](const Run& run) { return words_[run.from + n - run.start] != word; });
  for (size_t from = 0; from <= kRestartMaxSkippedWords && from + 2 <= n; ++from) {
    if (words_[from] == word) runs_.push_back({.start = n, .from = from});
  }
  words_.push_back(std::move(word));
  const auto run_words = static_cast<size_t>(run_words_);
  return std::ranges::any_of(runs_, [&](const Run& run) {
    const size_t needed = run.from == 0 ? run_words : std::max(run_words, kSkippingRestartMinWords);
    return n + 1 - run.start >= needed;
  });
}

}  // namespace waav::streaming

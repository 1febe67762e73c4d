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

bool RestartWatch::AddWord(std::string word) {
  if (word.empty()) return false;  // punctuation alone
  const size_t n = words_.size();  // the new word's index
  // A run from p goes on when the new word repeats the word p places before it.
  std::erase_if(runs_, [&](size_t p) { return words_[n - p] != word; });
  if (n >= 2 && words_.front() == word) runs_.push_back(n);
  words_.push_back(std::move(word));
  // The longest run is the one that started first.
  return !runs_.empty() && n + 1 - runs_.front() >= static_cast<size_t>(run_words_);
}

}  // namespace waav::streaming

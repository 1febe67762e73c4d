// LocalAgreement-2 over re-decoded hypotheses of a growing utterance (Macháček et al., 2023,
// "Turning Whisper into Real-Time Transcription System"): a word is committed once two
// consecutive hypotheses agree on it and on everything before it. Committed tokens are then
// forced as the decoder's prefix, so later hypotheses — the final one included — start with
// them: a word reported stable is never withdrawn.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace waav::streaming {

class LocalAgreement {
 public:
  // `starts_word(token)` tells whether a token begins a new word (a leading space in Whisper's
  // byte-level BPE); commits end only at word boundaries so a half word is never stable.
  explicit LocalAgreement(std::function<bool(int)> starts_word)
      : starts_word_(std::move(starts_word)) {}

  // Feeds the tokens decoded after the committed prefix. Returns how many of them were newly
  // committed (now part of committed()). With `may_commit` false the tail is only remembered,
  // for the next hypothesis to agree with.
  size_t Update(const std::vector<int>& tail, bool may_commit = true);

  const std::vector<int>& committed() const { return committed_; }
  const std::vector<int>& last_tail() const { return previous_tail_; }
  void Reset();

 private:
  std::function<bool(int)> starts_word_;
  std::vector<int> committed_;
  std::vector<int> previous_tail_;
  bool has_previous_ = false;
};

}  // namespace waav::streaming

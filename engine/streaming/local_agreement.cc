#include "engine/streaming/local_agreement.h"

#include <algorithm>

namespace waav::streaming {

size_t LocalAgreement::Update(const std::vector<int>& tail, bool may_commit) {
  size_t agreed = 0;
  if (has_previous_ && may_commit) {
    const std::vector<int>& previous = previous_tail_;
    const size_t limit = std::min(tail.size(), previous.size());
    while (agreed < limit && tail[agreed] == previous[agreed]) ++agreed;
    const bool identical = agreed == tail.size() && agreed == previous.size();
    if (!identical) {
      // Commit only whole words both hypotheses agree on: back off to a position where both go
      // on with the start of a new word. (Before `agreed` the two are equal token for token; a
      // hypothesis that ends there may have cut its last word short.)
      auto boundary = [&](size_t i) {
        if (i < agreed) return starts_word_(tail[i]);
        return i < tail.size() && i < previous.size() && starts_word_(tail[i]) &&
               starts_word_(previous[i]);
      };
      while (agreed > 0 && !boundary(agreed)) --agreed;
    }
  }
  committed_.insert(committed_.end(), tail.begin(),
                    tail.begin() + static_cast<std::ptrdiff_t>(agreed));
  previous_tail_.assign(tail.begin() + static_cast<std::ptrdiff_t>(agreed), tail.end());
  has_previous_ = true;
  return agreed;
}

void LocalAgreement::Reset() {
  committed_.clear();
  previous_tail_.clear();
  has_previous_ = false;
}

}  // namespace waav::streaming

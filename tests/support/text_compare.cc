#include "tests/support/text_compare.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace waav::testing {

std::string NormalizeText(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (absl::ascii_isalnum(c)) {
      out += absl::ascii_tolower(c);
    } else if (c == ' ' || c == '-') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int WordEditDistance(const std::string& reference, const std::string& hypothesis,
                     int* reference_words) {
  const std::vector<std::string> ref = absl::StrSplit(reference, ' ', absl::SkipEmpty());
  const std::vector<std::string> hyp = absl::StrSplit(hypothesis, ' ', absl::SkipEmpty());
  if (reference_words != nullptr) *reference_words = static_cast<int>(ref.size());
  std::vector<int> row(hyp.size() + 1);
  for (size_t j = 0; j <= hyp.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= ref.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= hyp.size(); ++j) {
      const int up = row[j];
      row[j] =
          std::min({row[j] + 1, row[j - 1] + 1, diagonal + (ref[i - 1] == hyp[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[hyp.size()];
}

int MissedWords(const std::string& reference, const std::string& hypothesis) {
  const std::vector<std::string> ref = absl::StrSplit(reference, ' ', absl::SkipEmpty());
  const std::vector<std::string> hyp = absl::StrSplit(hypothesis, ' ', absl::SkipEmpty());
  std::vector<int> row(hyp.size() + 1, 0);
  for (size_t i = 1; i <= ref.size(); ++i) {
    int diagonal = 0;
    for (size_t j = 1; j <= hyp.size(); ++j) {
      const int up = row[j];
      row[j] = ref[i - 1] == hyp[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = up;
    }
  }
  return static_cast<int>(ref.size()) - row[hyp.size()];
}

}  // namespace waav::testing

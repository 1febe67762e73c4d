// Test helper: texts compared the way the tests judge transcripts (word-level, normalised).
#pragma once

#include <string>

namespace waav::testing {

// Lower case, letters, digits and single spaces only: how texts are compared.
std::string NormalizeText(const std::string& text);

// Word-level edit distance between two normalised texts, and the words of `reference`.
int WordEditDistance(const std::string& reference, const std::string& hypothesis,
                     int* reference_words = nullptr);

// Words of `reference` missing from `hypothesis` (not matched in order: substituted or deleted),
// ignoring words the hypothesis adds: reference length minus the longest common subsequence.
int MissedWords(const std::string& reference, const std::string& hypothesis);

}  // namespace waav::testing

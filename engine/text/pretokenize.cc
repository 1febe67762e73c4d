#include "engine/text/pretokenize.h"

#include <cstddef>
#include <cstdint>

#include "engine/text/unicode.h"

namespace waav::text {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Char {
  size_t offset;  // byte offset of the character in the text
  char32_t code_point;
  CharClass cls;
};

CharClass Classify(const Utf8Char& c) {
  if (!c.valid) return CharClass::kOther;
  if (IsLetter(c.code_point)) return CharClass::kLetter;
  if (IsNumber(c.code_point)) return CharClass::kNumber;
  if (IsWhiteSpace(c.code_point)) return CharClass::kSpace;
  return CharClass::kOther;
}

// Length in characters of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) starting
// at chars[k], or 0.
size_t ContractionLength(const std::vector<Char>& chars, size_t k) {
  if (chars[k].code_point != '\'' || k + 1 >= chars.size()) return 0;
  const char32_t a = chars[k + 1].code_point;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (k + 2 >= chars.size()) return 0;
  const char32_t b = chars[k + 2].code_point;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> SplitGpt2(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    chars.push_back({pos, c.code_point, Classify(c)});
    pos += static_cast<size_t>(c.length_bytes);
  }
  const size_t n = chars.size();
  const auto offset = [&](size_t k) { return k < n ? chars[k].offset : text.size(); };
  const auto run_end = [&](size_t k, CharClass cls) {
    while (k < n && chars[k].cls == cls) ++k;
    return k;
  };

  std::vector<std::string_view> pieces;
  size_t k = 0;
  while (k < n) {
    size_t end = ContractionLength(chars, k);
    if (end != 0) {
      end += k;
    } else {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020 glued to the run that
      // follows it, provided that run is not whitespace.
      const bool lead_space =
          chars[k].code_point == ' ' && k + 1 < n && chars[k + 1].cls != CharClass::kSpace;
      const size_t body = lead_space ? k + 1 : k;
      const CharClass cls = chars[body].cls;
      if (cls != CharClass::kSpace) {
        end = run_end(body, cls);
      } else {
        // `\s+(?!\S)` then `\s+`: a whitespace run at the end of the text is taken whole; one
        // followed by a non-space gives up its last character (to be glued to the next word)
        // unless it is a single character, which `\s+` then takes alone.
        const size_t space_end = run_end(k, CharClass::kSpace);
        end = (space_end == n || space_end - k == 1) ? space_end : space_end - 1;
      }
    }
    pieces.push_back(text.substr(offset(k), offset(end) - offset(k)));
    k = end;
  }
  return pieces;
}

}  // namespace waav::text

// Small UTF-8 and Unicode-class helpers for the tokenizer. No locale, no ICU: the letter and
// number classes come from a generated range table (unicode_tables.inc, all planes, Unicode
// version recorded there), which is what the GPT-2 pre-tokenizer split needs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace waav::text {

// One step of UTF-8 decoding at a byte position.
struct Utf8Char {
  char32_t code_point;  // the scalar value; U+FFFD when !valid
  int length_bytes;     // >= 1: bytes consumed (for invalid input, the maximal ill-formed subpart)
  bool valid;
};

// Decodes the character starting at `bytes[pos]` (pos < bytes.size()). Ill-formed input yields
// valid == false and consumes the "maximal subpart" (Unicode 15, §3.9, U+FFFD substitution of
// maximal subparts), so callers that emit one U+FFFD per invalid step match Python's
// errors="replace" and Rust's String::from_utf8_lossy, which HF tokenizers uses.
Utf8Char DecodeUtf8(std::string_view bytes, size_t pos);

// Appends the UTF-8 encoding of a Unicode scalar value (surrogates and values above U+10FFFF
// are written as U+FFFD).
void AppendUtf8(char32_t code_point, std::string* out);

// `bytes` with every ill-formed subsequence replaced by U+FFFD (see DecodeUtf8).
std::string ToValidUtf8(std::string_view bytes);

// \p{L}: General_Category Lu, Ll, Lt, Lm or Lo.
bool IsLetter(char32_t code_point);
// \p{N}: General_Category Nd, Nl or No.
bool IsNumber(char32_t code_point);
// \s as Oniguruma (the regex engine of HF tokenizers) defines it for Unicode: the White_Space
// property (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000). Unlike Python's str.isspace it excludes U+001C..U+001F.
bool IsWhiteSpace(char32_t code_point);

}  // namespace waav::text

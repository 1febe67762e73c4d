#include "engine/text/unicode.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace waav::text {
namespace {

struct CodePointRange {
  char32_t lo;
  char32_t hi;  // inclusive
};

#include "engine/text/unicode_tables.inc"

bool InRanges(std::span<const CodePointRange> ranges, char32_t cp) {
  // First range whose upper end is >= cp; cp is inside if that range starts at or before it.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const CodePointRange& r, char32_t v) { return r.hi < v; });
  return it != ranges.end() && it->lo <= cp;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Char DecodeUtf8(std::string_view bytes, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const uint8_t b0 = at(pos);
  if (b0 < 0x80) return {b0, 1, true};

  // Lead byte: sequence length and the allowed range of the second byte (Table 3-7 of the
  // Unicode standard), which excludes overlongs, surrogates and values above U+10FFFF.
  int length = 0;
  uint8_t lo2 = 0x80, hi2 = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo2 = 0xA0;
    if (b0 == 0xED) hi2 = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo2 = 0x90;
    if (b0 == 0xF4) hi2 = 0x8F;
  } else {
    return {0xFFFD, 1, false};  // continuation byte or a byte that never starts a sequence
  }

  for (int k = 1; k < length; ++k) {
    const size_t i = pos + static_cast<size_t>(k);
    if (i >= bytes.size()) return {0xFFFD, k, false};  // truncated: the prefix is one subpart
    const uint8_t b = at(i);
    const bool ok = (k == 1) ? (b >= lo2 && b <= hi2) : IsContinuation(b);
    if (!ok) return {0xFFFD, k, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, length, true};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Char c = DecodeUtf8(bytes, pos);
    if (c.valid) {
      out.append(bytes.substr(pos, static_cast<size_t>(c.length_bytes)));
    } else {
      AppendUtf8(0xFFFD, &out);
    }
    pos += static_cast<size_t>(c.length_bytes);
  }
  return out;
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return InRanges(kLetterRanges, cp);
}

bool IsNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, cp);
}

bool IsWhiteSpace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace waav::text

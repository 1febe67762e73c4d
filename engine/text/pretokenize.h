// The GPT-2 pre-tokenizer split used by byte-level BPE (HF tokenizers' ByteLevel with
// use_regex), written by hand instead of with a regex engine. It reproduces the pattern
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with leftmost-first alternation as Oniguruma runs it. Character classes come from
// engine/text/unicode.h (full Unicode range table; \s is the White_Space property). Deviation:
// ill-formed UTF-8 (which HF cannot receive, its input is a str) is not rejected; each ill-formed
// subpart counts as one character of the "other" class [^\s\p{L}\p{N}], so every byte still
// reaches the byte-level BPE and the split still covers the input.
#pragma once

#include <string_view>
#include <vector>

namespace waav::text {

// Pieces in order; they are views into `text` and concatenate to exactly `text`.
std::vector<std::string_view> SplitGpt2(std::string_view text);

}  // namespace waav::text

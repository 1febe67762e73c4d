// Word end times that do not depend on the server under test, to measure latency from.
//
// By default waav-load measures each word's latency from the end time the server itself gave
// the word in its final result (its cross-attention alignment). Two server configurations
// whose finals differ (another forced prefix, another window) then place the same spoken word
// at different times, and their latencies are not comparable: seen on an H100, where one
// configuration's word ends came ~80 ms earlier than another's on the same audio, which moved
// every latency by as much. A reference file gives each audio file's words once, from one
// fixed transcription (`waav transcribe --json --word-timestamps FILE...`, one JSON object a
// line), and each final word is measured from its reference word's end instead.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace waav::load {

struct ReferenceWord {
  std::string text;  // NormalizeWord of the word
  uint32_t end_ms = 0;
};

// Audio file name (its last path component) -> its words in spoken order.
using ReferenceWords = std::map<std::string, std::vector<ReferenceWord>>;

// Parses `waav transcribe --json --word-timestamps` output: one JSON object per line (blank
// lines skipped), each with "file" (a path; its last component names the file) and "segments",
// an array of objects whose "words" arrays hold objects with "word" (text) and "end" (seconds,
// finite, >= 0). Words must not end before the word before them; a file may appear once. Every
// error names the line and what is wrong.
absl::StatusOr<ReferenceWords> ParseReferenceWords(absl::string_view text);

// Reads and parses a reference file (at most 64 MiB).
absl::StatusOr<ReferenceWords> LoadReferenceWords(const std::string& path);

// The last path component of `path` ("a/b/jfk.wav" -> "jfk.wav").
std::string FileNameOf(absl::string_view path);

}  // namespace waav::load

#include "load-tests/reference_words.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "load-tests/stream_record.h"
#include "nlohmann/json.hpp"

namespace waav::load {
namespace {

constexpr size_t kMaxFileBytes = size_t{64} << 20;

// The words of one transcription object (one line), or an error without the line number.
absl::StatusOr<std::vector<ReferenceWord>> WordsOf(const nlohmann::json& object) {
  const auto segments = object.find("segments");
  if (segments == object.end() || !segments->is_array()) {
    return absl::InvalidArgumentError("no \"segments\" array (written with --word-timestamps?)");
  }
  std::vector<ReferenceWord> words;
  for (size_t s = 0; s < segments->size(); ++s) {
    const nlohmann::json& segment = (*segments)[s];
    const std::string where = absl::StrCat("segment ", s);
    if (!segment.is_object()) return absl::InvalidArgumentError(where + " is not an object");
    const auto list = segment.find("words");
    if (list == segment.end() || !list->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has no \"words\" array (written with --word-timestamps?)"));
    }
    for (size_t w = 0; w < list->size(); ++w) {
      const nlohmann::json& word = (*list)[w];
      const std::string at = absl::StrCat(where, ", word ", w);
      if (!word.is_object()) return absl::InvalidArgumentError(at + " is not an object");
      const auto text = word.find("word");
      const auto end = word.find("end");
      if (text == word.end() || !text->is_string()) {
        return absl::InvalidArgumentError(at + ": \"word\" is missing or not a string");
      }
      if (end == word.end() || !end->is_number()) {
        return absl::InvalidArgumentError(at + ": \"end\" is missing or not a number");
      }
      const double seconds = end->get<double>();
      // 4e6 s keeps the milliseconds inside uint32_t.
      if (!std::isfinite(seconds) || seconds < 0 || seconds > 4e6) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": \"end\" ", seconds, " is not a time in seconds (0..4e6)"));
      }
      const auto end_ms = static_cast<uint32_t>(std::lround(seconds * 1000));
      if (!words.empty() && end_ms < words.back().end_ms) {
        return absl::InvalidArgumentError(absl::StrCat(at, " ends at ", end_ms,
                                                       " ms, before the word before it (",
                                                       words.back().end_ms, " ms)"));
      }
      words.push_back({NormalizeWord(text->get<std::string>()), end_ms});
    }
  }
  return words;
}

}  // namespace

std::string FileNameOf(absl::string_view path) {
  const size_t slash = path.find_last_of('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

absl::StatusOr<ReferenceWords> ParseReferenceWords(absl::string_view text) {
  ReferenceWords reference;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string where = absl::StrCat("line ", line_number);
    const nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not JSON (truncated or corrupt; one object a line expected)"));
    }
    if (!object.is_object()) return absl::InvalidArgumentError(where + ": not a JSON object");
    const auto file = object.find("file");
    if (file == object.end() || !file->is_string() || file->get<std::string>().empty()) {
      return absl::InvalidArgumentError(where + ": \"file\" is missing or not a file name");
    }
    const std::string name = FileNameOf(file->get<std::string>());
    if (name.empty()) return absl::InvalidArgumentError(where + ": \"file\" names a folder");
    absl::StatusOr<std::vector<ReferenceWord>> words = WordsOf(object);
    if (!words.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", name, "): ", words.status().message()));
    }
    if (!reference.emplace(name, std::move(*words)).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, " appears twice"));
    }
  }
  return reference;
}

absl::StatusOr<ReferenceWords> LoadReferenceWords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open reference words ", path));
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("reference words ", path, ": larger than ", kMaxFileBytes >> 20, " MiB"));
    }
  }
  absl::StatusOr<ReferenceWords> reference = ParseReferenceWords(text);
  if (!reference.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference words ", path, ": ", reference.status().message()));
  }
  return reference;
}

}  // namespace waav::load

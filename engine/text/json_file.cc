#include "engine/text/json_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace waav::text {
namespace {

// nlohmann's parser is iterative, but deep nesting still costs memory and means the input is not
// what we expect; checking it first also gives a precise offset.
absl::Status CheckDepth(const std::string& text, const std::string& source, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character (a quote or backslash must not end the string)
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": JSON nesting deeper than ", max_depth, " at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& source,
                                         const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", text.size(), " bytes, more than the limit of ", limits.max_bytes));
  }
  if (absl::Status s = CheckDepth(text, source, limits.max_depth); !s.ok()) return s;
  // nlohmann reports errors by exception; they are caught here and never leave this function.
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not valid JSON (byte ", e.byte, "): ", e.what()));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const JsonLimits& limits) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrCat(path, ": cannot determine the size"));
  if (static_cast<uint64_t>(size) > limits.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than the limit of ", limits.max_bytes));
  }
  in.seekg(0, std::ios::beg);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) {
    return absl::DataLossError(absl::StrCat(path, ": read failed"));
  }
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  return ParseJson(text, path, limits);
}

std::string JsonTypeName(const nlohmann::json& value) { return value.type_name(); }

absl::StatusOr<int64_t> JsonInt(const nlohmann::json& value, int64_t lo, int64_t hi,
                                const std::string& source, const std::string& what) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", what, " is ", u, ", outside [", lo, ", ", hi, "]"));
    }
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " must be an integer, not ", JsonTypeName(value)));
  }
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " is ", v, ", outside [", lo, ", ", hi, "]"));
  }
  return v;
}

}  // namespace waav::text

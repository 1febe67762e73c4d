// Reading JSON files (tokenizer.json, config.json) into nlohmann::json with limits, turning every
// parse failure into an absl::Status that names the file and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace waav::text {

struct JsonLimits {
  // Larger files are rejected before reading. Default: 64 MiB (tokenizer.json is ~2 MiB).
  size_t max_bytes = size_t{64} << 20;
  // Deeper nesting of arrays/objects is rejected before parsing. Default: 64.
  int max_depth = 64;
};

// Reads and parses `path`. Errors: NotFound (missing), InvalidArgument (too large, too deep,
// not JSON, ill-formed UTF-8 in a string), DataLoss (read failure).
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const JsonLimits& limits = {});

// Parses JSON text; `source` names it in error messages.
absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& source,
                                         const JsonLimits& limits = {});

// The JSON type of `value` for error messages ("object", "array", "string", ...).
std::string JsonTypeName(const nlohmann::json& value);

// Checked integer read: `value` must be an integer in [lo, hi]. `what` names the field.
absl::StatusOr<int64_t> JsonInt(const nlohmann::json& value, int64_t lo, int64_t hi,
                                const std::string& source, const std::string& what);

}  // namespace waav::text

#include "engine/models/ct2/whisper_files.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "engine/text/json_file.h"

namespace waav::ct2 {
namespace {

using nlohmann::json;

// Token ids and layer/head indices: anything larger is not a Whisper model.
constexpr int64_t kMaxIndex = (int64_t{1} << 24) - 1;
// config.json is a few KiB; refuse anything that is clearly something else.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;

absl::StatusOr<std::vector<int>> IntList(const json& root, const char* key,
                                         const std::string& path) {
  std::vector<int> out;
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", key, "' must be a list, not ", text::JsonTypeName(*it)));
  }
  out.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    ASSIGN_OR_RETURN(const int64_t v,
                     text::JsonInt((*it)[i], 0, kMaxIndex, path, absl::StrCat(key, "[", i, "]")));
    out.push_back(static_cast<int>(v));
  }
  return out;
}

}  // namespace

absl::StatusOr<WhisperConfig> LoadWhisperConfig(const std::string& path) {
  text::JsonLimits limits;
  limits.max_bytes = kMaxConfigBytes;
  limits.max_depth = 8;
  ASSIGN_OR_RETURN(const json root, text::ReadJsonFile(path, limits));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": top level is ", text::JsonTypeName(root), ", not an object"));
  }
  WhisperConfig config;
  ASSIGN_OR_RETURN(config.suppress_ids, IntList(root, "suppress_ids", path));
  ASSIGN_OR_RETURN(config.suppress_ids_begin, IntList(root, "suppress_ids_begin", path));
  ASSIGN_OR_RETURN(config.lang_ids, IntList(root, "lang_ids", path));

  auto heads = root.find("alignment_heads");
  if (heads != root.end() && !heads->is_null()) {
    if (!heads->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": 'alignment_heads' must be a list, not ", text::JsonTypeName(*heads)));
    }
    for (size_t i = 0; i < heads->size(); ++i) {
      const json& pair = (*heads)[i];
      const std::string where = absl::StrCat("alignment_heads[", i, "]");
      if (!pair.is_array() || pair.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": ", where, " must be a [layer, head] pair"));
      }
      ASSIGN_OR_RETURN(const int64_t layer,
                       text::JsonInt(pair[0], 0, kMaxIndex, path, where + " layer"));
      ASSIGN_OR_RETURN(const int64_t head,
                       text::JsonInt(pair[1], 0, kMaxIndex, path, where + " head"));
      config.alignment_heads.emplace_back(static_cast<int>(layer), static_cast<int>(head));
    }
  }
  return config;
}

absl::StatusOr<WhisperModelFiles> FindWhisperModelFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a model folder (no such directory)"));
  }
  const auto present = [&](const char* name) {
    const fs::path p = fs::path(dir) / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  WhisperModelFiles files{present("model.bin"), present("config.json"), present("tokenizer.json")};
  if (files.model_bin.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no model.bin in the model folder"));
  }
  return files;
}

}  // namespace waav::ct2

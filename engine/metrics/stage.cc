#include "engine/metrics/stage.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace waav::metrics {
namespace {

constexpr std::array<absl::string_view, kStageCount> kStageNames = {
    "capture",     "preprocessing", "stt",     "processing",   "tts",   "output",
    "ingest_wait", "frontend",      "encoder", "decoder_step", "queue",
};

}  // namespace

absl::string_view StageName(Stage stage) {
  const size_t index = StageIndex(stage);
  return index < kStageNames.size() ? kStageNames[index] : "unknown";
}

absl::StatusOr<Stage> StageFromName(absl::string_view name) {
  for (const Stage stage : kAllStages) {
    if (StageName(stage) == name) return stage;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown stage '", name, "'; known stages: ", absl::StrJoin(kStageNames, ", ")));
}

}  // namespace waav::metrics

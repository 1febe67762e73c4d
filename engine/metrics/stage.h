// The pipeline stages whose latency waav measures, and their names as `stage` label values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace waav::metrics {

// The first six are the stages of design.md's latency plan; each has a budget and they follow
// one another, so their durations add up to the end-to-end latency (less the margin). The
// rest are inner steps measured inside those stages (they overlap them: never add them to
// the stages): waiting for audio in the ingest ring and the frontend (inside preprocessing),
// the encoder and one decoder step (inside stt), and time spent queued for the scheduler.
enum class Stage : uint8_t {
  kCapture,
  kPreprocessing,
  kStt,
  kProcessing,
  kTts,
  kOutput,
  kIngestWait,
  kFrontend,
  kEncoder,
  kDecoderStep,
  kQueue,
};

inline constexpr size_t kStageCount = 11;
inline constexpr size_t kPipelineStageCount = 6;

inline constexpr std::array<Stage, kStageCount> kAllStages = {
    Stage::kCapture, Stage::kPreprocessing, Stage::kStt,        Stage::kProcessing,
    Stage::kTts,     Stage::kOutput,        Stage::kIngestWait, Stage::kFrontend,
    Stage::kEncoder, Stage::kDecoderStep,   Stage::kQueue,
};

constexpr size_t StageIndex(Stage stage) { return static_cast<size_t>(stage); }

// True for the six stages of the latency plan, false for inner steps.
constexpr bool IsPipelineStage(Stage stage) { return StageIndex(stage) < kPipelineStageCount; }

// "capture", "preprocessing", "stt", "processing", "tts", "output", "ingest_wait", "frontend",
// "encoder", "decoder_step", "queue".
absl::string_view StageName(Stage stage);

// The inverse of StageName; NotFound naming the known stages otherwise.
absl::StatusOr<Stage> StageFromName(absl::string_view name);

}  // namespace waav::metrics

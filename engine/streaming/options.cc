// Range checks of the engine's and a stream's options (the server's config and a stream's
// StartStream request are refused with the setting named before anything opens).
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "engine/streaming/stream_types.h"
#include "engine/streaming/streaming_engine.h"

namespace waav::streaming {

absl::Status StreamOptions::Validate() const {
  RETURN_IF_ERROR(endpoint.Validate());
  if (partial_interval_ms < 100 || partial_interval_ms > 10000) {
    return absl::InvalidArgumentError("partial interval must be in [100, 10000] ms");
  }
  if (pause_partial_ms < 0 || pause_partial_ms > 10000) {
    return absl::InvalidArgumentError("pause partial delay must be in [0, 10000] ms (0: off)");
  }
  if (start_partial_ms < -1 || start_partial_ms > 10000) {
    return absl::InvalidArgumentError("start partial delay must be in [-1, 10000] ms (-1: off)");
  }
  if (gap_partial_db < 0 || gap_partial_db > 60) {
    return absl::InvalidArgumentError("gap partial drop must be in [0, 60] dB (0: off)");
  }
  if (gap_partial_min_ms < 0 || gap_partial_min_ms > 10000) {
    return absl::InvalidArgumentError("gap partial spacing must be in [0, 10000] ms");
  }
  if (commit_min_audio_ms < 0 || commit_min_audio_ms > 30000) {
    return absl::InvalidArgumentError("commit minimum audio must be in [0, 30000] ms");
  }
  if (initial_prompt.size() > 1024) {
    return absl::InvalidArgumentError("initial prompt is longer than 1024 bytes");
  }
  return absl::OkStatus();
}

absl::Status EngineOptions::Validate() const {
  if (max_streams < 1 || max_streams > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_streams must be in [1, 100000]; got ", max_streams));
  }
  if (ingest_ring_slots < 16 || ingest_ring_slots > (1 << 22)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ingest ring slots must be in [16, 4194304]; got ", ingest_ring_slots));
  }
  if (max_batch < 1 || max_batch > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be in [1, 256]; got ", max_batch));
  }
  if (prepare_threads < 0 || prepare_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare_threads must be in [0, 64]; got ", prepare_threads));
  }
  if (partial_window_ms != 0 && (partial_window_ms < 1000 || partial_window_ms > 30000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("partial_window_ms must be 0 (whole windows) or in [1000, 30000]; got ",
                     partial_window_ms));
  }
  if (restart_stop_words != 0 && (restart_stop_words < 2 || restart_stop_words > 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "restart_stop_words must be 0 (never) or in [2, 16]; got ", restart_stop_words));
  }
  if (encoder_batch < 0 || encoder_batch > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoder_batch must be in [0, 256]; got ", encoder_batch));
  }
  return absl::OkStatus();
}

}  // namespace waav::streaming
